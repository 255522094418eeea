"""The NCCL-like collective model: protocol ramp, algorithm choice, NVLS, latency growth with the group."""

import itertools

import pytest

from trainsim.cost.nccl import Links, choose, collective_seconds


def links(ranks: int, nodes: int, bus: float = 200e9, nvls: bool = False) -> Links:
    return Links(ranks, nodes, bus, nvls=nvls)


def test_protocol_ramp_low_latency_for_small_messages_full_bandwidth_for_large():
    one_node = links(8, 1)
    assert choose("all_reduce", 4096, one_node).protocol == "LL"
    assert choose("all_reduce", 1 << 30, one_node).protocol == "Simple"
    # bus bandwidth rises with the message size (nccl-tests' familiar ramp)
    sizes = [1 << k for k in range(10, 31, 2)]
    bus = [choose("all_reduce", s, one_node).busbw("all_reduce", s, 8) for s in sizes]
    assert all(b2 >= b1 for b1, b2 in itertools.pairwise(bus))
    assert bus[-1] == pytest.approx(200e9, rel=0.02)
    assert bus[0] < 0.01 * bus[-1]


def test_tree_for_many_nodes_and_mid_sizes_ring_inside_a_node():
    assert choose("all_reduce", 1 << 20, links(1024, 128)).algorithm == "tree"
    assert choose("all_reduce", 1 << 20, links(8, 1)).algorithm == "ring"
    # all-gather and reduce-scatter only have the ring
    assert choose("all_gather", 1 << 20, links(1024, 128)).algorithm == "ring"


def test_ring_latency_grows_with_the_group_and_nodes_cost_more_than_nvlink_steps():
    small = collective_seconds("all_gather", 1024, links(16, 2))
    large = collective_seconds("all_gather", 1024, links(1024, 128))
    assert large > 40 * small
    # same ranks, more of the ring's steps cross the network
    assert collective_seconds("all_gather", 1024, links(64, 64)) > collective_seconds("all_gather", 1024, links(64, 8))


def test_nvls_only_where_the_switch_reduces():
    with_sharp = choose("all_reduce", 1 << 30, links(8, 1, nvls=True))
    without = choose("all_reduce", 1 << 30, links(8, 1))
    assert with_sharp.algorithm == "nvls" and without.algorithm == "ring"
    # algorithm bandwidth 5/6·B against the ring's 8/14·B
    assert without.time / with_sharp.time == pytest.approx((14 / 8) / (6 / 5), rel=0.02)
    assert choose("all_gather", 1 << 30, links(8, 1, nvls=True)).algorithm == "ring"


def test_step_latencies_scale_with_the_system():
    fast = Links(256, 32, 200e9)
    slow = Links(256, 32, 200e9, net_step=28e-6)
    assert collective_seconds("all_gather", 1024, slow) > collective_seconds("all_gather", 1024, fast)
    assert collective_seconds("all_gather", 0, fast) == 0.0
    assert collective_seconds("all_reduce", 1e6, Links(1, 1, 200e9)) == 0.0


def test_forced_algorithm_and_protocol():
    c = choose("all_reduce", 1 << 20, links(64, 8), algorithm="ring", protocol="Simple")
    assert (c.algorithm, c.protocol) == ("ring", "Simple")
    with pytest.raises(ValueError):
        choose("all_gather", 1 << 20, links(64, 8), algorithm="tree")


def test_nvls_tree_across_nodes_is_bounded_by_nvlink_and_the_node_nics():
    two = Links(16, 2, 340e9, nvlink_bandwidth=340e9, net_bandwidth=356e9, nvls=True)
    c = choose("all_reduce", 8 << 30, two)
    assert c.algorithm == "nvls_tree"
    assert c.algbw == pytest.approx(340e9 * 0.70)  # NVLink-bound: NCCL's two-node NVLS-tree ratio
    # NIC-bound (8x 200G): on two nodes each byte crosses the network once per direction, at the NICs' full speed
    slow = Links(16, 2, 176e9, nvlink_bandwidth=340e9, net_bandwidth=176e9, nvls=True)
    assert choose("all_reduce", 8 << 30, slow, algorithm="nvls_tree").algbw == pytest.approx(176e9)
    many = Links(64, 8, 340e9, nvlink_bandwidth=340e9, net_bandwidth=356e9, nvls=True)
    assert choose("all_reduce", 8 << 30, many, algorithm="nvls_tree").algbw == pytest.approx(178e9 * 5 / 6)
    # one GPU per node: nothing for the switch to reduce
    assert choose("all_reduce", 8 << 30, Links(8, 8, 50e9, nvls=True)).algorithm != "nvls_tree"
