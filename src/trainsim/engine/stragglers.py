"""Heterogeneity and stragglers: slow GPUs, stages and links, and per-micro-batch sequence-length variation.

* ``slow_rank {rank: factor}``: that GPU's compute (and optimizer step) takes ``factor`` times longer. Its TP/CP
  group waits for it in every layer's collective, and with expert parallelism its expert group does too, so the whole
  unit (and the units tied to it by expert parallelism) runs at its pace.
* ``slow_stage {stage: factor}``: every GPU of a pipeline stage, in every replica.
* ``slow_link {node: factor}``: the node's NICs deliver ``1/factor`` of their bandwidth: every collective or transfer
  that leaves the node through them takes ``factor`` times longer (a ring runs at its slowest link, so a slow node
  slows the whole data-parallel collective of its stage, for every replica).
* ``seq_len_cv``: each micro-batch of each replica and step gets a sequence length ``L·r`` with ``r`` log-normal of
  mean 1 and coefficient of variation ``seq_len_cv`` (seeded): linear ops and activation transfers scale with ``r``,
  the attention core with ``r²``.

A factor of 1 changes nothing; factors below 1 model a faster GPU (which cannot speed up its synchronised group).
Replicas with identical settings form one **class**, simulated once; each class is one column of the engine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from trainsim.errors import TrainsimError
from trainsim.parallel.axes import Group
from trainsim.parallel.layout import Layout

MAX_SEQ_LEN_CV = 3.0


def _factor(field_name: str, key: int, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TrainsimError(field_name, f"factor of {key} must be a number (got {value!r})",
                            "give KEY=FACTOR, e.g. 3=1.5 for 1.5× slower")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise TrainsimError(field_name, f"factor of {key} must be a positive finite number (got {value!r})",
                            "give KEY=FACTOR with FACTOR > 0, e.g. 3=1.5 for 1.5× slower")
    return v


def parse_assignments(values: Iterable[str] | Mapping[int, float] | None, field_name: str,
                      what: str) -> dict[int, float]:
    """Parse ``["KEY=FACTOR", ...]`` (or pass a mapping through) into ``{key: factor}``; repeated keys multiply."""
    if values is None:
        return {}
    if isinstance(values, Mapping):
        items: list[tuple[object, object]] = list(values.items())
    else:
        items = []
        for text in values:
            if not isinstance(text, str) or text.count("=") != 1:
                raise TrainsimError(field_name, f"expected {what.upper()}=FACTOR, got {text!r}",
                                    f"e.g. {field_name.replace('_', '-')} 3=1.5")
            key, _, val = text.partition("=")
            try:
                items.append((int(key.strip()), float(val.strip())))
            except ValueError:
                raise TrainsimError(field_name, f"expected integer {what}=number, got {text!r}",
                                    f"e.g. {field_name.replace('_', '-')} 3=1.5") from None
    out: dict[int, float] = {}
    for key, val in items:
        if isinstance(key, bool) or not isinstance(key, int | np.integer):
            raise TrainsimError(field_name, f"{what} must be an integer (got {key!r})", f"give {what}=FACTOR")
        k = int(key)
        out[k] = out.get(k, 1.0) * _factor(field_name, k, val)
    return out


def _check_range(values: Mapping[int, float], field_name: str, what: str, limit: int, size_name: str) -> None:
    for key in values:
        if not 0 <= key < limit:
            raise TrainsimError(field_name, f"{what} {key} is outside 0..{limit - 1} ({size_name} {limit})",
                                f"give a {what} between 0 and {limit - 1}")


@dataclass(frozen=True)
class Heterogeneity:
    """Validated straggler settings (see module docstring)."""

    slow_rank: Mapping[int, float] = field(default_factory=dict)
    slow_stage: Mapping[int, float] = field(default_factory=dict)
    slow_link: Mapping[int, float] = field(default_factory=dict)
    seq_len_cv: float = 0.0
    seed: int = 0

    @property
    def active(self) -> bool:
        """Whether anything differs from a homogeneous run."""
        return bool(self.slow_rank or self.slow_stage or self.slow_link or self.seq_len_cv > 0)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready description."""
        return {
            "slow_rank": {str(k): v for k, v in sorted(self.slow_rank.items())},
            "slow_stage": {str(k): v for k, v in sorted(self.slow_stage.items())},
            "slow_link": {str(k): v for k, v in sorted(self.slow_link.items())},
            "seq_len_cv": self.seq_len_cv,
            "seed": self.seed,
        }


