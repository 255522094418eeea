import json
import subprocess
import sys

import pytest

from cli_helpers import run


def test_predict_json_on_presets(capsys):
    code, out, err = run(["predict", "--model", "gpt3-175b", "--system", "dgx-a100", "--num-gpus", "1024", "--tp", "8",
                          "--pp", "16", "--mbs", "1", "--gbs", "1536", "--seq-length", "2048",
                          "--recompute-granularity", "full", "--fp16", "--train-tokens", "300e9", "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["job"]["dp"] == 8 and d["job"]["num_microbatches"] == 192
    assert d["training"]["tokens"] == 300e9 and d["training"]["cost_usd"] > 0
    assert 0.3 < d["mfu"] < 0.6 and d["hfu"] > d["mfu"]
    assert sum(d["breakdown_s"].values()) == pytest.approx(d["iteration_time_s"])


def test_predict_with_explicit_architecture_flags(capsys):
    code, out, _ = run(["predict", "--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
                        "--num-query-groups", "8", "--ffn-hidden-size", "14336", "--vocab-size", "128256", "--swiglu",
                        "--seq-length", "8192", "--num-gpus", "8", "--gbs", "32", "--use-distributed-optimizer",
                        "--recompute-granularity", "full", "--json"], capsys)
    assert code == 0
    d = json.loads(out)
    assert d["job"]["zero_stage"] == 1 and d["job"]["model"]["swiglu"] is True


def test_readable_output(capsys):
    code, out, _ = run(["predict", "-m", "llama3-8b", "-n", "8", "--gbs", "32", "--use-distributed-optimizer",
                        "--recompute-granularity", "full"], capsys)
    assert code == 0
    assert "iteration time" in out and "where the time goes" in out and "memory per GPU" in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--model", "gpt3-175b", "--num-gpus", "1000", "--tp", "8", "--pp", "16", "--gbs", "8"], "num_gpus"),
        (["--model", "gpt3-175b", "--num-gpus", "56", "--tp", "7", "--gbs", "8"], "parallelism.tp"),
        (["--model", "nope-7b", "--gbs", "8"], "unknown preset"),
        (["--model", "gpt3-175b", "--tpp", "2", "--gbs", "8"], "No such option"),
        (["--model", "gpt3-175b", "--gbs", "8", "--fp16", "--bf16"], "training.precision"),
        (["--model", "gpt3-175b"], "global_batch_size"),
        (["--hidden-size", "1024", "--gbs", "8"], "--num-layers"),
    ],
)
def test_bad_input_is_one_line_exit_2_no_traceback(args, words, capsys):
    code, _out, err = run(["predict", *args], capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0]
    assert "Traceback" not in err


def test_console_script_exit_code_and_stderr():
    proc = subprocess.run([sys.executable, "-m", "trainsim", "predict", "--model", "gpt3-175b", "--tp", "5", "--gbs",
                           "5", "--num-gpus", "5"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "heads" in proc.stderr


def test_presets_listing(capsys):
    code, out, _ = run(["presets", "--json"], capsys)
    d = json.loads(out)
    assert code == 0 and "llama3-405b" in d["models"] and "nvl72-gb200" in d["systems"]
