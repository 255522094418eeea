"""Data-parallel behaviour: per-micro-batch ZeRO-3 traffic, prefetch depth, interleaved overlap window."""

from types import SimpleNamespace

import pytest

from trainsim.cost.job_costs import zero3_overhead
from trainsim.cost.sharded import Unit, Zero3Comm, run_pass
from trainsim.engine import simulate_job
from trainsim.estimate import _overlapped_sync, estimate
from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.workload.sharding import sharding_of


def _comm(gather: float, reduce: float, **kw) -> Zero3Comm:  # type: ignore[no-untyped-def]
    """One unit per layer, every gather ``gather`` s and every reduce-scatter ``reduce`` s."""
    units = kw.pop("units", (Unit(1.0, 1.0, 1.0),))
    return Zero3Comm(units=units, gather_time=lambda n: gather, reduce_time=lambda n: reduce, **kw)


def _passes(layers: int, f: float, b: float, c: Zero3Comm, slow: float = 0.0) -> tuple[float, float]:
    return run_pass("F", [(f, True)] * layers, c, slow).end, run_pass("B", [(b, True)] * layers, c, slow).end


def test_prefetch_hides_gathers_until_the_stream_is_the_bottleneck():
    c = _comm(1.0, 1.5)
    fwd, bwd = _passes(10, 2.0, 4.0, c)
    assert fwd == pytest.approx(10 * 2.0 + 1.0)  # only the first gather is exposed
    assert bwd == pytest.approx(1.0 + 10 * 4.0 + 1.5)  # first gather, last reduce-scatter
    fwd, bwd = _passes(10, 2.0, 4.0, _comm(3.0, 3.0))
    assert fwd == pytest.approx(10 * 3.0 + 2.0)  # the stream is the bottleneck
    assert 10 * 6.0 <= bwd <= 10 * 6.0 + 4.0
    serial = _comm(1.0, 1.5, forward_depth=0, backward_depth=0)
    assert zero3_overhead(10, 2.0, 4.0, serial, 0.1) > zero3_overhead(10, 2.0, 4.0, c, 0.1)
    assert _passes(10, 2.0, 4.0, _comm(1.0, 1.5, gather_in_backward=False))[1] < bwd


def test_the_overlap_slowdown_applies_to_compute_under_the_sharded_collectives():
    fast = zero3_overhead(10, 2.0, 4.0, _comm(1.0, 1.5), 0.0)
    slow = zero3_overhead(10, 2.0, 4.0, _comm(1.0, 1.5), 0.1)
    # at most 9 hidden gathers in forward, 9 in backward and 9 hidden reduce-scatters (31.5 s) of compute 10 % slower
    assert 0.5 * 0.1 * 31.5 < slow - fast <= 0.1 * 31.5 + 1e-9


def test_a_prefetch_bucket_smaller_than_a_layer_exposes_the_rest_of_the_gather():
    # DeepSpeed-style: per layer a small module (10 elements, 0.1 s) then a big one (100 elements, 3 s); 0.02 s per
    # element, so a layer's gathers (2.2 s) fit in its compute (3.1 s) only when prefetched more than one module ahead
    units = (Unit(10.0, 10.0, 0.1 / 3.1), Unit(100.0, 100.0, 3.0 / 3.1))
    layers = 20

    def stall(bucket: float) -> float:
        c = Zero3Comm(units=units, gather_time=lambda n: 0.02 * n, reduce_time=lambda n: 0.0,
                      prefetch_params=bucket)
        return run_pass("F", [(3.1, True)] * layers, c, 0.0).stall

    small, big = stall(5.0), stall(200.0)
    assert small == pytest.approx(0.2 + layers * (2.0 - 0.1), rel=0.02)  # every big gather waits after the small one
    assert big < 0.25 * small
    # the live-parameter cap bounds the prefetch the same way
    capped = Zero3Comm(units=units, gather_time=lambda n: 0.02 * n, reduce_time=lambda n: 0.0,
                       prefetch_params=200.0, max_live_params=110.0)
    assert run_pass("F", [(3.1, True)] * layers, capped, 0.0).stall > 0.8 * small


