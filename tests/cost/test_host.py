"""The host model: a pass waits for a CPU slower than its GPU (trainsim.cost.host), in both engines."""

from __future__ import annotations

import pytest

from trainsim.cost.host import host_excess, op_host_time
from trainsim.cost.job_costs import default_cost_model, host_op_seconds, shard_of
from trainsim.engine import simulate_job
from trainsim.estimate import estimate
from trainsim.spec import load_model
from trainsim.spec.framework import load_framework
from trainsim.spec.job import Job
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.presets import load_system
from trainsim.spec.training import Training
from trainsim.workload.layers import layer_work
from trainsim.workload.ops import elementwise


def _ops(n: int, host_calls: int = 1):
    from dataclasses import replace

    return [replace(elementwise(f"x{i}", "fwd", 1.0), host_calls=host_calls) for i in range(n)]


def test_a_pass_runs_ahead_of_its_gpu_unless_it_loops_over_experts():
    host = lambda op: 2.0 * op.host_calls  # noqa: E731
    free = _ops(3)
    # the host runs ahead: max(sum GPU, sum host) - sum GPU
    assert host_excess(free, [5.0, 0.5, 0.5], host) == pytest.approx(0.0)
    assert host_excess(free, [1.0, 1.0, 1.0], host) == pytest.approx(3.0)
    # a Python expert loop waits as it goes: each op max(GPU, host)
    loop = _ops(2, host_calls=4)
    assert host_excess(loop, [10.0, 1.0], host) == pytest.approx(7.0)
    assert host_excess([*free, *loop], [5.0, 0.5, 0.5, 10.0, 1.0], host) == pytest.approx(7.0)


def test_op_host_time_counts_python_calls_and_cpp_launches():
    from dataclasses import replace

    op = elementwise("x", "fwd", 1.0)
    assert op_host_time(op, 1e-4, 1e-5) == pytest.approx(1e-4)
    assert op_host_time(replace(op, kernels=16), 1e-4, 1e-5) == pytest.approx(1e-4 + 15e-5)
    assert op_host_time(replace(op, host_calls=16, kernels=16), 1e-4, 1e-5) == pytest.approx(16e-4)


def _moe_job(framework: str, mbs: int = 1, seq: int = 2048) -> Job:
    model = load_model("qwen3-30b-a3b").replace(num_layers=4)
    return Job(model=model, system=load_system("dgx-h100"), parallelism=Parallelism(ep=8),
               training=Training(micro_batch_size=mbs, global_batch_size=8 * mbs, seq_length=seq), num_gpus=8,
               framework=load_framework(framework))


@pytest.mark.parametrize(("framework", "calls", "kernels"), [("megatron-core-local", 16, 16),
                                                             ("megatron-core", 1, 16), ("torchtitan", 1, 1)])
def test_expert_ops_are_issued_as_the_stack_issues_them(framework, calls, kernels):
    job = _moe_job(framework)
    work = layer_work(job.model, shard_of(job), True)
    gemms = [op for op in (*work.fwd, *work.bwd) if op.name.startswith("expert_fc")]
    assert gemms and all(op.host_calls == calls and op.kernels == kernels for op in gemms)
    assert all(op.host_calls == 1 for op in work.fwd if not op.name.startswith("expert_"))


def test_small_micro_batches_wait_for_the_host_and_cuda_graphs_remove_it():
    job = _moe_job("megatron-core", seq=256)
    eager = estimate(job)
    graphs = job.replace(framework=job.framework.replace(cuda_graphs=True))
    assert host_op_seconds(graphs.framework) == 0.0
    assert host_op_seconds(job.replace(framework=job.framework.replace(torch_compile=True)).framework) \
        == job.framework.host_dispatch_s
    assert eager.breakdown_s["compute"] > 2 * estimate(graphs).breakdown_s["compute"]
    # the wait is host time, not priced compute: a fully measured job stays fully measured
    assert default_cost_model(job).host_op_s == job.framework.host_op_s


