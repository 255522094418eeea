"""NCCL-like cost of one collective: algorithm (ring, tree, NVLS) × protocol (LL, LL128, Simple), chosen as NCCL does.

NCCL prices every (algorithm, protocol) pair with an α-β model and runs the cheapest one
(``ncclTopoTuneModel``/``ncclTopoGetAlgoTime`` in NCCL's ``src/graph/tuning.cc``, v2.19–2.21). This module
reproduces that structure with trainsim's bandwidths:

* **Bus bandwidth** ``B``: the Simple protocol's achieved bandwidth of the group's slowest hop, from
  :func:`trainsim.cost.comm.link` (NVLink inside a node; the node's NICs shared by the group's members there across
  nodes). The calibration's ``nvlink_efficiency``/``network_efficiency`` are the achieved fractions.
* **Protocols** (the message-size ramp): LL moves 8-byte lines with 4 bytes of data and a flag — low latency, a
  quarter (multi-node or all-reduce; else a third) of ``B``, capped at NCCL's ``llMaxBw``; LL128 keeps 120 of every
  128 bytes (``0.92·B``; ``0.7·B`` with one GPU per node); Simple runs at ``B`` but pays the longest per-step latency.
  The cheapest wins: LL for small messages, LL128 for medium, Simple for large.
* **Algorithms**: ring (all collectives) moves ``2(n−1)/n·S`` (all-reduce) or ``(n−1)/n·S`` (all-gather /
  reduce-scatter) — broadcast and reduce (SUMMA's panels) run as a pipelined chain that carries ``S`` over every
  hop, ``n−1`` steps — and pays a latency per step — ``2(n−1)`` steps for all-reduce, ``2·nodes`` of them crossing the
  network; tree (all-reduce only) is a chain inside each node and a double binary tree across nodes: latency
  ``2((n/nodes − 1)·lat_intra + log₂(nodes)·lat_inter)``, bandwidth ``0.92·B/2`` with NCCL's medium-size correction;
  NVLS (all-reduce inside one NVSwitch domain with NVLink SHARP, Hopper and newer): the switch reduces, algorithm
  bandwidth ``5/6·B``; NVLS tree (NCCL ≥ 2.18, several such domains): NVLS inside each node and a tree of the
  nodes' NICs across them: on two nodes every byte crosses the network once per direction, so
  ``min(0.70·B_nvlink, B_net)`` (0.70: NCCL's NVLS-tree bus-to-algorithm ratio at two nodes; checked against
  public nccl-tests results in docs/VALIDATION.md, not fitted), beyond two nodes ``5/6·min(B_nvlink, B_net/2)``;
  latency ``lat_nvls + 2·log₂(nodes)·lat_inter``. NCCL's ring plateau (×1.4 latency for multi-node Simple all-reduce) is
  kept.

Latencies per step come from NCCL's ``hwLat`` table. The system's ``node.nvlink_latency`` and ``network.latency``
are the Simple-protocol ring step latencies of its links (NCCL's 3.4 µs and 14 µs by default); every other
(algorithm, protocol) latency scales with them in NCCL's proportions. The module has no fitted constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

Algorithm = Literal["ring", "tree", "nvls", "nvls_tree"]
Protocol = Literal["LL", "LL128", "Simple"]
Reduction = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"]
#: Rooted collectives: a pipelined ring (chain) moves the whole buffer once over every hop (algbw = bus bandwidth).
ROOTED = frozenset({"broadcast", "reduce"})

ALGORITHMS: tuple[Algorithm, ...] = ("ring", "tree", "nvls", "nvls_tree")
PROTOCOLS: tuple[Protocol, ...] = ("LL", "LL128", "Simple")

# NCCL tuning.cc (v2.19–2.21), microseconds. Base latency per (algorithm, protocol).
_BASE_US: dict[tuple[str, str], float] = {
    ("tree", "LL"): 6.8, ("tree", "LL128"): 14.0, ("tree", "Simple"): 0.0,
    ("ring", "LL"): 6.6, ("ring", "LL128"): 14.0, ("ring", "Simple"): 8.4,
}
# Per-step hardware latency: NVLink hop and network hop, per (algorithm, protocol).
_NVLINK_US: dict[tuple[str, str], float] = {
    ("tree", "LL"): 0.6, ("tree", "LL128"): 1.25, ("tree", "Simple"): 28.0,
    ("ring", "LL"): 0.6, ("ring", "LL128"): 1.9, ("ring", "Simple"): 3.4,
    ("nvls", "Simple"): 23.0, ("nvls_tree", "Simple"): 23.0,
}
_NET_US: dict[tuple[str, str], float] = {
    ("tree", "LL"): 5.0, ("tree", "LL128"): 8.5, ("tree", "Simple"): 28.0,
    ("ring", "LL"): 2.7, ("ring", "LL128"): 4.0, ("ring", "Simple"): 14.0,
    ("nvls", "Simple"): 18.0, ("nvls_tree", "Simple"): 14.0,
}
NCCL_NVLINK_STEP_S = _NVLINK_US[("ring", "Simple")] * 1e-6  # reference for the system's nvlink_latency
NCCL_NET_STEP_S = _NET_US[("ring", "Simple")] * 1e-6  # reference for the system's network latency
_NET_OVERHEAD_US = 1.0  # per network step posted by the proxy (x86); x3 for Simple
_LL_MAX_BW = {True: 87.7e9, False: 39.0e9}  # LL ceiling, bytes/s: single node (Ampere/Hopper), multi-node
# Trees are slower than the model for medium sizes: NCCL's correction, by protocol, for log2(bytes/64) = 0..22.
_TREE_CORRECTION: dict[str, tuple[float, ...]] = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
_RING_PLATEAU = 1.4  # multi-node Simple ring all-reduce latency factor (Ampere and newer)
# NVLS tree on two nodes: NCCL's bus-to-algorithm ratio .70·nNodes/(2(nNodes−1)) (tuning.cc, v2.2x) at nNodes = 2
_NVLS_TREE_TWO_NODES = 0.70


@dataclass(frozen=True, slots=True)
class Links:
    """What the NCCL model needs to know about a group and its links."""

    ranks: int
    nodes: int
    bus_bandwidth: float  # bytes/s of the Simple protocol over the slowest hop (per GPU, per direction)
    nvlink_bandwidth: float | None = None  # bytes/s inside the node (NVLS); None: bus_bandwidth
    net_bandwidth: float | None = None  # bytes/s of the node's NICs shared by the group's members (NVLS tree)
    nvlink_step: float = NCCL_NVLINK_STEP_S  # s, Simple ring step over NVLink
    net_step: float = NCCL_NET_STEP_S  # s, Simple ring step over the network
    nvls: bool = False  # NVLink SHARP available in the domain


@dataclass(frozen=True, slots=True)
class Choice:
    """The (algorithm, protocol) NCCL would run and its predicted time."""

    time: float
    algorithm: Algorithm
    protocol: Protocol
    latency: float
    algbw: float  # bytes/s: nbytes / (time − latency)

    def busbw(self, collective: Reduction, nbytes: float, ranks: int) -> float:
        """nccl-tests' bus bandwidth for this time: algbw·2(n−1)/n (all-reduce) or algbw·(n−1)/n."""
        if self.time <= 0:
            return 0.0
        if collective in ROOTED:
            return nbytes / self.time  # nccl-tests: busbw = algbw for broadcast and reduce
        factor = 2 * (ranks - 1) / ranks if collective == "all_reduce" else (ranks - 1) / ranks
        return nbytes / self.time * factor


