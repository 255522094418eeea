import itertools

import numpy as np
import pytest

from trainsim.errors import TrainsimError
from trainsim.parallel.axes import (
    DENSE_GROUP_AXES,
    EXPERT_GROUP_AXES,
    GRID_GROUPS,
    HIERARCHICAL_CP_GROUPS,
    Axis,
    Group,
)
from trainsim.parallel.layout import Layout, Placement, placement_of


def reference_coords(order: list[str], sizes: dict[str, int]) -> list[dict[str, int]]:
    """Coordinates of every global rank by counting through the grid, fastest axis first (no strides)."""
    slow_first = list(reversed(order))
    out = []
    for combo in itertools.product(*[range(sizes[a]) for a in slow_first]):
        out.append(dict(zip(slow_first, combo, strict=True)))
    return out


def reference_group(order: list[str], sizes: dict[str, int], axes: tuple[str, ...]) -> list[int]:
    coords = reference_coords(order, sizes)
    return [r for r, c in enumerate(coords) if all(c[a] == 0 for a in sizes if a not in axes)]


CASES = [
    ("tp-cp-ep-dp-pp", dict(tp=8, cp=1, ep=1, dp=4, pp=2), 8),
    ("dp-tp-cp-ep-pp", dict(tp=2, cp=2, ep=4, dp=4, pp=2), 8),
    ("tp-pp-dp-cp-ep", dict(tp=4, cp=2, ep=2, dp=2, pp=3), 4),
    ("pp-dp-ep-cp-tp", dict(tp=2, cp=1, ep=2, dp=6, pp=2), 72),
    ("tp-cp-ep-dp-pp", dict(tp=2, cp=2, ep=8, dp=4, pp=1, etp=1), 8),
]


@pytest.mark.parametrize("order,cp,a2a,expect_a2a,expect_p2p", [
    # tp 2 on 8-GPU nodes: the 2-rank all-to-all level is adjacent CP ranks (stride tp), inside a node; the ring
    # level joins the CP ranks 2 apart, across nodes once tp·cp exceeds the node
    ("tp-cp-ep-dp-pp", 8, 2, [0, 2], [0, 4, 8, 12]),
    ("tp-cp-ep-dp-pp", 8, 4, [0, 2, 4, 6], [0, 8]),
    # CP slowest but pipeline: its stride is tp·dp = 4
    ("tp-dp-pp-ep-cp", 4, 2, [0, 4], [0, 8]),
])
def test_hierarchical_cp_levels_split_the_cp_group(order, cp, a2a, expect_a2a, expect_p2p):
    lay = Layout(2, cp, 1, 2, 1, order, 8, cp_a2a=a2a)
    assert lay.hierarchical_cp
    assert lay.group_members(Group.CP_A2A) == expect_a2a
    assert lay.group_members(Group.CP_P2P) == expect_p2p
    # the two levels cover the CP group exactly: every CP rank is an a2a member plus a ring offset
    assert sorted(a + p for a in expect_a2a for p in expect_p2p) == lay.group_members(Group.CP)
    assert lay.group(Group.CP_A2A) == placement_of(expect_a2a, 8)
    flat = Layout(2, cp, 1, 2, 1, order, 8, cp_a2a=cp)  # one level (all-to-all): no sub-groups
    assert not flat.hierarchical_cp and Group.CP_A2A not in flat.placements
    with pytest.raises(TrainsimError, match="two context-parallel levels"):
        flat.group_members(Group.CP_P2P)


