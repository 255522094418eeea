"""Communication cost: α-β collectives over a two-tier network, with placement from the rank order.

Placement. Global ranks are laid out by ``rank_order`` (fastest-varying dimension first, Megatron's
``tp-cp-ep-dp-pp`` by default) and packed ``gpus_per_node`` to a node (an NVLink/NVSwitch domain). For each
parallel dimension we enumerate the group that contains rank 0 and count how many nodes it spans and how many of its
members share a node (:class:`Placement`). Expert groups use Megatron's expert rank generator (cp folded into the
expert data-parallel dimension).

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

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from trainsim.cost.calibration import Calibration
from trainsim.cost.nccl import Links, collective_seconds
from trainsim.spec.system import System
from trainsim.workload.ops import Collective

if TYPE_CHECKING:
    from trainsim.spec.job import Job

Algorithm = Literal["auto", "ring", "tree", "nvls"]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the members of one communication group sit."""

    size: int
    per_node: int
    nodes: int

    @property
    def crosses_nodes(self) -> bool:
        """True when the group spans more than one node."""
        return self.nodes > 1


SINGLE = Placement(1, 1, 1)


def _strides(order: list[str], sizes: dict[str, int]) -> dict[str, int]:
    strides, acc = {}, 1
    for dim in order:
        strides[dim] = acc
        acc *= sizes[dim]
    return strides


def _placement(members: list[int], gpus_per_node: int) -> Placement:
    counts: dict[int, int] = {}
    for r in members:
        node = r // gpus_per_node
        counts[node] = counts.get(node, 0) + 1
    return Placement(len(members), max(counts.values()), len(counts))


def grid_offsets(rows: int, cols: int, tp_inner: str) -> tuple[list[int], list[int]]:
    """Tensor-parallel ranks (offsets inside the TP group, in units of its stride) of the row group (the ``cols``
    GPUs of grid row 0) and of the column group (the ``rows`` GPUs of grid column 0) of a ``rows × cols`` SUMMA grid.
    ``tp_inner="row"``: TP rank ``i·cols + j`` holds grid cell ``(i, j)`` (row groups adjacent); ``"col"``: ``j·rows
    + i`` (column groups adjacent)."""
    if tp_inner == "row":
        return list(range(cols)), [i * cols for i in range(rows)]
    return [j * rows for j in range(cols)], list(range(rows))


@lru_cache(maxsize=8192)
def group_placements(rank_order: str, tp: int, cp: int, ep: int, dp: int, pp: int,
                     gpus_per_node: int, etp: int | None = None, grid: tuple[int, int] | None = None,
                     tp_inner: str = "row") -> dict[str, Placement]:
    """Placement of the tp, cp, dp, dp_cp, pp, ep, etp, edp, embedding and world groups that contain global rank 0,
    and with a 2D tensor-parallel ``grid`` (rows, columns) of its ``tp_row`` and ``tp_col`` groups.

    The expert groups follow Megatron-Core's expert rank generator (parallel folding): the same global ranks are
    re-read as an ``etp × ep × edp × pp`` grid in the rank order with cp removed, ``edp = tp·cp·dp/(ep·etp)``.
    """
    order = rank_order.split("-")
    dense = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    st = _strides(order, dense)
    out: dict[str, Placement] = {}
    for dim in ("tp", "cp", "dp", "pp"):
        out[dim] = _placement([i * st[dim] for i in range(dense[dim])], gpus_per_node)
    if grid is not None:
        row, col = grid_offsets(grid[0], grid[1], tp_inner)
        out["tp_row"] = _placement([t * st["tp"] for t in row], gpus_per_node)
        out["tp_col"] = _placement([t * st["tp"] for t in col], gpus_per_node)
    out["dp_cp"] = _placement([i * st["dp"] + j * st["cp"] for i in range(dp) for j in range(cp)], gpus_per_node)
    out["embedding"] = _placement(sorted({0, (pp - 1) * st["pp"]}), gpus_per_node)
    world = tp * cp * dp * pp
    out["world"] = Placement(world, min(world, gpus_per_node), -(-world // gpus_per_node))
    etp = tp if etp is None else etp
    edp = max(1, tp * cp * dp // (ep * etp))
    expert = {"tp": etp, "cp": 1, "ep": ep, "dp": edp, "pp": pp}
    est = _strides(order, expert)
    out["ep"] = _placement([i * est["ep"] for i in range(ep)], gpus_per_node)
    if ep > 1 or etp != tp:  # expert groups differ from the dense ones only then
        out["etp"] = _placement([i * est["tp"] for i in range(etp)], gpus_per_node)
        out["edp"] = _placement([i * est["dp"] for i in range(edp)], gpus_per_node)
    return out


def placements_of(job: Job) -> dict[str, Placement]:
    """Placements of the groups of ``job``."""
    par = job.parallelism
    grid = par.grid if par.summa else None
    return group_placements(par.rank_order, par.tp, par.cp, par.ep, job.dp, par.pp, job.system.gpus_per_node,
                            par.expert_tp, grid, par.tp_inner)


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
                    job_nodes: int = 1, algorithm: Algorithm = "auto") -> float:
    """Seconds for one collective of ``nbytes`` over a group placed as ``place``."""
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
            inter = (n - place.per_node) / n * nbytes / nic
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
