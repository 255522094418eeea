"""Per-stage costs of a job: the shared input of the analytic estimator and the event engine.

For every pipeline stage (one GPU of it: TP ranks and DP replicas are symmetric) this gives the time of one
micro-batch's forward and backward pass (compute, recompute, and the TP/CP/EP communication left exposed after the
framework's overlap), the point-to-point transfer to the next stage, and the per-iteration data-parallel
synchronisation and optimizer step. Times come from :mod:`trainsim.cost.compute` and :mod:`trainsim.cost.comm`, or
from any :class:`CostModel` (e.g. measured tables).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from trainsim.cost.calibration import Calibration, calibration_for
from trainsim.cost.comm import Placement, Placements, collective_time, placements_of
from trainsim.cost.compute import op_time
from trainsim.cost.host import host_excess, op_host_time
from trainsim.cost.offload import host_copy_time, host_step_time
from trainsim.cost.sharded import Unit, Zero3Comm, pass_overhead
from trainsim.errors import TrainsimError
from trainsim.workload.layers import Shard, Work, embedding_work, head_work, layer_work, shard_of
from trainsim.workload.memory import stage_parameter_split
from trainsim.workload.ops import (
    Collective,
    CommOp,
    ComputeOp,
    Group,
    OpSet,
    Overlap,
    comm_stream,
    elementwise,
    exposed_time,
    overlap_target,
)
from trainsim.workload.sharding import sharding_of
from trainsim.workload.stages import stage_layer_counts

if TYPE_CHECKING:
    from trainsim.spec.framework import Framework
    from trainsim.spec.job import Job
    from trainsim.spec.system import System

# Adam step with fp32 master weights: read grad, param, m, v; write param, m, v and the 16-bit copy; plus the
# gradient-clipping pass (read + write the gradient).
OPTIMIZER_BYTES_PER_PARAM = 38.0


class CostModel(Protocol):
    """Anything that prices compute ops and collectives (the analytic model, a measured table with fallback)."""

    calibration: Calibration

    def compute(self, op: ComputeOp) -> float:
        """Seconds for one compute op."""
        ...

    def host(self, op: ComputeOp) -> float:
        """CPU seconds to issue one compute op (:func:`trainsim.cost.host.op_host_time`)."""
        ...

    def collective(self, op: CommOp, place: Placement) -> float:
        """Seconds for one collective over a group placed as ``place``."""
        ...

    def is_measured(self, op: ComputeOp | CommOp) -> bool:
        """Whether the cost of ``op`` comes from a measurement (for the measured fractions)."""
        ...

    def optimizer_step(self, params: float) -> float:
        """Seconds for the optimizer step (with gradient clipping) over ``params`` local parameters."""
        ...


@dataclass
class AnalyticCostModel:
    """Roofline compute and α-β communication for one system."""

    system: System
    calibration: Calibration
    job_nodes: int = 1
    optimizer_bytes_per_param: float = OPTIMIZER_BYTES_PER_PARAM  # the stack's (Framework.optimizer_step_bytes)
    host_dispatch_s: float = 0.0  # the stack's CPU time to launch one kernel (Framework.host_dispatch_s)
    host_op_s: float = 0.0  # the stack's eager CPU time per modelled operator (Framework.host_op_s)

    def compute(self, op: ComputeOp) -> float:
        """Roofline time of ``op``; a kernel shorter than the host's dispatch time waits for the host."""
        return max(op_time(op, self.system.gpu, self.calibration), self.host_dispatch_s)

    def host(self, op: ComputeOp) -> float:
        """CPU seconds to issue ``op`` (:func:`trainsim.cost.host.op_host_time`)."""
        return op_host_time(op, self.host_op_s, self.host_dispatch_s)

    def collective(self, op: CommOp, place: Placement) -> float:
        """α-β time of ``op``."""
        return collective_time(op.collective, op.nbytes, place, self.system, self.calibration, self.job_nodes,
                               network_share=op.network_share)

    def is_measured(self, op: ComputeOp | CommOp) -> bool:
        """Nothing is measured in the analytic model."""
        return False

    def optimizer_step(self, params: float) -> float:
        """The optimizer step is memory-bound: ``optimizer_bytes_per_param`` (the stack's optimizer implementation and
        dtypes; :data:`OPTIMIZER_BYTES_PER_PARAM` for fused Adam with fp32 master weights) at achieved HBM speed."""
        return params * self.optimizer_bytes_per_param / (self.system.gpu.hbm_bandwidth
                                                          * self.calibration.memory_efficiency)


