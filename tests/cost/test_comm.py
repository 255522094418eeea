import pytest

from trainsim.cost.calibration import Calibration
from trainsim.cost.comm import Placement, collective_time, group_placements
from trainsim.spec import load_system

SYS = load_system("dgx-a100")
CAL = Calibration(nvlink_efficiency=1.0, network_efficiency=1.0)


def test_megatron_rank_order_keeps_tensor_parallel_ranks_in_a_node():
    p = group_placements("tp-cp-ep-dp-pp", 8, 1, 1, 4, 2, 8)
    assert p["tp"] == Placement(8, 8, 1)
    assert p["dp"] == Placement(4, 1, 4)  # one GPU per node: each DP ring crosses 4 nodes
    assert p["pp"].crosses_nodes


def test_rank_order_moves_data_parallel_inside_the_node():
    p = group_placements("dp-tp-cp-ep-pp", 2, 1, 1, 4, 1, 8)
    assert p["dp"] == Placement(4, 4, 1)
    assert p["tp"] == Placement(2, 1, 2) or p["tp"].per_node == 2


def test_nvswitch_domain_size_changes_placement():
    assert group_placements("tp-cp-ep-dp-pp", 8, 1, 1, 8, 1, 4)["tp"] == Placement(8, 4, 2)
    assert group_placements("tp-cp-ep-dp-pp", 8, 1, 1, 8, 1, 72)["dp"] == Placement(8, 8, 1)


def test_ring_all_reduce_formula_inside_a_node():
    """NCCL's ring with the Simple protocol: base latency + one NVLink step latency per step + 2(n-1)/n·S/B."""
    S = 1e9
    t = collective_time("all_reduce", S, Placement(8, 8, 1), SYS, CAL, algorithm="ring")
    base = 8.4e-6
    expected = base + 2 * 7 * SYS.node.nvlink_latency + 2 * 7 / 8 * S / SYS.node.nvlink_bandwidth
    assert t == pytest.approx(expected)
    assert collective_time("all_gather", S, Placement(8, 8, 1), SYS, CAL) == pytest.approx(
        base + 7 * SYS.node.nvlink_latency + 7 / 8 * S / SYS.node.nvlink_bandwidth)


def test_inter_node_groups_share_the_nics_of_their_members():
    S = 1e9
    one_per_node = collective_time("all_gather", S, Placement(4, 1, 4), SYS, CAL)
    eight_per_node = collective_time("all_gather", S, Placement(32, 8, 4), SYS, CAL)
    nic = SYS.nic_bandwidth_per_gpu()
    lat = SYS.network.latency
    # one GPU per node: every step crosses the network, the GPU's own NIC
    assert one_per_node == pytest.approx(8.4e-6 + 3 * lat + 3 / 4 * S / nic)
    # eight members per node use eight NICs (200 GB/s), still below NVLink's 300 GB/s; 3 of 31 steps cross nodes
    assert eight_per_node == pytest.approx(8.4e-6 + 28 * SYS.node.nvlink_latency + 3 * lat + 31 / 32 * S / (8 * nic))
    assert collective_time("all_reduce", S, Placement(1, 1, 1), SYS, CAL) == 0.0


def test_tree_wins_for_small_messages_and_oversubscription_slows_large_jobs():
    place = Placement(64, 1, 64)
    ring = collective_time("all_reduce", 1e3, place, SYS, CAL, algorithm="ring")
    auto = collective_time("all_reduce", 1e3, place, SYS, CAL)
    assert auto < ring
    over = SYS.replace(network=SYS.network.replace(oversubscription=2.0, full_bisection_nodes=32))
    assert collective_time("all_reduce", 1e9, place, over, CAL, job_nodes=64) > collective_time(
        "all_reduce", 1e9, place, over, CAL, job_nodes=16)
