"""Issue 12's acceptance runs from the command line: DeepSeek-V3 from its preset and from its config.json, the
Mixtral memory case, FP8 recipes and MoE flag errors."""

import json
from pathlib import Path

import pytest

from cli_helpers import check_one_line_error, run

HF = Path(__file__).resolve().parents[1] / "data" / "hf"
DSV3 = ["--system", "nvl72-gb300", "--num-gpus", "256", "--pp", "8", "--vpp", "4", "--ep", "32", "--gbs", "512",
        "--use-distributed-optimizer", "--fp8-recipe", "mxfp8",
        "--pipeline-model-parallel-layout", "Et|(tt|)*30L", "--json"]


@pytest.mark.parametrize("model", ["deepseek-v3", str(HF / "deepseek-v3.json")])
def test_deepseek_v3_256_gpus_pp8_ep32_vpp_mla_mxfp8(capsys, model):
    code, out, err = run(["predict", "--model", model, "--seq-length", "4096", *DSV3], capsys)
    assert code == 0, err
    d = json.loads(out)
    job = d["job"]
    assert job["num_params_without_mtp"] == pytest.approx(671e9, rel=0.002)  # the report's 671B
    assert job["model"]["multi_latent_attention"] and job["fp8_recipe"] == "mxfp8" and job["precision"] == "fp8"
    assert (job["pp"], job["vpp"], job["ep"], job["dp"], job["expert_dp"]) == (8, 4, 32, 32, 1)
    moe = d["moe"]
    assert moe["ep_group_nodes"] == 1  # 32 GPUs of one NVL72 NVLink domain
    for row in moe["per_stage"]:
        it = row["per_iteration"]
        assert it["dispatch_s"] > 0 and it["combine_s"] > 0 and it["expert_gemm_s"] > 0
    assert moe["per_stage"][-1]["moe_layers"] == 6 + 1  # the last stage's 6 layers and the MTP layer
    assert len(d["memory"]["per_stage"]) == 8 and d["memory"]["fits"]
    assert d["breakdown_s"]["ep_comm"] > 0


def test_mixtral_64_h100_ep8_no_longer_fits_wrongly(capsys):
    code, out, err = run(["predict", "-m", "mixtral-8x7b", "-n", "64", "--ep", "8", "--gbs", "256",
                          "--use-distributed-optimizer", "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert not d["memory"]["fits"] and d["memory"]["peak_bytes"] > 85e9


def test_mxfp8_needs_blackwell(capsys):
    code, _, err = run(["predict", "-m", "mixtral-8x7b", "-n", "8", "--ep", "8", "--gbs", "8",
                        "--fp8-recipe", "mxfp8"], capsys)
    check_one_line_error(code, err, "training.fp8_recipe", "Blackwell")


def test_recipe_with_another_precision_is_an_error(capsys):
    code, _, err = run(["predict", "-m", "mixtral-8x7b", "-n", "8", "--ep", "8", "--gbs", "8", "--bf16",
                        "--fp8-recipe", "blockwise"], capsys)
    check_one_line_error(code, err, "training.fp8_recipe", "--fp8")


def test_bad_pipeline_layout_is_one_line(capsys):
    code, _, err = run(["predict", "-m", "deepseek-v3", "-n", "256", "--pp", "8", "--vpp", "2", "--ep", "32",
                        "--gbs", "512", "--pipeline-model-parallel-layout", "Et|(tt|)*30L"], capsys)
    check_one_line_error(code, err, "parallelism.pipeline_layout")


def test_recipes_cost_in_order(capsys):
    # with CUDA graphs no host wait masks the recipes' GPU costs (16 experts at micro-batch 1 are host-bound eager)
    times = {}
    for recipe in ("delayed", "tensorwise", "blockwise", "mxfp8"):
        code, out, err = run(["predict", "-m", "qwen3-30b-a3b", "-s", "dgx-b200", "-n", "16", "--ep", "8", "--gbs",
                              "64", "--fp8-recipe", recipe, "--enable-cuda-graph", "--json"], capsys)
        assert code == 0, err
        d = json.loads(out)
        times[recipe] = d["iteration_time_s"]
    assert times["delayed"] < times["tensorwise"]  # an extra amax pass per cast
    assert times["delayed"] < times["mxfp8"]  # two quantized copies per tensor
