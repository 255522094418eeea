"""Scheduling policies, one module each, registered by name in :data:`POLICIES`."""

from __future__ import annotations

import importlib

from trainsim.cluster.policies.base import POLICIES, JobState, Policy, Target, View, register
from trainsim.errors import TrainsimError

#: Policy modules, imported for their registration side effect. One line per policy module.
_MODULES = ("fifo", "sjf", "srtf", "las", "edf", "elasticflow", "gavel_maxmin", "sia", "themis", "deadline_plan")

for _m in _MODULES:
    try:
        importlib.import_module(f"trainsim.cluster.policies.{_m}")
    except ModuleNotFoundError as _exc:  # a policy module not written yet
        if _exc.name != f"trainsim.cluster.policies.{_m}":
            raise


def get_policy(name: str | Policy, **options: object) -> Policy:
    """A policy instance by name (or the instance itself)."""
    if isinstance(name, Policy):
        return name
    cls = POLICIES.get(name)
    if cls is None:
        raise TrainsimError("--policy", f"unknown policy {name!r}", f"use one of {', '.join(sorted(POLICIES))}")
    return cls(**options)


__all__ = ["POLICIES", "JobState", "Policy", "Target", "View", "get_policy", "register"]
