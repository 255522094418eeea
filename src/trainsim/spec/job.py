"""A training job: model + system + parallelism + training, cross-validated."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, model_validator

from trainsim.errors import TrainsimError, warn
from trainsim.parallel.axes import Axis, check_degrees, expert_dp
from trainsim.schedule import default_schedule, get_schedule
from trainsim.spec.base import Spec
from trainsim.spec.flags import Flag
from trainsim.spec.framework import DEFAULT_FRAMEWORK, Framework, load_framework
from trainsim.spec.limits import MAX_GPUS
from trainsim.spec.model import Model
from trainsim.spec.parallelism import Parallelism, Schedule
from trainsim.spec.pipeline_split import virtual_stage_layers
from trainsim.spec.system import System
from trainsim.spec.training import Training

if TYPE_CHECKING:
    from trainsim.schedule import PipelineSchedule


class Job(Spec, frozen=True):
    """Everything needed to predict one training job.

    Either ``num_gpus`` or ``parallelism.dp`` (or both, then they must agree) fixes the data-parallel size.
    ``framework`` is the software stack: a preset name (``"nemo"``, ``"hf-transformers@4.x"``), a profile YAML
    path, a :class:`~trainsim.spec.framework.Framework`, or a mapping ``{"name": preset, field: override...}``;
    default ``megatron-core``. The job stores the *resolved* profile: training fields left ``None`` take the
    profile's values, fields the training sets override the profile, and both agree afterwards.
    Every inconsistency raises :class:`~trainsim.errors.TrainsimError` naming the field and the fix.
    """

    model: Annotated[Model, Flag("--model", "-m", megatron=False,
                                 help="model preset, Hugging Face config.json, or model JSON")]
    system: Annotated[System, Flag("--system", "-s", megatron=False, default="dgx-h100",
                                   help="system preset or YAML file")]
    parallelism: Parallelism = Field(default_factory=Parallelism)
    training: Training
    num_gpus: Annotated[int | None, Flag("--num-gpus", "-n", dimension="num_gpus", megatron=False,
                                         help="total GPUs (dp is derived from it)")] = Field(
        default=None, gt=0, le=MAX_GPUS)
    framework: Annotated[Framework, Flag(
        "--framework", megatron=False, default=DEFAULT_FRAMEWORK,
        help="software stack: NAME[@version] preset (megatron-core, nemo, torchtitan, fsdp, hf-transformers, ...) or "
             "profile YAML")] = Field(default_factory=lambda: load_framework(DEFAULT_FRAMEWORK))

    @model_validator(mode="before")
    @classmethod
    def _resolve_framework(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return resolve_stack(data)

    @model_validator(mode="after")
    def _validate(self) -> Job:
        validate_job(self)
        return self

    # ---- resolved values ----------------------------------------------------------------------------------------
    @cached_property
    def dp(self) -> int:
        """Data-parallel size."""
        par = self.parallelism
        if par.dp is not None:
            return par.dp
        if self.num_gpus is None:
            return 1
        return self.num_gpus // par.model_parallel_size

    @property
    def expert_dp(self) -> int:
        """Expert-data-parallel size: ``tp·cp·dp / (ep·etp)`` (Megatron's parallel folding carves the expert grid
        etp × ep × edp out of the attention grid tp × cp × dp of each pipeline stage)."""
        par = self.parallelism
        return expert_dp(par.tp, par.cp, self.dp, par.ep, par.expert_tp)

    @property
    def world_size(self) -> int:
        """Total GPUs: tp·pp·cp·dp."""
        return self.parallelism.model_parallel_size * self.dp

    @property
    def seq_length(self) -> int:
        """Training sequence length."""
        return self.training.seq_length or self.model.seq_length

    @property
    def schedule(self) -> Schedule:
        """Pipeline schedule (resolved default)."""
        par = self.parallelism
        if par.schedule is not None:
            return par.schedule
        return default_schedule(par.vpp)

    @cached_property
    def pipeline(self) -> PipelineSchedule:
        """The pipeline schedule object (order, placement, memory, closed form)."""
        return get_schedule(self.schedule)

    @cached_property
    def head_stage(self) -> int:
        """Pipeline rank holding the LM head (the last rank, or rank 0 for V-shaped schedules)."""
        return self.pipeline.head_stage(self.parallelism.pp, self.parallelism.vpp)

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per pipeline per iteration: gbs / (mbs·dp)."""
        return self.training.global_batch_size // (self.training.micro_batch_size * self.dp)

    @property
    def tokens_per_iteration(self) -> int:
        """Tokens processed per iteration."""
        return self.training.global_batch_size * self.seq_length

    @property
    def sequence_parallel(self) -> bool:
        """Sequence parallelism in effect (only meaningful with tp > 1). The 2D (SUMMA) grid always splits the
        tokens over its rows and the features over its columns, so its norms and dropouts see ``1/tp`` of the
        activations, as with sequence parallelism."""
        par = self.parallelism
        return (par.sequence_parallel or par.summa) and par.tp > 1

    @cached_property
    def virtual_stage_layers(self) -> tuple[int, ...]:
        """Transformer layers of every virtual stage (model chunk), indexed ``chunk·pp + rank``."""
        fw = self.framework
        return virtual_stage_layers(self.model.num_layers, self.parallelism, fw.pipeline_layer_split,
                                    fw.pipeline_engine)

    @cached_property
    def layers_per_stage(self) -> tuple[int, ...]:
        """Transformer layers held by each pipeline rank (all its virtual stages together)."""
        vsl, pp = self.virtual_stage_layers, self.parallelism.pp
        return tuple(sum(vsl[r::pp]) for r in range(pp))

    @cached_property
    def cp_levels(self) -> tuple[int, int]:
        """(all-to-all size, ring size) of the context-parallel attention, whose product is cp: ``(1, cp)`` for the
        ring (p2p) and all-gather, ``(cp, 1)`` for all-to-all (Ulysses), and for hierarchical ``a2a+p2p`` the
        ``hierarchical_cp_sizes`` or, when not given, the CP ranks that share a node (the largest divisor of cp
        not above the CP group's members per node under the job's rank order) all-to-all and a ring across them."""
        par = self.parallelism
        cp, comm = par.cp, self.framework.cp_comm_type
        if comm == "a2a":
            return cp, 1
        if comm != "a2a+p2p":
            return 1, cp
        if par.hierarchical_cp_sizes:
            a, r = par.hierarchical_cp_sizes
            return a, r
        from trainsim.parallel.axes import Group
        from trainsim.parallel.layout import Layout

        room = Layout.of(self, cp_levels=False).placements[Group.CP].per_node
        a = max(d for d in range(1, cp + 1) if cp % d == 0 and d <= room)
        return a, cp // a

    @property
    def attention_path(self) -> str:
        """Core-attention path in effect: ``flash``, ``unfused`` (fused softmax kernel) or ``eager``."""
        return self.training.attention or "flash"

    @property
    def dp_engine(self) -> str:
        """The data-parallel engine running this job (the profile's, by ZeRO stage)."""
        return self.framework.engine_for(self.training.zero_stage or 0)

    @property
    def bf16_optimizer(self) -> bool:
        """Whether DeepSpeed's ``BF16_Optimizer`` runs this job (bf16 at ZeRO stage 0 under a profile with
        ``bf16_optimizer_partitions``): master weights and moments partitioned over the data-parallel ranks, and
        every backward's 16-bit gradients cast and added into a whole fp32 gradient buffer."""
        tr = self.training
        return (tr.zero_stage or 0) == 0 and tr.precision == "bf16" and bool(self.framework.bf16_optimizer_partitions)

    @property
    def num_nodes(self) -> int:
        """Nodes (NVLink domains) used, rounded up."""
        return -(-self.world_size // self.system.gpus_per_node)


_ALIAS_BACKEND = {"flash": "flash", "unfused": "local", "eager": "local"}


def _framework_of(value: Any) -> Framework:
    if value is None or isinstance(value, (str, Framework)):
        return load_framework(value)
    if isinstance(value, dict):
        data = dict(value)
        base = load_framework(data.pop("name", None) or DEFAULT_FRAMEWORK)
        return base.replace(**data) if data else base
    raise TrainsimError("framework", f"cannot use {type(value).__name__} as a framework",
                        "give a preset name, a profile YAML path, a Framework or a mapping")


def _num_experts(model: Any) -> int:
    """Experts of a job's model input (a :class:`Model` or its mapping; 0 for anything else)."""
    if isinstance(model, Model):
        return model.num_experts or 0
    if isinstance(model, dict):
        return int(model.get("num_experts") or 0)
    return 0


def resolve_stack(data: dict[str, Any]) -> dict[str, Any]:
    """Resolve the framework of a job's input mapping and fill the training fields it decides.

    Explicit training values override the profile (``attention`` selects the attention backend, the overlap flags
    and ``grad_reduce_in_fp32`` the profile's fields); ``None`` ones take the profile's value. Conditional features
    of the profile switch off where the plan cannot use them (parameter-gather overlap without a distributed
    optimizer, TP-communication overlap without sequence parallelism); an explicit request is checked by
    :func:`validate_job` instead.
    """
    fw = _framework_of(data.get("framework"))
    tr_in = data.get("training")
    par_in = data.get("parallelism")
    if tr_in is None:
        return {**data, "framework": fw}
    training = tr_in if isinstance(tr_in, Training) else Training(**tr_in)
    par = par_in if isinstance(par_in, Parallelism) else Parallelism(**(par_in or {}))
    over: dict[str, Any] = {}
    if training.attention is not None:
        over["attention_backend"] = _ALIAS_BACKEND[training.attention]
        if training.attention != "flash":
            over["masked_softmax_fusion"] = training.attention == "unfused"
    zero = training.zero_stage if training.zero_stage is not None else fw.default_zero_stage
    if zero == 1 and par.pp > 1 and training.precision == "bf16" and fw.bf16_optimizer_partitions \
            and fw.bf16_optimizer_with_pp:
        warn("training.zero_stage", f"{fw.name}: bf16 ZeRO-1 with pipelining runs DeepSpeed's BF16_Optimizer "
             "(its own ZeRO-1 equivalent): predicted with --zero-stage 0")
        zero = 0
    if not par.sequence_parallel and fw.shards_sequence(par.tp, par.ep > 1 or _num_experts(data.get("model")) > 0):
        if not fw.tp_shards_sequence:  # the user's choice overruled (Megatron-Core refuses MoE + TP without it)
            warn("parallelism.sequence_parallel", f"{fw.name} requires sequence parallelism for a "
                 f"mixture-of-experts model with tp = {par.tp}: predicted with --sequence-parallel")
        par = par.replace(sequence_parallel=True)
        data = {**data, "parallelism": par}
    sp = par.sequence_parallel and par.tp > 1
    ogr = training.overlap_grad_reduce if training.overlap_grad_reduce is not None else fw.overlap_grad_reduce
    opg = training.overlap_param_gather
    if opg is None:
        opg = fw.overlap_param_gather and zero >= 1
    elif opg and zero == 0 and fw.overlap_param_gather:
        opg = False  # the profile's default, carried by a copied training, does not apply without sharding
    tpo = training.tp_comm_overlap
    if tpo is None:
        tpo = fw.tp_comm_overlap and sp
    elif tpo and not sp and fw.tp_comm_overlap:
        tpo = False  # likewise: the profile's TP overlap needs sequence parallelism with tp > 1
    grads32 = training.grad_reduce_in_fp32
    if grads32 is None:
        grads32 = fw.grad_reduce_dtype == "fp32" and training.precision != "fp16"
    over.update(overlap_grad_reduce=ogr, overlap_param_gather=opg, tp_comm_overlap=tpo,
                grad_reduce_dtype="fp32" if grads32 else "param")
    changed = {k: v for k, v in over.items() if getattr(fw, k) != v}
    if changed:
        fw = fw.replace(**changed)
    model = data.get("model")
    seq = training.seq_length or _model_field(model, "seq_length")
    heads = _model_field(model, "num_attention_heads")
    path = fw.attention_path(seq, training.micro_batch_size * (heads // max(par.tp, 1))) if seq and heads else (
        "flash" if fw.attention_backend in ("flash", "fused") else "unfused")
    if path == "flash" and training.attention is None and _eager_in_transformers_code(fw, model):
        path = "eager"
    training = training.replace(zero_stage=zero, overlap_grad_reduce=ogr, overlap_param_gather=opg,
                                tp_comm_overlap=tpo, grad_reduce_in_fp32=grads32, attention=path)
    return {**data, "framework": fw, "training": training}


def _model_field(model: Any, name: str) -> Any:
    """A field of the job's model before validation: a :class:`Model` or its dict (``None`` when absent)."""
    if isinstance(model, Model):
        return getattr(model, name)
    return model.get(name) if isinstance(model, dict) else None


def _eager_in_transformers_code(fw: Framework, model: Any) -> bool:
    """Whether the stack runs transformers' model code (``Framework.transformers_model_code``) on a model whose
    attention transformers implements eagerly only: the fp32 softmax on all s² scores plus the variant's term.

    * ALiBi: transformers ``BloomAttention`` and ``MptAttention`` have no SDPA or flash variant; Baichuan-13B's remote
      code adds its ALiBi mask to eager scores.
    * Attention sinks (GPT-OSS): ``GptOssPreTrainedModel._supports_sdpa = False``, so the default
      ``attn_implementation`` is eager (a sink logit joins each row's softmax); its only flash path is the hub kernel
      ``kernels-community/vllm-flash-attn3``, which a user selects with ``--attention flash``.
    """
    return bool(fw.transformers_model_code) and (_model_field(model, "position_embedding_type") == "alibi"
                                                 or bool(_model_field(model, "attention_sinks")))


def validate_job(job: Job) -> None:
    """Cross-field checks; raises :class:`TrainsimError` on the first problem."""
    m, par, tr, sysm = job.model, job.parallelism, job.training, job.system
    tp, pp, cp, ep, vpp = par.tp, par.pp, par.cp, par.ep, par.vpp

    # GPU count vs tp·pp·cp·dp, expert grid folding (the axis checks of trainsim.parallel.axes)
    dp = job.dp
    check_degrees(tp, cp, pp, par.dp, ep, par.expert_tp, job.num_gpus, dp)
    if m.is_moe and tp > 1 and not par.sequence_parallel:
        warn("parallelism.sequence_parallel",
             f"Megatron-Core requires --sequence-parallel for MoE with tp = {tp}; the MoE layers are modelled on "
             "sequence-parallel tokens as Megatron would run them")
    if par.etp is not None and par.etp > 1 and not m.is_moe:
        raise TrainsimError("parallelism.etp", "expert tensor parallelism needs a model with experts",
                            "drop --expert-tensor-parallel-size for dense models")
    if ep > 1 and not m.is_moe:
        raise TrainsimError("parallelism.ep", f"ep = {ep} but the model has no experts", "use ep 1 for dense models")
    if m.is_moe and (m.num_experts or 0) % ep:
        raise TrainsimError(
            "parallelism.ep",
            f"{m.num_experts} experts are not divisible by ep = {ep}",
            "choose ep dividing the number of experts",
        )
    # all-to-all context parallelism hands each rank of its all-to-all level heads/(tp·a) heads (TE asserts it)
    a2a = job.cp_levels[0]
    if a2a > 1 and (m.num_attention_heads // max(tp, 1)) % a2a:
        raise TrainsimError(
            "framework.cp_comm_type",
            f"{job.framework.cp_comm_type} context parallelism splits the {m.num_attention_heads // max(tp, 1)} heads "
            f"of a tensor-parallel rank over {'its all-to-all level of ' if a2a < cp else 'cp = '}{a2a}"
            f"{' GPUs' if a2a < cp else ''}, which does not divide them",
            "choose cp (or --hierarchical-context-parallel-sizes) dividing heads/tp, or --cp-comm-type p2p",
        )
    # tensor parallelism vs heads
    if m.num_attention_heads % tp:
        raise TrainsimError(
            "parallelism.tp",
            f"{m.num_attention_heads} attention heads are not divisible by tp = {tp}",
            "choose a tensor-parallel size that divides the number of heads",
        )
    if m.query_groups % tp:
        raise TrainsimError(
            "parallelism.tp",
            f"{m.query_groups} query groups are not divisible by tp = {tp}",
            "choose a tensor-parallel size that divides the number of query groups (--num-query-groups)",
        )
    if par.summa:
        from trainsim.workload.summa import check_summa

        check_summa(job)
    elif tp > sysm.gpus_per_node:
        warn("parallelism.tp", f"tp = {tp} spans nodes ({sysm.gpus_per_node} GPUs per node): expect slow TP comm")
    # pipeline
    if vpp > 1 and pp == 1:
        raise TrainsimError("parallelism.vpp", "virtual stages need pipeline parallelism", "use pp > 1 or vpp 1")
    vsl = job.virtual_stage_layers  # raises on an impossible split (the profile's split rule)
    if job.pipeline.v_shape and len(set(vsl)) > 1:
        raise TrainsimError("parallelism.pipeline_layout",
                            f"the V-shaped {job.schedule} schedule needs the same layers in every virtual stage",
                            "use an even split (no first/last stage sizes, layout or --account-for-*)")
    # batch
    mbs, gbs = tr.micro_batch_size, tr.global_batch_size
    if gbs % (mbs * dp):
        raise TrainsimError(
            "training.global_batch_size",
            f"global batch {gbs} is not divisible by micro batch × dp = {mbs}·{dp} = {mbs * dp}",
            "make the global batch a multiple of mbs·dp",
        )
    microbatches = gbs // (mbs * dp)
    job.pipeline.check(pp, microbatches, vpp)
    # sequence / context parallelism
    seq = job.seq_length
    if cp > 1 and m.causal and seq % (2 * cp):
        raise TrainsimError(
            "training.seq_length",
            f"sequence {seq} is not divisible by 2·cp = {2 * cp} (causal context parallelism balances 2·cp chunks)",
            "choose a sequence length that is a multiple of 2·cp",
        )
    if cp > 1 and not m.causal and seq % cp:
        raise TrainsimError(
            "training.seq_length", f"sequence {seq} is not divisible by cp = {cp}", "use a multiple of cp"
        )
    if par.sequence_parallel and tp > 1 and seq % tp:
        raise TrainsimError(
            "training.seq_length",
            f"sequence {seq} is not divisible by tp = {tp} (sequence parallelism splits the sequence)",
            "use a sequence length that is a multiple of tp",
        )
    # optimizer / overlap flags
    if tr.overlap_param_gather and tr.zero_stage == 0:
        raise TrainsimError(
            "training.overlap_param_gather",
            "overlapping the parameter all-gather needs the distributed optimizer",
            "add --use-distributed-optimizer (or --zero-stage 1..3)",
        )
    if tr.tp_comm_overlap and not job.sequence_parallel:
        raise TrainsimError(
            "training.tp_comm_overlap",
            "TP communication overlap needs sequence parallelism with tp > 1",
            "add --sequence-parallel (and tp > 1), or drop --tp-comm-overlap",
        )
    check_framework(job)
    if tr.zero_stage == 2 and pp > 1:
        raise TrainsimError(
            "training.zero_stage",
            f"ZeRO stage 2 with pipeline parallelism (pp = {pp}) is not supported by the frameworks (gradients "
            "accumulate over the micro-batches)",
            "use --zero-stage 1 (distributed optimizer) or 3 (FSDP-style: parameters gathered once per step) "
            "with pp > 1",
        )
    if tr.fp8_recipe is not None and tr.precision != "fp8":
        raise TrainsimError("training.fp8_recipe", f"--fp8-recipe {tr.fp8_recipe} with {tr.precision} training",
                            "add --fp8 (or drop --fp8-recipe)")
    if tr.fp8_param_gather and (tr.precision != "fp8" or (tr.zero_stage or 0) < 1):
        raise TrainsimError("training.fp8_param_gather", "--fp8-param-gather needs FP8 training and the distributed "
                            "optimizer (Megatron-Core asserts both)", "add --fp8 and --use-distributed-optimizer, "
                            "or drop --fp8-param-gather")
    if tr.precision == "bf16" and sysm.gpu.peak_flops.bf16 is None:
        sysm.gpu.peak_flops.for_dtype("bf16")  # the one error for a GPU without BF16 tensor cores
    _check_flash_runs(job)
    if tr.precision == "fp8":
        from trainsim.workload.fp8 import recipe_cost

        recipe = recipe_cost(tr.fp8_recipe)
        known = sysm.gpu.generation in {"volta", "ampere", "ada", "hopper", "blackwell"}
        if known and sysm.gpu.peak_flops.fp8 is not None and sysm.gpu.generation not in recipe.generations:
            raise TrainsimError(
                "training.fp8_recipe",
                f"{tr.fp8_recipe or 'delayed'} scaling does not run on {sysm.gpu.name} ({sysm.gpu.generation})",
                f"use a recipe for {sysm.gpu.generation} GPUs (mxfp8 and nvfp4 need Blackwell), or a "
                f"{'/'.join(recipe.generations)} system",
            )
    if "mla_up_proj" in tr.recompute_modules and not m.multi_latent_attention:
        raise TrainsimError("training.recompute_modules", "mla_up_proj needs multi-latent attention",
                            "drop mla_up_proj for models without MLA")
    for module in ("moe_act", "moe", "shared_experts"):
        if module in tr.recompute_modules and not m.is_moe:
            raise TrainsimError("training.recompute_modules", f"{module} needs a model with experts", f"drop {module}")
    if "shared_experts" in tr.recompute_modules and not m.moe_shared_expert_intermediate_size:
        raise TrainsimError("training.recompute_modules", "shared_experts needs a model with a shared expert",
                            "drop shared_experts")
    if tr.moe_a2a_overlap and par.ep == 1:
        raise TrainsimError("training.moe_a2a_overlap", "overlapping the expert all-to-all needs ep > 1",
                            "use --ep > 1 or drop --overlap-moe-expert-parallel-comm")
    if tr.precision == "fp8" and tr.fp8_recipe == "nvfp4" and sysm.gpu.peak_flops.fp4 is None:
        raise TrainsimError("training.fp8_recipe", f"{sysm.gpu.name} has no FP4 tensor cores (NVFP4)",
                            "use a Blackwell system, or an FP8 recipe")
    if tr.precision == "fp8" and sysm.gpu.peak_flops.fp8 is None:
        raise TrainsimError(
            "training.precision",
            f"{sysm.gpu.name} has no FP8 tensor cores",
            "use --bf16 or --fp16, or a Hopper/Blackwell system",
        )
    if tr.recompute_num_layers is not None and tr.recompute_granularity != "full":
        raise TrainsimError(
            "training.recompute_num_layers",
            "only applies to full recomputation",
            "add --recompute-granularity full or drop --recompute-num-layers",
        )
    if m.position_embedding_type == "learned_absolute" and seq > m.seq_length:
        raise TrainsimError(
            "training.seq_length",
            f"sequence {seq} exceeds the model's {m.seq_length} learned positions",
            "use a shorter sequence or a model with rotary positions",
        )


def _check_offload(job: Job, zero: int) -> None:
    """CPU optimizer offloading needs a stack that offers it, the sharded (distributed) optimizer and a described
    host; offloading the parameters needs ZeRO-3 / FSDP and a stack that offers that."""
    field = "training.optimizer_cpu_offload"
    name = job.framework.label
    if job.training.param_cpu_offload:
        if not job.framework.param_cpu_offload:
            raise TrainsimError("training.param_cpu_offload", f"{name} cannot keep its parameters on the CPU",
                                "use --framework deepspeed, fsdp or torchtitan with ZeRO-3, or no parameter offload")
        if zero < 3:
            raise TrainsimError("training.param_cpu_offload", "parameter offloading offloads the ZeRO-3 / FSDP shards",
                                "use --zero-stage 3")
        if job.parallelism.pp > 1:  # the stage's parameters stay gathered through the step: nothing to offload
            raise TrainsimError("training.param_cpu_offload", "parameter offloading with pipeline parallelism is not "
                                "modelled (FSDP with pipelining keeps the stage's parameters gathered)",
                                "use pp 1 or --optimizer-cpu-offload")
    elif not job.framework.optimizer_cpu_offload:
        fix = (f"use --param-cpu-offload with --zero-stage 3 ({name} offloads parameters and optimizer together)"
               if job.framework.param_cpu_offload else
               "use --framework deepspeed, megatron-deepspeed, megatron-core or nemo, or no offload")
        raise TrainsimError(field, f"{name} offers no optimizer-only CPU offload", fix)
    if zero < 1:
        raise TrainsimError(field, "CPU optimizer offload runs the sharded optimizer on the host",
                            "add --use-distributed-optimizer (ZeRO stage 1 or higher)")
    if job.system.host is None:
        raise TrainsimError("system.host",
                            f"system {job.system.name} describes no host CPU for the offloaded optimizer",
                            "add a host: section (link_bandwidth_gb_s, memory_bandwidth_gb_s) to the system YAML")


def check_framework(job: Job) -> None:
    """Feasibility rules of the job's software stack (what the profile's engines offer)."""
    fw, par, tr = job.framework, job.parallelism, job.training
    zero = tr.zero_stage or 0
    name = fw.label
    if zero > fw.max_zero_stage:
        raise TrainsimError("training.zero_stage", f"ZeRO stage {zero} is not offered by {name} "
                            f"(at most {fw.max_zero_stage})",
                            f"use --zero-stage {fw.max_zero_stage} or lower, or another --framework")
    if par.pp > 1 and fw.pipeline_engine == "none":
        raise TrainsimError("parallelism.pp", f"{name} has no pipeline engine", "use pp 1 or another --framework")
    if par.pp > 1 and zero > fw.max_zero_stage_with_pp:
        engine = {"deepspeed": "the DeepSpeed pipeline engine"}.get(fw.pipeline_engine, f"{name}")
        raise TrainsimError("training.zero_stage",
                            f"ZeRO stage {zero} with pipeline parallelism (pp = {par.pp}) is refused by {engine}",
                            f"use --zero-stage {fw.max_zero_stage_with_pp} or lower with pp > 1, pp = 1, or a "
                            "framework whose sharding composes with pipelining (torchtitan)")
    if not fw.runs_chunks(par.vpp):
        raise TrainsimError("parallelism.vpp", f"{name}'s pipeline engine has no virtual stages",
                            "use vpp 1 or another --framework")
    if par.pp > 1 and fw.pipeline_schedules and job.schedule not in fw.pipeline_schedules:
        warn("parallelism.schedule", f"{name} ships no {job.schedule} schedule (it ships "
             f"{', '.join(fw.pipeline_schedules)}): predicted as if it did")
    if tr.offloaded_fraction > 0:
        _check_offload(job, zero)
    for axis, size, ok in ((Axis.TP, par.tp, fw.supports_tp), (Axis.CP, par.cp, fw.supports_cp),
                           (Axis.EP, par.ep, fw.supports_ep)):
        if size > 1 and not ok:
            raise TrainsimError(f"parallelism.{axis}", f"{name} offers no {axis.upper()} parallelism",
                                f"use {axis} 1 or another --framework (e.g. megatron-core, torchtitan)")


def _check_flash_runs(job: Job) -> None:
    """Flash attention needs a GPU its kernels run on (:data:`~trainsim.cost.attention_kernels.NO_FLASH_GENERATIONS`),
    except under transformers' model code (PyTorch SDPA's default backend order), which falls back to its
    memory-efficient fused kernel."""
    from trainsim.cost.attention_kernels import NO_FLASH_GENERATIONS

    gpu = job.system.gpu
    if (job.attention_path == "flash" and gpu.generation in NO_FLASH_GENERATIONS
            and not job.framework.transformers_model_code):
        raise TrainsimError(
            "training.attention", f"flash attention does not run on {gpu.name} ({gpu.generation}): FlashAttention "
            "and cuDNN fused attention need Ampere (sm80) or newer",
            "use --attention-backend unfused (Transformer Engine's fallback) or local (Megatron's fused softmax)")