@pytest.mark.parametrize("order,d,gpn", CASES)
def test_dense_and_expert_groups_match_a_grid_count(order, d, gpn):
    lay = Layout(d["tp"], d["cp"], d["ep"], d["dp"], d["pp"], order, gpn, d.get("etp"))
    dense = {"tp": d["tp"], "tp2": 1, "cp": d["cp"], "ep": 1, "dp": d["dp"], "pp": d["pp"]}
    names = [a.value for a in lay.order]
    for g, axes in DENSE_GROUP_AXES.items():
        if g in GRID_GROUPS:
            continue
        assert lay.group_members(g) == reference_group(names, dense, tuple(a.value for a in axes)), g
    etp = d.get("etp") or d["tp"]
    expert = {"tp": etp, "tp2": 1, "cp": 1, "ep": d["ep"], "dp": d["tp"] * d["cp"] * d["dp"] // (d["ep"] * etp),
              "pp": d["pp"]}
    read = {Axis.ETP: "tp", Axis.EP: "ep", Axis.EDP: "dp"}
    if lay.separate_expert_groups:
        for g, axes in EXPERT_GROUP_AXES.items():
            ref = reference_group(names, expert, tuple(read[a] for a in axes))
            assert lay.group_members(g) == ref, g
    else:
        assert lay.group(Group.ETP) == lay.group(Group.TP) and lay.group(Group.EDP) == lay.group(Group.DP_CP)
    for g in Group:
        if g in GRID_GROUPS or g in HIERARCHICAL_CP_GROUPS:
            assert g not in lay.placements
            continue
        assert lay.group(g) == placement_of(lay.group_members(g), gpn)
    assert lay.group(Group.WORLD) == Placement(lay.world_size, min(lay.world_size, gpn), lay.num_nodes)
    assert lay.group_members(Group.EMBEDDING) == sorted({0, (d["pp"] - 1) * lay.strides[Axis.PP]})
    # strides: rank() inverts coords()
    ranks = np.arange(lay.world_size)
    c = lay.coords(ranks)
    assert np.array_equal(lay.rank(c[Axis.TP], c[Axis.CP], c[Axis.DP], c[Axis.PP]), ranks)


def test_megatron_order_keeps_tensor_parallel_in_a_node_and_node_size_matters():
    lay = Layout(8, 1, 1, 4, 2, "tp-cp-ep-dp-pp", 8)
    assert lay.group(Group.TP) == Placement(8, 8, 1)
    assert lay.group(Group.DP) == Placement(4, 1, 4)
    assert Layout(8, 1, 1, 8, 1, gpus_per_node=4).group(Group.TP) == Placement(8, 4, 2)
    assert Layout(8, 1, 1, 8, 1, gpus_per_node=72).group(Group.DP) == Placement(8, 8, 1)


def test_second_tensor_axis_for_2d_tensor_parallelism():
    # a 2 × 2 grid: row groups on adjacent ranks (TP rank i·C + j holds cell (i, j))
    lay = Layout(tp=4, cp=1, ep=1, dp=2, pp=1, gpus_per_node=4, grid=(2, 2))
    assert lay.world_size == 8 and lay.degrees[Axis.TP] == 2 and lay.degrees[Axis.TP2] == 2
    assert lay.group_members(Group.TP) == [0, 1, 2, 3]  # both axes: the whole tensor-parallel group
    assert lay.group_members(Group.TP_ROW) == [0, 1]
    assert lay.group_members(Group.TP_COL) == [0, 2]
    assert lay.group_members(Group.DP) == [0, 4]
    assert lay.unit_ranks(1, 0).tolist() == [4, 5, 6, 7]
    cols_inner = Layout(tp=8, cp=1, ep=1, dp=2, pp=1, gpus_per_node=4, grid=(2, 4), tp_inner="col")
    assert cols_inner.group_members(Group.TP_COL) == [0, 1]  # j·R + i: a column's GPUs adjacent
    assert cols_inner.group_members(Group.TP_ROW) == [0, 2, 4, 6] and cols_inner.group(Group.TP_ROW).crosses_nodes
    assert cols_inner.group_members(Group.TP) == list(range(8))
    with pytest.raises(TrainsimError, match="needs a 2D tensor-parallel grid"):
        Layout(tp=4, cp=1, ep=1, dp=2, pp=1).group_members(Group.TP_ROW)
    with pytest.raises(TrainsimError, match="does not exist in this layout"):
        Layout(tp=4, cp=1, ep=1, dp=2, pp=1).placements[Group.TP_COL]


def test_placements_reject_unknown_groups_and_layouts_are_shared():
    lay = Layout.create(2, 1, 1, 4, 1, "tp-cp-ep-dp-pp", 8)
    assert lay is Layout.create(2, 1, 1, 4, 1, "tp-cp-ep-dp-pp", 8)
    assert lay.placements["dp_cp"] == lay.placements[Group.DP_CP]
    with pytest.raises(TrainsimError, match="unknown communication group 'edpp'"):
        lay.placements["edpp"]
