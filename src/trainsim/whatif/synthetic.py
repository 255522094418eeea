"""Synthetic 1F1B pipeline traces with known, injected stragglers (for tests, demos and sanity checks).

:func:`synthetic_trace` plays a Megatron-style 1F1B schedule (no interleaving) step by step with a small
scalar event loop and emits the operations in the released trace schema. Stragglers are injected as
multiplicative factors on the compute time of chosen workers or stages, as per-micro-batch work factors
(sequence-length imbalance), and as CPU gaps before operations (launch delays). With no stragglers every
operation of a type takes the same time, so the what-if slowdown is exactly 1 when the durations are dyadic
(exactly representable) numbers.

Timing rules (the paper's dependency model, written out per operation): compute runs in 1F1B order on each
stage; forward receive k is posted after forward compute k-1, forward compute k waits for it, forward send k
follows forward compute k (backward mirrored; the first backward send/receive also waits for the forward
compute two positions before the first backward compute); a send/receive pair ends at the later of the two
starts plus the transfer time; params-all-gather opens the step and grads-reduce-scatter follows the embedding
all-reduce, both synchronised across DP ranks; the step ends with gc, layernorm- and
embedding-grads-all-reduce, the grad-norm all-reduce (a global barrier) and the optimizer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from trainsim.errors import TrainsimError
from trainsim.io.traces import (
    BACKWARD_COMPUTE,
    BACKWARD_RECV,
    BACKWARD_SEND,
    EMBEDDING_GRADS_ALL_REDUCE,
    FORWARD_COMPUTE,
    FORWARD_RECV,
    FORWARD_SEND,
    GC,
    GRADS_REDUCE_SCATTER,
    LAYERNORM_GRADS_ALL_REDUCE,
    OPTIMIZER,
    OPTIMIZER_CLIP_MAIN_GRAD,
    PARAMS_ALL_GATHER,
    TraceMeta,
)


@dataclasses.dataclass(frozen=True)
class TraceOpTimes:
    """Seconds per operation type (forward/backward per stage when given as a sequence)."""

    forward: float | Sequence[float] = 0.0625
    backward: float | Sequence[float] = 0.125
    p2p: float = 0.00048828125
    params_all_gather: float = 0.0078125
    grads_reduce_scatter: float = 0.0078125
    layernorm: float = 0.0001220703125
    embedding: float = 0.0009765625
    clip: float = 0.000244140625
    optimizer: float = 0.015625
    gc: float = 0.0

    @classmethod
    def compute_only(cls, forward: float | Sequence[float], backward: float | Sequence[float]) -> TraceOpTimes:
        """Forward and backward compute only; every communication, the optimizer and gc take no time."""
        return cls(forward=forward, backward=backward, p2p=0.0, params_all_gather=0.0, grads_reduce_scatter=0.0,
                   layernorm=0.0, embedding=0.0, clip=0.0, optimizer=0.0, gc=0.0)


def one_f_one_b(stage: int, pp: int, microbatches: int) -> list[tuple[str, int]]:
    """Compute order of a stage under 1F1B: ``[("F", k) | ("B", k), ...]``."""
    warmup = min(pp - stage - 1, microbatches)
    order = [("F", k) for k in range(warmup)]
    for i in range(microbatches - warmup):
        order += [("F", warmup + i), ("B", i)]
    order += [("B", k) for k in range(microbatches - warmup, microbatches)]
    return order


@dataclasses.dataclass
class _Op:
    key: tuple
    dp: int
    stage: int
    optype: str
    seq: int
    mb: int
    work: float
    deps: list[tuple]
    delay: float = 0.0
    group: tuple | None = None
    mc: int = -1
    gmc: int = -1
    start: float | None = None
    end: float | None = None


def _per_stage(v: float | Sequence[float], pp: int, name: str) -> list[float]:
    if isinstance(v, int | float):
        return [float(v)] * pp
    vals = [float(x) for x in v]
    if len(vals) != pp:
        raise TrainsimError(name, f"needs {pp} values (one per stage), got {len(vals)}", "give one per stage")
    return vals


def chunked_gpipe(stage: int, pp: int, microbatches: int, vpp: int) -> list[tuple[str, int, int]]:
    """Compute order of a stage holding ``vpp`` model chunks: every forward chunk by chunk, then every backward
    in reverse chunk order: ``[("F" | "B", chunk, micro-batch), ...]``."""
    del stage, pp
    fwd = [("F", c, k) for c in range(vpp) for k in range(microbatches)]
    bwd = [("B", c, k) for c in reversed(range(vpp)) for k in range(microbatches)]
    return fwd + bwd


def _order(stage: int, pp: int, m: int, vpp: int) -> list[tuple[str, int, int]]:
    if vpp == 1:
        return [(kind, 0, k) for kind, k in one_f_one_b(stage, pp, m)]
    return chunked_gpipe(stage, pp, m, vpp)


def _step(
    pp: int,
    dp: int,
    m: int,
    vpp: int,
    times: TraceOpTimes,
    factor: np.ndarray,
    mb_factor: np.ndarray,
    gap: float,
    first_gap: float,
) -> list[_Op]:
    """Ops of one step (all DP replicas), resolved to start/end times."""
    fwd = _per_stage(times.forward, pp, "forward")
    bwd = _per_stage(times.backward, pp, "backward")
    last_chunk = pp * vpp - 1
    ops: dict[tuple, _Op] = {}

    def add(key: tuple, d: int, s: int, optype: str, seq: int, mb: int, work: float, deps: list, **kw) -> None:
        ops[key] = _Op(key, d, s, optype, seq, mb, work, [x for x in deps if x is not None], **kw)

    for d in range(dp):
        for s in range(pp):
            order = _order(s, pp, m, vpp)
            comp_key = [("C", d, s, kind, c, k) for kind, c, k in order]
            first_b = next((i for i, o in enumerate(order) if o[0] == "B"), None)
            warm = comp_key[first_b - 2] if first_b is not None and first_b >= 2 else None
            for c in range(vpp):  # params all-gather per chunk on the DP stream, synchronised across DP ranks
                add(
                    ("AG", d, s, c),
                    d,
                    s,
                    PARAMS_ALL_GATHER,
                    c,
                    -1,
                    times.params_all_gather,
                    [("AG", d, s, c - 1) if c else None],
                    group=("AG", s, c),
                    mc=c,
                )
            seen_chunk: set[int] = set()
            index = {"F": 0, "B": 0}
            prev_of: dict[str, tuple | None] = {"F": None, "B": None}  # previous compute of the same direction
            for i, (kind, c, k) in enumerate(order):
                g = c * pp + s
                j = index[kind]
                forward = kind == "F"
                recv_t, send_t = (FORWARD_RECV, FORWARD_SEND) if forward else (BACKWARD_RECV, BACKWARD_SEND)
                rk, sk = ("FR", "FS") if forward else ("BR", "BS")
                has_recv = vpp > 1 or (s > 0 if forward else s < pp - 1)
                has_send = vpp > 1 or (s < pp - 1 if forward else s > 0)
                recv_noop = g == (0 if forward else last_chunk)
                send_noop = g == (last_chunk if forward else 0)
                deps: list = [comp_key[i - 1] if i else None]
                if has_recv:
                    rdeps = [(rk, d, s, j - 1), prev_of[kind]] if j else [warm if not forward else None]
                    peer = ("F", d, g - 1, k) if forward else ("B", d, g + 1, k)
                    add(
                        (rk, d, s, j),
                        d,
                        s,
                        recv_t,
                        j,
                        -1,
                        times.p2p,
                        rdeps,
                        group=None if recv_noop else peer,
                    )
                    deps.append((rk, d, s, j))
                if forward and c not in seen_chunk:
                    deps.append(("AG", d, s, c))
                    seen_chunk.add(c)
                work = (fwd if forward else bwd)[s] * factor[d, s] * mb_factor[d, k]
                delay = (gap + (first_gap if (s == 0 and j == 0) else 0.0)) if forward else 0.0
                add(
                    comp_key[i],
                    d,
                    s,
                    FORWARD_COMPUTE if forward else BACKWARD_COMPUTE,
                    j,
                    k,
                    work,
                    deps,
                    delay=delay,
                    mc=c,
                    gmc=g,
                )
                if has_send:
                    sdeps = [comp_key[i], (sk, d, s, j - 1) if j else (warm if not forward else None)]
                    key = ("F", d, g, k) if forward else ("B", d, g, k)
                    add((sk, d, s, j), d, s, send_t, j, -1, times.p2p, sdeps, group=None if send_noop else key)
                index[kind] += 1
                prev_of[kind] = comp_key[i]
            add(("GC", d, s), d, s, GC, 0, -1, times.gc, [comp_key[-1]])
            add(("LN", d, s), d, s, LAYERNORM_GRADS_ALL_REDUCE, 0, -1, times.layernorm, [("GC", d, s)])
            prev = ("LN", d, s)
            if s in (0, pp - 1):
                add(
                    ("EMB", d, s),
                    d,
                    s,
                    EMBEDDING_GRADS_ALL_REDUCE,
                    0,
                    -1,
                    times.embedding,
                    [prev],
                    group=("EMB", d),
                )
                prev = ("EMB", d, s)
            for c in range(vpp):  # reduce-scatter per chunk, after the embedding all-reduce and on the DP stream
                dp_prev = ("AG", d, s, vpp - 1) if c == 0 else None
                add(
                    ("RS", d, s, c),
                    d,
                    s,
                    GRADS_REDUCE_SCATTER,
                    c,
                    -1,
                    times.grads_reduce_scatter,
                    [prev, dp_prev],
                    group=("RS", s, c),
                    mc=c,
                )
                prev = ("RS", d, s, c)
            add(("CLIP", d, s), d, s, OPTIMIZER_CLIP_MAIN_GRAD, 0, -1, times.clip, [prev], group=("CLIP",))
            add(("OPT", d, s), d, s, OPTIMIZER, 0, -1, times.optimizer, [("CLIP", d, s)])

    members: dict[tuple, list[_Op]] = {}
    for op in ops.values():
        if op.group is not None:
            members.setdefault(op.group, []).append(op)
    pending = list(ops.values())
    while pending:
        progressed = False
        rest = []
        for op in pending:
            if op.start is None and all(ops[k].end is not None for k in op.deps):
                op.start = max((ops[k].end for k in op.deps), default=0.0) + op.delay  # type: ignore[type-var]
                progressed = True
            if op.start is not None and op.group is None:
                op.end = op.start + op.work
            elif op.start is not None and all(o.start is not None for o in members[op.group]):  # type: ignore[index]
                op.end = max(o.start for o in members[op.group]) + op.work  # type: ignore[index, type-var]
            if op.end is None:
                rest.append(op)
            else:
                progressed = True
        if not progressed:  # pragma: no cover - a bug in the rules above, not a user error
            raise RuntimeError(f"synthetic schedule deadlocks at {[o.key for o in rest[:5]]}")
        pending = rest
    return list(ops.values())


def synthetic_trace(
    *,
    pp: int = 4,
    dp: int = 2,
    microbatches: int = 4,
    steps: int | Sequence[int] = 3,
    vpp: int = 1,
    times: TraceOpTimes | None = None,
    slow_workers: Mapping[tuple[int, int], float] | None = None,
    slow_stages: Mapping[int, float] | None = None,
    sequence_jitter: float = 0.0,
    launch_gap_s: float = 0.0,
    first_op_gap_s: float = 0.0,
    seed: int = 0,
    trial_name: str = "SYN",
) -> tuple[pd.DataFrame, TraceMeta]:
    """A released-schema trace of a pipeline job with injected stragglers, and its metadata.

    With ``vpp == 1`` the schedule is 1F1B and, as in Megatron, the first stage has no forward receive and the
    last no forward send. With ``vpp > 1`` every stage holds ``vpp`` model chunks run by :func:`chunked_gpipe`,
    and every compute has its send and receive, those past either end of the model being no-ops.

    ``slow_workers`` maps ``(dp_rank, stage)`` to a factor on that worker's compute time; ``slow_stages`` maps
    a stage to a factor on its compute time; ``sequence_jitter`` is the standard deviation of a log-normal per
    (step, DP rank, micro-batch) factor on forward and backward compute of every stage (variable sequence
    lengths); ``launch_gap_s`` is a CPU gap before every forward compute and ``first_op_gap_s`` one before the
    first forward of stage 0 (data loading). Deterministic for a given ``seed``.
    """
    if pp < 1 or dp < 1 or microbatches < 1 or vpp < 1:
        raise TrainsimError("synthetic", "pp, dp, vpp and microbatches must be >= 1", "use positive sizes")
    step_ids = list(range(steps)) if isinstance(steps, int) else [int(s) for s in steps]
    t = times or TraceOpTimes()
    factor = np.ones((dp, pp))
    for st, f in (slow_stages or {}).items():
        factor[:, st] *= f
    for (d, st), f in (slow_workers or {}).items():
        factor[d, st] *= f
    rng = np.random.default_rng(seed)
    rows = []
    for step in step_ids:
        if sequence_jitter > 0:
            mb = np.exp(rng.normal(0.0, sequence_jitter, size=(dp, microbatches)))
        else:
            mb = np.ones((dp, microbatches))
        for op in _step(pp, dp, microbatches, vpp, t, factor, mb, launch_gap_s, first_op_gap_s):
            assert op.start is not None and op.end is not None
            rank = op.stage * dp + op.dp
            rows.append(
                (
                    op.dp,
                    op.stage,
                    rank,
                    step,
                    op.optype,
                    op.start,
                    op.end - op.start,
                    op.seq,
                    op.mc,
                    op.gmc,
                    op.mb,
                )
            )
    columns = [
        "dp_rank",
        "stage",
        "rank",
        "step",
        "optype",
        "start_ts",
        "duration",
        "seq_id",
        "mc",
        "gmc",
        "mb_id",
    ]
    df = pd.DataFrame(rows, columns=columns)
    df["start_ts"] -= df.groupby("step")["start_ts"].transform("min")
    df = df.sort_values(["step", "rank", "optype", "seq_id"], kind="stable").reset_index(drop=True)
    meta = TraceMeta(trial_name=trial_name, dp_size=dp, pp_size=pp, vpp_size=vpp)
    return df, meta
