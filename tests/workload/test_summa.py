"""2D tensor parallelism (SUMMA): communication volumes, pipelining, memory, placement, both engines, search, errors."""

import dataclasses
import subprocess
import sys

import pytest

from trainsim.cost.calibration import calibration_for
from trainsim.cost.comm import group_placements, placements_of
from trainsim.cost.job_costs import AnalyticCostModel, _time_work, stage_costs
from trainsim.errors import TrainsimError
from trainsim.predictor import predict
from trainsim.search import SearchSpace, search
from trainsim.spec import load_model, load_system
from trainsim.spec.job import Job
from trainsim.spec.parallelism import Parallelism, default_tp_rows
from trainsim.spec.training import Training
from trainsim.workload.layers import Shard, Work, layer_work, shard_of
from trainsim.workload.memory import stage_memory, stage_parameter_split
from trainsim.workload.summa import linear_volume, pipelined_exposed, summa_linear


def job(model="gpt3-7.5b", system="dgx-h100", n=64, **kw):
    par = {k: kw.pop(k) for k in list(kw) if k in Parallelism.model_fields}
    kw.setdefault("global_batch_size", 64)
    return Job(model=load_model(model), system=load_system(system), parallelism=Parallelism(**par),
               training=Training(**kw), num_gpus=n)


def _bytes(ops, phase, group):
    return sum(op.nbytes for op in ops if op.phase == phase and op.group == group)


# ---- communication volume: SUMMA's (Optimus' / the NERSC model's) per-GPU panel traffic -----------------------------
@pytest.mark.parametrize(("rows", "cols", "nb"), [(2, 4, 4), (4, 4, 1), (1, 8, 8), (8, 1, 2), (4, 2, 16)])
def test_linear_comm_volume_matches_the_summa_formulas(rows, cols, nb):
    M, K, N, e = 4096, 4096, 16384, 2.0
    shard = Shard(1, M, tp=rows * cols, sequence_parallel=True, summa=True, tp_rows=rows, summa_blocks=nb)
    lin = summa_linear("fc", shard, M, N, K, "bf16")
    ops = lin.comm_fwd + lin.comm_bwd
    # forward: X panels (M/R × K in all) over the row group, W panels (K × N/C) over the column group
    assert _bytes(ops, "fwd", "tp_row") == pytest.approx(M * K * e / rows)
    assert _bytes(ops, "fwd", "tp_col") == pytest.approx(K * N * e / cols)
    # backward: twice the forward (re-broadcast X and reduce dX on rows; broadcast W and reduce dW on columns)
    assert _bytes(ops, "bwd", "tp_row") == pytest.approx(2 * M * K * e / rows)
    assert _bytes(ops, "bwd", "tp_col") == pytest.approx(2 * K * N * e / cols)
    vol = linear_volume(M, N, K, rows, cols, e)
    assert vol.backward == pytest.approx(2 * vol.forward)
    assert vol.fwd_row + vol.fwd_col == pytest.approx(_bytes(ops, "fwd", "tp_row") + _bytes(ops, "fwd", "tp_col"))
    # nb forward and 2·nb backward GEMM blocks that add up to the 1D work (2·M·N·K/tp FLOPs each pass)
    assert len(lin.fwd) == nb and len(lin.bwd) == 2 * nb
    assert sum(op.flops for op in lin.fwd) == pytest.approx(2 * M * N * K / (rows * cols))
    assert sum(op.flops for op in lin.bwd) == pytest.approx(4 * M * N * K / (rows * cols))
    assert {op.collective for op in ops} == {"broadcast", "reduce"}


def test_summa_moves_fewer_activation_bytes_but_more_weights_than_1d():
    # long sequence (ViT on ERA5): activations dominate, the grid divides them by R; GPT-3 1T: weights dominate
    vit = linear_volume(259200, 4 * 4096, 4096, 4, 4, 2.0)
    gpt = linear_volume(2048, 4 * 25600, 25600, 4, 4, 2.0)
    one_d_vit, one_d_gpt = 259200 * 4096 * 2.0, 2048 * 25600 * 2.0  # 1D+SP all-gather of the input
    assert vit.forward < one_d_vit / 2
    assert gpt.forward > 10 * one_d_gpt


# ---- pipelining: exposed = first panel's broadcasts + (nb − 1)·max(0, c − g) -----------------------------------------
@pytest.mark.parametrize("nb", [1, 2, 4, 8])
@pytest.mark.parametrize("tokens", [512, 8192])
def test_analytic_exposure_is_the_pipelined_formula(nb, tokens):
    j = job(tp=8, tensor_parallel_mode="summa", tp_rows=2, summa_blocks=nb)
    calib = dataclasses.replace(calibration_for("hopper"), overlap_slowdown=0.0)
    cm = AnalyticCostModel(j.system, calib, j.num_nodes)
    shard = dataclasses.replace(shard_of(j), seq=tokens)
    lin = summa_linear("fc", shard, tokens, 4 * 4096, 4096, "bf16")
    places = placements_of(j)
    bt = _time_work(Work(lin.fwd, (), (), lin.comm_fwd), cm, places, False)
    g = cm.compute(lin.fwd[0])
    c = sum(cm.collective(op, places[op.group]) for op in lin.comm_fwd[:2])  # panel 0's two broadcasts
    assert bt.exposed_fwd == pytest.approx(pipelined_exposed(c, g, nb), rel=1e-9)
    assert bt.fwd_compute == pytest.approx(nb * g)


