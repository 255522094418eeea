"""Trace generators: vTrain's case-study recipe on Microsoft ITP arrivals, and Poisson arrivals with ITP sizes.

Randomness comes from the named substream ``trace`` of the seed (:mod:`trainsim.cluster.rng`).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from trainsim.cluster.rng import substream
from trainsim.cluster.spec import ClusterSpec, load_cluster
from trainsim.cluster.throughput import ThroughputModel
from trainsim.cluster.trace import JobSpec, records
from trainsim.errors import TrainsimError, TrainsimWarning

#: vTrain §V-B's three models (layers, hidden, heads) and global batch sizes; sequence 2048.
VTRAIN_MODELS: tuple[tuple[str, int], ...] = (("gpt3-18.4b", 1024), ("gpt3-39.1b", 1536), ("gpt3-81.2b", 1792))
#: Stand-in for the 81.2B preset while it is not available.
FALLBACK_81B = "gpt3-76.1b"
DEFAULT_BATCH = 1024
#: The software stack vTrain modelled (its profiles are of Megatron-LM as of 2021-22: local DDP with the gradient
#: all-reduce after the backward pass, unfused attention with the fused softmax; vTrain, MICRO'24 §III-IV).
VTRAIN_FRAMEWORK = "megatron-lm-2021"
_BASES: dict[tuple[str, str | None], ThroughputModel] = {}


def vtrain_models() -> list[tuple[str, int]]:
    """vTrain's models, with the stand-in for ``gpt3-81.2b`` when that preset is missing (warned)."""
    from trainsim.spec.presets import list_models

    out = []
    for name, gbs in VTRAIN_MODELS:
        if name not in list_models():
            warnings.warn(f"model: preset {name} is not available; using {FALLBACK_81B}", TrainsimWarning,
                          stacklevel=2)
            name = FALLBACK_81B
        out.append((name, gbs))
    return out


def read_itp(path: str | Path) -> pd.DataFrame:
    """An ITP arrival trace (raw or ElasticFlow's): ``submission_time``, ``duration``, ``num_gpu`` at least."""
    p = Path(path)
    if not p.exists():
        raise TrainsimError("--itp", f"file '{p}' does not exist",
                            "extract ../shared/data/cluster-traces/raw-traces.tar.gz and give a clusterNN.csv")
    try:
        df = pd.read_csv(p)
    except (OSError, ValueError) as exc:
        raise TrainsimError("--itp", f"cannot read '{p}': {exc}", "give an ITP CSV") from None
    need = {"submission_time", "duration", "num_gpu"}
    if not need <= set(df.columns):
        raise TrainsimError("--itp", f"'{p}' lacks columns {sorted(need - set(df.columns))}",
                            "give an ITP trace (job_id, submission_time, duration, num_gpu)")
    df = df[(df["duration"] > 0) & (df["num_gpu"] > 0)]
    return df.sort_values("submission_time", kind="stable").reset_index(drop=True)


def _sized(tm: ThroughputModel, cluster: ClusterSpec, model: str, gbs: int, seq: int, want: int,
           reference: str) -> tuple[int, float]:
    """Requested GPUs (≥ what the model needs under dp-only, a power of two) and the reference iteration time."""
    pool = cluster.pools[0]
    probe = JobSpec(0, "probe", 0.0, model, gbs, seq, 1, None, 1, None, None, 1.0, "default", None, None,
                    tm.framework)
    base = _BASES.get((tm.space, tm.framework))
    if base is None:
        base = _BASES[(tm.space, tm.framework)] = ThroughputModel(source="dp-only", space=tm.space,
                                                                   framework=tm.framework)
    need = base.curve(probe, pool).min_size
    if need is None:
        raise TrainsimError("model", f"{model} fits on no GPU count of pool {pool.name}", "use a larger pool")
    # a power-of-two multiple of the dp-only unit where its plan fits, so that every throughput source can run it
    n = need
    while n < want and 2 * n <= pool.num_gpus and math.isfinite(base.iteration_time(probe, pool, 2 * n)):
        n *= 2
    ref = (base if reference == "dp-only" else tm).iteration_time(probe, pool, n)
    if not math.isfinite(ref):
        ref = tm.iteration_time(probe, pool, n)
    return n, ref


