"""``sia``: Sia-style (Jayaram Subramanya et al., SOSP'23) heterogeneity- and elasticity-aware ILP.

Rule: at every event an ILP (``scipy.optimize.milp``, HiGHS) picks at most one configuration (pool, GPU count) per
job from its usable sizes, maximising ``Σ weight · utility`` under each pool's capacity, where utility =
``1 + ln(speedup)`` (speedup: throughput over the job's throughput at its smallest usable size on any pool; the log
spreads GPUs across jobs) and a configuration that differs from the job's current one is discounted by the share
of its remaining time a restart would cost (``restart_s``, default 300 s). Ties are broken by the solver
deterministically; the allocation is returned with running jobs first, then trace order.
"""

from __future__ import annotations

import math

import numpy as np

from trainsim.cluster.policies.base import Policy, Target, View, register
from trainsim.cluster.policies.elastic_common import Sizes


@register
class Sia(Policy):
    """Elastic, heterogeneity-aware ILP."""

    name = "sia"
    elastic = True

    def __init__(self, restart_s: float = 300.0) -> None:
        super().__init__()
        self.restart_s = restart_s
        self.sizes: dict[tuple[int, str], Sizes] = {}

    def schedule(self, view: View) -> dict[int, Target]:
        """Solve the ILP over (job, pool, size)."""
        from scipy.optimize import Bounds, LinearConstraint, milp

        configs: list[tuple[int, str, int, float]] = []  # (job position, pool, gpus, utility)
        for a, js in enumerate(view.jobs):
            opts = []
            for p in view.pools_for(js.spec):
                key = (js.spec.index, p.name)
                if key not in self.sizes:
                    self.sizes[key] = Sizes(view, js, p)
                s = self.sizes[key]
                for n, t in zip(s.sizes.tolist(), s.times.tolist(), strict=True):
                    if n <= view.capacity[p.name]:
                        opts.append((p.name, int(n), 1.0 / t))
            if not opts:
                continue
            base = min(thr for _, _, thr in opts)
            restart = self.restart_s
            for pool, n, thr in opts:
                u = js.spec.weight * (1.0 + math.log(thr / base))
                if js.running and (pool, n) != (js.pool, js.gpus):
                    left = js.remaining / thr
                    u *= left / (left + restart)
                configs.append((a, pool, n, u))
        if not configs:
            return {}
        nv = len(configs)
        c = -np.array([u for *_, u in configs])
        a_rows = []
        lo, hi = [], []
        for a in sorted({cfg[0] for cfg in configs}):
            r = np.zeros(nv)
            for k, cfg in enumerate(configs):
                if cfg[0] == a:
                    r[k] = 1.0
            a_rows.append(r)
            lo.append(0.0)
            hi.append(1.0)
        for p in view.pools:
            r = np.zeros(nv)
            for k, cfg in enumerate(configs):
                if cfg[1] == p.name:
                    r[k] = cfg[2]
            a_rows.append(r)
            lo.append(0.0)
            hi.append(float(view.capacity[p.name]))
        # lb/ub are array_like in scipy's documentation; its stubs say float
        rows = LinearConstraint(np.array(a_rows), lo, hi)  # pyright: ignore[reportArgumentType]
        res = milp(c, constraints=rows, integrality=np.ones(nv), bounds=Bounds(0, 1))
        if res.x is None:
            return {}
        chosen = [configs[k] for k in range(nv) if res.x[k] > 0.5]
        chosen.sort(key=lambda cfg: (not view.jobs[cfg[0]].running, view.jobs[cfg[0]].spec.index))
        return {view.jobs[a].spec.index: Target(pool, n) for a, pool, n, _ in chosen}