def test_more_panels_hide_more_communication_while_the_gemms_are_long_enough():
    # grid inside one node, long sequence: GEMM blocks outlast the panels' broadcasts, so more panels hide more (only
    # the first panel stays exposed); with many panels the per-panel latency and smaller GEMMs win again
    calib = dataclasses.replace(calibration_for("hopper"), overlap_slowdown=0.0)
    exposed = []
    for nb in (1, 2, 4):
        j = job(model="vit-era5", n=64, tp=8, tensor_parallel_mode="summa", summa_blocks=nb, seq_length=32768,
                recompute_granularity="full")
        exposed.append(stage_costs(j, AnalyticCostModel(j.system, calib, j.num_nodes))[0].body.exposed_fwd)
    assert exposed[0] > exposed[1] > exposed[2]


# ---- memory: weights and activations split over both axes ------------------------------------------------------------
def test_memory_splits_weights_and_activations_over_the_grid():
    one_d = job(tp=8, pp=2, sequence_parallel=False)
    grid = job(tp=8, pp=2, tensor_parallel_mode="summa", tp_rows=2)
    sp = job(tp=8, pp=2, sequence_parallel=True)
    # layer weights: 1/tp in both modes (stage 1: no position-embedding table, which only the grid splits)
    assert stage_parameter_split(grid, 1) == stage_parameter_split(one_d, 1)
    assert stage_parameter_split(grid, 0)[0] < stage_parameter_split(one_d, 0)[0]
    m1, m2, msp = stage_memory(one_d, 1), stage_memory(grid, 1), stage_memory(sp, 1)
    assert m2.weights_bytes == m1.weights_bytes
    # activations: all split by tp (as with sequence parallelism, plus the grid's gathered K/V and panel buffers)
    assert m2.activations_bytes < m1.activations_bytes
    assert msp.activations_bytes < m2.activations_bytes < 1.1 * msp.activations_bytes
    small = stage_memory(job(model="vit-era5", n=64, tp=4, tensor_parallel_mode="summa", seq_length=16384), 0)
    large = stage_memory(job(model="vit-era5", n=64, tp=16, tensor_parallel_mode="summa", seq_length=16384), 0)
    # (the position-embedding table is split over the grid too; 1D TP replicates it)
    assert large.activations_bytes == pytest.approx(small.activations_bytes / 4, rel=0.1)
    assert large.weights_bytes == pytest.approx(small.weights_bytes / 4, rel=0.01)


# ---- placement of the grid's groups ----------------------------------------------------------------------------------
def test_grid_groups_and_which_one_is_inside_the_node():
    row = group_placements("tp-cp-ep-dp-pp", 16, 1, 1, 4, 1, 8, None, (4, 4), "row")
    col = group_placements("tp-cp-ep-dp-pp", 16, 1, 1, 4, 1, 8, None, (4, 4), "col")
    assert (row["tp_row"].size, row["tp_col"].size) == (4, 4)
    assert not row["tp_row"].crosses_nodes and row["tp_col"].crosses_nodes
    assert col["tp_row"].crosses_nodes and not col["tp_col"].crosses_nodes
    wide = group_placements("tp-cp-ep-dp-pp", 16, 1, 1, 4, 1, 72, None, (4, 4), "row")
    assert not wide["tp_row"].crosses_nodes and not wide["tp_col"].crosses_nodes
    assert "tp_row" not in group_placements("tp-cp-ep-dp-pp", 16, 1, 1, 4, 1, 8)
    assert default_tp_rows(16) == 4 and default_tp_rows(8) == 2 and default_tp_rows(6) == 2


def test_placement_changes_the_cost():
    base = dict(model="vit-era5", n=256, tp=16, pp=1, tensor_parallel_mode="summa", tp_rows=4, seq_length=65536,
                recompute_granularity="full", global_batch_size=16)
    t_row = predict(job(**base, tp_inner="row")).iteration_time_s
    t_col = predict(job(**base, tp_inner="col")).iteration_time_s
    assert t_row != pytest.approx(t_col, rel=1e-3)


