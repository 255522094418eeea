"""Fit the α-β communication constants of a system from measured collective tables (nccl-tests).

The model fitted is trainsim's own (:func:`trainsim.cost.comm.collective_time`): per collective, ring/tree
latency steps times a per-hop latency α plus the bytes a rank moves over the slowest link's bandwidth, which is the
datasheet bandwidth times an efficiency. Rows are split into two tiers by where the group sits:

- ``nvlink`` (one node): the NVLink bandwidth × ``nvlink_efficiency``, latency ``node.nvlink_latency``;
- ``network`` (several nodes): the NICs of the group's GPUs on a node × ``network_efficiency`` (the NVLink part of
  all-to-all keeps the fitted NVLink efficiency), latency ``network.latency``.

For each tier, and for each collective inside it, the efficiency and α minimise the mean squared log error
``mean((log t_model − log t_measured)²)`` over all message sizes (so small messages fit α and large ones the
bandwidth), by a coarse-to-fine grid search in log space. The efficiencies of the joint per-tier fits go into a
calibration YAML for ``trainsim predict --calibration``; α is a property of the system (``nvlink_latency_us``,
``latency_us`` in the system YAML), reported alongside and optionally written into a copy of the system file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from trainsim.cost.calibration import Calibration
from trainsim.cost.comm import Placement, collective_time
from trainsim.cost.tables import COLLECTIVES, gpu_key, merge_tables
from trainsim.errors import TrainsimError
from trainsim.io.frames import rows_as
from trainsim.spec.system import System
from trainsim.workload.ops import Collective

TIERS = ("nvlink", "network")
_EFF_RANGE = (0.01, 2.0)
_LAT_RANGE = (1e-7, 1e-3)


@dataclass(frozen=True)
class Fit:
    """Fitted constants of one tier (``collective == "all"``) or one collective in it."""

    tier: str
    collective: str
    efficiency: float
    latency_s: float
    rows: int
    groups: tuple[tuple[int, int], ...]  # (ranks, nodes) of the measured groups
    rms_log_error: float
    median_abs_error: float
    max_abs_error: float
    max_abs_error_system_latency: float  # with the system's own α instead of the fitted one

    def as_dict(self) -> dict[str, Any]:
        return {"tier": self.tier, "collective": self.collective, "efficiency": self.efficiency,
                "latency_s": self.latency_s, "rows": self.rows, "groups": [list(g) for g in self.groups],
                "rms_log_error": self.rms_log_error, "median_abs_error": self.median_abs_error,
                "max_abs_error": self.max_abs_error, "max_abs_error_system_latency": self.max_abs_error_system_latency}


@dataclass
class CommFit:
    """All fits of a set of tables against one system."""

    system: System
    base: Calibration
    fits: list[Fit] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def tier(self, tier: str) -> Fit | None:
        """The joint fit of a tier, if the tables had rows for it."""
        return next((f for f in self.fits if f.tier == tier and f.collective == "all"), None)

    def calibration(self) -> dict[str, float]:
        """Calibration constants from the joint tier fits (only the tiers that were measured)."""
        out = {}
        for tier, key in (("nvlink", "nvlink_efficiency"), ("network", "network_efficiency")):
            f = self.tier(tier)
            if f is not None:
                out[key] = round(f.efficiency, 6)
        return out

    def latencies_us(self) -> dict[str, float]:
        """Fitted α per tier as system-file keys (µs)."""
        out = {}
        for tier, key in (("nvlink", "nvlink_latency_us"), ("network", "latency_us")):
            f = self.tier(tier)
            if f is not None:
                out[key] = round(f.latency_s * 1e6, 3)
        return out

    def to_yaml(self) -> str:
        """A calibration YAML (comments document the fit) for ``trainsim predict --calibration``."""
        import yaml

        sys_lat = {"nvlink": self.system.node.nvlink_latency, "network": self.system.network.latency}
        lines = [f"# trainsim fit-comm: alpha-beta efficiencies fitted for system {self.system.name} "
                 f"(GPU {self.system.gpu.name})"]
        if self.sources:
            lines.append(f"# tables: {', '.join(self.sources)}")
        lines.append("# use: trainsim predict ... --calibration THIS_FILE")
        for f in self.fits:
            what = "all collectives" if f.collective == "all" else f.collective
            groups = ", ".join(f"{r} ranks/{n} node{'s' if n > 1 else ''}" for r, n in f.groups)
            lines.append(f"# {f.tier} / {what} ({groups}; {f.rows} rows): efficiency {f.efficiency:.4f}, "
                         f"latency {f.latency_s * 1e6:.2f} us (system: {sys_lat[f.tier] * 1e6:.2f} us); "
                         f"|error| median {f.median_abs_error:.1%}, max {f.max_abs_error:.1%} "
                         f"(max {f.max_abs_error_system_latency:.1%} with the system's latency)")
        lat = self.latencies_us()
        if lat:
            lines.append("# the latencies belong in the system YAML: " + ", ".join(f"{k}: {v}" for k, v in lat.items()))
        body = yaml.safe_dump(self.calibration(), sort_keys=True) if self.calibration() else "{}\n"
        return "\n".join(lines) + "\n" + body

    def as_dict(self) -> dict[str, Any]:
        return {"system": self.system.name, "gpu": self.system.gpu.name, "calibration": self.calibration(),
                "latencies_us": self.latencies_us(), "fits": [f.as_dict() for f in self.fits],
                "tables": self.sources}


def _with_latency(system: System, tier: str, lat: float) -> System:
    if tier == "nvlink":
        return system.replace(node=system.node.replace(nvlink_latency=lat))
    return system.replace(network=system.network.replace(latency=lat))


def _model_times(rows: list[tuple[Collective, float, Placement, int]], tier: str, system: System, calib: Calibration,
                 eff: float) -> np.ndarray:
    cal = calib.with_(nvlink_efficiency=eff) if tier == "nvlink" else calib.with_(network_efficiency=eff)
    return np.array([collective_time(coll, nbytes, place, system, cal, nodes) for coll, nbytes, place, nodes in rows])


class _CommRow(NamedTuple):
    """The columns of a collective table that the fit reads."""

    collective: Collective  # fit_comm keeps only the rows of COLLECTIVES
    nbytes: float
    ranks: int
    nodes: int


class _Objective:
    """Mean squared log error of the model against the rows."""

    def __init__(self, rows: pd.DataFrame, tier: str, system: System, calib: Calibration) -> None:
        self.tier, self.system, self.calib = tier, system, calib
        self.rows: list[tuple[Collective, float, Placement, int]] = [
            (r.collective, float(r.nbytes), Placement(int(r.ranks), -(-int(r.ranks) // int(r.nodes)), int(r.nodes)),
             int(r.nodes))
            for r in rows_as(rows, _CommRow)]
        self.log_meas = np.log(rows["time_s"].to_numpy(dtype=float))
        self._systems: dict[float, System] = {}

    def times(self, eff: float, lat: float) -> np.ndarray:
        sys_ = self._systems.get(lat)
        if sys_ is None:
            sys_ = self._systems[lat] = _with_latency(self.system, self.tier, lat)
        return _model_times(self.rows, self.tier, sys_, self.calib, eff)

    def __call__(self, eff: float, lat: float) -> float:
        pred = self.times(eff, lat)
        if np.any(pred <= 0):
            return math.inf
        return float(np.mean((np.log(pred) - self.log_meas) ** 2))


def _grid_search(obj: _Objective, points: int = 17, rounds: int = 4) -> tuple[float, float, float]:
    lo_e, hi_e = math.log(_EFF_RANGE[0]), math.log(_EFF_RANGE[1])
    lo_l, hi_l = math.log(_LAT_RANGE[0]), math.log(_LAT_RANGE[1])
    best = (math.inf, 0.0, 0.0)
    for _ in range(rounds):
        effs = np.linspace(lo_e, hi_e, points)
        lats = np.linspace(lo_l, hi_l, points)
        for le in effs:
            for ll in lats:
                v = obj(math.exp(le), math.exp(ll))
                if v < best[0]:
                    best = (v, le, ll)
        step_e, step_l = (hi_e - lo_e) / (points - 1), (hi_l - lo_l) / (points - 1)
        lo_e, hi_e = best[1] - step_e, best[1] + step_e
        lo_l, hi_l = best[2] - step_l, best[2] + step_l
    return best[0], math.exp(best[1]), math.exp(best[2])


def _fit(rows: pd.DataFrame, tier: str, collective: str, system: System, calib: Calibration) -> Fit:
    obj = _Objective(rows, tier, system, calib)
    err, eff, lat = _grid_search(obj)
    meas = rows["time_s"].to_numpy(dtype=float)
    rel = np.abs(obj.times(eff, lat) / meas - 1)
    sys_lat = system.node.nvlink_latency if tier == "nvlink" else system.network.latency
    rel_sys = np.abs(obj.times(eff, sys_lat) / meas - 1)
    groups = tuple(sorted({(int(r), int(n)) for r, n in zip(rows["ranks"], rows["nodes"], strict=True)}))
    return Fit(tier, collective, eff, lat, len(rows), groups, math.sqrt(err), float(np.median(rel)),
               float(rel.max()), float(rel_sys.max()))


def fit_comm(tables: Sequence[str | Path | pd.DataFrame], system: System,
             calibration: Calibration | None = None) -> CommFit:
    """Fit efficiencies and latencies of ``system`` from collective tables (paths or DataFrames)."""
    from trainsim.cost.calibration import calibration_for

    base = calibration or calibration_for(system.gpu.generation)
    df = merge_tables(tables, "comm")
    gpus = sorted(set(df["gpu"]) - {""})
    if gpus and gpus[0] != gpu_key(system.gpu.name):
        raise TrainsimError("comm_costs", f"the tables were measured on {gpus[0]} but the system's GPU is "
                            f"{system.gpu.name} ({gpu_key(system.gpu.name)})", f"give a --system with {gpus[0]} GPUs")
    df = df[df["collective"].isin(COLLECTIVES) & (df["time_s"] > 0) & (df["nbytes"] > 0) & (df["ranks"] > 1)]
    # one time per (group, size): out-of-place where measured, as in the cost model
    oop = df.groupby(["collective", "ranks", "nodes"])["in_place"].transform(lambda s: (~s).any())
    df = df[~df["in_place"] | ~oop]
    df = df.groupby(["collective", "ranks", "nodes", "nbytes"], as_index=False)["time_s"].median()
    if df.empty:
        raise TrainsimError("comm_costs", "no usable rows (collectives over 2 or more ranks)",
                            "import nccl-tests logs of all_reduce, all_gather, reduce_scatter, all_to_all or send_recv")
    out = CommFit(system, base, sources=[str(t) for t in tables if not isinstance(t, pd.DataFrame)])
    calib = base
    for tier in TIERS:
        rows = df[df["nodes"] == 1] if tier == "nvlink" else df[df["nodes"] > 1]
        if rows.empty:
            continue
        joint = _fit(rows, tier, "all", system, calib)
        out.fits.append(joint)
        for coll in sorted(rows["collective"].unique()):
            out.fits.append(_fit(rows[rows["collective"] == coll], tier, str(coll), system, calib))
        if tier == "nvlink":  # the network tier's all-to-all and NVLink steps use the fitted NVLink constants
            calib = calib.with_(nvlink_efficiency=joint.efficiency)
            system = _with_latency(system, "nvlink", joint.latency_s)
    return out
