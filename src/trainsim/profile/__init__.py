"""Profiling kit: measure the operators of a job on this machine's GPU (or CPU) and fit communication constants.

- :func:`trainsim.profile.runner.profile_job` builds the *necessary operators* of one TP-sharded layer of a job
  (exactly the :class:`~trainsim.workload.ops.ComputeOp` of :func:`~trainsim.workload.layers.layer_work`, the
  embedding and the LM head, with their shapes and data types) in PyTorch, times forward and backward, and returns an
  operator table (:mod:`trainsim.cost.tables`); :func:`~trainsim.profile.runner.profile_sweep` measures grids of GEMM
  and attention shapes for interpolation.
- :func:`trainsim.profile.fit_comm.fit_comm` fits the α-β efficiencies and latencies of a system from collective
  tables (nccl-tests).

PyTorch is an optional dependency (``pip install trainsim[profile]``); the modules that need it (``kernels``,
``builders``, ``timing``) import it at their top and are only imported when profiling, so that
``trainsim.profile.fit_comm`` and the rest of trainsim work without it.
"""

from __future__ import annotations

__all__ = ["require_torch"]


def require_torch():  # type: ignore[no-untyped-def]
    """Import and return ``torch``, or raise a :class:`~trainsim.errors.TrainsimError` saying how to install it."""
    try:
        import torch
    except ModuleNotFoundError:
        from trainsim.errors import TrainsimError

        raise TrainsimError("device", "profiling needs PyTorch, which is not installed",
                            "pip install 'trainsim[profile]' (or a PyTorch build for your GPU)") from None
    return torch