# ---- both engines agree ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [
    dict(tp=8, pp=2, tensor_parallel_mode="summa"),
    dict(tp=8, pp=2, tensor_parallel_mode="summa", tp_rows=4, summa_blocks=1),
    dict(tp=8, pp=4, vpp=3, tensor_parallel_mode="summa", summa_blocks=8, recompute_granularity="full"),
    dict(model="vit-era5", n=128, tp=16, pp=2, tensor_parallel_mode="summa", seq_length=32768,
         recompute_granularity="full", global_batch_size=16),
    dict(model="vit-era5", n=128, tp=16, cp=2, pp=1, tensor_parallel_mode="summa", tp_inner="col",
         seq_length=32768, recompute_granularity="full", global_batch_size=16),
    dict(model="llama3-8b", n=64, tp=8, pp=2, tensor_parallel_mode="summa", schedule="zb-h1"),
])
def test_analytic_and_event_engines_agree(kw):
    j = job(**kw)
    a = predict(j, "analytic").iteration_time_s
    e = predict(j, "event").iteration_time_s
    assert abs(a - e) / e < 0.10, (a, e)


def test_one_d_jobs_have_no_grid():
    j = job(tp=8, pp=2)
    assert not j.parallelism.summa and j.parallelism.grid == (1, 8)
    assert "tp_row" not in placements_of(j)
    assert not any(op.group in ("tp_row", "tp_col") for op in layer_work(j.model, shard_of(j)).comm_fwd)


# ---- search ----------------------------------------------------------------------------------------------------------
def _best(model, seq, n, **dims):
    space = SearchSpace(model=model, system="dgx-h100",
                        training=Training(global_batch_size=16, seq_length=seq, recompute_granularity="full",
                                          zero_stage=1),
                        num_gpus=n, tp=16, pp=1, cp=1, vpp=1, micro_batch_size=1, recompute="full", zero_stage=1,
                        sequence_parallel=True, rank_order="tp-cp-ep-dp-pp", tensor_parallel_mode="1d,summa",
                        **dims)
    return search(space).best


def test_search_picks_summa_for_long_sequences_and_1d_for_short_ones():
    long = _best("vit-era5", 65536, 256)
    assert long.tensor_parallel_mode == "summa"
    short = _best("gpt3-18.4b", 2048, 256)
    assert short.tensor_parallel_mode == "1d"


def test_search_enumerates_rows_and_placements():
    space = SearchSpace(model="vit-era5", system="dgx-h100", training=Training(global_batch_size=16,
                        seq_length=65536, recompute_granularity="full"), num_gpus=256, tp=16, pp=1, cp=1, vpp=1,
                        micro_batch_size=1, recompute="full", zero_stage=0, sequence_parallel=False,
                        rank_order="tp-cp-ep-dp-pp", tensor_parallel_mode="summa")
    from trainsim.search.space import enumerate_space

    grids = {(c.tp_rows, c.tp_inner) for c in enumerate_space(space).candidates}
    # rows 1, 2, 4, 8, 16; both placements where both groups have several GPUs (the grid spans nodes)
    assert grids == {(1, "row"), (2, "row"), (2, "col"), (4, "row"), (4, "col"), (8, "row"), (8, "col"),
                     (16, "row")}


# ---- bad input: one line, exit 2 -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("flags", "field"), [
    (["--tp", "8", "--tensor-parallel-mode", "summa", "--tp-rows", "3"], "parallelism.tp_rows"),
    (["--tensor-parallel-mode", "summa"], "parallelism.tensor_parallel_mode"),
    (["--tp", "8", "--tp-rows", "2"], "parallelism.tp_rows"),
    (["--tp", "8", "--tensor-parallel-mode", "2d"], "parallelism.tensor_parallel_mode"),
    (["--tp", "8", "--tensor-parallel-mode", "summa", "--summa-blocks", "0"], "parallelism.summa_blocks"),
    (["--tp", "8", "--tensor-parallel-mode", "summa", "--tp-inner", "diagonal"], "parallelism.tp_inner"),
    (["--tp", "8", "--tensor-parallel-mode", "summa", "--tp-rows", "8", "--seq-length", "2044"],
     "parallelism.tp_rows"),
])
def test_bad_grids_are_one_line_errors_with_exit_2(flags, field):
    cmd = [sys.executable, "-c", "from trainsim.cli import main; main()", "predict", "-m", "gpt3-7.5b", "-n", "64",
           "--gbs", "64", *flags]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in r.stderr


def test_summa_refuses_models_it_does_not_model():
    with pytest.raises(TrainsimError, match="mixture-of-experts"):
        job(model="mixtral-8x7b", tp=8, ep=8, tensor_parallel_mode="summa", sequence_parallel=True)


def test_predict_json_echoes_the_grid():
    import json

    cmd = [sys.executable, "-c", "from trainsim.cli import main; main()", "predict", "-m", "gpt3-7.5b", "-n", "64",
           "--gbs", "64", "--tp", "8", "--tensor-parallel-mode", "summa", "--tp-rows", "2", "--summa-blocks", "2",
           "--tp-inner", "col", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)["job"]
    assert (j["tensor_parallel_mode"], j["tp_rows"], j["tp_cols"], j["summa_blocks"], j["tp_inner"]) == \
        ("summa", 2, 4, 2, "col")