@dataclass
class BlockCost:
    """Time of one block (a layer, the embedding or the head) for one micro-batch."""

    fwd_compute: float = 0.0
    bwd_compute: float = 0.0  # includes recompute
    recompute: float = 0.0
    wgrad: float = 0.0  # weight-gradient GEMMs inside bwd_compute (movable by zero-bubble schedules)
    exposed: dict[str, float] = field(default_factory=dict)  # per group: comm on the critical path (fwd + bwd)
    exposed_fwd: float = 0.0
    exposed_bwd: float = 0.0
    overlap_penalty_fwd: float = 0.0
    overlap_penalty_bwd: float = 0.0
    measured: float = 0.0  # compute seconds priced from measurements (for measured_compute_fraction)
    comm: float = 0.0  # all collective seconds (hidden or not)
    comm_measured: float = 0.0  # collective seconds priced from measurements
    host_wait: float = 0.0  # seconds in fwd/bwd_compute the GPU waits for its host (trainsim.cost.host)

    @property
    def fwd(self) -> float:
        """Forward critical-path time."""
        return self.fwd_compute + self.exposed_fwd + self.overlap_penalty_fwd

    @property
    def bwd(self) -> float:
        """Backward critical-path time (recompute included)."""
        return self.bwd_compute + self.exposed_bwd + self.overlap_penalty_bwd

    def scaled(self, k: float) -> BlockCost:
        """``k`` copies of this block in sequence."""
        return BlockCost(
            self.fwd_compute * k, self.bwd_compute * k, self.recompute * k, self.wgrad * k,
            {g: t * k for g, t in self.exposed.items()}, self.exposed_fwd * k, self.exposed_bwd * k,
            self.overlap_penalty_fwd * k, self.overlap_penalty_bwd * k, self.measured * k, self.comm * k,
            self.comm_measured * k, self.host_wait * k,
        )

    def __add__(self, other: BlockCost) -> BlockCost:
        exposed = dict(self.exposed)
        for g, t in other.exposed.items():
            exposed[g] = exposed.get(g, 0.0) + t
        return BlockCost(
            self.fwd_compute + other.fwd_compute, self.bwd_compute + other.bwd_compute,
            self.recompute + other.recompute, self.wgrad + other.wgrad, exposed,
            self.exposed_fwd + other.exposed_fwd, self.exposed_bwd + other.exposed_bwd,
            self.overlap_penalty_fwd + other.overlap_penalty_fwd, self.overlap_penalty_bwd + other.overlap_penalty_bwd,
            self.measured + other.measured, self.comm + other.comm, self.comm_measured + other.comm_measured,
            self.host_wait + other.host_wait,
        )


