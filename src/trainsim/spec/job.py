"""A training job: model + system + parallelism + training, cross-validated."""

from __future__ import annotations

from functools import cached_property

from pydantic import Field, model_validator

from trainsim.errors import TrainsimError, warn
from trainsim.spec.base import Spec
from trainsim.spec.model import Model
from trainsim.spec.parallelism import Parallelism, Schedule
from trainsim.spec.system import System
from trainsim.spec.training import Training


class Job(Spec):
    """Everything needed to predict one training job.

    Either ``num_gpus`` or ``parallelism.dp`` (or both, then they must agree) fixes the data-parallel size.
    Every inconsistency raises :class:`~trainsim.errors.TrainsimError` naming the field and the fix.
    """

    model: Model
    system: System
    parallelism: Parallelism = Field(default_factory=Parallelism)
    training: Training
    num_gpus: int | None = Field(default=None, gt=0)

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
        return max(1, par.tp * par.cp * self.dp // (par.ep * par.expert_tp))

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
        return "interleaved" if par.vpp > 1 else "1f1b"

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
        """Sequence parallelism in effect (only meaningful with tp > 1)."""
        return self.parallelism.sequence_parallel and self.parallelism.tp > 1

    @cached_property
    def layers_per_stage(self) -> tuple[int, ...]:
        """Transformer layers held by each pipeline rank (all its virtual stages together)."""
        return stage_layers(self.model.num_layers, self.parallelism)

    @property
    def num_nodes(self) -> int:
        """Nodes (NVLink domains) used, rounded up."""
        return -(-self.world_size // self.system.gpus_per_node)


def stage_layers(num_layers: int, par: Parallelism) -> tuple[int, ...]:
    """Split layers over pipeline ranks, honouring explicit first/last stage sizes."""
    pp = par.pp
    layout = par.virtual_stage_layers
    if layout is not None:
        return tuple(sum(layout[c * pp + s] for c in range(len(layout) // pp)) for s in range(pp))
    first, last = par.first_stage_layers, par.last_stage_layers
    if first is None and last is None:
        return (num_layers // pp,) * pp
    if pp == 1:
        return (num_layers,)
    fixed = {0: first, pp - 1: last}
    given = {i: v for i, v in fixed.items() if v is not None}
    rest = num_layers - sum(given.values())
    middle = pp - len(given)
    each = rest // middle if middle else 0
    return tuple(given.get(i, each) for i in range(pp))


def validate_job(job: Job) -> None:
    """Cross-field checks; raises :class:`TrainsimError` on the first problem."""
    m, par, tr, sysm = job.model, job.parallelism, job.training, job.system
    tp, pp, cp, ep, vpp = par.tp, par.pp, par.cp, par.ep, par.vpp
    mp = par.model_parallel_size

    # GPU count vs tp·pp·cp·dp
    if job.num_gpus is not None:
        if par.dp is not None and mp * par.dp != job.num_gpus:
            raise TrainsimError(
                "num_gpus",
                f"tp·pp·cp·dp = {tp}·{pp}·{cp}·{par.dp} = {mp * par.dp} ≠ {job.num_gpus} GPUs",
                "make the product equal the GPU count, or leave dp out to derive it",
            )
        if job.num_gpus % mp:
            raise TrainsimError(
                "num_gpus",
                f"{job.num_gpus} GPUs are not divisible by tp·pp·cp = {tp}·{pp}·{cp} = {mp}",
                "use a GPU count that is a multiple of tp·pp·cp",
            )
    dp = job.dp
    etp = par.expert_tp
    if (tp * dp * cp) % (ep * etp):
        raise TrainsimError(
            "parallelism.ep",
            f"ep·etp = {ep}·{etp} does not divide tp·cp·dp = {tp}·{cp}·{dp}",
            "choose ep and --expert-tensor-parallel-size whose product divides tp·cp·dp (Megatron's parallel "
            "folding builds the expert grid etp × ep × edp from the attention grid's ranks)",
        )
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
    if tp > sysm.gpus_per_node:
        warn("parallelism.tp", f"tp = {tp} spans nodes ({sysm.gpus_per_node} GPUs per node): expect slow TP comm")
    # pipeline
    if vpp > 1 and pp == 1:
        raise TrainsimError("parallelism.vpp", "virtual stages need pipeline parallelism", "use pp > 1 or vpp 1")
    schedule = job.schedule
    if schedule == "interleaved" and vpp == 1:
        raise TrainsimError(
            "parallelism.schedule", "the interleaved schedule needs vpp > 1", "give --vpp (virtual stages per rank)"
        )
    if vpp > 1 and schedule != "interleaved":
        raise TrainsimError(
            "parallelism.schedule",
            f"vpp = {vpp} needs the interleaved schedule, not {schedule}",
            "use --schedule interleaved or leave --schedule out",
        )
    explicit = par.first_stage_layers is not None or par.last_stage_layers is not None
    layout = par.virtual_stage_layers
    if layout is not None:
        if explicit:
            raise TrainsimError("parallelism.pipeline_layout", "given together with first/last stage layers",
                                "give either --pipeline-model-parallel-layout or the first/last stage sizes")
        if len(layout) != pp * vpp:
            raise TrainsimError(
                "parallelism.pipeline_layout",
                f"has {len(layout)} virtual stages but pp·vpp = {pp}·{vpp} = {pp * vpp}",
                "give one '|'-separated entry per virtual stage",
            )
        if sum(layout) != m.num_layers:
            raise TrainsimError(
                "parallelism.pipeline_layout",
                f"places {sum(layout)} transformer layers (t) but the model has {m.num_layers}",
                "put every layer in exactly one virtual stage",
            )
    elif explicit:
        if vpp > 1:
            raise TrainsimError(
                "parallelism.first_stage_layers",
                "uneven first/last stages are only supported without virtual stages",
                "use vpp 1 or an even split",
            )
        given = [v for v in (par.first_stage_layers, par.last_stage_layers) if v is not None]
        middle = pp - len(given)
        rest = m.num_layers - sum(given)
        if pp == 1 or rest < 0 or (middle == 0 and rest != 0) or (middle and (rest % middle or rest == 0)):
            raise TrainsimError(
                "parallelism.first_stage_layers",
                f"cannot split {m.num_layers} layers over {pp} stages with first/last = "
                f"{par.first_stage_layers}/{par.last_stage_layers}",
                "the remaining layers must divide evenly over the other stages",
            )
    elif m.num_layers % (pp * vpp):
        raise TrainsimError(
            "model.num_layers",
            f"{m.num_layers} layers are not divisible by pp·vpp = {pp}·{vpp} = {pp * vpp}",
            "change pp/vpp, or give --decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers",
        )
    # batch
    mbs, gbs = tr.micro_batch_size, tr.global_batch_size
    if gbs % (mbs * dp):
        raise TrainsimError(
            "training.global_batch_size",
            f"global batch {gbs} is not divisible by micro batch × dp = {mbs}·{dp} = {mbs * dp}",
            "make the global batch a multiple of mbs·dp",
        )
    microbatches = gbs // (mbs * dp)
    if schedule == "interleaved" and microbatches % pp:
        raise TrainsimError(
            "training.global_batch_size",
            f"the interleaved schedule needs micro-batches per pipeline ({microbatches}) divisible by pp = {pp}",
            "make gbs/(mbs·dp) a multiple of pp, or use the non-interleaved 1f1b schedule",
        )
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
    if tr.zero_stage >= 2 and pp > 1:
        raise TrainsimError(
            "training.zero_stage",
            f"ZeRO stage {tr.zero_stage} with pipeline parallelism (pp = {pp}) is not supported by the frameworks",
            "use --zero-stage 1 (distributed optimizer) with pp > 1, or pp = 1",
        )
    if tr.fp8_recipe is not None and tr.precision != "fp8":
        raise TrainsimError("training.fp8_recipe", f"--fp8-recipe {tr.fp8_recipe} with {tr.precision} training",
                            "add --fp8 (or drop --fp8-recipe)")
    if tr.precision == "fp8":
        from trainsim.workload.fp8 import recipe_cost

        recipe = recipe_cost(tr.fp8_recipe)
        known = sysm.gpu.generation in {"volta", "ampere", "ada", "hopper", "blackwell"}
        if known and sysm.gpu.peak_flops.fp8 is not None and sysm.gpu.generation not in recipe.generations:
            raise TrainsimError(
                "training.fp8_recipe",
                f"{tr.fp8_recipe or 'delayed'} scaling does not run on {sysm.gpu.name} ({sysm.gpu.generation})",
                f"use a recipe for {sysm.gpu.generation} GPUs (mxfp8 needs Blackwell), or a "
                f"{'/'.join(recipe.generations)} system",
            )
    if "mla_up_proj" in tr.recompute_modules and not m.multi_latent_attention:
        raise TrainsimError("training.recompute_modules", "mla_up_proj needs multi-latent attention",
                            "drop mla_up_proj for models without MLA")
    if "moe_act" in tr.recompute_modules and not m.is_moe:
        raise TrainsimError("training.recompute_modules", "moe_act needs a model with experts", "drop moe_act")
    if tr.moe_a2a_overlap and par.ep == 1:
        raise TrainsimError("training.moe_a2a_overlap", "overlapping the expert all-to-all needs ep > 1",
                            "use --ep > 1 or drop --overlap-moe-expert-parallel-comm")
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
