"""Where every GPU of a job sits: degrees, rank order, strides, groups and their placement over nodes.

Global ranks follow the job's ``rank_order`` (fastest-varying axis first, Megatron's ``tp-cp-ep-dp-pp`` by default),
packed ``gpus_per_node`` to a node (an NVLink/NVSwitch domain). A 2D tensor-parallel ``grid`` of ``R`` rows and
``C = tp/R`` columns splits the ``tp`` slot into two axes: ``tp`` (the position inside a grid row, degree ``C``) and
``tp2`` (the row, degree ``R``); ``tp_inner="row"`` puts a row's GPUs on adjacent ranks (TP rank ``i·C + j`` holds
cell ``(i, j)``), ``"col"`` a column's (``j·R + i``). :class:`Layout` owns the strides of both grids of
:mod:`trainsim.parallel.axes` (dense and expert) and everything derived from them:

* :meth:`Layout.placement` / :attr:`Layout.placements`: for each communication group the one that contains rank 0,
  as a :class:`Placement` (members, members per node, nodes spanned) — the input of the α-β collective costs;
* the event engine's **units**: one unit is the tensor- and context-parallel group of one data-parallel replica
  ``d`` on one pipeline stage ``s``. Its members exchange data in every layer, so they run in lock step at the pace
  of the slowest member; the unit is drawn as one representative GPU (TP rank 0, CP rank 0). Expert-parallel groups
  are carved out of data- and context-parallel ranks, so with ``ep > 1`` the units of several replicas exchange tokens
  in every MoE layer: :meth:`Layout.ep_coupling` says which replicas are tied together that way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

from trainsim.errors import TrainsimError
from trainsim.parallel.axes import (
    DEFAULT_RANK_ORDER,
    DENSE_GROUP_AXES,
    EXPERT_FALLBACK,
    EXPERT_GROUP_AXES,
    EXPERT_POSITION,
    GRID_GROUPS,
    HIERARCHICAL_CP_GROUPS,
    Axis,
    Group,
    expert_dp,
    parse_rank_order,
)

if TYPE_CHECKING:
    import numpy as np

    from trainsim.spec.job import Job


@dataclass(frozen=True, slots=True, order=True)
class Placement:
    """Where the members of one communication group sit: ``size`` GPUs, at most ``per_node`` of them in one node
    (NVLink domain), spread over ``nodes`` nodes (the NVLink-domain span)."""

    size: int
    per_node: int
    nodes: int

    @property
    def crosses_nodes(self) -> bool:
        """True when the group spans more than one node."""
        return self.nodes > 1


SINGLE = Placement(1, 1, 1)


def strides(order: Iterable[Axis], degrees: Mapping[Axis, int]) -> dict[Axis, int]:
    """Stride of every axis in the global rank: the product of the degrees of the axes before it in ``order``."""
    out: dict[Axis, int] = {}
    acc = 1
    for axis in order:
        out[axis] = acc
        acc *= degrees.get(axis, 1)
    return out


def placement_of(members: Iterable[int], gpus_per_node: int) -> Placement:
    """Placement of a set of global ranks packed ``gpus_per_node`` to a node."""
    counts: dict[int, int] = {}
    for r in members:
        node = r // gpus_per_node
        counts[node] = counts.get(node, 0) + 1
    return Placement(sum(counts.values()), max(counts.values()), len(counts))


class Placements(Mapping[Group, Placement]):
    """Placement of every :class:`Group` of a layout; an unknown group raises instead of falling back."""

    __slots__ = ("_places",)

    def __init__(self, places: dict[Group, Placement]) -> None:
        self._places = places

    def __getitem__(self, group: Group | str) -> Placement:
        place = self._places.get(group)  # type: ignore[call-overload]
        if place is not None:
            return place
        g = Group.parse(group)  # raises for an unknown name
        raise TrainsimError("group", f"the {g} group does not exist in this layout",
                            "the rows and columns of the tensor-parallel grid need --tensor-parallel-mode summa")

    def __contains__(self, group: object) -> bool:
        return group in self._places

    def get(self, group: Group | str, default: Any = None) -> Any:  # type: ignore[override]
        """The placement of ``group``, or ``default`` when the layout has no such group."""
        return self._places.get(group, default)  # type: ignore[call-overload]

    def __iter__(self) -> Iterator[Group]:
        return iter(self._places)

    def __len__(self) -> int:
        return len(self._places)

    def __repr__(self) -> str:
        return f"Placements({self._places!r})"


@dataclass(frozen=True)
class Layout:
    """Rank layout of a job: the parallel sizes, the rank order and the node size.

    ``tp`` is the size of the whole tensor-parallel group; ``grid`` (rows, columns) makes it a 2D SUMMA grid with
    ``tp_inner`` (``row`` or ``col``) on adjacent ranks; ``etp`` is the expert tensor-parallel size (``None``: tp).
    ``cp_a2a`` splits the context-parallel group in two levels (Megatron's ``--hierarchical-context-parallel-sizes
    a r``): groups of ``cp_a2a`` adjacent CP ranks (``cp_a2a`` group) and the CP ranks ``cp_a2a`` apart (``cp_p2p``
    group, ``cp / cp_a2a`` of them); 1 (or ``cp``): one level.
    """

    tp: int
    cp: int
    ep: int
    dp: int
    pp: int
    rank_order: str = DEFAULT_RANK_ORDER
    gpus_per_node: int = 8
    etp: int | None = None
    grid: tuple[int, int] | None = None
    tp_inner: str = "row"
    cp_a2a: int = 1

    @classmethod
    def of(cls, job: Job, cp_levels: bool = True) -> Layout:
        """The layout of ``job`` (cached per distinct layout); ``cp_levels=False``: with one context-parallel level
        (what :attr:`~trainsim.spec.job.Job.cp_levels` reads to place its default levels)."""
        par = job.parallelism
        grid = par.grid if par.summa else None
        return cls.create(par.tp, par.cp, par.ep, job.dp, par.pp, par.rank_order, job.system.gpus_per_node,
                          par.expert_tp, grid, par.tp_inner, job.cp_levels[0] if cp_levels else 1)

    @staticmethod
    @lru_cache(maxsize=8192)
    def create(tp: int, cp: int, ep: int, dp: int, pp: int, rank_order: str = DEFAULT_RANK_ORDER,
               gpus_per_node: int = 8, etp: int | None = None, grid: tuple[int, int] | None = None,
               tp_inner: str = "row", cp_a2a: int = 1) -> Layout:
        """A shared (cached) layout: its strides and placements are computed once."""
        return Layout(tp, cp, ep, dp, pp, rank_order, gpus_per_node, etp, grid, tp_inner, cp_a2a)

    @property
    def hierarchical_cp(self) -> bool:
        """Whether the context-parallel group has two levels (``1 < cp_a2a < cp``)."""
        return 1 < self.cp_a2a < self.cp

    # ---- degrees, order, strides ----------------------------------------------------------------------------------
    @cached_property
    def order(self) -> tuple[Axis, ...]:
        """The dense grid's axes in rank order, fastest-varying first (``tp2`` next to ``tp`` by ``tp_inner``)."""
        axes = list(parse_rank_order(self.rank_order))
        at = axes.index(Axis.TP)
        axes.insert(at if self.tp_inner == "col" else at + 1, Axis.TP2)
        return tuple(axes)

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel size (``etp``, default the tensor-parallel size)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Expert-data-parallel size: ``tp·cp·dp / (ep·etp)``."""
        return expert_dp(self.tp, self.cp, self.dp, self.ep, self.expert_tp)

    @cached_property
    def degrees(self) -> dict[Axis, int]:
        """Degree of every axis of the dense grid (``ep`` is 1 there: experts fold into data parallelism; a 2D grid
        splits ``tp`` into columns ``tp`` and rows ``tp2``)."""
        rows, cols = self.grid if self.grid is not None else (1, self.tp)
        return {Axis.TP: cols, Axis.TP2: rows, Axis.CP: self.cp, Axis.EP: 1, Axis.DP: self.dp, Axis.PP: self.pp}

    @cached_property
    def expert_degrees(self) -> dict[Axis, int]:
        """Degree of every axis of the expert grid."""
        return {Axis.ETP: self.expert_tp, Axis.EP: self.ep, Axis.EDP: self.expert_dp, Axis.PP: self.pp}

    @property
    def world_size(self) -> int:
        """Number of GPUs."""
        return self.tp * self.cp * self.dp * self.pp

    @property
    def num_nodes(self) -> int:
        """Nodes used (rounded up)."""
        return -(-self.world_size // self.gpus_per_node)

    @cached_property
    def strides(self) -> dict[Axis, int]:
        """Stride of each dense-grid axis in the global rank."""
        return strides(self.order, self.degrees)

    @cached_property
    def expert_order(self) -> tuple[Axis, ...]:
        """The expert grid's axes in rank order (``tp`` read as ``etp``, ``dp`` as ``edp``; ``cp`` folded)."""
        return tuple(EXPERT_POSITION[a] for a in self.order if a in EXPERT_POSITION)

    @cached_property
    def expert_strides(self) -> dict[Axis, int]:
        """Stride of each expert-grid axis in the global rank."""
        return strides(self.expert_order, self.expert_degrees)

    @property
    def separate_expert_groups(self) -> bool:
        """Whether the expert groups differ from the dense ones (``ep > 1`` or ``etp ≠ tp``); when they do not,
        ``etp`` is the tensor-parallel group and ``edp`` the ``dp_cp`` group."""
        return self.ep > 1 or self.expert_tp != self.tp

    # ---- groups -----------------------------------------------------------------------------------------------------
    def members(self, axes: Iterable[Axis], expert: bool = False) -> list[int]:
        """Global ranks (ascending) of the group over ``axes`` that contains rank 0 (dense grid, or the expert grid)."""
        st, deg = (self.expert_strides, self.expert_degrees) if expert else (self.strides, self.degrees)
        ranks = [0]
        for axis in axes:
            ranks = [r + i * st[axis] for r in ranks for i in range(deg[axis])]
        return sorted(ranks)

    def placement(self, *axes: Axis, expert: bool = False) -> Placement:
        """Placement of the group over ``axes`` that contains rank 0."""
        return placement_of(self.members(axes, expert), self.gpus_per_node)

    def group_members(self, group: Group | str) -> list[int]:
        """Global ranks of ``group`` (the one that contains rank 0)."""
        g = Group.parse(group)
        if g in GRID_GROUPS and self.grid is None:
            raise TrainsimError("group", f"the {g} group needs a 2D tensor-parallel grid",
                                "use --tensor-parallel-mode summa")
        if g in HIERARCHICAL_CP_GROUPS:
            if not self.hierarchical_cp:
                raise TrainsimError("group", f"the {g} group needs two context-parallel levels",
                                    "use --cp-comm-type a2a+p2p with --hierarchical-context-parallel-sizes")
            step = self.strides[Axis.CP]
            if g is Group.CP_A2A:
                return [i * step for i in range(self.cp_a2a)]
            return [j * self.cp_a2a * step for j in range(self.cp // self.cp_a2a)]
        if g in DENSE_GROUP_AXES:
            return self.members(DENSE_GROUP_AXES[g])
        if g in EXPERT_GROUP_AXES:
            if not self.separate_expert_groups and g in EXPERT_FALLBACK:
                return self.group_members(EXPERT_FALLBACK[g])
            return self.members(EXPERT_GROUP_AXES[g], expert=True)
        if g is Group.EMBEDDING:
            return sorted({0, (self.pp - 1) * self.strides[Axis.PP]})
        return list(range(self.world_size))

    def group(self, group: Group | str) -> Placement:
        """Placement of ``group`` (raises :class:`~trainsim.errors.TrainsimError` for an unknown group)."""
        return self.placements[group]

    @cached_property
    def placements(self) -> Placements:
        """Placement of every group (the groups that contain rank 0; the grid rows and columns only with a grid)."""
        out: dict[Group, Placement] = {}
        for g in Group:
            if (g in GRID_GROUPS and self.grid is None) or (g in HIERARCHICAL_CP_GROUPS and not self.hierarchical_cp):
                continue
            if g is Group.WORLD:
                n = self.world_size
                out[g] = Placement(n, min(n, self.gpus_per_node), self.num_nodes)
            else:
                out[g] = placement_of(self.group_members(g), self.gpus_per_node)
        return Placements(out)

    # ---- ranks and units (vectorised, for the event engine) ----------------------------------------------
    def rank(self, tp: Any = 0, cp: Any = 0, dp: Any = 0, pp: Any = 0, tp2: Any = 0) -> Any:
        """Global rank of the given dense-grid coordinates (ints or numpy arrays; ``tp``/``tp2``: the column and row
        of a 2D grid)."""
        st = self.strides
        return tp * st[Axis.TP] + tp2 * st[Axis.TP2] + cp * st[Axis.CP] + dp * st[Axis.DP] + pp * st[Axis.PP]

    def coords(self, rank: Any) -> dict[Axis, Any]:
        """Dense-grid coordinates of global ranks (ints or numpy arrays), keyed by axis."""
        st = self.strides
        return {a: (rank // st[a]) % d for a, d in self.degrees.items() if a is not Axis.EP}

    def unit_ranks(self, dp: int, pp: int) -> np.ndarray:
        """All global ranks of unit ``(dp, pp)``: its tensor × context group, TP rank 0 / CP rank 0 first."""
        import numpy as np

        base = self.rank(0, 0, dp, pp)
        inner = self.members((Axis.TP, Axis.TP2, Axis.CP))
        return np.sort(np.asarray(inner, dtype=np.int64) + base)

    @cached_property
    def unit_of_rank(self) -> tuple[np.ndarray, np.ndarray]:
        """``(dp, pp)`` of every global rank."""
        import numpy as np

        c = self.coords(np.arange(self.world_size))
        return np.asarray(c[Axis.DP]), np.asarray(c[Axis.PP])

    def representative(self, dp: Any, pp: Any) -> Any:
        """Global rank drawn for a unit (TP rank 0, CP rank 0), as in the released straggler traces."""
        return self.rank(0, 0, dp, pp)

    def node_of(self, rank: Any) -> Any:
        """Node (NVLink domain) of global ranks."""
        return rank // self.gpus_per_node

    def unit_max(self, per_rank: np.ndarray) -> np.ndarray:
        """``[dp, pp]`` maximum of a per-rank quantity over each unit's members."""
        import numpy as np

        d, s = self.unit_of_rank
        out = np.full((self.dp, self.pp), -np.inf)
        np.maximum.at(out, (d, s), per_rank)
        return out

    def unit_node_max(self, per_node: np.ndarray) -> np.ndarray:
        """``[dp, pp]`` maximum of a per-node quantity over the nodes a unit spans."""
        import numpy as np

        return self.unit_max(per_node[self.node_of(np.arange(self.world_size))])

    def p2p_crosses_nodes(self) -> np.ndarray:
        """``[dp, pp]``: whether the transfer from stage ``s`` to ``s + 1`` (mod pp) leaves the node (TP rank 0)."""
        import numpy as np

        d, s = np.meshgrid(np.arange(self.dp), np.arange(self.pp), indexing="ij")
        a = self.node_of(self.rank(0, 0, d, s))
        b = self.node_of(self.rank(0, 0, d, (s + 1) % self.pp))
        return np.asarray(a != b)

    def group_crosses_nodes(self, axes: Iterable[Axis | str]) -> bool:
        """Whether the dense-grid group over ``axes`` that contains rank 0 spans several nodes."""
        return self.placement(*(Axis(a) for a in axes)).crosses_nodes

    def ep_coupling(self) -> np.ndarray:
        """Label per DP replica: replicas with the same label share an expert-parallel group (``ep > 1``).

        Expert groups follow Megatron's expert rank generator (parallel folding, :attr:`expert_strides`).
        """
        import numpy as np

        labels = np.arange(self.dp)
        if self.ep == 1:
            return labels
        st = self.expert_strides[Axis.EP]
        ranks = np.arange(self.world_size)
        ep_coord = (ranks // st) % self.ep
        key = ranks - ep_coord * st  # identical for the members of one expert group
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


def placements_of(job: Job) -> Placements:
    """Placements of the groups of ``job``."""
    return Layout.of(job).placements