@dataclass
class StageCost:
    """Costs of one GPU of one pipeline stage."""

    stage: int
    layers: int
    body: BlockCost  # all transformer layers of the stage, one micro-batch
    pre: BlockCost  # input embedding (first stage only)
    post: BlockCost  # output layer and loss (last stage only)
    p2p: float  # one activation (or gradient) transfer to the neighbouring stage
    grad_sync: float  # per iteration: gradient all-reduce / reduce-scatter over data parallelism
    grad_bucket: float  # the last gradient bucket, which no backward work can hide
    param_gather: float  # per iteration: parameter all-gather (distributed optimizer)
    param_bucket: float
    embedding_sync: float  # tied-embedding gradient all-reduce between first and last stage
    optimizer: float
    zero3_exposed: float = 0.0  # per micro-batch, ZeRO-3 parameter gathers not hidden by compute

    @cached_property
    def total(self) -> BlockCost:
        """Everything of one micro-batch on this stage (computed once: the parts are not changed after creation)."""
        return self.pre + self.body + self.post

    @property
    def fwd(self) -> float:
        """Forward time of one micro-batch."""
        return self.total.fwd + self.zero3_exposed / 2

    @property
    def bwd(self) -> float:
        """Backward time of one micro-batch."""
        return self.total.bwd + self.zero3_exposed / 2


def _time_work(work: Work, model: CostModel, places: Placements, tp_comm_overlap: bool,
               recompute_comm: bool = True, split_backward: bool = False) -> BlockCost:
    """Costs of one block, each pass waiting for a slower host (:mod:`trainsim.cost.host`)."""
    c = model.compute
    fwd_ops = OpSet(work.fwd)
    # a split-backward schedule runs the weight gradients later: collectives cannot hide behind them
    bwd_ops = OpSet(op for op in work.bwd if not (split_backward and op.is_weight_grad))
    times = {op: c(op) for op in (*work.fwd, *work.bwd)}
    re_times = [c(op) for op in work.recompute]
    wgrad = sum(times[op] for op in work.bwd if op.is_weight_grad)
    measured = sum(c(op) for op in (*work.fwd, *work.bwd, *work.recompute) if model.is_measured(op))
    out = BlockCost(wgrad=wgrad, measured=measured)
    slow = model.calibration.overlap_slowdown

    def account(ops: tuple[CommOp, ...], pass_ops: OpSet, backward: bool) -> float:
        """Book the collectives of one pass; returns the GPU time they add to it (exposed plus overlap penalty)."""
        # collectives hiding behind the same op on the same stream queue one after the other (as in the event
        # engine): each is exposed by what the queue so far outlasts that op
        added = 0.0
        queued: dict[tuple[int, str], float] = {}
        for op in ops:
            t = model.collective(op, places[op.group])
            out.comm += t
            if model.is_measured(op):
                out.comm_measured += t
            target, can_hide = overlap_target(op, pass_ops, tp_comm_overlap)
            hidden_by = times[target] if target is not None else 0.0
            if can_hide and target is not None:
                key = (id(target), comm_stream(op.group))
                before = queued.get(key, 0.0)
                queued[key] = before + t
                e0, p0 = exposed_time(before, hidden_by, True, slow)
                e1, p1 = exposed_time(before + t, hidden_by, True, slow)
                exposed, penalty = e1 - e0, p1 - p0
            else:
                exposed, penalty = exposed_time(t, hidden_by, can_hide, slow)
            out.exposed[op.group] = out.exposed.get(op.group, 0.0) + exposed
            added += exposed + penalty
            if backward:
                out.exposed_bwd += exposed
                out.overlap_penalty_bwd += penalty
            else:
                out.exposed_fwd += exposed
                out.overlap_penalty_fwd += penalty
        return added

    comm_gpu = (account(work.comm_fwd, fwd_ops, backward=False),
                account(work.comm_recompute, fwd_ops, backward=True) if recompute_comm and work.comm_recompute
                else 0.0,
                account(work.comm_bwd, bwd_ops, backward=True))
    # the host issuing the ops: each pass waits for it where it is slower than the GPU (its collectives included)
    waits = (host_excess(work.fwd, [times[op] for op in work.fwd], model.host, comm_gpu[0]),
             host_excess(work.recompute, re_times, model.host, comm_gpu[1]),
             host_excess(work.bwd, [times[op] for op in work.bwd], model.host, comm_gpu[2]))
    out.fwd_compute = sum(times[op] for op in work.fwd) + waits[0]
    out.recompute = sum(re_times) + waits[1]
    out.bwd_compute = sum(times[op] for op in work.bwd) + waits[2] + out.recompute
    out.host_wait = sum(waits)
    return out


