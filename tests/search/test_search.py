import json
import sys
import types

import pandas as pd
import pytest

from trainsim.errors import TrainsimError
from trainsim.search import CANDIDATE_KEYS, SearchSpace, search
from trainsim.search import refine as refine_mod
from trainsim.search.backends import LocalBackend, RayBackend, chunked, get_backend, register_backend
from trainsim.search.evaluate import evaluate_spec
from trainsim.spec import Training

MTNLG = dict(model="mt-nlg-530b", system="dgx-a100", tp="4,8,16", dp="1,2,3,4,5,6,8,10,12,15,16,20,24,30",
             pp="3,5,7,15,21,35,105", others="default",
             training=Training(global_batch_size=1920, seq_length=2048, recompute_granularity="full",
                               train_tokens=270e9))


@pytest.fixture(scope="module")
def mtnlg():
    return search(SearchSpace(**MTNLG), objective="cost")


def records(result):
    return [result.record(c) for c in result.candidates]


def test_mtnlg_grid_search(mtnlg):
    r = mtnlg
    s = r.summary()
    assert s["valid"] == 294 and s["combinations"] == 294 and r.skipped == {}
    assert 0 < s["fitting"] < 294 and s["ranked"] == s["fitting"] == s["estimated"]
    # cheapest first among plans with headroom, then the plans that fit only tightly (within 10 % of capacity)
    ranked = [r.candidates[i] for i in r.ranking]
    roomy, tight = [c.cost_usd for c in ranked if not c.tight], [c.cost_usd for c in ranked if c.tight]
    assert [c.cost_usd for c in ranked] == roomy + tight and roomy == sorted(roomy) and tight == sorted(tight)
    assert roomy and all(c.fits for c in ranked)
    by_plan = {(c.tp, c.dp, c.pp): c for c in r.candidates}
    mt = by_plan[8, 8, 35]
    assert mt.num_gpus == 2240 and mt.fits and 0.25 < mt.mfu < 0.6
    # vTrain: (8, 12, 21) trains MT-NLG more cheaply than MT-NLG's own (8, 8, 35); the model agrees
    assert by_plan[8, 12, 21].cost_usd < mt.cost_usd
    # the tp 16 plans exceed a DGX node: warned, allowed, and slower per GPU than tp 8 at the same GPU count
    assert r.warnings and by_plan[16, 4, 35].mfu < by_plan[8, 8, 35].mfu


def test_json_dict_has_the_documented_shape(mtnlg):
    d = mtnlg.to_json_dict(top=5)
    assert set(d) >= {"candidates", "pareto", "skipped", "summary"}
    assert len(d["candidates"]) == 5 and [c["rank"] for c in d["candidates"]] == [1, 2, 3, 4, 5]
    for c in d["candidates"] + d["pareto"]:
        assert set(CANDIDATE_KEYS) <= set(c) and "breakdown_s" in c
        assert c["fits"] is True and c["training_days"] > 0 and c["cost_usd"] > 0
    assert all(p["pareto"] for p in d["pareto"])
    json.dumps(d, allow_nan=False)
    assert len(mtnlg.to_json_dict(top=0)["candidates"]) == len(mtnlg.ranking)


def test_pareto_front_trades_time_for_cost(mtnlg):
    front = mtnlg.pareto_candidates()
    assert len(front) > 2
    days = [c.training_days for c in front]
    costs = [c.cost_usd for c in front]
    assert days == sorted(days) and costs == sorted(costs, reverse=True)
    # the cheapest fitting plan ends the front (it may be tight; the best ranked plan is the cheapest with headroom)
    cheapest = min(c.cost_usd for c in mtnlg.candidates if c.fits and c.cost_usd is not None)
    assert front[-1].cost_usd == cheapest <= mtnlg.best.cost_usd


def test_include_unfit_ranks_every_plan():
    r = search(SearchSpace(**MTNLG), objective="time", include_unfit=True)
    assert len(r.ranking) == 294 and all(c.estimated for c in r.candidates)
    assert any(not c.fits for c in r.candidates)
    ranked = [r.candidates[i] for i in r.ranking]  # tight plans (fit within 10 %) after the others
    times = [c.iteration_time_s for c in ranked]
    roomy = [c.iteration_time_s for c in ranked if not (c.fits and c.tight)]
    tight = [c.iteration_time_s for c in ranked if c.fits and c.tight]
    assert times == roomy + tight and roomy == sorted(roomy) and tight == sorted(tight)


