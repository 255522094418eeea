import pytest

from trainsim.errors import TrainsimError
from trainsim.parallel.axes import (
    BREAKDOWN_KEY,
    DEFAULT_RANK_ORDER,
    DENSE_GROUP_AXES,
    EXPERT_GROUP_AXES,
    HIERARCHICAL_CP_GROUPS,
    Axis,
    Group,
    check_degrees,
    expert_dp,
    folds,
    parse_rank_order,
)
from trainsim.parallel.layout import Layout
from trainsim.workload.ops import CommOp


def test_default_rank_order_is_megatrons():
    assert DEFAULT_RANK_ORDER == "tp-cp-ep-dp-pp"
    assert parse_rank_order("tp-cp-ep-dp-pp") == (Axis.TP, Axis.CP, Axis.EP, Axis.DP, Axis.PP)
    assert parse_rank_order("DP-tp-cp-ep-pp")[:2] == (Axis.DP, Axis.TP)


def test_the_grid_row_axis_sits_next_to_tp_by_tp_inner():
    assert Layout(4, 1, 1, 2, 1, grid=(2, 2)).order[:2] == (Axis.TP, Axis.TP2)
    assert Layout(4, 1, 1, 2, 1, "dp-tp-cp-ep-pp", grid=(2, 2), tp_inner="col").order[:3] == (Axis.DP, Axis.TP2,
                                                                                               Axis.TP)


@pytest.mark.parametrize("bad", ["tp-cp-dp-pp", "tp-cp-ep-dp-pp-pp", "tp-cp-ep-dp-xx", "etp-cp-ep-dp-pp",
                                 "tp2-tp-cp-ep-dp-pp", ""])
def test_rank_order_must_be_a_permutation(bad):
    with pytest.raises(ValueError, match="permutation"):
        parse_rank_order(bad)


def test_every_group_has_a_definition_and_a_breakdown_entry():
    special = {Group.EMBEDDING, Group.WORLD, *HIERARCHICAL_CP_GROUPS}  # sub-groups of the CP axis (Layout)
    for g in Group:
        assert (g in DENSE_GROUP_AXES) + (g in EXPERT_GROUP_AXES) + (g in special) == 1, g
        assert g in BREAKDOWN_KEY


def test_unknown_group_raises_instead_of_pricing_as_tensor_parallel():
    # before the axis module a collective on a misspelt group was silently priced over the TP group
    with pytest.raises(TrainsimError, match="unknown communication group 'tq'"):
        CommOp("x", "all_reduce", "tq", "fwd", 1e6)  # type: ignore[arg-type]
    assert CommOp("x", "all_reduce", "dp_cp", "fwd", 1e6).group is Group.DP_CP  # type: ignore[arg-type]
    assert Group.parse(Group.EP) is Group.EP


def test_degree_checks_name_the_field():
    check_degrees(8, 1, 16, None, 1, 8, 1024, 8)
    with pytest.raises(TrainsimError, match="num_gpus: tp·pp·cp·dp = 8·16·1·4 = 512 ≠ 1024"):
        check_degrees(8, 1, 16, 4, 1, 8, 1024, 4)
    with pytest.raises(TrainsimError, match="not divisible by tp·pp·cp = 8·16·1 = 128"):
        check_degrees(8, 1, 16, None, 1, 8, 1000, 7)
    with pytest.raises(TrainsimError, match=r"parallelism\.ep: ep·etp = 8·2 does not divide"):
        check_degrees(2, 1, 1, None, 8, 2, 8, 4)
    assert folds(2, 1, 4, 8, 1) and not folds(2, 1, 4, 8, 2)
    assert expert_dp(8, 2, 4, 8, 1) == 8
