import numpy as np
import pytest

from trainsim.cost.comm import placements_of
from trainsim.cost.job_costs import _time_work, default_cost_model
from trainsim.graph.blocks import BlockLibrary, backward_order, simulate_ops
from trainsim.graph.build import COMPUTE_KINDS, Kind, buckets_of, build_graph, chunk_layers, chunk_parameters
from trainsim.parallel.layout import Layout
from trainsim.spec import load_model, load_system
from trainsim.spec.job import Job
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.training import Training
from trainsim.workload.layers import layer_work, shard_of
from trainsim.workload.memory import stage_parameters
from trainsim.workload.ops import CommOp, ComputeOp, Group, Overlap, elementwise


def job(model="gpt3-7.5b", system="dgx-a100", n=64, **kw):
    par = {k: kw.pop(k) for k in list(kw) if k in Parallelism.model_fields}
    kw.setdefault("global_batch_size", 64)
    return Job(model=load_model(model), system=load_system(system), parallelism=Parallelism(**par),
               training=Training(**kw), num_gpus=n)


# ---- topology ---------------------------------------------------------------------------------------------------
def test_layout_megatron_order_places_tp_ranks_together():
    j = job(n=64, tp=4, pp=2)  # dp 8
    lay = Layout.of(j)
    assert lay.world_size == 64 and lay.num_nodes == 8 and lay.dp == 8
    assert lay.unit_ranks(0, 0).tolist() == [0, 1, 2, 3]
    assert lay.unit_ranks(1, 0).tolist() == [4, 5, 6, 7]
    assert lay.unit_ranks(0, 1).tolist() == [32, 33, 34, 35]
    c = lay.coords(np.arange(64))
    assert np.array_equal(lay.rank(c["tp"], c["cp"], c["dp"], c["pp"]), np.arange(64))
    assert lay.p2p_crosses_nodes().all()  # stage 0 and 1 of a replica are 32 ranks apart
    assert lay.group_crosses_nodes(("dp",)) and not lay.group_crosses_nodes(("tp",))


def test_layout_other_rank_order_and_ep_coupling():
    lay = Layout.of(job(n=32, tp=2, pp=2, rank_order="tp-pp-dp-cp-ep"))
    assert lay.unit_ranks(0, 0).tolist() == [0, 1]
    assert lay.unit_ranks(0, 1).tolist() == [2, 3]  # stages adjacent, replicas 4 ranks apart
    assert lay.unit_ranks(1, 0).tolist() == [4, 5]
    assert not lay.p2p_crosses_nodes()[:, 0].any()
    # Megatron's expert groups (tp-cp-ep-dp-pp): ep 4 out of 8 replicas -> two groups of 4 replicas
    labels = Layout.of(job("mixtral-8x7b", "dgx-h100", n=32, tp=2, pp=2, ep=4)).ep_coupling()
    assert labels.tolist() == [0, 0, 0, 0, 4, 4, 4, 4]
    assert Layout.of(job(n=64, tp=4, pp=2)).ep_coupling().tolist() == list(range(8))


# ---- templates --------------------------------------------------------------------------------------------------
def test_fluid_overlap_of_a_hidden_collective():
    class Model:
        from trainsim.cost.calibration import Calibration

        calibration = Calibration(overlap_slowdown=0.1)

        def compute(self, op):
            return 10.0

        def collective(self, op, place):
            return 4.0

        def host(self, op):
            return 0.0

    ops = [elementwise("x", "fwd", 1.0)]
    hidden = CommOp("c", "all_gather", Group.TP, "fwd", 1.0, Overlap.COMPUTE, ops[0])
    j = job(tp=8, pp=1, n=64)
    b = simulate_ops(ops, [hidden], Model(), placements_of(j), False)
    # the op runs 1.1x slower while the collective is active: 4/1.1 of its work in 4 s, the rest at full speed
    assert b.duration == pytest.approx(10 + 4 * (1 - 1 / 1.1))
    assert b.exposed == {} and b.comm == {"tp": 4.0} and b.slowdown == pytest.approx(4 * 0.1 / 1.1)
    exposed = CommOp("c", "all_gather", Group.TP, "fwd", 1.0, Overlap.TP_COMM_OVERLAP, ops[0])  # no --tp-comm-overlap
    b = simulate_ops(ops, [exposed], Model(), placements_of(j), False)
    assert b.duration == 14.0 and b.exposed == {"tp": 4.0} and b.slices[0].name == "c"  # gather before the op
    long = CommOp("c", "all_gather", Group.TP, "fwd", 1.0, Overlap.COMPUTE, ops[0])

    class Slow(Model):
        def collective(self, op, place):
            return 20.0

    b = simulate_ops(ops, [long], Slow(), placements_of(j), False)
    assert b.duration == pytest.approx(20.0) and b.exposed["tp"] == pytest.approx(20 - 11.0)


