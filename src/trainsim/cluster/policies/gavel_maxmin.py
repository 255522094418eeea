"""``gavel-maxmin``: Gavel's heterogeneity-aware max-min fairness (Narayanan et al., OSDI'20), rigid sizes.

Rule: at every event an LP (``scipy.optimize.linprog``, HiGHS) chooses the time fractions ``x[j, p]`` each job
runs on each allowed pool with its requested GPUs, maximising the smallest weighted normalised throughput
``Σ_p x[j,p]·thr[j,p] / (weight_j · thr[j, best pool])`` subject to ``Σ_p x[j,p] ≤ 1`` and, per pool,
``Σ_j x[j,p]·requested_j ≤ capacity``. The allocation is then rounded as Gavel's round-based mechanism does on
average: jobs are taken in order of ``x[j,p]`` (largest first; ties: running jobs, submission time, trace order)
and placed on their pool when their requested GPUs are free.
"""

from __future__ import annotations

import math

import numpy as np

from trainsim.cluster.policies.base import Policy, Target, View, register


@register
class GavelMaxMin(Policy):
    """Heterogeneity-aware max-min fairness (LP)."""

    name = "gavel-maxmin"

    def schedule(self, view: View) -> dict[int, Target]:
        """Solve the LP, then place by time fraction."""
        from scipy.optimize import linprog

        jobs = view.jobs
        pairs: list[tuple[int, int, float]] = []  # (job position, pool position, throughput)
        pools = view.pools
        for a, js in enumerate(jobs):
            for b, p in enumerate(pools):
                if js.spec.pool is not None and js.spec.pool != p.name:
                    continue
                if js.spec.requested_gpus > view.capacity[p.name]:
                    continue
                t = view.time_at(js.spec, p, js.spec.requested_gpus)
                if math.isfinite(t):
                    pairs.append((a, b, 1.0 / t))
        if not pairs:
            return {}
        best = np.zeros(len(jobs))
        for a, _, thr in pairs:
            best[a] = max(best[a], thr)
        nv = len(pairs) + 1  # x per pair, then the max-min level z
        c = np.zeros(nv)
        c[-1] = -1.0
        rows, rhs = [], []
        for a in range(len(jobs)):  # z - Σ x·thr/(w·best) ≤ 0 ; Σ x ≤ 1
            r = np.zeros(nv)
            r2 = np.zeros(nv)
            used = False
            for k, (aa, _, thr) in enumerate(pairs):
                if aa == a:
                    r[k] = -thr / (jobs[a].spec.weight * best[a])
                    r2[k] = 1.0
                    used = True
            if used:
                r[-1] = 1.0
                rows += [r, r2]
                rhs += [0.0, 1.0]
        for b, p in enumerate(pools):
            r = np.zeros(nv)
            for k, (a, bb, _) in enumerate(pairs):
                if bb == b:
                    r[k] = jobs[a].spec.requested_gpus
            rows.append(r)
            rhs.append(float(view.capacity[p.name]))
        res = linprog(c, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=[(0, 1)] * nv, method="highs")
        x = res.x if res.status == 0 else np.zeros(nv)
        order = sorted(range(len(pairs)), key=lambda k: (-round(float(x[k]), 9), not jobs[pairs[k][0]].running,
                                                         jobs[pairs[k][0]].spec.submit_time_s,
                                                         jobs[pairs[k][0]].spec.index, pairs[k][1]))
        free = dict(view.capacity)
        out: dict[int, Target] = {}
        for k in order:
            a, b, _ = pairs[k]
            js, p = jobs[a], pools[b]
            if js.spec.index in out or free[p.name] < js.spec.requested_gpus:
                continue
            out[js.spec.index] = Target(p.name, js.spec.requested_gpus)
            free[p.name] -= js.spec.requested_gpus
        return out
