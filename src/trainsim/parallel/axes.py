"""Parallel axes and communication groups: the one place that names them.

An :class:`Axis` is one dimension of the rank grid (tensor, second tensor, context, expert, expert-tensor,
expert-data, data and pipeline parallelism). A :class:`Group` is a communication group a collective runs over: one
axis (``tp``, ``cp``, ``dp``, ``pp``, ``ep``, ``etp``, ``edp``; ``tp_row``/``tp_col``: a row / a column of the 2D
SUMMA grid), several axes (``dp_cp``: the data-parallel gradient group of context-parallel jobs; ``tp``: the whole
tensor-parallel group, both axes of a 2D grid), or a special set (``embedding``: the first and last pipeline stage;
``world``). :data:`GROUP_AXES` says which axes of which grid each group spans; the
:class:`~trainsim.parallel.layout.Layout` turns that into ranks and placements.

Two grids share the global ranks, as in Megatron-Core's rank generators: the **dense grid** ``tp × cp × dp × pp``
(attention and dense layers; ``ep`` has size 1 there; a 2D tensor-parallel grid splits the ``tp`` slot into the axes
``tp`` (position in a grid row) and ``tp2`` (grid row), see :class:`~trainsim.parallel.layout.Layout`) and the
**expert grid** ``etp × ep × edp × pp`` (MoE layers, "parallel folding": ``cp`` is folded into
``edp = tp·cp·dp / (ep·etp)``), both read in the job's rank order with ``tp`` standing for ``etp`` and ``dp`` for
``edp``.

Everything that depends on which axes exist reads this module: the rank-order check, the layout's strides and
placements, the collectives' groups (:class:`~trainsim.workload.ops.CommOp`), the breakdown key of each group's
exposed time and the degree checks (:func:`check_degrees`). See CONTRIBUTING.md, "How to add a parallel axis".
"""

from __future__ import annotations

from enum import StrEnum

from trainsim.errors import TrainsimError


class Axis(StrEnum):
    """One dimension of the rank grid."""

    TP = "tp"  #: tensor parallelism (1D); in a 2D SUMMA grid the position inside a grid row (degree: columns)
    TP2 = "tp2"  #: the row of a 2D SUMMA grid (degree: rows; 1 for 1D tensor parallelism)
    CP = "cp"  #: context parallelism
    EP = "ep"  #: expert parallelism (expert grid only; size 1 in the dense grid)
    ETP = "etp"  #: expert tensor parallelism (expert grid)
    EDP = "edp"  #: expert data parallelism (expert grid): tp·cp·dp / (ep·etp)
    DP = "dp"  #: data parallelism
    PP = "pp"  #: pipeline parallelism


#: The axes of Megatron's rank-order string (``--rank-order``), in Megatron's default order (a 2D grid's ``tp2``
#: sits in the ``tp`` slot, before or after ``tp`` by ``tp_inner``).
ORDER_AXES: tuple[Axis, ...] = (Axis.TP, Axis.CP, Axis.EP, Axis.DP, Axis.PP)
#: Megatron-LM's default rank order: tensor-parallel ranks adjacent, pipeline stages farthest apart.
DEFAULT_RANK_ORDER = "-".join(ORDER_AXES)
#: Dense-grid axes of the expert grid's positions in the rank order (Megatron's expert rank generator).
EXPERT_POSITION: dict[Axis, Axis] = {Axis.TP: Axis.ETP, Axis.EP: Axis.EP, Axis.DP: Axis.EDP, Axis.PP: Axis.PP}


class Group(StrEnum):
    """A communication group (what a collective runs over)."""

    TP = "tp"  #: the whole tensor-parallel group (both axes of a 2D grid)
    TP_ROW = "tp_row"  #: the GPUs of one row of the 2D SUMMA grid (activation-panel broadcasts)
    TP_COL = "tp_col"  #: the GPUs of one column of the 2D SUMMA grid (weight-panel broadcasts)
    CP = "cp"
    CP_A2A = "cp_a2a"  #: hierarchical CP (a2a+p2p): the inner all-to-all level, adjacent CP ranks
    CP_P2P = "cp_p2p"  #: hierarchical CP (a2a+p2p): the outer ring level, CP ranks a level-size apart
    EP = "ep"
    ETP = "etp"
    EDP = "edp"
    DP = "dp"
    PP = "pp"
    DP_CP = "dp_cp"  #: data-parallel gradient group of context-parallel jobs (Megatron's dp·cp group)
    EMBEDDING = "embedding"  #: first and last pipeline stage (tied-embedding gradient all-reduce)
    WORLD = "world"  #: every GPU of the job

    @classmethod
    def parse(cls, name: str | Group) -> Group:
        """The group called ``name``; raises :class:`TrainsimError` for an unknown name (never a silent fallback)."""
        if isinstance(name, Group):
            return name
        try:
            return cls(name)
        except ValueError:
            raise TrainsimError("group", f"unknown communication group {name!r}",
                                f"use one of {', '.join(g.value for g in cls)}") from None