def test_backward_order_reverses_modules_and_puts_dgrad_first():
    w = layer_work(load_model("gpt3-7.5b"), shard_of(job(tp=8, pp=1, n=64)), False)
    names = [op.name for op in backward_order(w.fwd, w.bwd)]
    assert names.index("mlp_fc2_dgrad") < names.index("mlp_fc1_dgrad") < names.index("qkv_dgrad")
    assert names.index("qkv_dgrad") + 1 == names.index("qkv_wgrad")
    assert names[0] == "mlp_bias_dropout_add_grad" and names[-1] == "input_norm_grad"
    assert sorted(names) == sorted(op.name for op in w.bwd)


@pytest.mark.parametrize("kw", [
    dict(tp=8, pp=1, n=8, attention="unfused", precision="fp16", recompute_granularity="full"),
    dict(tp=8, pp=1, n=8, sequence_parallel=True, tp_comm_overlap=True),
    dict(tp=4, pp=1, n=8, cp=2, sequence_parallel=True),
    dict(tp=8, pp=1, n=8, sequence_parallel=True, recompute_granularity="selective", precision="fp8",
         system="dgx-h100"),
])
def test_layer_templates_agree_with_the_analytic_block_costs(kw):
    j = job(**kw)
    cm = default_cost_model(j)
    places, shard = placements_of(j), shard_of(j)
    ref = _time_work(layer_work(j.model, shard, False), cm, places, j.training.tp_comm_overlap)
    lib = BlockLibrary(j, cm, places, shard)
    f = lib.layer("F", False, shard.recompute)
    b = lib.layer("B", False, shard.recompute)
    # fluid overlap vs the analytic "exposed + k·min(t, x)": they differ by at most k times the hidden comm
    k = cm.calibration.overlap_slowdown
    assert abs(f.duration - ref.fwd) <= k * sum(f.comm.values()) + 1e-12
    assert abs(b.duration - ref.bwd) <= k * sum(b.comm.values()) + 1e-12
    assert f.duration == pytest.approx(ref.fwd, rel=0.05)
    assert b.duration == pytest.approx(ref.bwd, rel=0.05)
    assert f.compute + sum(f.exposed.values()) == pytest.approx(f.duration)
    assert sum(f.comm.values()) == pytest.approx(sum(op.nbytes > 0 and cm.collective(op, places.get(
        op.group, places["tp"])) for op in layer_work(j.model, shard, False).comm_fwd))
    # without any overlap the fluid template and the analytic sum are identical
    if not j.training.tp_comm_overlap and j.parallelism.cp == 1 and not j.sequence_parallel:
        assert f.duration == pytest.approx(ref.fwd, rel=1e-9)


def test_split_backward_moves_weight_gradients():
    j = job(tp=8, pp=4, n=32, schedule="zb-h1")
    cm = default_cost_model(j)
    lib = BlockLibrary(j, cm, placements_of(j), shard_of(j))
    full = lib.layer("B", False, "none")
    b = lib.layer("B", False, "none", split=True)
    w = lib.layer("W", False, "none")
    assert all(s.name.endswith("_wgrad") for s in w.slices if s.name != "host")  # host: waiting for the CPU
    assert not any(s.name.endswith("_wgrad") for s in b.slices if s.stream == "compute")
    # the input-gradient all-reduce no longer hides behind the weight gradient
    assert b.duration + w.duration >= full.duration - 1e-12


# ---- graph ------------------------------------------------------------------------------------------------------
def _check_levels(g):
    level_of = np.empty(g.num_tasks, dtype=np.int64)
    for i in range(len(g.levels) - 1):
        level_of[g.levels[i]:g.levels[i + 1]] = i
    for t in range(g.num_tasks):
        preds = g.pred_idx[g.pred_ptr[t]:g.pred_ptr[t + 1]]
        assert (level_of[preds] < level_of[t]).all()