def test_deadline_and_gpus_objectives_on_a_gpu_range():
    space = SearchSpace(model="gpt3-18.4b", system="dgx-a100", num_gpus="64..512", tp=8, pp="1,2,4", others="default",
                        recompute="full", training=Training(global_batch_size=512, train_tokens=100e9))
    fastest = search(space, objective="training-time")
    deadline = fastest.best.training_days * 3
    r = search(space, objective="gpus", deadline_days=deadline)
    best = r.best
    assert best.training_days <= deadline
    assert best.num_gpus == min(c.num_gpus for c in r.candidates if c.fits and c.training_days <= deadline)
    cheap = search(space, deadline_days=deadline)  # objective defaults to cost under a deadline
    assert cheap.objective == "cost" and all(cheap.candidates[i].training_days <= deadline for i in cheap.ranking)
    none = search(space, objective="cost", deadline_days=fastest.best.training_days / 2)
    assert none.ranking == [] and none.best is None


def test_process_pool_gives_identical_results(mtnlg):
    pooled = search(SearchSpace(**MTNLG), objective="cost", workers=2)
    assert pooled.stats["workers"] == 2 and pooled.stats["backend"] == "local"
    assert records(pooled) == records(mtnlg)
    assert pooled.ranking == mtnlg.ranking and pooled.pareto == mtnlg.pareto


def test_small_spaces_run_in_process_unless_workers_given():
    space = SearchSpace(model="gpt3-1.7b", system="dgx-a100", num_gpus=8, tp="all", others="default",
                        training=Training(global_batch_size=16))
    assert search(space).stats["workers"] == 1
    assert search(space, workers=2).stats["workers"] == 2


def test_progress_is_reported_up_to_the_total():
    seen = []
    search(SearchSpace(**MTNLG), workers=2, progress=lambda phase, done, total: seen.append((phase, done, total)))
    assert seen[-1] == ("analytic", 294, 294) and all(b <= 294 for _, b, _ in seen)
    assert [d for _, d, _ in seen] == sorted(d for _, d, _ in seen)


class Ref:
    """Like Ray's ObjectRef: hashable by identity."""

    def __init__(self, value):
        self.value = value


class FakeRay(types.ModuleType):
    """Just enough of Ray's API, completing tasks in reverse order."""

    def __init__(self):
        super().__init__("ray")
        self.initialized = False
        self.init_kwargs = None

    def is_initialized(self):
        return self.initialized

    def init(self, **kwargs):
        self.initialized, self.init_kwargs = True, kwargs

    def shutdown(self):
        self.initialized = False

    def put(self, value):
        return ("ref", value)

    def remote(self, fn):
        def call(*args):
            args = [a[1] if isinstance(a, tuple) and a and a[0] == "ref" else a for a in args]
            return Ref(fn(*args))

        return types.SimpleNamespace(remote=call)

    def wait(self, refs, num_returns=1):
        return refs[-num_returns:], refs[:-num_returns]

    def get(self, ref):
        return ref.value


def test_ray_backend_gives_identical_results(monkeypatch, mtnlg):
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    r = search(SearchSpace(**MTNLG), objective="cost", backend="ray", workers=3)
    assert r.stats["backend"] == "ray" and fake.init_kwargs["num_cpus"] == 3 and not fake.initialized
    assert records(r) == records(mtnlg) and r.ranking == mtnlg.ranking


def test_ray_backend_connects_to_a_cluster_address(monkeypatch):
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    with get_backend("ray") as backend:
        assert backend.map(lambda ctx, chunk: [ctx + x for x in chunk], 10, [[1, 2], [3]]) == [[11, 12], [13]]
    assert fake.init_kwargs["address"] == "ray://head:10001"


def test_missing_ray_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import fails
    with pytest.raises(TrainsimError) as exc:
        search(SearchSpace(**MTNLG), backend="ray")
    assert exc.value.field == "backend" and "pip install 'trainsim[ray]'" in str(exc.value)


def test_backend_registry_and_errors():
    with pytest.raises(TrainsimError) as exc:
        get_backend("slurm")
    assert "local" in str(exc.value) and "ray" in str(exc.value)
    with pytest.raises(TrainsimError):
        LocalBackend(0)

    class Reversed(LocalBackend):
        name = "reversed"

        def map(self, fn, context, chunks, progress=None):
            return [fn(context, c) for c in chunks[::-1]][::-1]

    register_backend("reversed", Reversed)
    try:
        r = search(SearchSpace(**{**MTNLG, "tp": "8"}), backend="reversed")
        assert r.stats["backend"] == "reversed" and len(r.candidates) == 98
    finally:
        from trainsim.search.backends import BACKENDS

        BACKENDS.pop("reversed")
    assert RayBackend.name == "ray"
    assert [len(c) for c in chunked(list(range(100)), 2, min_size=10)] == [10] * 10


