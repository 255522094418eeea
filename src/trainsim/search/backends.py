"""Where candidates are evaluated: a registry of execution backends (name → class).

- ``local``: this machine. ``workers=1`` evaluates in this process; more uses a process pool
  (:mod:`concurrent.futures`), each worker receiving the evaluation context once.
- ``ray``: a Ray cluster (``pip install 'trainsim[ray]'``); connects to ``$RAY_ADDRESS`` when set, else starts a
  local Ray with ``workers`` CPUs. The context is put once in the object store.

A backend maps a module-level function ``fn(context, chunk) -> list`` over chunks and returns the results in chunk
order, so that every backend gives identical results. Adding one is a class with :meth:`Backend.map` and a line in
:data:`BACKENDS` (or :func:`register_backend`).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from trainsim.errors import TrainsimError

Progress = Callable[[int], None]  # called with the number of items just finished
ChunkFn = Callable[[Any, Any], list[Any]]


class Backend(ABC):
    """Runs ``fn(context, chunk)`` for every chunk."""

    name = "base"

    def __init__(self, workers: int | None = None) -> None:
        if workers is not None and workers < 1:
            raise TrainsimError("workers", f"must be at least 1 (got {workers})", "use --workers 1 or more")
        self.workers = workers or default_workers()

    @abstractmethod
    def map(self, fn: ChunkFn, context: Any, chunks: Sequence[Sequence[Any]],
            progress: Progress | None = None) -> list[list[Any]]:
        """Results of every chunk, in chunk order."""

    def close(self) -> None:  # noqa: B027 - optional hook: backends without workers have nothing to release
        """Release workers."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_workers() -> int:
    """CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# ---- local -----------------------------------------------------------------------------------------------------------
_CONTEXT: Any = None


def _init_worker(context: Any) -> None:
    global _CONTEXT
    _CONTEXT = context


def _run_in_worker(fn: ChunkFn, chunk: Sequence[Any]) -> list[Any]:
    return fn(_CONTEXT, chunk)


class LocalBackend(Backend):
    """This machine: in process (one worker) or a process pool that is kept until :meth:`close`."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        super().__init__(workers)
        self._pool: ProcessPoolExecutor | None = None
        self._pool_context: Any = None

    def _executor(self, context: Any) -> ProcessPoolExecutor:
        if self._pool is not None and self._pool_context is not context:
            self.close()
        if self._pool is None:
            # fork is fastest (workers inherit the imported modules); the pool is created before any progress
            # thread starts, and workers start at once with fork.
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context(method),
                                             initializer=_init_worker, initargs=(context,))
            self._pool_context = context
        return self._pool

    def start(self, context: Any) -> None:
        """Create the worker processes now (before a progress thread starts)."""
        if self.workers > 1:
            self._executor(context).submit(int).result()

    def map(self, fn: ChunkFn, context: Any, chunks: Sequence[Sequence[Any]],
            progress: Progress | None = None) -> list[list[Any]]:
        if self.workers == 1 or len(chunks) <= 1:
            results = []
            for chunk in chunks:
                results.append(fn(context, chunk))
                if progress:
                    progress(len(chunk))
            return results
        pool = self._executor(context)
        futures: dict[Future[list[Any]], int] = {pool.submit(_run_in_worker, fn, chunk): i
                                                 for i, chunk in enumerate(chunks)}
        out: list[list[Any]] = [[] for _ in chunks]
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    i = futures[f]
                    out[i] = f.result()
                    if progress:
                        progress(len(chunks[i]))
        except BaseException:
            for f in pending:
                f.cancel()
            self.close()
            raise
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._pool_context = None


# ---- ray -------------------------------------------------------------------------------------------------------------
def _ray_task(fn: ChunkFn, context: Any, chunk: Sequence[Any]) -> list[Any]:
    return fn(context, chunk)


def import_ray() -> Any:
    """The ``ray`` module, or a clear error telling how to install it."""
    try:
        ray = importlib.import_module("ray")  # the optional `ray` extra: imported by name, not type-checked
    except ImportError:
        raise TrainsimError("backend", "the Ray backend needs Ray, which is not installed",
                            "pip install 'trainsim[ray]' (or use --backend local)") from None
    return ray


class RayBackend(Backend):
    """A Ray cluster: ``$RAY_ADDRESS`` when set, else a local Ray with ``workers`` CPUs."""

    name = "ray"

    def __init__(self, workers: int | None = None) -> None:
        super().__init__(workers)
        self.ray = import_ray()
        self._started = False

    def _init(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        address = os.environ.get("RAY_ADDRESS")
        kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = self.workers
            kwargs["include_dashboard"] = False
        ray.init(**kwargs)
        self._started = True

    def map(self, fn: ChunkFn, context: Any, chunks: Sequence[Sequence[Any]],
            progress: Progress | None = None) -> list[list[Any]]:
        ray = self.ray
        self._init()
        ctx_ref = ray.put(context)
        task = ray.remote(_ray_task)
        refs = [task.remote(fn, ctx_ref, chunk) for chunk in chunks]
        index = {ref: i for i, ref in enumerate(refs)}
        out: list[list[Any]] = [[] for _ in chunks]
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                i = index[ref]
                out[i] = ray.get(ref)
                if progress:
                    progress(len(chunks[i]))
        return out

    def close(self) -> None:
        if self._started and self.ray.is_initialized():
            self.ray.shutdown()
        self._started = False


BACKENDS: dict[str, type[Backend]] = {"local": LocalBackend, "ray": RayBackend}


def register_backend(name: str, cls: type[Backend]) -> None:
    """Add an execution backend."""
    BACKENDS[name] = cls


def get_backend(name: str, workers: int | None = None) -> Backend:
    """An instance of the backend called ``name``."""
    if name not in BACKENDS:
        raise TrainsimError("backend", f"unknown backend {name!r}", f"use one of {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name](workers)


def chunked(items: Sequence[Any], workers: int, min_size: int = 32, max_size: int = 2048) -> list[Sequence[Any]]:
    """Contiguous chunks (neighbours share layer costs and memory), about 16 per worker for load balance."""
    n = len(items)
    if n == 0:
        return []
    size = max(min_size, min(max_size, -(-n // (16 * max(1, workers)))))
    return [items[i:i + size] for i in range(0, n, size)]
