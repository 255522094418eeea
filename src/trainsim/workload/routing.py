"""Where a token's experts sit: the nodes one token reaches, which sets a deduplicating dispatcher's network traffic.

Megatron-Core's ``alltoall`` dispatcher sends one copy of a token per chosen expert (``topk`` copies), so the share
of its bytes that leaves the node is the share of the expert-parallel group on other nodes. DeepEP and HybridEP
(``--moe-token-dispatcher-type flex``) send a token over the network **once per destination node** and forward it to
that node's experts over NVLink (DeepEP README, "normal kernels ... NVLink and RDMA forwarding"; DeepSeek-V3 report
§3.2.2). Its network bytes are therefore ``D / topk`` of the all-to-all's, ``D`` being the expected number of nodes
a token's ``topk`` experts occupy.

Experts are laid out contiguously over the expert-parallel ranks (Megatron's local experts), so each of the ``N``
nodes of the group holds ``E/N`` of the ``E`` experts. A token's ``k`` experts are modelled as drawn uniformly
without replacement (balanced routing), over all nodes or, with group-limited routing (DeepSeek's ``n_group`` /
``topk_group``: V2 device-limited, V3 node-limited, at most 4 nodes), over the nodes of its chosen groups:

* ``G`` groups, ``M`` chosen, ``G ≥ N`` (whole groups per node): the chosen groups cover
  ``L = N·(1 − C(G − G/N, M) / C(G, M))`` nodes on average;
* ``G < N`` (a group spans ``N/G`` nodes): ``L = M·N/G``;
* no groups: ``L = N``.

Then ``D = L·(1 − C(E_L − E/N, k) / C(E_L, k))`` with ``E_L = L·E/N`` the experts reachable. The same model gives
the all-to-all's remote copies, ``k·(N − 1)/N``, so the ratio needs nothing fitted.
"""

from __future__ import annotations

from functools import lru_cache

from trainsim.spec.model import Model


def _miss(total: float, held: float, draws: int) -> float:
    """Probability that ``draws`` picks without replacement out of ``total`` miss all ``held`` of them
    (``C(total − held, draws) / C(total, draws)``, continuous in ``total``)."""
    p = 1.0
    for i in range(draws):
        rest = total - i
        if rest <= 0:
            return 0.0
        p *= max(rest - held, 0.0) / rest
    return p


@lru_cache(maxsize=1024)
def _nodes_per_token(experts: int, topk: int, groups: int | None, picked: int | None, nodes: int) -> float:
    if nodes <= 1:
        return 1.0
    per_node = experts / nodes
    if groups and picked and picked < groups:
        reach = nodes * (1.0 - _miss(groups, groups / nodes, picked)) if groups >= nodes else picked * nodes / groups
    else:
        reach = float(nodes)
    reach = min(max(reach, 1.0), float(nodes))
    return reach * (1.0 - _miss(reach * per_node, per_node, topk))


def nodes_per_token(model: Model, nodes: int) -> float:
    """Expected number of the expert-parallel group's ``nodes`` that one token's ``topk`` experts occupy."""
    return _nodes_per_token(model.num_experts or 0, model.moe_router_topk, model.moe_router_num_groups,
                            model.moe_router_group_topk, nodes)


def network_copy_ratio(model: Model, nodes: int) -> float:
    """Network bytes of a deduplicating (flex: DeepEP / HybridEP) dispatch relative to the all-to-all's: a token
    crosses the network once per remote node it reaches instead of once per remote expert (1 within one node)."""
    if nodes <= 1 or not model.num_experts:
        return 1.0
    k = model.moe_router_topk
    return min(1.0, nodes_per_token(model, nodes) / k)
