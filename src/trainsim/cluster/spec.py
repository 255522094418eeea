"""Cluster specification: GPU pools, topology, failures and stragglers (YAML with a strict schema, or CLI forms).

.. code-block:: yaml

    pools:
      - {name: a100, system: dgx-a100, nodes: 128, price_per_gpu_hour: 1.8}
    topology: {nodes_per_rack: 16}
    failures: {node_mtbf_h: 2000, repair_h: 4, restart_s: 300}
    stragglers: {rate_per_node_day: 0.05, slowdown: 1.5, duration_h: 2}

Unknown keys are errors. Times in the file are in the units their names say (``_h`` hours, ``_s`` seconds); inside,
everything is seconds.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, field_validator, model_validator

from trainsim.errors import TrainsimError
from trainsim.spec.base import Spec
from trainsim.spec.system import System


class Pool(Spec, frozen=True):
    """A homogeneous group of nodes: ``system`` is a preset name or a system YAML file."""

    name: str = Field(min_length=1)
    system: str
    nodes: int = Field(gt=0)
    gpus_per_node: int | None = Field(default=None, gt=0)
    price_per_gpu_hour: float | None = Field(default=None, ge=0)

    @field_validator("system")
    @classmethod
    def _known(cls, value: str) -> str:
        from trainsim.spec.presets import load_system

        load_system(value)
        return value

    @cached_property
    def resolved_system(self) -> System:
        """The pool's :class:`System` with its GPUs per node and price applied."""
        from trainsim.spec.presets import load_system

        s = load_system(self.system)
        if self.gpus_per_node is not None and self.gpus_per_node != s.node.gpus_per_node:
            s = s.replace(node=s.node.replace(gpus_per_node=self.gpus_per_node))
        if self.price_per_gpu_hour is not None:
            s = s.replace(price_per_gpu_hour=self.price_per_gpu_hour)
        return s

    @property
    def gpn(self) -> int:
        """GPUs per node."""
        return self.resolved_system.node.gpus_per_node

    @property
    def num_gpus(self) -> int:
        """GPUs in the pool."""
        return self.nodes * self.gpn

    @property
    def price(self) -> float:
        """USD per GPU-hour."""
        return self.resolved_system.price_per_gpu_hour


class Topology(Spec, frozen=True):
    """Racks of ``nodes_per_rack`` consecutive nodes (placement keeps a job inside as few racks as it can)."""

    nodes_per_rack: int = Field(default=16, gt=0)


class Failures(Spec, frozen=True):
    """Node failures: exponential time between failures per node, fixed repair time, restart cost of a hit job."""

    node_mtbf_h: float = Field(gt=0)
    repair_h: float = Field(default=4.0, ge=0)
    restart_s: float = Field(default=300.0, ge=0)


class Stragglers(Spec, frozen=True):
    """Straggling nodes: Poisson onsets per node and day; one GPU of the node computes ``slowdown``× slower for
    ``duration_h``. The slowdown of a job on that node comes from the event engine for the job's plan."""

    rate_per_node_day: float = Field(gt=0)
    slowdown: float = Field(default=1.5, gt=1.0)
    duration_h: float = Field(default=2.0, gt=0)


class ClusterSpec(Spec, frozen=True):
    """The whole cluster."""

    pools: list[Pool] = Field(min_length=1)
    topology: Topology = Topology()
    failures: Failures | None = None
    stragglers: Stragglers | None = None

    @model_validator(mode="after")
    def _unique(self) -> ClusterSpec:
        names = [p.name for p in self.pools]
        dup = [n for i, n in enumerate(names) if n in names[:i]]
        if dup:
            raise TrainsimError(f"pools.{dup[0]}", "duplicate pool name", "give every pool a distinct name")
        return self

    @property
    def num_gpus(self) -> int:
        """GPUs in all pools."""
        return sum(p.num_gpus for p in self.pools)

    def pool(self, name: str) -> Pool:
        """A pool by name."""
        for p in self.pools:
            if p.name == name:
                return p
        raise TrainsimError("pool", f"unknown pool {name!r}", f"use one of {', '.join(p.name for p in self.pools)}")


def _kv(text: str, field: str, keys: dict[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in text.split(","):
        if "=" not in item:
            raise TrainsimError(field, f"cannot read {item!r}", f"write KEY=VALUE pairs with keys {', '.join(keys)}")
        k, v = (s.strip() for s in item.split("=", 1))
        if k not in keys:
            raise TrainsimError(field, f"unknown key {k!r}", f"use {', '.join(keys)}")
        try:
            out[keys[k]] = float(v)
        except ValueError:
            raise TrainsimError(field, f"{k}={v!r} is not a number", "give a number") from None
    return out


def parse_failures(text: str) -> Failures:
    """``node_mtbf_h=H[,repair_h=R,restart_s=S]``."""
    vals = _kv(text, "--failures", {"node_mtbf_h": "node_mtbf_h", "repair_h": "repair_h", "restart_s": "restart_s"})
    if "node_mtbf_h" not in vals:
        raise TrainsimError("--failures", "node_mtbf_h is required", "e.g. --failures node_mtbf_h=2000")
    return Failures(**vals)


def parse_stragglers(text: str) -> Stragglers:
    """``rate_per_node_day=R[,slowdown=X,duration_h=D]``."""
    vals = _kv(text, "--stragglers", {"rate_per_node_day": "rate_per_node_day", "slowdown": "slowdown",
                                      "duration_h": "duration_h"})
    if "rate_per_node_day" not in vals:
        raise TrainsimError("--stragglers", "rate_per_node_day is required", "e.g. --stragglers rate_per_node_day=0.1")
    return Stragglers(**vals)


def load_cluster(source: str | Path | dict[str, Any] | ClusterSpec) -> ClusterSpec:
    """A cluster from a YAML file, a dict, a spec, or the short form ``SYSTEM:NODES`` (one pool)."""
    if isinstance(source, ClusterSpec):
        return source
    if isinstance(source, dict):
        return ClusterSpec(**source)
    text = str(source)
    path = Path(text)
    if path.suffix.lower() in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise TrainsimError("cluster", f"file '{path}' does not exist", "give a cluster YAML or SYSTEM:NODES")
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise TrainsimError("cluster", f"'{path}' is not valid YAML ({str(exc).splitlines()[0]})",
                                "fix the YAML syntax") from None
        if not isinstance(data, dict):
            raise TrainsimError("cluster", f"'{path}' is not a mapping", "give pools: [...] at the top level")
        return ClusterSpec(**data)
    if ":" in text:
        system, _, nodes = text.rpartition(":")
        try:
            n = int(nodes)
        except ValueError:
            raise TrainsimError("cluster", f"cannot read {text!r}", "give SYSTEM:NODES, e.g. dgx-a100:128") from None
        return ClusterSpec(pools=[Pool(name=system, system=system, nodes=n)])
    raise TrainsimError("cluster", f"cannot read {text!r}", "give a cluster YAML file or SYSTEM:NODES (dgx-a100:128)")