def test_backward_prefetch_post_waits_for_every_gather_and_pre_hides_them():
    pre = run_pass("B", [(4.0, True)] * 10, _comm(1.0, 1.5, backward_order="pre"), 0.0)
    post = run_pass("B", [(4.0, True)] * 10, _comm(1.0, 1.5, backward_order="post"), 0.0)
    none = run_pass("B", [(4.0, True)] * 10, _comm(1.0, 1.5, backward_order="none"), 0.0)
    assert pre.stall == pytest.approx(1.0 + 1.5)
    assert post.stall == pytest.approx(10 * 1.0 + 1.5)  # the next gather is issued after the current compute
    assert none.stall == pytest.approx(1.0 + 9 * (1.5 + 1.0) + 1.5)  # ...and behind the current reduce-scatter


def test_without_the_rate_limiter_the_forward_gathers_run_ahead():
    blocks = [(0.1, True), (5.0, True)] * 4
    limited = run_pass("F", blocks, _comm(1.0, 0.0, forward_depth=1), 0.0)
    unlimited = run_pass("F", blocks, _comm(1.0, 0.0, forward_depth=1 << 30), 0.0)
    assert unlimited.end < limited.end
    fsdp = Job(model=load_model("llama2-7b"), system=load_system("dgx-a100"), num_gpus=64,
               training=Training(global_batch_size=64, zero_stage=3), framework="fsdp")
    free = Job(model=load_model("llama2-7b"), system=load_system("dgx-a100"), num_gpus=64,
               training=Training(global_batch_size=64, zero_stage=3),
               framework={"name": "fsdp", "limit_all_gathers": False})
    assert sharding_of(fsdp).forward_depth == 1 and sharding_of(free).forward_depth > 64


def test_the_last_reduce_bucket_is_exposed_after_the_backward():
    # 10 layers of 100 gradient elements, buckets of 250: flushed at 200, 400, ... and the last 200 after the pass
    c = Zero3Comm(units=(Unit(100.0, 100.0, 1.0),), gather_time=lambda n: 0.0, reduce_time=lambda n: 0.01 * n,
                  reduce_bucket_params=250.0, gather_in_backward=False)
    trace = run_pass("B", [(4.0, True)] * 10, c, 0.0)
    sizes = [round((e - s) / 0.01) for name, s, e in trace.slices]
    assert sizes == [200] * 5 and trace.end == pytest.approx(40.0 + 2.0)
    per_layer = Zero3Comm(units=(Unit(100.0, 100.0, 1.0),), gather_time=lambda n: 0.0,
                          reduce_time=lambda n: 0.01 * n, gather_in_backward=False)
    assert run_pass("B", [(4.0, True)] * 10, per_layer, 0.0).end == pytest.approx(41.0)


def _job(framework: object, num_gpus: int = 512, model: str = "llama2-7b") -> Job:
    return Job(model=load_model(model), system=load_system("dgx-a100"), num_gpus=num_gpus, framework=framework,
               training=Training(global_batch_size=num_gpus, zero_stage=3, recompute_granularity="full"))


def test_fp32_reduce_doubles_the_reduce_scatter_bytes():
    fp32, bf16 = sharding_of(_job("fsdp")), sharding_of(_job({"name": "fsdp", "grad_reduce_dtype": "param"}))
    assert fp32.grad_reduce_bytes == 4.0 and bf16.grad_reduce_bytes == 2.0
    assert sharding_of(_job("deepspeed")).grad_reduce_bytes == 2.0  # communication_data_type: the training dtype
    a, b = estimate(_job("fsdp")), estimate(_job({"name": "fsdp", "grad_reduce_dtype": "param"}))
    assert a.breakdown_s["dp_comm"] > b.breakdown_s["dp_comm"]


def test_fsdp2_copies_cost_compute_stream_time():
    with_copies = estimate(_job("torchtitan")).breakdown_s["dp_comm"]
    without = estimate(_job({"name": "torchtitan", "all_gather_copy_out": False})).breakdown_s["dp_comm"]
    assert with_copies > without


