import json
from pathlib import Path

import pytest
import yaml

from cli_helpers import check_one_line_error, run
from trainsim.cost.tables import read_table

DATA = Path(__file__).resolve().parents[1] / "io" / "data"

TINY = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--vocab-size", "256",
        "--seq-length", "32", "--mbs", "2", "--fp32"]
FAST = ["--warmup", "1", "--reps", "2", "--min-rep-ms", "0.1", "--min-warmup-ms", "0"]
CPU_SYSTEM = {
    "name": "cpu-test",
    "gpu": {"name": "cpu", "generation": "default", "peak_tflops": {"fp32": 0.1, "tf32": 0.1, "fp16": 0.1, "bf16": 0.1},
            "vector_tflops": 0.1, "hbm_bandwidth_tb_s": 0.02, "hbm_capacity_gb": 16, "num_sms": 2},
    "node": {"gpus_per_node": 1, "nvlink_bandwidth_gb_s": 10},
    "network": {"nics_per_node": 1, "nic_bandwidth_gbit_s": 10},
}






def test_import_nccl_tests_writes_a_collective_table(tmp_path, capsys):
    out = tmp_path / "ar.parquet"
    code, stdout, err = run(["import-nccl-tests", str(DATA / "all_reduce_8xh100.txt"), "--out", str(out), "--json"],
                            capsys)
    assert code == 0, err
    summary = json.loads(stdout)
    (group,) = summary["groups"]
    assert group["collective"] == "all_reduce" and group["ranks"] == 8 and group["nodes"] == 1
    assert group["gpu"] == "h100" and group["rows"] == 46 and group["peak_busbw"] == pytest.approx(373.61e9)
    assert len(read_table(out, "comm")) == 46
    code, stdout, _ = run(["import-nccl-tests", str(DATA / "all_gather_16xa100_mpirun_old.txt"), "-o",
                           str(tmp_path / "ag.parquet")], capsys)
    assert code == 0 and "all_gather" in stdout and "wrote" in stdout


def test_import_errors_are_one_line(tmp_path, capsys):
    out = str(tmp_path / "t.parquet")
    code, _, err = run(["import-nccl-tests", str(DATA / "reduce_scatter_16xh100_srun.txt"), "--out", out], capsys)
    check_one_line_error(code, err, "--collective")
    code, _, err = run(["import-nccl-tests", str(DATA / "all_reduce_8xh100.txt"), "--out", out, "-n", "16"], capsys)
    check_one_line_error(code, err, "num_gpus")
    code, _, err = run(["import-nccl-tests", str(tmp_path / "missing.log"), "--out", out], capsys)
    check_one_line_error(code, err, "does not exist")


def test_comm_costs_fit_comm_and_calibration_in_predict(tmp_path, capsys):
    table = tmp_path / "ar.parquet"
    assert run(["import-nccl-tests", str(DATA / "all_reduce_8xh100.txt"), "--out", str(table)], capsys)[0] == 0
    job = ["predict", "--model", "llama3-8b", "--num-gpus", "8", "--tp", "8", "--gbs", "16", "--json"]
    code, out, err = run([*job, "--comm-costs", str(table)], capsys)
    assert code == 0, err
    assert json.loads(out)["measured_comm_fraction"] > 0.3  # the DP-free TP all-reduces of this job
    calib = tmp_path / "calib.yaml"
    sys_out = tmp_path / "system.yaml"
    code, out, err = run(["fit-comm", str(table), "--system", "dgx-h100", "--out", str(calib), "--system-out",
                          str(sys_out), "--json"], capsys)
    assert code == 0, err
    fit = json.loads(out)
    assert set(yaml.safe_load(calib.read_text())) == {"nvlink_efficiency"}
    assert 0.5 < fit["calibration"]["nvlink_efficiency"] < 1.0
    assert yaml.safe_load(sys_out.read_text())["node"]["nvlink_latency_us"] == fit["latencies_us"]["nvlink_latency_us"]
    code, out, err = run([*job, "--calibration", str(calib), "--system", str(sys_out)], capsys)
    assert code == 0, err
    code, _, err = run(["fit-comm", str(table), "--system", "dgx-a100"], capsys)
    check_one_line_error(code, err, "(a100)")


