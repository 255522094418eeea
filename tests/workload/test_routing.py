"""Nodes a token reaches and a deduplicating dispatcher's network bytes (trainsim.workload.routing)."""

from __future__ import annotations

import numpy as np
import pytest

from trainsim.spec import load_model
from trainsim.workload.routing import network_copy_ratio, nodes_per_token


def _simulated_nodes(experts: int, topk: int, groups: int | None, picked: int | None, nodes: int,
                     tokens: int = 20000, seed: int = 0) -> float:
    """Monte-Carlo: each token picks `picked` of `groups` groups (or all), then `topk` experts among theirs."""
    rng = np.random.default_rng(seed)
    per_group = experts // groups if groups else experts
    node_of = np.arange(experts) * nodes // experts  # contiguous experts per node
    total = 0
    for _ in range(tokens):
        if groups and picked:
            chosen = rng.choice(groups, picked, replace=False)
            pool = (chosen[:, None] * per_group + np.arange(per_group)).ravel()
        else:
            pool = np.arange(experts)
        total += len(set(node_of[rng.choice(pool, topk, replace=False)]))
    return total / tokens


@pytest.mark.parametrize(("experts", "topk", "groups", "picked", "nodes"), [
    (256, 8, 8, 4, 8),     # DeepSeek-V3 on 8 nodes: groups are nodes, at most 4 per token
    (256, 8, None, None, 8),
    (128, 8, None, None, 4),  # Qwen3-235B, EP32 over 4 nodes
    (160, 6, 8, 3, 16),    # DeepSeek-V2 device-limited, groups spanning two nodes
    (256, 8, 8, 4, 4),     # two groups per node
])
def test_nodes_per_token_matches_a_simulation_of_the_routing(experts, topk, groups, picked, nodes):
    m = load_model("deepseek-v3").replace(num_experts=experts, moe_router_topk=topk, moe_router_num_groups=groups,
                                          moe_router_group_topk=picked)
    expected = _simulated_nodes(experts, topk, groups, picked, nodes)
    # the G >= N case draws the chosen groups' node coverage and the experts' as independent (within a few %)
    assert nodes_per_token(m, nodes) == pytest.approx(expected, rel=0.04)


def test_network_copy_ratio_is_one_inside_a_node_and_falls_with_the_node_limit():
    v3 = load_model("deepseek-v3")
    assert network_copy_ratio(v3, 1) == 1.0
    limited = network_copy_ratio(v3, 8)
    free = network_copy_ratio(v3.replace(moe_router_num_groups=None, moe_router_group_topk=None), 8)
    assert nodes_per_token(v3, 8) <= 4 and limited == pytest.approx(nodes_per_token(v3, 8) / 8)
    assert limited < free < 1.0
    assert network_copy_ratio(load_model("mixtral-8x7b"), 8) == 1.0  # 8 experts on 8 nodes: nothing to share