def test_deepspeed_modules_skip_persistent_parameters():
    ds = sharding_of(_job("deepspeed"))
    # llama: input norm, q, k, v, o, post-attention norm, gate, up, down; the norms (4096 elements) stay gathered
    assert len(ds.units) == 9 and ds.collectives_per_layer == 7
    assert sum(u[1] for u in ds.units) == pytest.approx(1.0) and sum(u[2] for u in ds.units) == pytest.approx(1.0)
    everything = sharding_of(_job({"name": "deepspeed", "param_persistence_threshold": 0}))
    assert everything.collectives_per_layer == 9
    megatron = sharding_of(_job("megatron-deepspeed"))  # fused QKV and gate/up
    assert megatron.collectives_per_layer == 4


def test_interleaving_lets_early_chunks_reduce_behind_later_chunks():
    stage = SimpleNamespace(bwd=8.0, grad_sync=6.0, grad_bucket=0.5)
    one = _overlapped_sync(stage, vpp=1, pp=4, slow=0.0)  # type: ignore[arg-type]
    four = _overlapped_sync(stage, vpp=4, pp=4, slow=0.0)  # type: ignore[arg-type]
    assert one == pytest.approx(max(0.5, 6.0 - 8.0))
    assert four <= one
    big = SimpleNamespace(bwd=8.0, grad_sync=40.0, grad_bucket=0.5)
    # chunk c's last backward ends c·pp chunk-backwards early: 4 chunks of 10 s, windows of 8 s between them
    assert _overlapped_sync(big, vpp=4, pp=4, slow=0.0) < _overlapped_sync(big, vpp=1, pp=4, slow=0.0)  # type: ignore[arg-type]


def _fsdp_job(num_gpus: int) -> Job:
    return Job(model=load_model("llama2-7b"), system=load_system("dgx-a100"), parallelism=Parallelism(),
               training=Training(global_batch_size=num_gpus, zero_stage=3), num_gpus=num_gpus)


def test_zero3_gathers_every_microbatch_without_pipelining_and_both_engines_agree():
    job = _fsdp_job(64)
    sh = sharding_of(job)
    assert sh.per_microbatch_gather and sh.reshard_after_forward and not sh.gather_per_step
    a = estimate(job).iteration_time_s
    e = simulate_job(job)[0].iteration_time_s
    assert e == pytest.approx(a, rel=0.05)


def test_zero3_cost_grows_with_the_group_at_fixed_work_per_gpu():
    small, large = estimate(_fsdp_job(64)), estimate(_fsdp_job(1024))
    assert large.breakdown_s["dp_comm"] > small.breakdown_s["dp_comm"]


def test_deepspeed_stage3_gathers_per_submodule_and_pays_the_latency_each_time():
    def job(framework: str) -> Job:
        return Job(model=load_model("llama2-7b"), system=load_system("dgx-a100"), parallelism=Parallelism(),
                   training=Training(global_batch_size=512, zero_stage=3), num_gpus=512, framework=framework)

    ds, fsdp = job("deepspeed"), job({"name": "fsdp", "backward_prefetch": "pre", "grad_reduce_dtype": "param"})
    assert sharding_of(ds).collectives_per_layer > 1 and sharding_of(fsdp).collectives_per_layer == 1
    assert estimate(ds).breakdown_s["dp_comm"] > estimate(fsdp).breakdown_s["dp_comm"]


@pytest.mark.parametrize("framework", ["fsdp", "deepspeed", "torchtitan"])
def test_both_engines_expose_the_same_sharded_traffic(framework: str):
    job = _job(framework, 256)
    a = estimate(job).iteration_time_s
    e = simulate_job(job)[0].iteration_time_s
    assert e == pytest.approx(a, rel=0.05)


ZERO3_ARGS = ["predict", "--model", "llama2-70b", "--system", "dgx-a100", "--num-gpus", "1024", "--global-batch-size",
              "1024", "--micro-batch-size", "1", "--seq-length", "4096", "--zero-stage", "3",
              "--recompute-granularity", "full", "--json"]