def ddp_bucket_params(job: Job) -> float:
    """Parameters per data-parallel gradient bucket: ``--ddp-bucket-size``, else Megatron-Core's default of
    max(40M, 1M·dp·cp) with ``--overlap-grad-reduce`` and a single bucket (infinite size) without."""
    tr = job.training
    if tr.ddp_bucket_size:
        return float(tr.ddp_bucket_size)
    if not tr.overlap_grad_reduce:
        return math.inf
    return float(max(40_000_000, 1_000_000 * job.dp * job.parallelism.cp))


def _bucketed(model: CostModel, kind: Collective, params: float, bytes_per_param: float, bucket_params: float,
              place: Placement, group: Group = Group.DP_CP) -> tuple[float, float]:
    """(all buckets, one bucket) of a data-parallel collective over ``params`` parameters: Megatron's DDP issues one
    collective per bucket, so every bucket pays the collective's latency."""
    if params <= 0:
        return 0.0, 0.0
    bucket = min(params, bucket_params)
    full, rest = divmod(params, bucket)
    one = model.collective(CommOp("dp_bucket", kind, group, "bwd", bucket * bytes_per_param, Overlap.DP_WINDOW), place)
    tail = (model.collective(CommOp("dp_bucket", kind, group, "bwd", rest * bytes_per_param, Overlap.DP_WINDOW), place)
            if rest else 0.0)
    return full * one + tail, one


def _dp_sync(model: CostModel, kind: Collective, dense: float, expert: float, bytes_per_param: float,
             bucket_params: float, places: Placements) -> tuple[float, float]:
    """(all buckets, last bucket) of a data-parallel collective: non-expert parameters over dp·cp, routed-expert
    parameters over the expert-data-parallel group (their own DDP buffers in Megatron-Core)."""
    d_all, d_one = _bucketed(model, kind, dense, bytes_per_param, bucket_params, places[Group.DP_CP])
    e_all, e_one = _bucketed(model, kind, expert, bytes_per_param, bucket_params, places[Group.EDP], Group.EDP)
    return d_all + e_all, max(d_one, e_one)


def _memo(fn: Callable[[float], float]) -> Callable[[float], float]:
    cache: dict[float, float] = {}

    def memoised(n: float) -> float:
        if n not in cache:
            cache[n] = fn(n)
        return cache[n]
    return memoised


