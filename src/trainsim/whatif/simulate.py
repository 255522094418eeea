"""Vectorized replay of the dependency model (the paper's section 3.4).

An operation starts when its dependencies have ended (plus its launch delay, when kept); a local operation
ends after its work time; the members of a communication group all end at the group's latest start (taken
across DP ranks for DP-synchronised groups) plus their own transfer time. Steps are independent and start at
0; the step time is the end of the last optimizer. With expert parallelism (``model.ep_groups``) the forward
and backward compute of the DP ranks of one expert group end together, at the latest of their own ends: they
exchange tokens in every MoE layer, so the group runs at its slowest member's pace.

The model is walked once in topological order while every quantity is an array over ``(scenario, step,
dp_rank)``: one pass simulates all steps and DP ranks of many what-if scenarios at once. A scenario takes each
operation's work time and launch delay either from a *base* or from an *alternative* set of inputs, chosen per
(scenario, op, dp rank) by a boolean mask; that covers "restore the original durations of this op type / stage
/ DP rank / worker in the ideal run" and "idealize this selection in the original run".
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trainsim.errors import TrainsimError
from trainsim.io.traces import BACKWARD_COMPUTE, FORWARD_COMPUTE, OPTIMIZER
from trainsim.whatif.model import DependencyModel

#: Memory budget (bytes) of the per-operation end-time buffer; larger batches are split into chunks of
#: scenarios.
DEFAULT_MAX_BYTES = 256 * 2**20


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Per-operation work times and optional launch delays, shape ``(ops, steps, dp_ranks)``."""

    work: np.ndarray
    delay: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class Simulation:
    """Step times ``(scenarios, steps)``; when recorded, start/end ``(ops, scenarios, steps, dp)``."""

    step_time: np.ndarray
    start: np.ndarray | None = None
    end: np.ndarray | None = None


def _pick(base: np.ndarray | None, alt: np.ndarray | None, mask: np.ndarray | None) -> np.ndarray | None:
    """Per-scenario values of one op: ``base`` where ``mask`` is False, ``alt`` where True; (K|1, S, D)."""
    if mask is None or base is alt:
        return None if base is None else base[None]
    any_, all_ = bool(mask.any()), bool(mask.all())
    if not any_:
        return None if base is None else base[None]
    if all_ and mask.shape[0] > 0:
        return None if alt is None else alt[None]
    b = 0.0 if base is None else base[None]
    a = 0.0 if alt is None else alt[None]
    return np.where(mask[:, None, :], a, b)


def _check(model: DependencyModel, x: Inputs, name: str) -> tuple[int, int]:
    n = model.num_ops
    if x.work.ndim != 3 or x.work.shape[0] != n:
        raise TrainsimError(
            name,
            f"work has shape {x.work.shape}, expected ({n}, steps, dp_ranks)",
            "build inputs from the same trace as the model",
        )
    if x.delay is not None and x.delay.shape != x.work.shape:
        raise TrainsimError(name, f"delay has shape {x.delay.shape}, expected {x.work.shape}", "match the shapes")
    if not np.isfinite(x.work).all():
        raise TrainsimError(name, "work times must be finite", "replace NaN/inf durations")
    return x.work.shape[1], x.work.shape[2]