def vtrain2(itp: str | Path | pd.DataFrame, jobs: int, seed: int, cluster: str | ClusterSpec = "dgx-a100:128", *,
            deadlines: bool = True, all_at_once: bool = False, gpu_scale: int = 8, seq_length: int = 2048,
            reference: str = "dp-only", lam: tuple[float, float] = (0.5, 1.5), start: int | None = None,
            search_space: str = "tdp", framework: str | None = VTRAIN_FRAMEWORK,
            time_scale: float = 1.0) -> pd.DataFrame:
    """vTrain's recipe: ``jobs`` consecutive ITP arrivals from a random (seeded) start; each job gets one of the three
    GPT models, ``gpu_scale`` × its ITP GPU count (rounded up to a power-of-two multiple of the smallest GPU count
    the model fits on with the DP-only plan),
    an iteration count that makes its duration on those GPUs (``reference`` throughput) equal to its ITP duration
    times ``time_scale``, and a deadline ``λ·duration`` after arrival with ``λ ~ U[lam]``. ``time_scale`` stretches
    the gaps between arrivals alike, so it changes the job lengths (iterations) but not the offered load.
    ``all_at_once`` submits every job at time 0 (makespan experiments); ``deadlines=False`` leaves deadlines out (JCT
    experiments). Every row names ``framework`` (default: vTrain's stack, :data:`VTRAIN_FRAMEWORK`; ``None``: no
    column, the run's default).
    """
    df = itp if isinstance(itp, pd.DataFrame) else read_itp(itp)
    if jobs <= 0:
        raise TrainsimError("--jobs", "must be positive", "give the number of jobs to sample")
    if jobs > len(df):
        raise TrainsimError("--jobs", f"the ITP trace has only {len(df)} usable jobs", "ask for fewer")
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise TrainsimError("--time-scale", "must be a positive number", "give e.g. 1 (ITP's own durations) or 10")
    if gpu_scale < 1:
        raise TrainsimError("--gpu-scale", f"must be a positive integer, got {gpu_scale}",
                            "give GPUs per ITP GPU, e.g. 8 (vTrain's DGX nodes)")
    spec = load_cluster(cluster) if not isinstance(cluster, ClusterSpec) else cluster
    rng = substream(seed, "trace")
    first = int(rng.integers(0, len(df) - jobs + 1)) if start is None else start
    win = df.iloc[first:first + jobs]
    models = vtrain_models()
    pick = rng.integers(0, len(models), size=jobs)
    lams = rng.uniform(lam[0], lam[1], size=jobs)
    tm = ThroughputModel(source="best", space=search_space, framework=framework)  # type: ignore[arg-type]
    t0 = float(win["submission_time"].iloc[0])
    rows = []
    for k, r in enumerate(records(win)):
        model, gbs = models[int(pick[k])]
        n, ref = _sized(tm, spec, model, gbs, seq_length, int(r.num_gpu) * gpu_scale, reference)
        iters = max(1, round(float(r.duration) * time_scale / ref))
        duration = iters * ref
        submit = 0.0 if all_at_once else (float(r.submission_time) - t0) * time_scale
        row = {"job_id": f"j{k:05d}", "submit_time_s": submit, "model": model, "global_batch_size": gbs,
               "seq_length": seq_length, "iterations": iters,
               "deadline_s": submit + float(lams[k]) * duration if deadlines else np.nan,
               "requested_gpus": n, "tenant": "default"}
        if framework is not None:
            row["framework"] = framework
        rows.append(row)
    return pd.DataFrame(rows)


def poisson(itp_sizes: str | Path | pd.DataFrame, jobs: int, models: list[str], seed: int, *,
            mean_interarrival_s: float = 600.0, gpu_scale: int = 8, cluster: str | ClusterSpec = "dgx-a100:128",
            deadlines: bool = True, seq_length: int = 2048, search_space: str = "tdp",
            framework: str | None = None) -> pd.DataFrame:
    """Poisson arrivals (mean gap ``mean_interarrival_s``); GPU counts and durations drawn (jointly) from an ITP
    trace; models uniformly from ``models`` (vTrain's batch sizes for its three models, else 1024); ``framework``
    (optional) is written on every row."""
    df = itp_sizes if isinstance(itp_sizes, pd.DataFrame) else read_itp(itp_sizes)
    if jobs <= 0:
        raise TrainsimError("--jobs", "must be positive", "give the number of jobs")
    if not models:
        raise TrainsimError("--models", "is empty", "give model presets, e.g. gpt3-1.7b,gpt3-7.5b")
    if mean_interarrival_s <= 0:
        raise TrainsimError("--mean-interarrival-s", "must be positive", "give seconds between arrivals")
    from trainsim.spec.presets import load_model

    for m in models:
        load_model(m)
    spec = load_cluster(cluster) if not isinstance(cluster, ClusterSpec) else cluster
    rng = substream(seed, "trace")
    gaps = rng.exponential(mean_interarrival_s, size=jobs)
    rows_idx = rng.integers(0, len(df), size=jobs)
    pick = rng.integers(0, len(models), size=jobs)
    lams = rng.uniform(0.5, 1.5, size=jobs)
    batches = dict(VTRAIN_MODELS)
    tm = ThroughputModel(source="best", space=search_space, framework=framework)  # type: ignore[arg-type]
    t = 0.0
    out = []
    for k in range(jobs):
        t += float(gaps[k])
        r = df.iloc[int(rows_idx[k])]
        model = models[int(pick[k])]
        gbs = batches.get(model, DEFAULT_BATCH)
        n, ref = _sized(tm, spec, model, gbs, seq_length, int(r["num_gpu"]) * gpu_scale, "dp-only")
        iters = max(1, round(float(r["duration"]) / ref))
        row = {"job_id": f"p{k:05d}", "submit_time_s": t, "model": model, "global_batch_size": gbs,
               "seq_length": seq_length, "iterations": iters,
               "deadline_s": t + float(lams[k]) * iters * ref if deadlines else np.nan,
               "requested_gpus": n, "tenant": "default"}
        if framework is not None:
            row["framework"] = framework
        out.append(row)
    return pd.DataFrame(out)


def offered_load(trace: pd.DataFrame, tm: ThroughputModel, cluster: ClusterSpec) -> float:
    """GPU-seconds the jobs need on their requested GPUs (first pool, ``tm``'s throughput, each row's framework)
    over the GPU-seconds of the arrival span (or of the longest job for all-at-once traces)."""
    from trainsim.cluster.trace import job_specs, load_trace

    pool = cluster.pools[0]
    need = 0.0
    longest = 0.0
    for s in job_specs(load_trace(trace)):
        dur = s.iterations * tm.iteration_time(s, pool, s.requested_gpus)
        need += dur * s.requested_gpus
        longest = max(longest, dur)
    span = float(trace["submit_time_s"].max() - trace["submit_time_s"].min())
    span = max(span, longest)
    return need / (cluster.num_gpus * span) if span > 0 else math.inf