def zero3_layer_comm(job: Job, model: CostModel, place: Placement, stage_params: float,
                     layers: int) -> Zero3Comm | None:
    """The per-micro-batch ZeRO-3 / FSDP traffic of a stage of ``layers`` layers and ``stage_params`` parameters
    (``None`` unless parameters are gathered per micro-batch).

    Every all-gather and reduce-scatter is priced on its own by the NCCL model (:mod:`trainsim.cost.nccl`: the ring
    latency of the whole data-parallel group, which grows with it); the copies the engine makes
    (:func:`trainsim.workload.sharding.sharding_of`) are HBM passes at the cost model's elementwise speed.
    """
    sh = sharding_of(job)
    if not sh.per_microbatch_gather or sh.shards <= 1:
        return None
    per_layer = stage_params / max(layers, 1)
    e, g = sh.param_bytes, sh.grad_reduce_bytes
    replicas = None
    if sh.replicas > 1:  # hybrid: shard inside the node, one replica group per local rank across the nodes
        place, replicas = Placement(sh.shards, sh.shards, 1), Placement(sh.replicas, 1, sh.replicas)

    # parameter offloading: this GPU's shard of each gather first crosses from the host, of each reduce back
    to_host = host_copy_time(job, 1.0 / sh.shards) if job.training.param_cpu_offload else 0.0

    def gather(n: float) -> float:
        t = model.collective(CommOp("zero3_gather", "all_gather", Group.DP_CP, "fwd", n * e), place)
        return t + n * e * to_host

    def copy_in(n: float) -> float:  # read the gradient in the parameter dtype, write it in the reduce dtype
        return model.compute(elementwise("zero3_rs_copy_in", "bwd", n * (e + g)))

    def reduce(n: float) -> float:
        t = model.collective(CommOp("zero3_rs", "reduce_scatter", Group.DP_CP, "bwd", n * g), place)
        if replicas is not None:  # the reduce-scattered shard, all-reduced across the replicas
            t += model.collective(CommOp("zero3_replica_ar", "all_reduce", Group.DP_CP, "bwd", n * g / sh.shards),
                                  replicas)
        return t + (copy_in(n) if sh.copy_in == "stream" else 0.0) + n * g * to_host

    def grad_copy(n: float) -> float:
        return copy_in(n) if sh.copy_in == "compute" else 0.0

    def copy_out(n: float) -> float:
        return model.compute(elementwise("zero3_ag_copy_out", "fwd", 2 * n * e)) if sh.copy_out else 0.0

    # DeepSpeed's max reuse distance: with full recompute a unit's recompute forward and its backward are two
    # passes over the later units of the layer apart; beyond the limit its parameters are released in between
    full = job.training.recompute_granularity == "full"
    later = [sum(a for a, _, _ in sh.units[i + 1:]) * per_layer for i in range(len(sh.units))]
    return Zero3Comm(
        units=tuple(Unit(a * per_layer, r * per_layer, c, full and 2 * rest > sh.max_reuse_params)
                    for (a, r, c), rest in zip(sh.units, later, strict=True)),
        gather_time=_memo(gather), reduce_time=_memo(reduce), copy_out_time=_memo(copy_out),
        grad_copy_time=_memo(grad_copy),
        forward_depth=sh.forward_depth, backward_order=sh.backward_order, backward_depth=sh.backward_depth,
        prefetch_params=sh.prefetch_params, max_live_params=sh.max_live_params,
        reduce_bucket_params=sh.reduce_bucket_params, gather_in_backward=sh.reshard_after_forward,
        device_sync=sh.device_sync, reduce_per_unit=sh.rank_lists, host_per_collective=sh.host_per_collective,
    )


def zero3_persistent_gather(job: Job, model: CostModel, place: Placement, stage_params: float,
                            layers: int) -> float:
    """Seconds after the optimizer step to all-gather the tensors DeepSpeed's ZeRO-3 keeps gathered through the
    step's passes (those under ``stage3_param_persistence_threshold``): ``stage3.py`` ``_post_step`` gathers them
    all in one blocking collective; with list collectives (DeepSpeed <= 0.5's ``_allgather_params``) every such
    tensor is then copied out of the flat buffer rank by rank from Python, one host dispatch per tensor and rank."""
    sh = sharding_of(job)
    if not sh.per_microbatch_gather or sh.shards <= 1 or job.dp_engine != "deepspeed-zero":
        return 0.0
    kept = [r - a for a, r, _ in sh.units if r - a > 0]  # fractions of a layer that stay gathered
    if not kept or layers < 1:
        return 0.0
    t = model.collective(CommOp("zero3_persistent_gather", "all_gather", Group.DP_CP, "fwd",
                                sum(kept) * stage_params * sh.param_bytes), place)
    return max(t, len(kept) * layers * sh.host_per_collective)  # list APIs: copied out tensor by tensor


def zero3_overhead(layers: int, f: float, b: float, c: Zero3Comm, slowdown: float) -> float:
    """Seconds per micro-batch the ZeRO-3 traffic adds to ``layers`` uniform layers of ``f``/``b`` seconds: the
    forward and backward passes scheduled by :func:`trainsim.cost.sharded.run_pass` (exposed gathers, the last
    reduce-scatters, and the compute slowed while the collectives overlap it)."""
    fwd, bwd = pass_overhead(layers, f, b, c, slowdown)
    return fwd + bwd