def heterogeneity(layout: Layout, slow_rank: Iterable[str] | Mapping[int, float] | None = None,
                  slow_stage: Iterable[str] | Mapping[int, float] | None = None,
                  slow_link: Iterable[str] | Mapping[int, float] | None = None, seq_len_cv: float = 0.0,
                  seed: int = 0) -> Heterogeneity:
    """Parse and check straggler settings against a job's layout (raises :class:`TrainsimError`)."""
    ranks = parse_assignments(slow_rank, "slow_rank", "rank")
    stages = parse_assignments(slow_stage, "slow_stage", "stage")
    links = parse_assignments(slow_link, "slow_link", "node")
    _check_range(ranks, "slow_rank", "rank", layout.world_size, "world size")
    _check_range(stages, "slow_stage", "stage", layout.pp, "pipeline stages")
    _check_range(links, "slow_link", "node", layout.num_nodes, "nodes")
    if isinstance(seq_len_cv, bool) or not isinstance(seq_len_cv, int | float) or not math.isfinite(seq_len_cv) \
            or not 0 <= seq_len_cv <= MAX_SEQ_LEN_CV:
        raise TrainsimError("seq_len_cv", f"must be between 0 and {MAX_SEQ_LEN_CV} (got {seq_len_cv!r})",
                            "e.g. --seq-len-cv 0.3 for a 30% spread of sequence lengths")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise TrainsimError("seed", f"must be a non-negative integer (got {seed!r})", "e.g. --seed 0")
    return Heterogeneity(ranks, stages, links, float(seq_len_cv), int(seed))


@dataclass(frozen=True)
class Scenario:
    """Per replica class: compute and link factors per stage, and sequence-length ratios per step and micro-batch.

    ``classes[r]`` lists the data-parallel replicas of class ``r``. ``compute[r, s]`` slows compute and optimizer;
    ``unit_link[r, s]`` the unit's in-block collectives that leave the node; ``p2p_link[r, s]`` the link from stage
    ``s`` to stage ``s + 1`` (mod pp); ``dp_link[s]`` the data-parallel collectives of stage ``s`` (all replicas);
    ``emb_link[r]`` the tied-embedding all-reduce; ``seq[k, r, b]`` the sequence-length ratio of micro-batch ``b``
    of class ``r`` in simulated step ``k``.
    """

    classes: tuple[tuple[int, ...], ...]
    compute: np.ndarray
    unit_link: np.ndarray
    p2p_link: np.ndarray
    dp_link: np.ndarray
    emb_link: np.ndarray
    seq: np.ndarray
    symmetric: bool

    @property
    def num_classes(self) -> int:
        """Replica classes (engine columns per step)."""
        return len(self.classes)

    @property
    def steps(self) -> int:
        """Distinct simulated steps."""
        return self.seq.shape[0]


def sequence_ratios(cv: float, seed: int, steps: int, dp: int, m: int) -> np.ndarray:
    """``[steps, dp, m]`` log-normal ratios of mean 1 and coefficient of variation ``cv`` (ones for ``cv = 0``)."""
    if cv <= 0:
        return np.ones((steps, dp, m))
    sigma2 = math.log1p(cv * cv)
    rng = np.random.default_rng(seed)
    return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), size=(steps, dp, m))


def scenario(layout: Layout, het: Heterogeneity, m: int, steps: int, crosses: Mapping[Group, bool]) -> Scenario:
    """Resolve heterogeneity into replica classes and per-class factors."""
    dp, pp = layout.dp, layout.pp
    rank_f = np.ones(layout.world_size)
    for r, f in het.slow_rank.items():
        rank_f[r] *= f
    compute = layout.unit_max(rank_f)
    for s, f in het.slow_stage.items():
        compute[:, s] *= f
    node_f = np.ones(layout.num_nodes)
    for n, f in het.slow_link.items():
        node_f[n] *= f
    unit_link = layout.unit_node_max(node_f)
    labels = layout.ep_coupling()
    if layout.ep > 1:  # expert groups tie replicas together in every MoE layer
        for lab in np.unique(labels):
            sel = labels == lab
            compute[sel] = compute[sel].max(axis=0)
            unit_link[sel] = unit_link[sel].max(axis=0)
    p2p_link = np.maximum(unit_link, np.roll(unit_link, -1, axis=1))
    p2p_link = np.where(layout.p2p_crosses_nodes(), p2p_link, 1.0)
    dp_link = unit_link.max(axis=0) if crosses[Group.DP_CP] else np.ones(pp)
    emb_link = (np.maximum(unit_link[:, 0], unit_link[:, -1]) if crosses[Group.EMBEDDING]
                else np.ones(dp))
    sim_steps = steps if het.seq_len_cv > 0 else 1
    seq = sequence_ratios(het.seq_len_cv, het.seed, sim_steps, dp, m)
    if het.seq_len_cv > 0:
        groups = [(d,) for d in range(dp)]
    else:
        sig: dict[bytes, list[int]] = {}
        for d in range(dp):
            key = np.concatenate((compute[d], unit_link[d], p2p_link[d], emb_link[d:d + 1])).tobytes()
            sig.setdefault(key, []).append(d)
        groups = [tuple(v) for v in sig.values()]
    first = [g[0] for g in groups]
    return Scenario(
        classes=tuple(tuple(g) for g in groups),
        compute=compute[first],
        unit_link=unit_link[first],
        p2p_link=p2p_link[first],
        dp_link=dp_link,
        emb_link=emb_link[first],
        seq=seq[:, first, :],
        symmetric=not het.active,
    )
