"""Where every GPU of a job sits: global ranks, their parallel coordinates, nodes and simulation units.

Global ranks follow the job's ``rank_order`` (fastest-varying dimension first, Megatron's ``tp-cp-ep-dp-pp`` by
default), packed ``gpus_per_node`` to a node — the same layout as :mod:`trainsim.cost.comm`.

The event engine simulates **units**: one unit is the tensor- and context-parallel group of one data-parallel replica
``d`` on one pipeline stage ``s``. Its members exchange data in every layer (TP/SP collectives, the CP ring), so they
run in lock step at the pace of the slowest member; the unit is drawn as one representative GPU (TP rank 0, CP rank
0) with its group noted. Expert-parallel groups are carved out of data- and context-parallel ranks, so with ``ep > 1``
the units of several replicas exchange tokens in every MoE layer: :meth:`Layout.ep_coupling` says which replicas are
tied together that way.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from trainsim.spec.job import Job


@dataclass(frozen=True)
class Layout:
    """Rank layout of a job."""

    tp: int
    cp: int
    ep: int
    dp: int
    pp: int
    rank_order: str
    gpus_per_node: int
    etp: int | None = None  #: expert tensor-parallel size (None: tp)

    @classmethod
    def of(cls, job: Job) -> Layout:
        """The layout of ``job``."""
        par = job.parallelism
        return cls(par.tp, par.cp, par.ep, job.dp, par.pp, par.rank_order, job.system.gpus_per_node, par.expert_tp)

    @property
    def world_size(self) -> int:
        """Number of GPUs."""
        return self.tp * self.cp * self.dp * self.pp

    @property
    def num_nodes(self) -> int:
        """Nodes used (rounded up)."""
        return -(-self.world_size // self.gpus_per_node)

    @cached_property
    def strides(self) -> dict[str, int]:
        """Stride of each dense dimension in the global rank (expert parallelism folded into dp/cp)."""
        sizes = {"tp": self.tp, "cp": self.cp, "ep": 1, "dp": self.dp, "pp": self.pp}
        out, acc = {}, 1
        for dim in self.rank_order.split("-"):
            out[dim] = acc
            acc *= sizes[dim]
        return out

    def rank(self, tp: int | np.ndarray = 0, cp: int | np.ndarray = 0, dp: int | np.ndarray = 0,
             pp: int | np.ndarray = 0) -> int | np.ndarray:
        """Global rank of the given coordinates (vectorised)."""
        st = self.strides
        return tp * st["tp"] + cp * st["cp"] + dp * st["dp"] + pp * st["pp"]

    def coords(self, rank: int | np.ndarray) -> dict[str, int | np.ndarray]:
        """Coordinates ``tp, cp, dp, pp`` of global ranks (vectorised)."""
        st = self.strides
        sizes = {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp}
        return {dim: (rank // st[dim]) % size for dim, size in sizes.items()}

    def unit_ranks(self, dp: int, pp: int) -> np.ndarray:
        """All global ranks of unit ``(dp, pp)``: its TP × CP group, TP rank 0 / CP rank 0 first."""
        tp, cp = np.meshgrid(np.arange(self.tp), np.arange(self.cp), indexing="ij")
        return np.sort(np.asarray(self.rank(tp.ravel(), cp.ravel(), dp, pp)))

    @cached_property
    def unit_of_rank(self) -> tuple[np.ndarray, np.ndarray]:
        """``(dp, pp)`` of every global rank."""
        c = self.coords(np.arange(self.world_size))
        return np.asarray(c["dp"]), np.asarray(c["pp"])

    def representative(self, dp: int | np.ndarray, pp: int | np.ndarray) -> int | np.ndarray:
        """Global rank drawn for a unit (TP rank 0, CP rank 0), as in the released straggler traces."""
        return self.rank(0, 0, dp, pp)

    def node_of(self, rank: int | np.ndarray) -> int | np.ndarray:
        """Node (NVLink domain) of global ranks."""
        return rank // self.gpus_per_node

    def unit_max(self, per_rank: np.ndarray) -> np.ndarray:
        """``[dp, pp]`` maximum of a per-rank quantity over each unit's members."""
        d, s = self.unit_of_rank
        out = np.full((self.dp, self.pp), -np.inf)
        np.maximum.at(out, (d, s), per_rank)
        return out

    def unit_node_max(self, per_node: np.ndarray) -> np.ndarray:
        """``[dp, pp]`` maximum of a per-node quantity over the nodes a unit spans."""
        return self.unit_max(per_node[self.node_of(np.arange(self.world_size))])

    def p2p_crosses_nodes(self) -> np.ndarray:
        """``[dp, pp]``: whether the transfer from stage ``s`` to ``s + 1`` (mod pp) leaves the node (TP rank 0)."""
        d, s = np.meshgrid(np.arange(self.dp), np.arange(self.pp), indexing="ij")
        a = self.node_of(self.rank(0, 0, d, s))
        b = self.node_of(self.rank(0, 0, d, (s + 1) % self.pp))
        return np.asarray(a != b)

    def group_crosses_nodes(self, dims: tuple[str, ...]) -> bool:
        """Whether the group over ``dims`` that contains rank 0 spans several nodes."""
        sizes = {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp}
        grids = np.meshgrid(*[np.arange(sizes[d]) for d in dims], indexing="ij")
        kwargs = {d: g.ravel() for d, g in zip(dims, grids, strict=True)}
        nodes = self.node_of(np.asarray(self.rank(**kwargs)))
        return bool(np.unique(nodes).size > 1)

    def ep_coupling(self) -> np.ndarray:
        """Label per DP replica: replicas with the same label share an expert-parallel group (``ep > 1``).

        Expert groups follow Megatron's expert rank generator (parallel folding): dimensions
        ``etp, ep, edp = tp·cp·dp/(ep·etp), pp`` in the job's rank order, with ``cp`` folded into the expert
        data-parallel dimension.
        """
        labels = np.arange(self.dp)
        if self.ep == 1:
            return labels
        order = self.rank_order.split("-")
        etp = self.tp if self.etp is None else self.etp
        edp = max(1, self.tp * self.cp * self.dp // (self.ep * etp))
        sizes = {"tp": etp, "cp": 1, "ep": self.ep, "dp": edp, "pp": self.pp}
        st, acc = {}, 1
        for dim in order:
            st[dim] = acc
            acc *= sizes[dim]
        ranks = np.arange(self.world_size)
        ep_coord = (ranks // st["ep"]) % self.ep
        key = ranks - ep_coord * st["ep"]  # identical for the members of one expert group
        dense_dp, _ = self.unit_of_rank
        # propagate the minimum label inside every expert group until stable (union of overlapping groups)
        while True:
            per_rank = labels[dense_dp]
            group_min = np.full(self.world_size, np.iinfo(np.int64).max)
            np.minimum.at(group_min, key, per_rank)
            new = labels.copy()
            np.minimum.at(new, dense_dp, group_min[key])
            if np.array_equal(new, labels):
                return labels
            labels = new