def _step_latency(links: Links, algo: str, proto: str, network: bool) -> float:
    table = _NET_US if network else _NVLINK_US
    ref = _NET_US[("ring", "Simple")] if network else _NVLINK_US[("ring", "Simple")]
    scale = (links.net_step if network else links.nvlink_step) / (ref * 1e-6)
    return table[(algo, proto)] * 1e-6 * scale


def _latency(coll: Reduction, algo: str, proto: str, links: Links, nbytes: float) -> float:
    n, nodes = links.ranks, links.nodes
    intra = _step_latency(links, algo, proto, network=False)
    inter = _step_latency(links, algo, proto, network=True)
    if algo == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if algo == "nvls_tree":
        return intra + 2 * math.floor(math.log2(nodes)) * inter
    base = _BASE_US[(algo, proto)] * 1e-6
    if algo == "tree":
        per_node = max(1, n // nodes)
        return base + 2 * ((per_node - 1) * intra + math.floor(math.log2(nodes)) * inter)
    if coll == "all_reduce":
        steps, inter_steps = 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
    else:
        steps, inter_steps = n - 1, nodes - 1
    if nodes > 1:  # the proxy posts every step to the network
        intra = max(intra, _NET_OVERHEAD_US * 1e-6 * (3 if proto == "Simple" else 1))
    lat = base + (steps - inter_steps) * intra + inter_steps * inter
    if coll == "all_reduce" and proto == "Simple" and nodes > 1:
        lat *= _RING_PLATEAU
    return lat


def _algbw(coll: Reduction, algo: str, proto: str, links: Links, nbytes: float) -> float:
    """Algorithm bandwidth (nbytes / transfer time) of one (algorithm, protocol)."""
    n, nodes, bus = links.ranks, links.nodes, links.bus_bandwidth
    single = nodes == 1
    if algo == "ring":
        if proto == "LL":
            bus = min(_LL_MAX_BW[single], bus * (0.25 if (not single or coll == "all_reduce") else 1 / 3))
        elif proto == "LL128":
            bus *= 0.7 if n / nodes < 2 else 0.92
        if coll in ROOTED:  # pipelined chain: every hop carries the whole buffer
            return bus
        steps = 2 * (n - 1) if coll == "all_reduce" else n - 1
        return bus * n / steps
    if algo == "tree":
        bus *= 0.92
        if proto == "LL":
            bus = min(bus / 3.8, _LL_MAX_BW[single])
        elif proto == "LL128":
            bus *= 7 / 9 if single else 120 / 128
        size_log = max(0, int(math.log2(max(nbytes, 64.0) / 64)))
        table = _TREE_CORRECTION[proto]
        if size_log < len(table):
            bus *= table[size_log]
        return bus * 0.5
    nv = links.nvlink_bandwidth or bus
    if algo == "nvls_tree":  # NVLS inside each node, a tree of node NICs across (halved beyond two nodes)
        net = links.net_bandwidth or bus
        if nodes <= 2:  # every byte crosses the network once per direction: the NICs run at full speed
            return min(nv * _NVLS_TREE_TWO_NODES, net)
        return min(nv, net / 2) * 5 / 6
    return nv * 5 / 6  # NVLS


def _candidates(coll: Reduction, links: Links) -> list[tuple[Algorithm, Protocol]]:
    out: list[tuple[Algorithm, Protocol]] = [("ring", p) for p in PROTOCOLS]
    if coll == "all_reduce":
        out.extend(("tree", p) for p in PROTOCOLS)
        if links.nvls and links.ranks // links.nodes > 2:
            algo: Algorithm = "nvls" if links.nodes == 1 else "nvls_tree"
            out.append((algo, "Simple"))
    return out


def choose(coll: Reduction, nbytes: float, links: Links, algorithm: str = "auto",
           protocol: str = "auto") -> Choice:
    """The (algorithm, protocol) NCCL's tuner would pick for ``nbytes`` and its time (``auto`` = cheapest)."""
    best: Choice | None = None
    for algo, proto in _candidates(coll, links):
        if algorithm != "auto" and algo != algorithm:
            continue
        if protocol != "auto" and proto != protocol:
            continue
        lat = _latency(coll, algo, proto, links, nbytes)
        bw = _algbw(coll, algo, proto, links, nbytes)
        t = lat + nbytes / bw
        if best is None or t < best.time:
            best = Choice(t, algo, proto, lat, bw)
    if best is None:
        raise ValueError(f"no NCCL algorithm {algorithm}/{protocol} for {coll} on {links.ranks} ranks")
    return best


@lru_cache(maxsize=1 << 16)
def collective_seconds(coll: Reduction, nbytes: float, links: Links, algorithm: str = "auto",
                       protocol: str = "auto") -> float:
    """Seconds of one collective of ``nbytes`` (nccl-tests' buffer size) over ``links`` (cached: a search prices
    the same few collectives for thousands of candidates)."""
    if links.ranks <= 1 or nbytes <= 0:
        return 0.0
    return choose(coll, nbytes, links, algorithm, protocol).time