#: Axes spanned by each group on the dense grid (``None``: on the expert grid, see :data:`EXPERT_GROUP_AXES`;
#: ``EMBEDDING`` and ``WORLD`` are special sets of ranks).
DENSE_GROUP_AXES: dict[Group, tuple[Axis, ...]] = {
    Group.TP: (Axis.TP, Axis.TP2),
    Group.TP_ROW: (Axis.TP,),
    Group.TP_COL: (Axis.TP2,),
    Group.CP: (Axis.CP,),
    Group.DP: (Axis.DP,),
    Group.PP: (Axis.PP,),
    Group.DP_CP: (Axis.DP, Axis.CP),
}
#: Axes spanned by the expert groups on the expert grid.
EXPERT_GROUP_AXES: dict[Group, tuple[Axis, ...]] = {
    Group.EP: (Axis.EP,),
    Group.ETP: (Axis.ETP,),
    Group.EDP: (Axis.EDP,),
}
#: Group an expert group equals when the expert grid does not differ from the dense one (ep = 1, etp = tp).
EXPERT_FALLBACK: dict[Group, Group] = {Group.ETP: Group.TP, Group.EDP: Group.DP_CP}

#: Breakdown entry (``trainsim predict``'s ``breakdown_s``) that the exposed in-layer time of a group counts under.
BREAKDOWN_KEY: dict[Group, str] = {
    Group.TP: "tp_comm", Group.TP_ROW: "tp_comm", Group.TP_COL: "tp_comm", Group.ETP: "tp_comm",
    Group.CP: "cp_comm", Group.CP_A2A: "cp_comm", Group.CP_P2P: "cp_comm", Group.EP: "ep_comm",
    Group.DP: "dp_comm", Group.DP_CP: "dp_comm", Group.EDP: "dp_comm", Group.EMBEDDING: "dp_comm",
    Group.PP: "pp_comm", Group.WORLD: "dp_comm",
}
#: Groups whose collectives run on the expert-parallel stream (token dispatch/combine, expert-TP gather/scatter).
EXPERT_STREAM_GROUPS: frozenset[Group] = frozenset({Group.EP, Group.ETP})
#: The dense tensor-parallel groups (1D, and the rows and columns of the 2D grid), in a fixed order.
TENSOR_GROUPS: tuple[Group, ...] = (Group.TP, Group.TP_ROW, Group.TP_COL)
#: Groups that exist only with a 2D tensor-parallel grid.
GRID_GROUPS: frozenset[Group] = frozenset({Group.TP_ROW, Group.TP_COL})
#: Groups that exist only with hierarchical context parallelism (two CP levels, ``--cp-comm-type a2a+p2p``).
HIERARCHICAL_CP_GROUPS: frozenset[Group] = frozenset({Group.CP_A2A, Group.CP_P2P})


def parse_rank_order(text: str) -> tuple[Axis, ...]:
    """Axes of a rank-order string (``tp-cp-ep-dp-pp``, fastest-varying first); raises ``ValueError`` unless it is a
    permutation of :data:`DEFAULT_RANK_ORDER`."""
    parts = text.strip().lower().split("-")
    if sorted(parts) != sorted(ORDER_AXES):
        raise ValueError(f"must be a permutation of {DEFAULT_RANK_ORDER} (got {text!r})")
    return tuple(Axis(p) for p in parts)


def normalize_rank_order(text: str) -> str:
    """``text`` in canonical form (lower case, checked)."""
    return "-".join(parse_rank_order(text))


def expert_dp(tp: int, cp: int, dp: int, ep: int, etp: int) -> int:
    """Expert-data-parallel size ``tp·cp·dp / (ep·etp)`` (at least 1)."""
    return max(1, tp * cp * dp // (ep * etp))


def folds(tp: int, cp: int, dp: int, ep: int, etp: int) -> bool:
    """Whether the expert grid ``etp × ep × edp`` folds into the attention grid: ``ep·etp`` divides ``tp·cp·dp``."""
    return (tp * cp * dp) % (ep * etp) == 0


def check_degrees(tp: int, cp: int, pp: int, dp: int | None, ep: int, etp: int, num_gpus: int | None,
                  derived_dp: int) -> None:
    """The axis checks of a job (raise :class:`TrainsimError`): the product of the degrees equals the GPU count
    (``dp`` given) or divides it (``dp`` derived), and the expert grid folds into the attention grid."""
    mp = tp * pp * cp
    if num_gpus is not None:
        if dp is not None and mp * dp != num_gpus:
            raise TrainsimError(
                "num_gpus",
                f"tp·pp·cp·dp = {tp}·{pp}·{cp}·{dp} = {mp * dp} ≠ {num_gpus} GPUs",
                "make the product equal the GPU count, or leave dp out to derive it",
            )
        if num_gpus % mp:
            raise TrainsimError(
                "num_gpus",
                f"{num_gpus} GPUs are not divisible by tp·pp·cp = {tp}·{pp}·{cp} = {mp}",
                "use a GPU count that is a multiple of tp·pp·cp",
            )
    if not folds(tp, cp, derived_dp, ep, etp):
        raise TrainsimError(
            "parallelism.ep",
            f"ep·etp = {ep}·{etp} does not divide tp·cp·dp = {tp}·{cp}·{derived_dp}",
            "choose ep and --expert-tensor-parallel-size whose product divides tp·cp·dp (Megatron's parallel "
            "folding builds the expert grid etp × ep × edp from the attention grid's ranks)",
        )