@pytest.mark.parametrize(("kw", "mode"), [
    (dict(tp=2, pp=4, n=64, global_batch_size=64), "blocking"),
    (dict(tp=2, pp=4, n=64, global_batch_size=64, schedule="gpipe"), "blocking"),
    (dict(tp=2, pp=4, n=64, global_batch_size=64, schedule="zb-h1"), "overlap"),
    (dict(tp=2, pp=4, vpp=3, n=64, global_batch_size=64, zero_stage=1, overlap_grad_reduce=True,
          overlap_param_gather=True), "overlap"),
    (dict(tp=2, pp=4, vpp=3, n=64, global_batch_size=64, overlap_p2p_comm=False), "blocking-steps"),
])
def test_graph_structure(kw, mode):
    j = job(**kw)
    g = build_graph(j, default_cost_model(j))
    p, v, m = j.parallelism.pp, j.parallelism.vpp, j.num_microbatches
    assert g.p2p_mode == mode
    per_mb = 3 if j.schedule == "zb-h1" else 2
    assert len(g.ids(*COMPUTE_KINDS)) == per_mb * m * v * p
    assert len(g.ids(Kind.SEND_F)) == len(g.ids(Kind.SEND_B)) == (p * v - 1) * m
    assert len(g.ids(Kind.OPT)) == p and len(g.ids(Kind.CLIP)) == 1 and len(g.ids(Kind.LN_AR)) == p
    assert len(g.ids(Kind.EMB_AR)) == 1  # tied embeddings, pp > 1
    assert g.sync[g.ids(Kind.GRAD_RS, Kind.PARAM_AG, Kind.CLIP)].all()
    _check_levels(g)
    # every transfer knows when its two ends issued it
    x = g.ids(Kind.SEND_F, Kind.SEND_B)
    assert (g.send_pred[x] >= 0).all() and (g.recv_pred[x] >= 0).all()
    # gradient buckets cover the stage's parameters
    shards, grad_bytes = j.dp * j.parallelism.cp, 4.0
    for s in range(p):
        rs = g.ids(Kind.GRAD_RS)
        rs = rs[g.stage[rs] == s]
        assert g.nbytes[rs].sum() == pytest.approx(stage_parameters(j, s) * grad_bytes)
        ag = g.ids(Kind.PARAM_AG)
        ag = ag[g.stage[ag] == s]
        if j.training.zero_stage:
            assert g.nbytes[ag].sum() == pytest.approx(stage_parameters(j, s) * 2.0)
        else:
            assert ag.size == 0
    assert shards > 1


def test_chunk_parameters_and_buckets():
    j = job(tp=2, pp=4, vpp=3, n=64)
    for s in range(4):
        assert sum(chunk_parameters(j, s)) == pytest.approx(stage_parameters(j, s))
    sizes = buckets_of(100e6, 40e6)
    assert sizes.tolist() == [40e6, 40e6, 20e6]
    j = job(n=8, tp=8, pp=1, recompute_granularity="full", recompute_num_layers=2)
    modes = [mode for _, mode in chunk_layers(j, 0, 0)]
    assert modes[:2] == ["full", "full"] and set(modes[2:]) == {"none"}


def test_overlapped_param_gather_constrains_the_first_forward():
    j = job(tp=2, pp=2, n=16, global_batch_size=32, zero_stage=1, overlap_param_gather=True)
    g = build_graph(j, default_cost_model(j))
    assert g.endc_ptr[-1] > 0  # end constraints: pipelined parameter gathers
    j2 = job(tp=2, pp=2, n=16, global_batch_size=32, zero_stage=1)
    g2 = build_graph(j2, default_cost_model(j2))
    assert g2.endc_ptr[-1] == 0


def test_zero3_blocks_gather_every_layer():
    j = job("llama2-7b", "dgx-h100", n=16, tp=1, pp=1, global_batch_size=32, zero_stage=3)
    g = build_graph(j, default_cost_model(j))
    assert len(g.ids(Kind.GRAD_RS)) == 0 and len(g.ids(Kind.PARAM_AG)) == 0
    f = g.templates[int(g.tmpl[g.ids(Kind.FWD)[0]])]
    b = g.templates[int(g.tmpl[g.ids(Kind.BWD)[0]])]
    layers = j.model.num_layers
    assert sum(s.name == "zero3_param_gather" for s in f.dp_slices) == layers
    assert sum(s.name == "zero3_grad_reduce_scatter" for s in b.dp_slices) == layers
    assert f.total.comm["dp"] > 0 and f.duration >= f.total.compute


def test_compute_op_type_is_what_templates_expect():
    assert ComputeOp.__slots__  # frozen dataclass with slots: templates key their caches on ops
