"""Named random substreams: one ``numpy`` generator per purpose (trace, failures, stragglers, ...), derived from
the user's seed and the name only, so adding randomness to one part never changes another's numbers."""

from __future__ import annotations

import hashlib

import numpy as np


def substream(seed: int, name: str) -> np.random.Generator:
    """The generator of substream ``name`` for ``seed`` (independent of ``PYTHONHASHSEED`` and of other streams)."""
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), key])))
