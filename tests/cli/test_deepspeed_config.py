"""``trainsim predict --deepspeed-config ds_config.json``: DeepSpeed's configuration sets the job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import check_one_line_error, run
from trainsim.cli.deepspeed_config import merge_deepspeed_into_options, parse_deepspeed_config
from trainsim.errors import TrainsimError

DATA = Path(__file__).resolve().parents[1] / "data" / "deepspeed"


def test_keys_map_to_job_options():
    cfg = parse_deepspeed_config(json.loads((DATA / "zero3_offload.json").read_text()))
    assert cfg.options == {"micro_batch_size": 1, "bf16": True, "zero_stage": 3, "optimizer_cpu_offload": True,
                           "param_cpu_offload": True}
    assert cfg.gradient_accumulation_steps == 4
    assert cfg.ignored == ["gradient_clipping", "optimizer", "steps_per_print", "wall_clock_breakdown"]
    auto = parse_deepspeed_config({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                                   "zero_optimization": {"stage": 2}})
    assert auto.options == {"zero_stage": 2}  # "auto" (the Hugging Face integration fills it in) is skipped


def test_flags_win_and_the_global_batch_comes_from_the_accumulation():
    cfg = parse_deepspeed_config({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
                                  "fp16": {"enabled": True}, "zero_optimization": {"stage": 1}})
    out = merge_deepspeed_into_options({"num_gpus": 16, "tp": 2, "zero_stage": 2, "bf16": True}, cfg)
    assert out["zero_stage"] == 2 and out["bf16"] and not out.get("fp16")  # given flags win
    assert out["global_batch_size"] == 2 * 8 * 8 and out["framework"] == "deepspeed"
    assert any("gradient_accumulation_steps 8" in n for n in cfg.notes)


def test_cli_end_to_end(capsys):
    code, out, _ = run(["predict", "-m", "llama2-70b", "-s", "dgx-a100", "-n", "8", "--recompute-granularity", "full",
                        "--deepspeed-config", str(DATA / "zero3_offload.json"), "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    job = data["job"]
    assert job["framework"]["name"] == "deepspeed" and job["zero_stage"] == 3 and job["param_cpu_offload"]
    assert job["global_batch_size"] == 32 and data["memory"]["fits"]
    assert data["deepspeed_config"]["ignored"][0] == "gradient_clipping"


@pytest.mark.parametrize(("content", "words"), [
    ("{not json", "not valid JSON"),
    ('{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}', "NVMe is not modelled"),
    ('{"zero_optimization": {"stage": 5}}', "stage must be 0-3"),
    ('{"fp16": {"enabled": true}, "bf16": {"enabled": true}}', "both enabled"),
    ('{"train_micro_batch_size_per_gpu": 0}', "positive integer"),
    ('[1, 2]', "JSON object"),
])
def test_bad_configurations_are_one_line_errors(tmp_path, capsys, content, words):
    path = tmp_path / "ds.json"
    path.write_text(content)
    code, _, err = run(["predict", "-m", "llama2-7b", "-n", "8", "--gbs", "8", "--deepspeed-config", str(path)],
                       capsys)
    check_one_line_error(code, err, "deepspeed_config", words)


def test_missing_file_is_a_one_line_error(tmp_path, capsys):
    code, _, err = run(["predict", "-m", "llama2-7b", "-n", "8", "--gbs", "8", "--deepspeed-config",
                        str(tmp_path / "nope.json")], capsys)
    check_one_line_error(code, err, "deepspeed_config", "file not found")


def test_parallelism_keys_and_precision_of_newer_configs():
    """AutoTP, Ulysses (ALST) and AutoEP degrees; both 16-bit types disabled is fp32; the legacy bfloat16 key."""
    cfg = parse_deepspeed_config({"tensor_parallel": {"autotp_size": 2}, "zero_optimization": {"stage": 2},
                                  "sequence_parallel": {"enabled": True, "mode": "ulysses", "ulysses": {"degree": 4}},
                                  "expert_parallel": {"enabled": True, "autoep_size": 8},
                                  "fp16": {"enabled": False}, "bf16": {"enabled": False}})
    assert (cfg.options["tp"], cfg.options["cp"], cfg.options["cp_comm_type"], cfg.options["ep"]) == (2, 4, "a2a", 8)
    assert cfg.options["fp32"] and "bf16" not in cfg.options
    out = merge_deepspeed_into_options({"num_gpus": 16}, cfg)
    assert out["framework"] == "deepspeed@0.17"  # AutoTP / Ulysses came with DeepSpeed 0.16.4 / 0.17
    assert parse_deepspeed_config({"bfloat16": {"enabled": True}}).options == {"bf16": True}
    assert merge_deepspeed_into_options({"num_gpus": 8, "bf16": True}, cfg).get("fp32") is None  # the flag wins


def test_offload_param_below_stage_3_is_ignored_with_a_note():
    cfg = parse_deepspeed_config({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"},
                                                        "offload_optimizer": {"device": "cpu"}}})
    assert "param_cpu_offload" not in cfg.options and cfg.options["optimizer_cpu_offload"]
    assert any("offload_param ignored" in n for n in cfg.notes)


def test_the_micro_batch_from_the_global_batch_and_an_inconsistent_triple():
    cfg = parse_deepspeed_config({"train_batch_size": 96, "gradient_accumulation_steps": 1})
    out = merge_deepspeed_into_options({"num_gpus": 8}, cfg)
    assert out["micro_batch_size"] == 12 and out["global_batch_size"] == 96
    bad = parse_deepspeed_config({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 1,
                                  "gradient_accumulation_steps": 8})
    with pytest.raises(Exception, match="train_batch_size 256 is not"):
        merge_deepspeed_into_options({"num_gpus": 8}, bad)
    assert merge_deepspeed_into_options({"num_gpus": 32}, bad)["global_batch_size"] == 256  # consistent on 32


def test_overlap_buckets_and_the_bf16_accumulation_type_are_read():
    """overlap_comm (ZeRO-1/2), the bucket sizes (5e8 as DeepSpeed writes them) and the ZeRO-3 knobs map onto their
    flags; bf16 ZeRO-1 with fp32 gradient accumulation is DeepSpeed's BF16_Optimizer, stage 0."""
    cfg = parse_deepspeed_config({"bf16": {"enabled": True}, "zero_optimization": {
        "stage": 2, "overlap_comm": True, "reduce_bucket_size": 5e8, "stage3_prefetch_bucket_size": "auto"}})
    assert cfg.options == {"bf16": True, "zero_stage": 2, "overlap_grad_reduce": True, "bucket_size_params": 500000000}
    z3 = parse_deepspeed_config({"zero_optimization": {
        "stage": 3, "overlap_comm": True, "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
        "stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 0}})
    assert z3.options == {"zero_stage": 3, "max_live_params": 10**9, "max_reuse_params": 10**9,
                          "prefetch_bucket_params": 5 * 10**7, "param_persistence_threshold": 0}
    bf16 = parse_deepspeed_config({"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"},
                                   "zero_optimization": {"stage": 1}})
    assert bf16.options["zero_stage"] == 0 and any("BF16_Optimizer" in n for n in bf16.notes)
    assert not bf16.ignored
    fp16 = parse_deepspeed_config({"fp16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"},
                                   "zero_optimization": {"stage": 1}})
    assert fp16.options["zero_stage"] == 1
    with pytest.raises(TrainsimError) as err:
        parse_deepspeed_config({"zero_optimization": {"stage": 2, "reduce_bucket_size": 2.5}})
    assert err.value.field == "deepspeed_config" and "reduce_bucket_size" in err.value.message
