"""CPU optimizer offloading (ZeRO-Offload, Megatron-Core --optimizer-cpu-offload): memory, step time, feasibility."""

from __future__ import annotations

import json

import pytest

from cli_helpers import check_one_line_error, run
from trainsim.cost.offload import HOST_LINK_EFFICIENCY, HOST_MEMORY_EFFICIENCY, host_step_time
from trainsim.errors import TrainsimError
from trainsim.predictor import predict
from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.workload.memory import memory_per_stage


def job(framework: str = "deepspeed", zero: int = 2, system: str = "dgx-a100", **kw: object) -> Job:
    tr = {"global_batch_size": 16, "micro_batch_size": 1, "seq_length": 2048, "zero_stage": zero,
          "recompute_granularity": "full", **kw}
    return Job(model=load_model("llama2-7b"), system=load_system(system), training=Training(**tr), num_gpus=8,
               framework=framework)


def test_offloaded_optimizer_and_gradient_shard_leave_the_gpu():
    base, off = memory_per_stage(job())[0], memory_per_stage(job(optimizer_cpu_offload=True))[0]
    assert base.optimizer_bytes > 0 and off.optimizer_bytes == 0 and off.optimizer_step_bytes == 0
    assert off.gradients_bytes == 0 < base.gradients_bytes  # ZeRO-2: the gradient partition goes to the host
    assert off.weights_bytes == base.weights_bytes and off.activations_bytes == base.activations_bytes
    half = memory_per_stage(job(optimizer_cpu_offload=True, optimizer_offload_fraction=0.5))[0]
    assert half.optimizer_bytes == pytest.approx(base.optimizer_bytes / 2)
    # ZeRO-1 (Megatron's distributed optimizer): the gradient buffer stays on the GPU
    z1 = memory_per_stage(job("megatron-core", 1, optimizer_cpu_offload=True))[0]
    assert z1.optimizer_bytes == 0
    assert z1.gradients_bytes == memory_per_stage(job("megatron-core", 1))[0].gradients_bytes


def test_host_step_moves_gradients_and_parameters_and_streams_the_optimizer():
    j = job(optimizer_cpu_offload=True)
    host, fw, n = j.system.host, j.framework, 1e9
    assert host is not None
    g = p = 2.0  # deepspeed: 16-bit gradients and parameters
    cpu = fw.replace(optimizer_impl="fused").optimizer_step_bytes("bf16", False)
    expected = n * ((g + p) / (host.link_bandwidth * HOST_LINK_EFFICIENCY)
                    + cpu / (host.memory_bandwidth * HOST_MEMORY_EFFICIENCY))
    assert host_step_time(j, n) == pytest.approx(expected)
    assert host_step_time(job(), n) == 0.0


def test_offloaded_step_is_slower_and_grows_with_the_share_on_the_cpu():
    times = [predict(job(optimizer_cpu_offload=f > 0, optimizer_offload_fraction=f or 1.0)).breakdown_s["optimizer"]
             for f in (0.0, 0.5, 1.0)]
    assert times[0] < times[1] < times[2]
    # the faster host of a Grace superchip (NVLink-C2C, LPDDR5X) steps faster than a DGX A100's PCIe host
    gb200 = predict(job(system="nvl72-gb200", optimizer_cpu_offload=True)).breakdown_s["optimizer"]
    assert gb200 < times[2]


@pytest.mark.parametrize(("kw", "field", "fix"), [
    ({"framework": "fsdp", "zero": 3}, "training.optimizer_cpu_offload", "--param-cpu-offload"),
    ({"framework": "megatron-core", "zero": 0}, "training.optimizer_cpu_offload", "--use-distributed-optimizer"),
    ({"system": "dgx-b300"}, "system.host", "host:"),
])
def test_offload_needs_a_stack_that_offers_it_a_sharded_optimizer_and_a_host(kw, field, fix):
    with pytest.raises(TrainsimError) as exc:
        job(optimizer_cpu_offload=True, **kw)
    assert exc.value.field == field and fix in str(exc.value)


def test_cli_flags_and_json(capsys):
    args = ["predict", "-m", "llama2-7b", "-s", "dgx-h100", "-n", "8", "--gbs", "16", "--use-distributed-optimizer",
            "--optimizer-cpu-offload", "--optimizer-offload-fraction", "0.5", "--json"]
    code, out, _ = run(args, capsys)
    data = json.loads(out)
    assert code == 0 and data["job"]["optimizer_cpu_offload"] and data["job"]["optimizer_offload_fraction"] == 0.5
    code, _, err = run(["predict", "-m", "llama2-7b", "-n", "8", "--gbs", "16", "--optimizer-cpu-offload"], capsys)
    check_one_line_error(code, err, "training.optimizer_cpu_offload", "--use-distributed-optimizer")


def test_search_keeps_the_offload_and_skips_plans_without_a_sharded_optimizer(capsys):
    code, out, _ = run(["search", "-m", "llama2-7b", "-s", "dgx-a100", "-n", "8", "--gbs", "16", "--framework",
                        "deepspeed", "--optimizer-cpu-offload", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["candidates"]
    assert all(c["zero_stage"] >= 1 and c["breakdown_s"]["optimizer"] > 0.1 for c in data["candidates"])
    assert data["skipped"].get("training.optimizer_cpu_offload", 0) > 0  # the ZeRO-0 plans



def test_parameter_offload_keeps_only_the_gathered_working_set_and_copies_every_shard():
    base = job("fsdp", 3)
    off = job("fsdp", 3, param_cpu_offload=True)
    m0, m1 = memory_per_stage(base)[0], memory_per_stage(off)[0]
    assert m1.optimizer_bytes == m1.gradients_bytes == 0 and m1.weights_bytes < m0.weights_bytes
    assert off.training.offloaded_fraction == 1.0
    r0, r1 = predict(base), predict(off)
    assert r1.breakdown_s["dp_comm"] > r0.breakdown_s["dp_comm"]  # each gather/reduce also crosses the host link
    assert r1.breakdown_s["optimizer"] > r0.breakdown_s["optimizer"]
    # the shards' copies are in the collectives, so the host step is the CPU's pass alone
    host = off.system.host
    assert host is not None
    cpu = off.framework.replace(optimizer_impl="fused").optimizer_step_bytes("bf16", True)
    assert host_step_time(off, 1e9) == pytest.approx(1e9 * cpu / (host.memory_bandwidth * HOST_MEMORY_EFFICIENCY))


@pytest.mark.parametrize(("kw", "fix"), [
    ({"framework": "megatron-core", "zero": 1}, "--framework deepspeed, fsdp or torchtitan"),
    ({"framework": "deepspeed", "zero": 2}, "--zero-stage 3"),
])
def test_parameter_offload_needs_zero3_and_a_stack_that_offers_it(kw, fix):
    with pytest.raises(TrainsimError) as exc:
        job(param_cpu_offload=True, **kw)
    assert exc.value.field == "training.param_cpu_offload" and fix in str(exc.value)


def test_parameter_offload_with_pipelining_is_refused():
    with pytest.raises(TrainsimError) as exc:
        Job(model=load_model("llama2-7b"), system=load_system("dgx-a100"), num_gpus=8, framework="torchtitan",
            parallelism=Parallelism(pp=2),
            training=Training(global_batch_size=16, seq_length=2048, zero_stage=3, param_cpu_offload=True))
    assert exc.value.field == "training.param_cpu_offload" and "pipeline" in str(exc.value)
