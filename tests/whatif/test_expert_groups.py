"""Expert parallelism in the what-if: a slow GPU in an expert group is found and its group named (issue 12)."""

import numpy as np
import pytest

from trainsim.engine import simulate_job
from trainsim.errors import TrainsimError
from trainsim.io.traces import load_trace, meta_from_mapping
from trainsim.spec import load_model
from trainsim.spec.job import Job
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.presets import load_system
from trainsim.spec.training import Training
from trainsim.whatif import analyze_trace


def _moe_job() -> Job:
    return Job(model=load_model("mixtral-8x7b").replace(num_layers=8), system=load_system("dgx-h100"),
               parallelism=Parallelism(pp=2, ep=8), training=Training(global_batch_size=64, zero_stage=1),
               num_gpus=32)


def test_slow_gpu_in_an_expert_group_is_named(tmp_path):
    job = _moe_job()
    trace, meta = tmp_path / "trace-EP.parquet", tmp_path / "meta-EP.yaml"
    simulate_job(job, slow_rank={5: 1.5}, steps=2, export_ops=trace, export_meta=meta)
    _, m = load_trace(trace, meta)
    assert m.ep_groups == (0,) * 8 + (8,) * 8  # rank 5 = DP rank 5 on stage 0, in the first expert group
    result = analyze_trace(trace, meta)
    assert result.verdict == "worker"
    assert "expert group 0 (DP ranks 0-7) on stage 0" in result.verdict_reason
    assert result.worker_share_ep_groups == [(0, 0)]
    by_group = result.slowdown_by_ep_group or {}
    assert by_group[0] > 1.1 and by_group[8] == pytest.approx(1.0, abs=1e-6)
    assert result.to_dict()["worker_share_ep_groups"] == [[0, 0]]


def test_without_expert_groups_the_member_alone_cannot_explain_it(tmp_path):
    """The old behaviour (no EP coupling in the dependency model): idealizing one worker leaves its lock-step group
    slow, so no worker explains the slowdown — the reason the coupling is needed."""
    job = _moe_job()
    trace, meta = tmp_path / "trace-EP.parquet", tmp_path / "meta-EP.yaml"
    simulate_job(job, slow_rank={5: 1.5}, steps=2, export_ops=trace, export_meta=meta)
    _, m = load_trace(trace, meta)
    plain = {**m.to_dict()}
    plain.pop("ep_groups")
    result = analyze_trace(trace, plain)
    assert result.verdict != "worker"


def test_ep_groups_meta_is_validated():
    base = {"trial_name": "x", "dp_size": 4, "pp_size": 1}
    assert meta_from_mapping({**base, "ep_groups": [0, 0, 1, 1]}).ep_groups == (0, 0, 1, 1)
    with pytest.raises(TrainsimError, match="ep_groups"):
        meta_from_mapping({**base, "ep_groups": [0, 1]})
    assert np.array_equal(np.asarray(meta_from_mapping(base).ep_groups), np.array([]))
