"""Job → execution graph: tasks on per-unit streams, dependencies, collective groups and timed templates.

:func:`build_graph` builds the :class:`Graph` of one training step of one replica (see :mod:`trainsim.graph.build`);
:mod:`trainsim.graph.blocks` times the work inside each action at operator granularity; :class:`Layout` maps global
ranks to parallel coordinates, nodes and simulation units.
"""

from __future__ import annotations

from trainsim.graph.blocks import BlockLibrary, BlockTime, ChunkTemplate, Segment, Slice, simulate_ops
from trainsim.graph.build import (
    COMPUTE_KINDS,
    DP_KINDS,
    GRAD_SYNC_KINDS,
    P2P_KINDS,
    Graph,
    GraphBuilder,
    Kind,
    buckets_of,
    build_graph,
    chunk_parameters,
)
from trainsim.parallel.layout import Layout
from trainsim.workload.stages import chunk_layer_indices, chunk_layers

__all__ = [
    "COMPUTE_KINDS",
    "DP_KINDS",
    "GRAD_SYNC_KINDS",
    "P2P_KINDS",
    "BlockLibrary",
    "BlockTime",
    "ChunkTemplate",
    "Graph",
    "GraphBuilder",
    "Kind",
    "Layout",
    "Segment",
    "Slice",
    "buckets_of",
    "build_graph",
    "chunk_layer_indices",
    "chunk_layers",
    "chunk_parameters",
    "simulate_ops",
]