#: Kernel models ``default_cost_model`` offers: ``auto`` (measured where a surface exists), ``measured``, ``analytic``.
KERNEL_MODELS = ("auto", "measured", "analytic")


def default_cost_model(job: Job, calibration: Calibration | None = None,
                       kernels: str = "auto") -> AnalyticCostModel:
    """The cost model for ``job``'s system (calibrated for its GPU generation) and software stack.

    ``kernels`` chooses the GEMM and attention kernel model: ``"auto"`` (default) the measured H100 efficiency
    surface on Hopper GPUs (:mod:`trainsim.cost.kernel_surfaces`; other Hopper parts use it as their shape model) and
    the analytic roofline elsewhere; ``"measured"`` the surface, refused for a GPU without one; ``"analytic"`` the
    roofline everywhere.
    """
    from trainsim.cost.kernel_surfaces import MEASURED_GPU, SurfaceCostModel, packaged_surface, uses_surface
    from trainsim.cost.tables import gpu_key

    if kernels not in KERNEL_MODELS:
        raise TrainsimError("kernels", f"unknown kernel model {kernels!r}", "use auto, measured or analytic")
    calib = calibration or calibration_for(job.system.gpu.generation)
    fw = job.framework
    opt = fw.optimizer_step_bytes(job.training.precision, bool(job.training.grads_in_fp32))
    gpu = job.system.gpu
    surface = uses_surface(gpu.name, gpu.generation)
    if kernels == "measured" and not surface:
        raise TrainsimError("kernels", f"no measured kernel surface for {gpu.name} ({gpu.generation})",
                            "use --kernels analytic or auto (measured surfaces: Hopper GPUs)")
    if kernels != "analytic" and surface:
        return SurfaceCostModel(job.system, calib, job.num_nodes, opt, fw.host_dispatch_s, host_op_seconds(fw),
                                surface=packaged_surface(), measured_gpu=gpu_key(gpu.name) == MEASURED_GPU)
    return AnalyticCostModel(job.system, calib, job.num_nodes, opt, fw.host_dispatch_s, host_op_seconds(fw))


def host_op_seconds(fw: Framework) -> float:
    """CPU seconds per modelled operator of a stack: its eager ``host_op_s``; a torch.compile'd model keeps only the
    launches (``host_dispatch_s``); CUDA graphs replay without the host."""
    if fw.cuda_graphs:
        return 0.0
    return fw.host_dispatch_s if fw.torch_compile else fw.host_op_s


def kernel_model_of(model: object) -> str:
    """Which kernel model ``model`` prices with: ``measured`` (the packaged measured surface), ``tables`` (the user's
    measured operator tables, ``--op-costs``) or ``analytic``."""
    from trainsim.cost.kernel_surfaces import SurfaceCostModel
    from trainsim.cost.tables import MeasuredCostModel

    if isinstance(model, MeasuredCostModel):
        return "tables" if model.ops is not None else kernel_model_of(model.fallback)
    return "measured" if isinstance(model, SurfaceCostModel) else "analytic"


