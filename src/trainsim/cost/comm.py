"""Communication cost: α-β collectives over a two-tier network, with placement from the rank order.

Placement. Which GPUs of a group share a node (:class:`~trainsim.parallel.layout.Placement`) comes from the job's
:class:`~trainsim.parallel.layout.Layout` (rank order, strides, dense and expert grids); this module prices a
collective over such a placement.

Bandwidth. Inside a node a GPU reaches ``nvlink_bandwidth · nvlink_efficiency`` per direction. Across nodes, a
group's traffic leaves each node through the NICs of its members there (rail-optimised: each GPU owns
``nics_per_node · nic_bandwidth / gpus_per_node``), so a ring crossing nodes is limited by
``members_per_node · nic_per_gpu · network_efficiency`` — and when every GPU of a node runs the same kind of
collective at once (TP, DP, CP groups all do), this is exactly the node's NICs shared between the concurrent
groups. Oversubscribed fabrics divide the NIC bandwidth above ``full_bisection_nodes``.

Algorithms: all-reduce, all-gather and reduce-scatter follow NCCL's tuner (:mod:`trainsim.cost.nccl`: ring / tree /
NVLS × LL / LL128 / Simple, the cheapest for the message size, per-step latencies inside and across nodes);
all-to-all sends the share of ``S`` for peers in the same node over NVLink, the rest over the GPU's own NIC;
send/recv costs ``α + S/B`` on the link between the two GPUs.
"""

from __future__ import annotations

from typing import Literal

from trainsim.cost.calibration import Calibration
from trainsim.cost.nccl import Links, collective_seconds
from trainsim.parallel.axes import DEFAULT_RANK_ORDER
from trainsim.parallel.layout import SINGLE, Layout, Placement, Placements, placements_of
from trainsim.spec.system import System
from trainsim.workload.ops import Collective

__all__ = ["SINGLE", "Algorithm", "Placement", "Placements", "collective_time", "group_placements", "link",
           "nccl_links", "placements_of"]

Algorithm = Literal["auto", "ring", "tree", "nvls"]


def group_placements(rank_order: str = DEFAULT_RANK_ORDER, tp: int = 1, cp: int = 1, ep: int = 1, dp: int = 1,
                     pp: int = 1, gpus_per_node: int = 8, etp: int | None = None, grid: tuple[int, int] | None = None,
                     tp_inner: str = "row") -> Placements:
    """Placement of every communication group that contains global rank 0 (:class:`~trainsim.parallel.layout.Layout`
    owns the strides and groups; this is its placement table for scalar sizes). With a 2D tensor-parallel ``grid``
    (rows, columns) it includes the ``tp_row`` and ``tp_col`` groups."""
    return Layout.create(tp, cp, ep, dp, pp, rank_order, gpus_per_node, etp, grid, tp_inner).placements


def link(place: Placement, system: System, calib: Calibration, job_nodes: int,
         per_gpu: bool = False) -> tuple[float, float]:
    """(bandwidth bytes/s, latency s) of the slowest hop of a group.

    Across nodes the group's members on one node share that node's NICs (``per_node`` of them each with
    ``nic_per_gpu``): groups of the same kind run concurrently on every GPU of a node, so this is the NIC share of
    each concurrent collective. ``per_gpu``: one GPU's own NIC (point-to-point transfers).
    """
    nv = system.node.nvlink_bandwidth * calib.nvlink_efficiency
    if not place.crosses_nodes:
        return nv, system.node.nvlink_latency
    sharing = 1 if per_gpu else place.per_node
    nic = sharing * system.nic_bandwidth_per_gpu(job_nodes) * calib.network_efficiency
    return min(nv, nic), system.network.latency


def collective_time(collective: Collective, nbytes: float, place: Placement, system: System, calib: Calibration,
                    job_nodes: int = 1, algorithm: Algorithm = "auto", network_share: float = 1.0) -> float:
    """Seconds for one collective of ``nbytes`` over a group placed as ``place``; ``network_share`` scales an
    all-to-all's inter-node bytes (a deduplicating MoE dispatcher, :class:`~trainsim.workload.ops.CommOp`)."""
    n = place.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    if collective == "send_recv":
        bw, lat = link(place, system, calib, job_nodes, per_gpu=True)
        return lat + nbytes / bw
    if collective == "all_to_all":
        nv = system.node.nvlink_bandwidth * calib.nvlink_efficiency
        intra = (place.per_node - 1) / n * nbytes / nv
        inter = 0.0
        lat = system.node.nvlink_latency
        if place.crosses_nodes:
            nic = system.nic_bandwidth_per_gpu(job_nodes) * calib.network_efficiency
            inter = network_share * (n - place.per_node) / n * nbytes / nic
            lat = system.network.latency
        return (n - 1) * lat + max(intra, inter)
    return collective_seconds(collective, nbytes, nccl_links(place, system, calib, job_nodes), algorithm)


def nccl_links(place: Placement, system: System, calib: Calibration, job_nodes: int = 1) -> Links:
    """The NCCL model's view of a group: ranks, nodes, Simple-protocol bus bandwidth and step latencies."""
    bw, _ = link(place, system, calib, job_nodes)
    nv = system.node.nvlink_bandwidth * calib.nvlink_efficiency
    net = place.per_node * system.nic_bandwidth_per_gpu(job_nodes) * calib.network_efficiency
    return Links(place.size, place.nodes, bw, nv, net, system.node.nvlink_latency, system.network.latency,
                 system.has_nvls)