def test_the_cli_reaches_the_sharded_engine_fields_with_deepspeed_and_fsdp_names(capsys):
    import json

    from tests.cli_helpers import check_one_line_error, run

    def predict(*extra: str) -> dict:  # type: ignore[type-arg]
        code, out, err = run([*ZERO3_ARGS, *extra], capsys)
        assert code == 0, err
        return json.loads(out)

    base = predict("--framework", "deepspeed")
    tight = predict("--framework", "deepspeed", "--stage3-prefetch-bucket-size", "1000000",
                    "--stage3-max-live-parameters", "100000000", "--stage3-param-persistence-threshold", "0",
                    "--reduce-bucket-size", "100000000")
    fw = tight["job"]["framework"]
    assert (fw["prefetch_bucket_params"], fw["max_live_params"], fw["param_persistence_threshold"],
            fw["bucket_size_params"]) == (1_000_000, 100_000_000, 0, 100_000_000)
    assert base["job"]["framework"]["gather_granularity"] == "module"
    assert tight["iteration_time_s"] > base["iteration_time_s"]
    post = predict("--framework", "fsdp")
    pre = predict("--framework", "fsdp", "--backward-prefetch", "pre")
    assert post["job"]["framework"]["backward_prefetch"] == "post"
    assert pre["iteration_time_s"] < post["iteration_time_s"]
    kept = predict("--framework", "deepspeed", "--stage3-max-reuse-distance", "1000000000000")
    assert kept["job"]["framework"]["max_reuse_params"] == 10**12
    assert kept["iteration_time_s"] < base["iteration_time_s"]  # 70B layers: nothing gathered again in backward
    old = predict("--framework", "deepspeed@0.3")
    assert old["job"]["framework"]["gather_device_sync"] and old["job"]["framework"]["collective_rank_lists"]
    assert old["iteration_time_s"] > base["iteration_time_s"]
    unlimited = predict("--framework", "fsdp", "--no-limit-all-gathers", "--forward-prefetch")
    assert unlimited["job"]["framework"]["limit_all_gathers"] is False
    code, _, err = run([*ZERO3_ARGS, "--framework", "fsdp", "--backward-prefetch", "sideways"], capsys)
    check_one_line_error(code, err, "backward_prefetch")
    hybrid = predict("--framework", "torchtitan", "--sharding-strategy", "hybrid")
    assert hybrid["job"]["framework"]["sharding_strategy"] == "hybrid"
    code, _, err = run([*ZERO3_ARGS, "--framework", "torchtitan", "--sharding-strategy", "hybrid", "--pp", "2"],
                       capsys)
    check_one_line_error(code, err, "sharding_strategy")


def test_the_python_api_reaches_the_sharded_engine_fields():
    from trainsim import api

    job = _job({"name": "deepspeed", "prefetch_bucket_params": 10_000_000, "bucket_size_params": 200_000_000})
    assert sharding_of(job).prefetch_params == 1e7 and sharding_of(job).reduce_bucket_params == 2e8
    assert api.predict(job).iteration_time_s > 0


def test_gathered_parameter_memory_follows_the_prefetch_rule():
    from trainsim.workload.memory import stage_memory

    def peak(framework: object) -> float:
        return stage_memory(_job(framework, 1024, "llama2-70b"), 0).weights_bytes

    # DeepSpeed holds up to stage3_max_live_parameters gathered elements (never less than a layer)
    assert peak({"name": "deepspeed", "max_live_params": 3_000_000_000}) - peak("deepspeed") == pytest.approx(
        2e9 * 2, rel=0.01)
    # FSDP1 without the rate limiter may gather every layer ahead
    assert peak({"name": "fsdp", "limit_all_gathers": False}) > peak("fsdp") + 50e9


def test_hybrid_sharding_gathers_inside_the_node_and_all_reduces_across_replicas():
    from trainsim.cost.comm import placements_of
    from trainsim.cost.job_costs import default_cost_model, zero3_layer_comm
    from trainsim.errors import TrainsimError
    from trainsim.parallel.axes import Group
    from trainsim.workload.memory import stage_memory

    full, hybrid = _job("fsdp", 512), _job({"name": "fsdp", "sharding_strategy": "hybrid"}, 512)
    sf, sh = sharding_of(full), sharding_of(hybrid)
    assert (sf.shards, sf.replicas) == (512, 1) and (sh.shards, sh.replicas) == (8, 64)

    def comm(job: Job):  # type: ignore[no-untyped-def]
        return zero3_layer_comm(job, default_cost_model(job), placements_of(job)[Group.DP_CP],
                                job.model.num_params, job.model.num_layers)

    cf, ch = comm(full), comm(hybrid)
    assert cf is not None and ch is not None
    assert ch.gather < 0.5 * cf.gather  # NVLink inside the node instead of a 512-rank ring over the network
    # the reduce-scatter inside the node plus the all-reduce of its shard across 64 nodes
    assert ch.reduce > 0
    # states are sharded over 8 GPUs, not 512
    assert stage_memory(hybrid, 0).optimizer_bytes == pytest.approx(64 * stage_memory(full, 0).optimizer_bytes,
                                                                    rel=0.01)
    with pytest.raises(TrainsimError, match="sharding_strategy"):
        sharding_of(Job(model=load_model("llama2-7b"), system=load_system("dgx-a100"), num_gpus=64,
                        parallelism=Parallelism(pp=2), framework={"name": "torchtitan", "sharding_strategy": "hybrid"},
                        training=Training(global_batch_size=64, zero_stage=3)))