def test_files_and_plot(tmp_path, mtnlg):
    csv = mtnlg.write(tmp_path / "all.csv")
    pq = mtnlg.write(tmp_path / "all.parquet")
    js = mtnlg.write(tmp_path / "top.json", top=3)
    df = pd.read_csv(csv)
    assert len(df) == 294 and list(df.columns[: len(CANDIDATE_KEYS)]) == list(CANDIDATE_KEYS)
    assert df["rank"].notna().sum() == len(mtnlg.ranking) and df["pareto"].sum() == len(mtnlg.pareto)
    dq = pd.read_parquet(pq)
    assert len(dq) == 294 and dq["rank"].min() == 1 and dq.loc[dq["rank"] == 1, "cost_usd"].iloc[0] == pytest.approx(
        mtnlg.best.cost_usd)
    assert len(json.loads(js.read_text())["candidates"]) == 3
    for x in ("gpus", "cost", "memory"):
        png = tmp_path / f"space-{x}.png"
        mtnlg.plot(png, x=x, color="pp")  # returns the Figure, writes the PNG
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(TrainsimError):
        mtnlg.write(tmp_path / "x.txt")
    with pytest.raises(TrainsimError):
        mtnlg.plot(tmp_path / "x.png", x="latency")
    with pytest.raises(TrainsimError):
        mtnlg.plot(tmp_path / "x.png", color="colour")


def test_price_override_scales_cost_only(mtnlg):
    r = search(SearchSpace(**{**MTNLG, "tp": "8", "pp": "35"}), objective="cost", price_per_gpu_hour=4.0)
    by_plan = {(c.tp, c.dp, c.pp): c for c in mtnlg.candidates}
    for c in r.candidates:
        ref = by_plan[c.tp, c.dp, c.pp]
        assert c.iteration_time_s == ref.iteration_time_s
        if c.fits:
            assert c.cost_usd == pytest.approx(2 * ref.cost_usd)
    with pytest.raises(TrainsimError):
        search(SearchSpace(**MTNLG), price_per_gpu_hour=-1)


# ---- refinement ----------------------------------------------------------------------------------------------------
def fake_event_chunk(ctx, specs):
    """A stand-in event engine: 40 % slower with pp 35 (so the ranking changes), unchanged otherwise."""
    out = []
    for spec in specs:
        _, _, _, t, mfu, hfu, breakdown = evaluate_spec(ctx.__class__(**{**ctx.__dict__, "include_unfit": True}),
                                                        spec)
        k = 1.4 if spec.pp == 35 else 1.0
        out.append((t * k, mfu / k, hfu / k, tuple(b * k for b in breakdown)))
    return out


def test_refinement_reranks_the_best_and_reports_changes(monkeypatch, mtnlg):
    monkeypatch.setattr(refine_mod, "event_engine_available", lambda: True)
    monkeypatch.setattr(refine_mod, "refine_chunk", fake_event_chunk)
    r = search(SearchSpace(**MTNLG), objective="cost", refine=6)
    ref = r.refinement
    assert ref is not None and ref.k == 6 and len(ref.rows) == 6
    analytic_top = [mtnlg.candidates[i].index for i in mtnlg.ranking[:6]]
    refined_top = [r.candidates[i].index for i in r.ranking[:6]]
    assert sorted(analytic_top) == sorted(refined_top)
    assert ref.changed == (analytic_top != refined_top) and ref.changed  # pp 35 plans fall behind
    for row in ref.rows:
        c = r.candidates[row["index"]]
        assert c.engine == "event" and c.analytic_iteration_time_s == pytest.approx(row["analytic_iteration_time_s"])
        k = 1.4 if c.pp == 35 else 1.0
        assert row["relative_difference"] == pytest.approx(k - 1)
    costs = [r.candidates[i].cost_usd for i in r.ranking[:6]]
    assert costs == sorted(costs)
    assert r.ranking[6:] == mtnlg.ranking[6:]
    assert any("larger --refine" in n for n in ref.notes)
    d = r.to_json_dict()
    assert d["refinement"]["ranking_changed"] is True and d["candidates"][0]["engine"] == "event"


def test_refinement_without_the_event_engine_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(refine_mod, "event_engine_available", lambda: False)
    with pytest.raises(TrainsimError) as exc:
        search(SearchSpace(**MTNLG), refine=3)
    assert exc.value.field == "refine" and "event engine" in str(exc.value)
    with pytest.raises(TrainsimError):
        search(SearchSpace(**MTNLG), refine=-1)


@pytest.mark.skipif(not refine_mod.event_engine_available(),
                    reason="the event engine (trainsim.engine, issue 3) is not in this tree yet")
def test_refinement_with_the_event_engine():
    r = search(SearchSpace(**{**MTNLG, "tp": "8", "dp": "8,12", "pp": "21,35"}), objective="cost", refine=2)
    assert r.refinement is not None and len(r.refinement.rows) == 2
    for row in r.refinement.rows:
        assert row["event_iteration_time_s"] > 0 and r.candidates[row["index"]].engine == "event"