def test_both_engines_wait_for_the_host_alike():
    job = _moe_job("megatron-core-local", seq=512)
    analytic = estimate(job).iteration_time_s
    event = simulate_job(job)[0].iteration_time_s
    gpu_only = estimate(job.replace(framework=job.framework.replace(cuda_graphs=True))).iteration_time_s
    assert analytic > 1.5 * gpu_only
    assert event == pytest.approx(analytic, rel=0.05)


def test_the_host_runs_on_through_the_collectives_a_pass_waits_for_but_not_across_a_host_sync():
    from dataclasses import replace

    host = lambda op: 2.0 * op.host_calls  # noqa: E731
    free = _ops(3)  # host 6, GPU 3: the pass waits 3 for its host
    assert host_excess(free, [1.0, 1.0, 1.0], host) == pytest.approx(3.0)
    # 2 s of exposed collectives: the GPU is busy 5 s, so the host (issuing asynchronously) keeps it waiting 1 s only
    assert host_excess(free, [1.0, 1.0, 1.0], host, other_gpu=2.0) == pytest.approx(1.0)
    assert host_excess(free, [1.0, 1.0, 1.0], host, other_gpu=4.0) == pytest.approx(0.0)
    # a dropless MoE forward pass copies its token counts to the host: the collectives queued before add as before
    synced = [*free, replace(elementwise("moe_permute", "fwd", 1.0), host_sync=True)]
    assert host_excess(synced, [1.0, 1.0, 1.0, 1.0], host, other_gpu=2.0) == pytest.approx(4.0)
    # and the sync splits the pass: GPU-heavy work before it (an attention) cannot cover the host time of the
    # operators issued after it (the expert dispatch): 6.5 s of GPU against 8 s of host waits 1.5 s without the
    # sync, 4.5 s with it (nothing before it, 6 - 1.5 after it)
    split = [free[0], synced[-1], *free[1:]]
    unsynced = [free[0], replace(synced[-1], host_sync=False), *free[1:]]
    assert host_excess(unsynced, [5.0, 0.5, 0.5, 0.5], host) == pytest.approx(1.5)
    assert host_excess(split, [5.0, 0.5, 0.5, 0.5], host) == pytest.approx(4.5)


def test_a_host_bound_tensor_parallel_step_hides_its_collectives_in_both_engines():
    """GPT 1.3B with TP 8 and 512-token micro-batches is host-bound: the TP all-reduces run while the host issues
    the next operators, so the step is about max(host, GPU + collectives), not their sum."""
    from trainsim.spec import Model

    model = Model(num_layers=4, hidden_size=2048, num_attention_heads=16, vocab_size=50257, seq_length=512)
    job = Job(model=model, system=load_system("dgx-a100"), parallelism=Parallelism(tp=8),
              training=Training(micro_batch_size=1, global_batch_size=64, seq_length=512), num_gpus=8,
              framework=load_framework("megatron-lm-2021"))
    est = estimate(job)
    tp = est.breakdown_s["tp_comm"]
    graphs = estimate(job.replace(framework=job.framework.replace(cuda_graphs=True)))
    assert est.breakdown_s["compute"] > 1.5 * graphs.breakdown_s["compute"]  # host-bound
    assert tp > 0.0
    # the exposed collectives shorten the host wait by as much as they add: the step is no slower for them
    no_comm = job.replace(system=job.system.replace(node=job.system.node.replace(nvlink_bandwidth=1e18,
                                                                                  nvlink_latency=0.0)))
    assert est.iteration_time_s == pytest.approx(estimate(no_comm).iteration_time_s, rel=0.005)
    assert tp > 0.02 * est.iteration_time_s  # (added to the host wait they would make it 2 % slower and more)
    assert simulate_job(job)[0].iteration_time_s == pytest.approx(est.iteration_time_s, rel=0.05)


def test_a_dropless_moe_layer_syncs_its_host_in_forward_only():
    """The dispatcher copies the token counts to the host before the forward dispatch; the backward pass reuses the
    split sizes it kept, so only the forward (and its recomputation) holds a host sync."""
    job = _moe_job("megatron-core")
    work = layer_work(job.model, shard_of(job), True)
    assert [op.name for op in work.fwd if op.host_sync] == ["moe_permute"]
    assert not any(op.host_sync for op in work.bwd)