def _gpt3_job(framework: object, num_gpus: int = 1536, recompute: str = "full") -> Job:
    return Job(model=load_model("gpt3-175b"), system=load_system("dgx-a100"), num_gpus=num_gpus, framework=framework,
               training=Training(global_batch_size=num_gpus, zero_stage=3, recompute_granularity=recompute,
                                 seq_length=2048, precision="fp16"))


def _layer_comm(job: Job) -> Zero3Comm:
    from trainsim.cost.comm import placements_of
    from trainsim.cost.job_costs import default_cost_model, zero3_layer_comm
    from trainsim.parallel.axes import Group

    comm = zero3_layer_comm(job, default_cost_model(job), placements_of(job)[Group.DP_CP], job.model.num_params,
                            job.model.num_layers)
    assert comm is not None
    return comm


def test_a_device_synchronize_before_each_gather_lets_only_the_last_prefetch_overlap():
    # two 1 s gathers per layer, 2 s of compute per unit, a prefetch bucket reaching every unit ahead
    units = (Unit(10.0, 10.0, 0.5), Unit(10.0, 10.0, 0.5))

    def end(sync: bool) -> float:
        c = Zero3Comm(units=units, gather_time=lambda n: 1.0, reduce_time=lambda n: 0.0, prefetch_params=1e9,
                      device_sync=sync)
        return run_pass("F", [(4.0, True)] * 5, c, 0.0).end

    assert end(False) == pytest.approx(1.0 + 20.0)  # the first gather exposed, the rest under the compute
    # synchronised: the first hook fetches its unit, then issues every prefetch one after another (each waits for
    # the device), and only the last overlaps the compute the host launches after it
    assert end(True) == pytest.approx(1.0 + 8 * 1.0 + 20.0)


def test_list_collectives_charge_the_host_one_dispatch_per_rank():
    units = (Unit(10.0, 10.0, 1.0),)
    c = Zero3Comm(units=units, gather_time=lambda n: 0.1, reduce_time=lambda n: 0.1, host_per_collective=0.5,
                  gather_in_backward=False)
    fwd = run_pass("F", [(0.0, True)] * 4, c, 0.0)
    assert fwd.end == pytest.approx(4 * 0.5)  # the host, not the 0.1 s gather, sets the pace
    bwd = run_pass("B", [(0.0, True)] * 4, c, 0.0)
    assert bwd.end == pytest.approx(4 * 0.5 + 0.1)  # copies into the flat input before each reduce-scatter
    new, old = _layer_comm(_gpt3_job("deepspeed")), _layer_comm(_gpt3_job("deepspeed@0.3"))
    assert new.host_per_collective == 0.0 and not new.device_sync
    assert old.host_per_collective == pytest.approx(1536 * 8e-6) and old.device_sync and old.reduce_per_unit