def stage_costs(job: Job, model: CostModel | None = None) -> list[StageCost]:
    """Costs of every pipeline stage of ``job``."""
    model = model or default_cost_model(job)
    par, tr = job.parallelism, job.training
    shard: Shard = shard_of(job)
    places = placements_of(job)
    overlap = bool(tr.tp_comm_overlap)  # resolved by the Job (None only on an unresolved Training)
    blocks: dict[tuple[bool, str], BlockCost] = {}

    def block(kind: tuple[bool, str]) -> BlockCost:
        """One layer of a kind (MoE or dense, recompute mode), timed once per job."""
        if kind not in blocks:
            moe, mode = kind
            sh = shard.with_recompute(mode)
            blocks[kind] = _time_work(layer_work(job.model, sh, moe), model, places, overlap,
                                      split_backward=split)
        return blocks[kind]

    split = job.pipeline.split_backward
    emb = _time_work(embedding_work(job.model, shard), model, places, overlap, split_backward=split)
    head = _time_work(head_work(job.model, shard), model, places, overlap, split_backward=split)
    empty = BlockCost()

    act = shard.p2p_bytes(job.model.hidden_size)
    p2p = (model.collective(CommOp("pp_p2p", "send_recv", Group.PP, "fwd", act, Overlap.P2P), places[Group.PP])
           if par.pp > 1 else 0.0)
    if par.pp > 1 and not job.sequence_parallel and par.tp > 1:
        # scatter/gather optimisation: each TP rank sends 1/tp, then an all-gather inside the node
        p2p += model.collective(CommOp("pp_gather", "all_gather", Group.TP, "fwd", act * par.tp, Overlap.P2P),
                                 places[Group.TP])

    sh = sharding_of(job)
    shards = sh.shards
    grad_bytes_pp = sh.grad_reduce_bytes
    bucket_params = ddp_bucket_params(job)
    dp_place = places[Group.DP_CP]
    slow = model.calibration.overlap_slowdown
    stages = []
    # a stage's costs depend on its index only through its layer kinds and counts and whether it holds the
    # embedding or the head: stages alike in those share one computation (most stages of a uniform split)
    alike: dict[tuple[object, ...], StageCost] = {}
    for s, layers in enumerate(job.layers_per_stage):
        counts = stage_layer_counts(job, s)
        key = (tuple(counts.items()), layers, s == 0, s == job.head_stage)
        twin = alike.get(key)
        if twin is not None:
            stages.append(replace(twin, stage=s))
            continue
        body = BlockCost()
        for kind, count in counts.items():
            body = body + block(kind).scaled(count)
        dense, expert = stage_parameter_split(job, s)
        params = dense + expert
        grad_sync = grad_bucket = gather = bucket_gather = 0.0
        if sh.reduce_per_step:
            grad_sync, grad_bucket = _dp_sync(model, sh.grad_collective, dense, expert, grad_bytes_pp,
                                              bucket_params, places)
        if sh.gather_per_step:
            gather, bucket_gather = _dp_sync(model, "all_gather", dense, expert, sh.param_bytes, bucket_params,
                                             places)
        emb_sync = 0.0
        tied_copy = job.head_stage != 0 and not job.model.untie_embeddings_and_output_weights
        if tied_copy and s in (0, job.head_stage):
            v_h = job.model.padded_vocab_size(par.tp) * job.model.hidden_size / par.tp
            emb_sync = model.collective(CommOp("embedding_sync", "all_reduce", Group.EMBEDDING, "bwd",
                                               v_h * grad_bytes_pp, Overlap.DP_WINDOW), places[Group.EMBEDDING])
        local = dense / shards + expert / job.expert_dp if sh.memory_stage >= 1 else params
        # CPU offloading: the GPU steps its share while the host steps the offloaded one (trainsim.cost.offload)
        opt = max(model.optimizer_step(local * (1.0 - job.training.offloaded_fraction)),
                  host_step_time(job, local)) + zero3_persistent_gather(job, model, dp_place, params, layers)
        zero3 = 0.0
        comm = zero3_layer_comm(job, model, dp_place, params, layers)
        if comm is not None:
            n = max(layers, 1)
            zero3 = zero3_overhead(n, body.fwd / n, body.bwd / n, comm, slow)
        stages.append(StageCost(
            stage=s, layers=layers, body=body,
            pre=emb if s == 0 else empty, post=head if s == job.head_stage else empty,
            p2p=p2p, grad_sync=grad_sync, grad_bucket=grad_bucket, param_gather=gather, param_bucket=bucket_gather,
            embedding_sync=emb_sync, optimizer=opt, zero3_exposed=zero3,
        ))
        alike[key] = stages[-1]
    return stages
