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


def _tp_job(framework: str, sp: bool) -> Job:
    return Job(model=load_model("gpt3-7.5b"), system=load_system("dgx-a100"), num_gpus=8, framework=framework,
               parallelism=Parallelism(tp=8, sequence_parallel=sp), training=Training(global_batch_size=8))


@pytest.mark.parametrize("sp", [False, True])
def test_async_tp_grad_reduce_decides_whether_backward_tp_collectives_hide(sp):
    """Megatron-LM 2021's copy_to_tensor_model_parallel_region all-reduces synchronously after the linear's
    backward; the 2022 code (version 3.0) and Megatron-Core launch it under the weight-gradient GEMM."""
    from trainsim.predictor import predict

    old, new = _tp_job("megatron-lm-2021", sp), _tp_job("megatron-lm-2021@3.0", sp)
    assert not old.framework.async_tp_grad_reduce and new.framework.async_tp_grad_reduce
    bwd_old = layer_work(old.model, shard_of(old), False).comm_bwd
    bwd_new = layer_work(new.model, shard_of(new), False).comm_bwd
    column = [c for c in bwd_old if c.behind is not None and c.behind.is_weight_grad]
    assert column and all(c.overlap is Overlap.NONE for c in column)  # blocks after the weight gradient
    assert all(c.overlap is Overlap.COMPUTE for c in bwd_new if c.behind is not None and c.behind.is_weight_grad)
    t_old = predict(old).breakdown_s.get("tp_comm", 0.0)
    t_new = predict(new).breakdown_s.get("tp_comm", 0.0)
    assert t_old > t_new > 0.0


def test_no_async_flag_overrides_the_profile():
    from trainsim.cli.megatron_args import parse_megatron_args

    job = Job(model=load_model("gpt3-7.5b"), system=load_system("dgx-a100"), num_gpus=8,
              framework={"name": "megatron-core", "async_tp_grad_reduce": False},
              parallelism=Parallelism(tp=8), training=Training(global_batch_size=8))
    assert not job.framework.async_tp_grad_reduce
    parsed = parse_megatron_args(["--tensor-model-parallel-size", "8", "--no-async-tensor-model-parallel-allreduce"])
    assert parsed.options["no_async_tensor_model_parallel_allreduce"] is True and not parsed.ignored