def test_deepspeed_2021_gathers_and_reduces_every_tensor_on_its_own():
    old = sharding_of(_gpt3_job("deepspeed@0.3"))
    # GPT: LayerNorm (w, b), QKV (w, b), proj (w, b), LayerNorm (w, b), fc1 (w, b), fc2 (w, b); the biases and
    # norms below the persistence threshold are not gathered but each is reduce-scattered
    assert len(old.units) == 12 and old.collectives_per_layer == 4 and old.rank_lists and old.device_sync
    assert sum(u[1] for u in old.units) == pytest.approx(1.0) and sum(u[2] for u in old.units) == pytest.approx(1.0)
    assert len(sharding_of(_gpt3_job("deepspeed")).units) == 6
    a, b = estimate(_gpt3_job("deepspeed@0.3")), estimate(_gpt3_job("deepspeed"))
    assert a.breakdown_s["dp_comm"] > 2 * b.breakdown_s["dp_comm"]
    e = simulate_job(_gpt3_job("deepspeed@0.3", 256))[0].iteration_time_s
    assert e == pytest.approx(estimate(_gpt3_job("deepspeed@0.3", 256)).iteration_time_s, rel=0.05)


def test_the_reuse_distance_regathers_sub_modules_far_from_their_backward_under_full_recompute():
    comm = _layer_comm(_gpt3_job("deepspeed"))
    gathered = [u for u in comm.units if u.params > 0]
    # QKV, proj and fc1 are more than 1e9 elements (the later modules' recompute and backward) from their backward
    assert [u.regather for u in gathered] == [True, True, True, False]
    assert not any(u.regather for u in _layer_comm(_gpt3_job({"name": "deepspeed",
                                                              "max_reuse_params": 10**12})).units)
    assert not any(u.regather for u in _layer_comm(_gpt3_job("deepspeed", recompute="none")).units)
    bwd = run_pass("B", [(1.0, True)] * 2, comm, 0.0)
    assert sum(1 for name, _, _ in bwd.slices if name == "zero3_param_gather") == 2 * (4 + 3)


def test_the_persistent_tensors_are_gathered_after_the_step_rank_by_rank_in_2021():
    from trainsim.cost.comm import placements_of
    from trainsim.cost.job_costs import default_cost_model, zero3_persistent_gather
    from trainsim.parallel.axes import Group

    def after_step(framework: str) -> float:
        job = _gpt3_job(framework)
        return zero3_persistent_gather(job, default_cost_model(job), placements_of(job)[Group.DP_CP],
                                       job.model.num_params, job.model.num_layers)

    # GPT-3: two LayerNorms (weight, bias) and four biases per layer stay gathered: 8 tensors x 96 layers, each
    # copied out of the flat buffer for every one of the 1,536 ranks
    assert after_step("deepspeed@0.3") == pytest.approx(8 * 96 * 1536 * 8e-6)
    assert 0 < after_step("deepspeed") < 0.05  # one coalesced all-gather of ~16M elements
    assert after_step("fsdp") == 0.0
    assert estimate(_gpt3_job("deepspeed@0.3")).breakdown_s["optimizer"] > 9.0


@pytest.mark.parametrize("framework", ["fsdp", "torchtitan"])
def test_shard_grad_op_gathers_for_every_forward_only_and_keeps_the_whole_weights(framework: str):
    """FSDP's SHARD_GRAD_OP (zero stage 2; FSDP2 reshard_after_forward=False): parameters gathered for every
    micro-batch's forward and kept until its backward (no backward re-gather), gradients reduce-scattered every
    micro-batch; the gathered layers are the whole weights (stage 2's memory). FULL_SHARD pays the backward gathers;
    both engines agree."""
    def job(zero: int) -> Job:
        return Job(model=load_model("llama2-7b"), system=load_system("dgx-a100"), num_gpus=64, framework=framework,
                   training=Training(global_batch_size=256, micro_batch_size=2, zero_stage=zero))

    op, full = job(2), job(3)
    sh = sharding_of(op)
    assert sh.per_microbatch_gather and not sh.reshard_after_forward and sh.memory_stage == 2
    assert not _layer_comm(op).gather_in_backward and _layer_comm(full).gather_in_backward
    a2, a3 = estimate(op), estimate(full)
    assert 0 < a2.breakdown_s["dp_comm"] < a3.breakdown_s["dp_comm"]
    from trainsim.workload.memory import memory_per_stage

    m2, m3 = memory_per_stage(op)[0], memory_per_stage(full)[0]
    assert m2.weights_bytes > 8 * m3.weights_bytes  # every layer gathered vs the shard and a few layers
    assert simulate_job(op)[0].iteration_time_s == pytest.approx(a2.iteration_time_s, rel=0.02)

