"""Where the time of the MoE layers goes: token dispatch/combine, expert GEMMs, router, permutation, shared expert.

For every pipeline stage the ops of its MoE layers (MTP layers included) are priced with the job's cost model for
one micro-batch and summed over the stage's MoE layers; ``exposed`` is the expert-parallel communication left on
the critical path after the overlap the framework does (shared-expert overlap, merged-1F1B all-to-all overlap), by
the same rule as the analytic estimate (:func:`trainsim.cost.job_costs._time_work`). ``per_iteration`` multiplies
by the micro-batches of one iteration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainsim.cost.comm import Placements, placements_of
from trainsim.cost.job_costs import CostModel, _time_work, default_cost_model
from trainsim.parallel.axes import Group
from trainsim.workload.layers import Work, layer_work, shard_of
from trainsim.workload.stages import stage_layer_counts

if TYPE_CHECKING:
    from trainsim.spec.job import Job

#: op-name prefix → category
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("expert_", "expert_gemm_s"), ("shared_expert_", "shared_expert_s"), ("router", "router_s"),
    ("moe_permute", "permute_s"), ("moe_unpermute", "permute_s"), ("moe_sort", "permute_s"),
    ("moe_unsort", "permute_s"),
)
COMM: tuple[tuple[str, str], ...] = (
    ("moe_dispatch", "dispatch_s"), ("moe_combine", "combine_s"), ("moe_etp_", "expert_tp_comm_s"),
)


def _categorise(work: Work, model: CostModel, places: Placements) -> dict[str, float]:
    out: dict[str, float] = {}
    for op in (*work.fwd, *work.bwd, *work.recompute):
        for prefix, key in CATEGORIES:
            if op.name.startswith(prefix) and (op.kind == "gemm" or not prefix.endswith("_")
                                                or key != "expert_gemm_s"):
                if key == "expert_gemm_s" and op.kind != "gemm":
                    key = "expert_activation_s"
                out[key] = out.get(key, 0.0) + model.compute(op)
                break
    for op in (*work.comm_fwd, *work.comm_bwd):
        for prefix, key in COMM:
            if op.name.startswith(prefix):
                out[key] = out.get(key, 0.0) + model.collective(op, places[op.group])
                break
    return out


def moe_breakdown(job: Job, cost_model: CostModel | None = None) -> dict[str, Any]:
    """MoE time per stage (one micro-batch, all its MoE layers) and per iteration, with the expert groups."""
    model = cost_model or default_cost_model(job)
    m = job.model
    par = job.parallelism
    places = placements_of(job)
    shard = shard_of(job)
    per_stage = []
    for s in range(par.pp):
        totals: dict[str, float] = {}
        layers = 0
        kinds = [(kind, n) for kind, n in stage_layer_counts(job, s).items() if kind[0]]
        if s == par.pp - 1 and m.mtp_num_layers and m.is_moe:
            kinds.append(((True, job.training.recompute_granularity), m.mtp_num_layers))
        for (_moe, mode), n in kinds:
            sh = shard.with_recompute(mode)
            work = layer_work(m, sh, True)
            for key, t in _categorise(work, model, places).items():
                totals[key] = totals.get(key, 0.0) + n * t
            block = _time_work(work, model, places, bool(job.training.tp_comm_overlap))
            totals["ep_exposed_s"] = totals.get("ep_exposed_s", 0.0) + n * block.exposed.get(Group.EP, 0.0)
            # the whole layer's wait for its host (dense part included): the GPU idles while Python issues ops
            totals["host_wait_s"] = totals.get("host_wait_s", 0.0) + n * block.host_wait
            layers += n
        per_stage.append({"stage": s, "moe_layers": layers, "per_microbatch": totals,
                          "per_iteration": {k: v * job.num_microbatches for k, v in totals.items()}})
    ep_place, edp_place = places[Group.EP], places[Group.EDP]
    return {
        "num_experts": m.num_experts, "topk": m.moe_router_topk, "moe_layers": m.num_moe_layers,
        "mtp_layers": m.mtp_num_layers, "ep": par.ep, "etp": par.expert_tp, "expert_dp": job.expert_dp,
        "ep_group_nodes": ep_place.nodes, "ep_group_gpus_per_node": ep_place.per_node,
        "edp_group_nodes": edp_place.nodes, "load_imbalance": m.moe_load_imbalance,
        "capacity_factor": m.moe_expert_capacity_factor, "per_stage": per_stage,
    }
