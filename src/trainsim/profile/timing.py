"""Timing of one operator: warm-up, then repetitions timed with CUDA events (GPU) or ``perf_counter_ns`` (CPU).

The warm-up runs ``warmup`` calls and goes on until ``min_warmup_s`` has passed, so that worker threads (CPU) and
clocks (GPU) are up before timing: on a CPU an idle OpenMP pool can add milliseconds of wake-up to every call.

Each repetition runs the operator ``inner`` times back to back and reports the mean per call; ``inner`` is chosen
from one timed call so that a repetition lasts at least ``min_rep_s`` (kernels of a few microseconds are then timed
over many launches, as they run in an eager training step: a launch-bound kernel costs its launch). On a GPU all
repetitions are queued with their own event pair and synchronised once at the end, so the device never idles between
them. The statistics are over repetitions: median (the table's ``time_s``), mean, standard deviation, min, max.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Stats:
    """Seconds per call over the timed repetitions."""

    median: float
    mean: float
    std: float
    min: float
    max: float
    repetitions: int
    inner: int
    warmup: int

    @classmethod
    def of(cls, samples: list[float], inner: int, warmup: int) -> Stats:
        return cls(statistics.median(samples), statistics.fmean(samples),
                   statistics.pstdev(samples) if len(samples) > 1 else 0.0, min(samples), max(samples), len(samples),
                   inner, warmup)


def synchronize(device: torch.device) -> None:
    """Wait for the device to finish its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_cpu(fn: Callable[[], object], calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) * 1e-9


def _time_cuda(fn: Callable[[], object], calls: int, reps: int) -> list[float]:
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        for _ in range(calls):
            fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e-3 for start, end in events]


def warm_up(fn: Callable[[], object], device: torch.device, calls: int, min_s: float, max_calls: int = 1000) -> int:
    """Run ``fn`` at least ``calls`` times (at least once: allocation, kernel and plan selection) and until
    ``min_s`` seconds have passed (thread pools and clocks spun up); returns the number of calls."""
    done = 0
    t0 = time.perf_counter()
    while done < max(calls, 1) or (time.perf_counter() - t0 < min_s and done < max_calls):
        fn()
        done += 1
        if min_s > 0:
            synchronize(device)
    synchronize(device)
    return done


def measure(fn: Callable[[], object], device: torch.device, warmup: int = 3, reps: int = 10,
            min_rep_s: float | None = None, max_inner: int = 1000, min_warmup_s: float = 0.05) -> Stats:
    """Time ``fn`` (one call = one execution of the operator) on ``device``."""
    if reps < 1:
        raise ValueError("reps must be at least 1")
    cuda = device.type == "cuda"
    if min_rep_s is None:
        min_rep_s = 1e-3 if cuda else 2e-3
    warm_up(fn, device, warmup, min_warmup_s)
    once = _time_cuda(fn, 1, 1)[0] if cuda else _time_cpu(fn, 1)
    inner = 1 if once <= 0 else max(1, min(max_inner, math.ceil(min_rep_s / once)))
    if cuda:
        samples = [t / inner for t in _time_cuda(fn, inner, reps)]
    else:
        samples = [_time_cpu(fn, inner) / inner for _ in range(reps)]
    return Stats.of(samples, inner, warmup)