def simulate(
    model: DependencyModel,
    base: Inputs,
    alt: Inputs | None = None,
    masks: np.ndarray | None = None,
    *,
    record: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Simulation:
    """Simulate one scenario (``masks is None``) or a batch of masked scenarios.

    ``masks`` has shape ``(scenarios, ops, dp_ranks)``: True takes the op's inputs from ``alt``, False from
    ``base``. Returns step times of shape ``(scenarios, steps)`` (one scenario without masks).
    """
    n_s, n_d = _check(model, base, "base")
    if masks is None:
        masks_arr = np.zeros((1, model.num_ops, n_d), dtype=bool)
        alt = base
    else:
        masks_arr = np.asarray(masks, dtype=bool)
        if alt is None:
            raise TrainsimError("alt", "masked scenarios need alternative inputs", "pass alt=Inputs(...)")
        if alt.work.shape != base.work.shape:
            raise TrainsimError("alt", f"shape {alt.work.shape} differs from base {base.work.shape}", "match shapes")
        _check(model, alt, "alt")
        if masks_arr.ndim != 3 or masks_arr.shape[1:] != (model.num_ops, n_d):
            raise TrainsimError(
                "masks",
                f"shape {masks_arr.shape}, expected (scenarios, {model.num_ops}, {n_d})",
                "one boolean per scenario, op and DP rank",
            )
    n_k = masks_arr.shape[0]
    per_scenario = model.num_ops * n_s * n_d * 8 * (2 if record else 1)
    chunk = max(1, min(n_k, max_bytes // max(per_scenario, 1)))
    if record and chunk < n_k:
        raise TrainsimError(
            "record",
            f"recording {n_k} scenarios needs {per_scenario * n_k / 2**20:.0f} MiB",
            "record fewer scenarios at once",
        )
    parts = [_run(model, base, alt, masks_arr[k0 : k0 + chunk], record) for k0 in range(0, n_k, chunk)]
    if len(parts) == 1:
        return parts[0]
    return Simulation(step_time=np.concatenate([p.step_time for p in parts], axis=0))


def _run(model: DependencyModel, base: Inputs, alt: Inputs, masks: np.ndarray, record: bool) -> Simulation:
    n_k = masks.shape[0]
    _, n_s, n_d = base.work.shape
    end = np.empty((model.num_ops, n_k, n_s, n_d))
    start = np.empty_like(end) if record else None
    vary = np.asarray(masks.any(axis=(0, 2)))  # ops whose inputs differ between scenarios (one flag per op)
    ep_members = _ep_members(model)
    coupled = (np.isin(model.ops["optype"].to_numpy(), (FORWARD_COMPUTE, BACKWARD_COMPUTE))
               if ep_members else np.zeros(model.num_ops, dtype=bool))
    for node in model.schedule:
        if not node.is_group:
            v = int(node.members[0])
            st = _start(end, node.deps[0], v, base, alt, masks if vary[v] else None)
            if start is not None:
                start[v] = st
            w = _pick(base.work[v], alt.work[v], masks[:, v] if vary[v] else None)
            end[v] = st + w
            if coupled[v]:
                for idx in ep_members:
                    end[v][..., idx] = end[v][..., idx].max(axis=-1, keepdims=True)
            continue
        starts = [
            _start(end, d, int(m), base, alt, masks if vary[int(m)] else None)
            for m, d in zip(node.members, node.deps, strict=True)
        ]
        latest = starts[0]
        for st in starts[1:]:
            latest = np.maximum(latest, st)
        if node.dp_sync:
            latest = latest.max(axis=-1, keepdims=True)
        for m, st in zip(node.members, starts, strict=True):
            m = int(m)
            if start is not None:
                start[m] = st
            end[m] = latest + _pick(base.work[m], alt.work[m], masks[:, m] if vary[m] else None)
    opt = np.flatnonzero(model.ops["optype"].to_numpy() == OPTIMIZER)
    step_time = end[opt].max(axis=(0, 3))
    return Simulation(step_time=step_time, start=start, end=end if record else None)


def _ep_members(model: DependencyModel) -> list[np.ndarray]:
    """DP-rank indices of every expert group with more than one traced member."""
    if model.ep_groups is None:
        return []
    labels = np.asarray(model.ep_groups)
    out = [np.flatnonzero(labels == g) for g in np.unique(labels)]
    return [idx for idx in out if idx.size > 1]


def _start(
    end: np.ndarray, deps: np.ndarray, v: int, base: Inputs, alt: Inputs, masks: np.ndarray | None
) -> np.ndarray:
    """Start of op ``v``: latest end of its dependencies (0 without any) plus its launch delay."""
    if len(deps) == 0:
        st = np.zeros((1, *end.shape[2:]))
    elif len(deps) == 1:
        st = end[deps[0]]
    else:
        st = end[deps].max(axis=0)
    delay = _pick(
        base.delay[v] if base.delay is not None else None,
        alt.delay[v] if alt.delay is not None else None,
        masks[:, v] if masks is not None else None,
    )
    return st if delay is None else st + delay
