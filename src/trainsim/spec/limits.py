"""Upper bounds on sizes: absurd inputs are refused with one error instead of running for minutes.

The bounds are generous (one to three orders of magnitude beyond the largest published training runs) and exist
only so that a typo (``--num-gpus 1e9``, ``--num-layers 1000000000000``) costs a one-line error rather than an
out-of-memory kill. Non-finite numbers (``inf``, ``nan``) are refused by every spec (``allow_inf_nan=False``).
"""

from __future__ import annotations

#: GPUs in one job (the largest published runs use ~1e5).
MAX_GPUS = 1 << 22
#: Transformer layers (published models have at most a few hundred).
MAX_LAYERS = 10_000
#: Hidden, FFN and head sizes.
MAX_WIDTH = 1 << 22
#: Attention heads and query groups.
MAX_HEADS = 1 << 16
#: Vocabulary (or output projection) size.
MAX_VOCAB = 1 << 26
#: Sequence length in tokens.
MAX_SEQ_LENGTH = 1 << 26
#: Experts per MoE layer.
MAX_EXPERTS = 1 << 16
#: Global batch in sequences.
MAX_BATCH = 1 << 30
#: Training tokens of a whole run (1e18 is ~50 000× Llama 3's 15T).
MAX_TRAIN_TOKENS = 1e18
#: GPUs per node / NVLink domain and NICs per node.
MAX_NODE_GPUS = 1 << 16
#: Price of one GPU-hour in USD.
MAX_PRICE = 1e6
#: Micro-batch × pipeline-chunk × step tasks the event engine may simulate (memory grows with it).
MAX_EVENT_UNITS = 1_000_000
#: Longest operation accepted in a trace (seconds): one day.
MAX_OP_SECONDS = 86_400.0