def test_profile_on_cpu_then_predict_with_the_table(tmp_path, capsys):
    pytest.importorskip("torch")
    table = tmp_path / "ops.parquet"
    code, out, err = run(["profile", *TINY, "--device", "cpu", "--out", str(table), *FAST, "--threads", "1",
                          "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["gpu"] == "cpu" and summary["layer_fwd_s"] > 0 and summary["layer_bwd_s"] > 0
    assert summary["optimizer_s_per_param"] > 0 and summary["rows"] == len(read_table(table, "ops"))
    system = tmp_path / "cpu.yaml"
    system.write_text(yaml.safe_dump(CPU_SYSTEM))
    code, out, err = run(["predict", *TINY, "--gbs", "2", "--system", str(system), "--op-costs", str(table),
                          "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["measured_compute_fraction"] == pytest.approx(1.0)
    code, _, err = run(["predict", *TINY, "--gbs", "2", "--op-costs", str(table)], capsys)
    check_one_line_error(code, err, "measured on cpu")
    code, out, err = run(["profile", *TINY, "--device", "cpu", "--out", str(tmp_path / "p2.parquet"), *FAST,
                          "--no-optimizer", "--quiet"], capsys)
    assert code == 0 and "one layer: forward" in out and "wrote" in out
    merged = tmp_path / "merged.parquet"
    code, out, err = run(["merge-tables", str(table), str(tmp_path / "p2.parquet"), "--out", str(merged)], capsys)
    assert code == 0 and "ops" in out
    assert len(read_table(merged, "ops")) == len(read_table(table, "ops"))  # same keys: the later table wins


def test_profile_sweep_on_cpu(tmp_path, capsys):
    pytest.importorskip("torch")
    table = tmp_path / "sweep.parquet"
    code, out, err = run(["profile", "--sweep", "--device", "cpu", "--out", str(table), "--gemm-sizes", "16,32",
                          "--sweep-layouts", "fwd", "--attn-seq-lengths", "16", "--attn-batch-heads", "2",
                          "--attn-head-dims", "16", "--fp32", *FAST, "--quiet"], capsys)
    assert code == 0, err
    df = read_table(table, "ops")
    assert (df["source"] == "sweep").all() and set(df["dtype"][df["kind"] == "gemm"]) == {"tf32"}
    assert len(df) == 8 + 2 * 2 and "sweep: 8 GEMM and 4 attention shapes" in out


def test_profile_argument_errors(tmp_path, capsys):
    out = str(tmp_path / "x.parquet")
    code, _, err = run(["profile", "--device", "cpu", "--out", out], capsys)
    check_one_line_error(code, err, "profile needs a model")
    code, _, err = run(["profile", *TINY, "--device", "tpu", "--out", out], capsys)
    check_one_line_error(code, err, "device")
    code, _, err = run(["profile", "--sweep", "--device", "cpu", "--out", out, "--gemm-sizes", "a,b"], capsys)
    check_one_line_error(code, err, "gemm_sizes")
    code, _, err = run(["merge-tables", str(DATA / "all_reduce_8xh100.txt"), "--out", out], capsys)
    check_one_line_error(code, err, "cannot read")


def test_profile_without_torch_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails
    for name in ("trainsim.profile.builders", "trainsim.profile.kernels", "trainsim.profile.timing"):
        monkeypatch.delitem(sys.modules, name, raising=False)  # as in a fresh process
    code, _, err = run(["profile", *TINY, "--device", "cpu", "--out", str(tmp_path / "x.parquet")], capsys)
    check_one_line_error(code, err, "trainsim[profile]")


def test_trainsim_does_not_import_torch_outside_profiling():
    import subprocess
    import sys

    code = ("import sys, trainsim, trainsim.cli, trainsim.cost.tables, trainsim.io.nccl_tests, "
            "trainsim.profile, trainsim.profile.fit_comm, trainsim.profile.runner; "
            "from trainsim.cli import main\n"
            "try:\n    main(['import-nccl-tests', '--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
