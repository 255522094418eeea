"""Typed collectives: every overlap and anchor reference points at a compute op of the same block and pass."""

import warnings

import pytest

from trainsim.spec import load_model, load_system
from trainsim.spec.job import Job
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.training import Training
from trainsim.workload.layers import embedding_work, head_work, layer_work, shard_of
from trainsim.workload.ops import CommOp, GemmLayout, Group, Overlap, Role, elementwise, gemm, overlap_target

CASES = [
    ("gpt3-7.5b", dict(tp=8, sequence_parallel=True), {}),
    ("gpt3-7.5b", dict(tp=8), {"recompute_granularity": "full"}),
    ("llama3-8b", dict(tp=4, cp=2, sequence_parallel=True), {}),
    ("mixtral-8x7b", dict(tp=2, ep=4, sequence_parallel=True), {"moe_a2a_overlap": True}),
    ("deepseek-v2", dict(tp=2, ep=8, etp=1, sequence_parallel=True), {}),
    ("gpt3-18.4b", dict(tp=8, tensor_parallel_mode="summa", tp_rows=2), {}),
]


@pytest.mark.parametrize("model,par,tr", CASES)
def test_collectives_reference_ops_of_their_own_pass(model, par, tr):
    m = load_model(model)
    n = par.get("tp", 1) * par.get("cp", 1) * max(par.get("ep", 1), 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = Job(model=m, system=load_system("dgx-h100"), num_gpus=n, parallelism=Parallelism(**par),
                  training=Training(global_batch_size=8 * n, **tr))
    shard = shard_of(job)
    works = [layer_work(m, shard, m.is_moe), embedding_work(m, shard), head_work(m, shard)]
    refs = 0
    for w in works:
        for comm, ops in ((w.comm_fwd, w.fwd), (w.comm_bwd, w.bwd), (w.comm_recompute, w.recompute)):
            for c in comm:
                assert isinstance(c.group, Group) and isinstance(c.overlap, Overlap)
                for ref in (c.behind, c.anchor):
                    if ref is not None:
                        refs += 1
                        assert ref in ops, f"{c.name}: {ref.name} is not in its pass"
                if c.overlap in (Overlap.COMPUTE, Overlap.TP_COMM_OVERLAP):
                    assert c.behind is not None
    assert refs > 0


def test_overlap_kinds_decide_hiding():
    x = elementwise("x", "fwd", 1.0)
    y = elementwise("y", "fwd", 1.0)
    always = CommOp("a", "all_gather", Group.CP, "fwd", 1.0, Overlap.COMPUTE, x)
    userbuffers = CommOp("b", "all_gather", Group.TP, "fwd", 1.0, Overlap.TP_COMM_OVERLAP, x)
    blocking = CommOp("c", "all_gather", Group.TP, "fwd", 1.0, behind=x)
    assert overlap_target(always, {x}, False) == (x, True)
    assert overlap_target(userbuffers, {x}, False) == (x, False)
    assert overlap_target(userbuffers, {x}, True) == (x, True)
    assert overlap_target(blocking, {x}, True) == (x, False)
    assert overlap_target(always, {y}, False) == (None, False)  # its op is not in this pass (e.g. moved to W)
    with pytest.raises(ValueError, match="needs the compute op it hides behind"):
        CommOp("d", "all_gather", Group.TP, "fwd", 1.0, Overlap.COMPUTE)


def test_gemm_layout_is_typed_not_named():
    d = gemm("anything", "bwd", 4, 4, 4, "bf16", role=Role.INPUT_GRAD)
    w = gemm("anything_else", "bwd", 4, 4, 4, "bf16", role=Role.WEIGHT_GRAD)
    kv = gemm("attn_av_wgrad", "bwd", 4, 4, 4, "bf16", layout=GemmLayout.WGRAD)  # dV: wgrad layout, input gradient
    assert (gemm("f", "fwd", 4, 4, 4, "bf16").layout, d.layout, w.layout) == (GemmLayout.FWD, GemmLayout.DGRAD,
                                                                              GemmLayout.WGRAD)
    assert kv.layout is GemmLayout.WGRAD and kv.role is Role.INPUT_GRAD
    assert elementwise("e", "bwd", 1.0).layout is None
