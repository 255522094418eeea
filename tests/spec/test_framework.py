"""Framework profiles: strict schema with sources, presets, resolution into a job, feasibility rules, CLI."""

from __future__ import annotations

import json

import pytest
from tests.cli_helpers import check_one_line_error, run

from trainsim.errors import TrainsimError
from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.spec.framework import OPTIONAL_FIELDS, Framework, list_frameworks, load_framework

REQUIRED = {"megatron-lm-2021", "megatron-deepspeed", "deepspeed", "megatron-core", "megatron-core-local", "nemo",
            "torchtitan", "fsdp", "hf-transformers"}


def job(framework=None, **kw):  # type: ignore[no-untyped-def]
    par = kw.pop("parallelism", Parallelism())
    training = Training(**{"global_batch_size": 8, **kw})
    return Job(model=load_model("llama3-8b"), system=load_system("dgx-h100"), parallelism=par, training=training,
               num_gpus=8 * par.tp * par.pp, framework=framework)


def test_every_required_profile_ships_and_every_field_has_a_source():
    assert set(list_frameworks()) >= REQUIRED
    for name in list_frameworks():
        fw = load_framework(name)
        stack = set(Framework.model_fields) - {"name", "version", "description", "sources"}
        documented = {f for f in stack if fw.sources.get(f, "").strip()}
        assert stack - documented <= OPTIONAL_FIELDS, (name, stack - documented)


def test_a_profile_without_a_source_is_refused():
    data = load_framework("nemo").model_dump()
    del data["sources"]["optimizer_impl"]
    with pytest.raises(TrainsimError) as err:
        Framework(**data)
    assert "optimizer_impl" in str(err.value) and err.value.field.startswith("framework.sources")


def test_unknown_names_and_versions_name_the_alternatives():
    with pytest.raises(TrainsimError, match="did you mean nemo"):
        load_framework("nemmo")
    with pytest.raises(TrainsimError, match="no version"):
        load_framework("nemo@1.0")
    assert load_framework("nemo@24.07").label == "nemo@24.07"


def test_default_is_megatron_core_and_training_fields_are_resolved_from_the_profile():
    j = job()
    assert j.framework.name == "megatron-core" and j.training.zero_stage == 0
    assert j.training.attention == "flash" and j.training.grads_in_fp32 and j.dp_engine == "megatron-ddp"
    n = job("nemo", parallelism=Parallelism(tp=2, sequence_parallel=True))
    assert n.training.zero_stage == 1 and n.training.overlap_param_gather and n.training.tp_comm_overlap
    assert n.framework.overlap_grad_reduce and not n.training.grads_in_fp32
    # nemo's TP overlap is switched off where it cannot apply (no sequence parallelism)
    assert not job("nemo").training.tp_comm_overlap


def test_explicit_training_values_override_the_profile_and_the_echo_agrees():
    j = job("nemo", overlap_grad_reduce=False, grad_reduce_in_fp32=True, attention="eager")
    assert not j.framework.overlap_grad_reduce and j.framework.grad_reduce_dtype == "fp32"
    assert j.framework.attention_backend == "local" and not j.framework.masked_softmax_fusion
    assert j.training.attention == "eager"


def test_attention_path_follows_the_fused_softmax_kernel_limits():
    fw = load_framework("megatron-lm-2021")
    assert fw.attention_path(2048, 64) == "unfused"
    assert fw.attention_path(4096, 64) == "eager"  # beyond the 2021 kernel's 2048 keys
    assert fw.attention_path(2048, 6) == "eager"  # batch·heads not a multiple of 4
    assert load_framework("megatron-core-local").attention_path(2048, 64) == "eager"
    assert load_framework("torchtitan").attention_path(8192, 1) == "flash"


@pytest.mark.parametrize("framework,kw,field,words", [
    ("deepspeed", {"zero_stage": 2, "parallelism": Parallelism(pp=2)}, "training.zero_stage",
     ["DeepSpeed pipeline engine"]),
    ("megatron-deepspeed", {"zero_stage": 3, "parallelism": Parallelism(pp=4)}, "training.zero_stage", ["refused"]),
    ("hf-transformers", {"parallelism": Parallelism(tp=2)}, "parallelism.tp", ["no TP"]),
    ("hf-transformers", {"parallelism": Parallelism(pp=2)}, "parallelism.pp", ["no pipeline engine"]),
    ("megatron-lm-2021", {"zero_stage": 1}, "training.zero_stage", ["not offered"]),
    ("megatron-deepspeed", {"parallelism": Parallelism(pp=2, vpp=2), "global_batch_size": 32},
     "parallelism.vpp", ["virtual stages"]),
])
def test_feasibility_depends_on_the_profile(framework, kw, field, words):
    with pytest.raises(TrainsimError) as err:
        job(framework, **kw)
    assert err.value.field == field
    for w in words:
        assert w in str(err.value)


def test_sharding_with_pipelining_is_accepted_where_the_engine_composes_them():
    j = job("torchtitan", parallelism=Parallelism(pp=2))
    assert j.training.zero_stage == 3 and j.dp_engine == "fsdp2"
    fp16 = job("deepspeed", zero_stage=1, precision="fp16", parallelism=Parallelism(pp=2))
    assert fp16.dp_engine == "deepspeed-zero" and fp16.training.zero_stage == 1
    # bf16: DeepSpeed's pipeline engine runs its ZeRO-1 equivalent, the BF16_Optimizer, at stage 0
    bf16 = job("deepspeed", zero_stage=1, parallelism=Parallelism(pp=2))
    assert bf16.dp_engine == "deepspeed" and bf16.bf16_optimizer


def test_mapping_and_object_forms_of_the_python_api():
    j = job({"name": "megatron-core", "optimizer_impl": "foreach"})
    assert j.framework.optimizer_impl == "foreach" and j.framework.name == "megatron-core"
    assert job(load_framework("fsdp")).framework.dp_engine == "fsdp1"
    with pytest.raises(TrainsimError) as err:
        job({"name": "nemo", "attention_backend": "sparse"})
    assert err.value.field == "framework.attention_backend"


ARGS = ["predict", "-m", "llama3-8b", "--gbs", "16", "-n", "8", "--json"]


def test_cli_framework_flag_and_overrides_are_echoed_in_json(capsys):
    code, out, _ = run([*ARGS, "--framework", "hf-transformers", "--exp-avg-dtype", "fp32"], capsys)
    assert code == 0
    fw = json.loads(out)["job"]["framework"]
    assert fw["name"] == "hf-transformers" and fw["exp_avg_dtype"] == "fp32" and fw["exp_avg_sq_dtype"] == "bf16"
    assert set(Framework.model_fields) - {"sources"} <= set(fw)
    code, out, _ = run([*ARGS, "--transformer-impl", "local"], capsys)
    fw = json.loads(out)["job"]["framework"]
    assert code == 0 and fw["transformer_impl"] == "local" and fw["attention_backend"] == "local"


def test_cli_bad_framework_values_are_one_line_errors(capsys):
    code, _, err = run([*ARGS, "--framework", "megatron"], capsys)
    check_one_line_error(code, err, "framework", "megatron-core")
    code, _, err = run([*ARGS, "--attention-backend", "sparse"], capsys)
    check_one_line_error(code, err, "framework.attention_backend")
    code, _, err = run([*ARGS, "--framework", "deepspeed", "--zero-stage", "3", "--pp", "2"], capsys)
    check_one_line_error(code, err, "training.zero_stage", "pipeline")


def test_docs_model_tables_are_the_profiles():
    """docs/model.md's field table and shipped-profile table are exactly what the Framework class and the presets
    render (``python scripts/doc_tables.py model-profiles`` prints them)."""
    from pathlib import Path

    from trainsim.spec.framework_docs import fields_table, profiles_table

    text = (Path(__file__).resolve().parents[2] / "docs" / "model.md").read_text()
    rerun = "rerun scripts/doc_tables.py model-profiles"
    assert fields_table() in text, f"docs/model.md's field table is stale: {rerun}"
    assert profiles_table() in text, f"docs/model.md's profile table is stale: {rerun}"


def test_a_schedule_the_stack_does_not_ship_is_a_warned_what_if():
    import warnings

    from trainsim.errors import TrainsimWarning
    from trainsim.spec import load_model, load_system
    from trainsim.spec.job import Job
    from trainsim.spec.parallelism import Parallelism
    from trainsim.spec.training import Training

    def job(framework: str, schedule: str) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Job(model=load_model("gpt3-1.7b"), system=load_system("dgx-a100"), num_gpus=8, framework=framework,
                parallelism=Parallelism(pp=4, schedule=schedule), training=Training(global_batch_size=16))
        return [str(w.message) for w in caught if issubclass(w.category, TrainsimWarning)]

    assert any("ships no zb-h1 schedule" in m for m in job("megatron-core", "zb-h1"))
    assert not any("schedule" in m for m in job("megatron-core", "1f1b"))
    assert not any("schedule" in m for m in job("torchtitan", "gpipe"))
    with pytest.raises(TrainsimError, match="unknown schedule 'zb-h2'"):
        load_framework("megatron-core").replace(pipeline_schedules=["zb-h2"])


def test_torchtitan_tp_always_shards_the_sequence():
    """torchtitan's TP plan (SequenceParallel norms) has no switch: sequence parallelism is on whenever tp > 1, in
    predict and in search; Megatron keeps --sequence-parallel as the user's choice."""
    from trainsim.search.space import SearchSpace, enumerate_space
    from trainsim.spec import load_model, load_system
    from trainsim.spec.job import Job
    from trainsim.spec.parallelism import Parallelism
    from trainsim.spec.training import Training

    def job(framework: str) -> Job:
        return Job(model=load_model("llama3-8b"), system=load_system("dgx-h100"), num_gpus=8, framework=framework,
                   parallelism=Parallelism(tp=4), training=Training(global_batch_size=8))

    assert job("torchtitan").sequence_parallel and not job("megatron-core").sequence_parallel
    space = SearchSpace(model="llama3-8b", system="dgx-h100", num_gpus=8, framework="torchtitan", pp=1,
                        training=Training(global_batch_size=8))
    assert {c.sequence_parallel for c in enumerate_space(space).candidates if c.tp > 1} == {True}


def test_megatron_core_turns_sequence_parallelism_on_for_tensor_with_expert_parallelism():
    """Megatron-Core refuses a mixture-of-experts model with tp > 1 without sequence parallelism (arguments.py,
    ModelParallelConfig), so such a job is predicted sequence-parallel, with a warning; a dense job and
    Megatron-DeepSpeed's MoE keep the choice; the search does not list the sp = false twin."""
    from trainsim.errors import TrainsimWarning
    from trainsim.search.space import SearchSpace, enumerate_space

    def moe(framework: str, ep: int) -> Job:
        return Job(model=load_model("mixtral-8x7b"), system=load_system("dgx-h100"), num_gpus=16,
                   framework=framework, parallelism=Parallelism(tp=2, ep=ep), training=Training(global_batch_size=16))

    for name in ("megatron-core", "megatron-core-local", "nemo"):
        for ep in (1, 4):
            with pytest.warns(TrainsimWarning, match="requires sequence parallelism"):
                assert moe(name, ep).sequence_parallel
    dense = Job(model=load_model("llama3-8b"), system=load_system("dgx-h100"), num_gpus=16,
                parallelism=Parallelism(tp=2), training=Training(global_batch_size=16))
    assert not dense.sequence_parallel
    with pytest.warns(TrainsimWarning, match="modelled on sequence-parallel tokens"):
        assert not moe("megatron-deepspeed", 4).sequence_parallel
    space = SearchSpace(model="mixtral-8x7b", system="dgx-h100", num_gpus=16, framework="megatron-core", pp=1, tp=2,
                        training=Training(global_batch_size=16))
    plans = [c for c in enumerate_space(space).candidates if c.ep > 1]
    assert plans and all(c.sequence_parallel for c in plans)


def test_torchtitan_context_parallelism_all_gathers_the_kv_shards():
    """torchtitan's context_parallel_rotate_method defaults to allgather: the K/V shards are gathered before the
    attention (and dK/dV reduce-scattered), not passed around a ring under the kernel as Megatron's p2p."""
    from trainsim.workload.layers import layer_work, shard_of

    def cp_ops(framework: str) -> list[str]:
        j = Job(model=load_model("llama3-8b"), system=load_system("dgx-h100"), num_gpus=8, framework=framework,
                parallelism=Parallelism(cp=8), training=Training(global_batch_size=8, seq_length=65536))
        w = layer_work(j.model, shard_of(j), False)
        return [c.collective for c in w.comm_fwd + w.comm_bwd if c.group == "cp"]

    assert cp_ops("torchtitan") == ["all_gather", "all_gather", "reduce_scatter"]
    assert cp_ops("megatron-core") == ["send_recv", "send_recv"]


def test_presets_list_the_versions_a_profile_offers(capsys):
    import json

    from trainsim.cli import main
    from trainsim.spec.framework import preset_versions

    assert preset_versions("megatron-lm-2021") == ("2.5", "3.0") and preset_versions("nemo") == ("24.07",)
    for version in preset_versions("megatron-lm-2021"):
        assert load_framework(f"megatron-lm-2021@{version}").version == version
    main(["presets", "--frameworks", "--json"])
    listed = json.loads(capsys.readouterr().out)["frameworks"]["megatron-lm-2021"]["versions"]
    assert listed == ["2.5", "3.0"]


def test_a_profile_extends_a_preset_with_its_own_facts(tmp_path):
    from trainsim.errors import TrainsimError

    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: megatron-core\nname: mine\ntransformer_impl: local\n"
                    "sources:\n  transformer_impl: our fork drops Transformer Engine\n")
    fw, base = load_framework(str(mine)), load_framework("megatron-core")
    assert fw.name == "mine" and fw.transformer_impl == "local" and fw.sources["transformer_impl"].startswith("our")
    assert fw.attention_backend == base.attention_backend
    assert fw.sources["optimizer_impl"] == base.sources["optimizer_impl"]
    unsourced = tmp_path / "unsourced.yaml"
    unsourced.write_text("extends: fsdp\nname: mine\nfused_cross_entropy: true\n")
    with pytest.raises(TrainsimError, match="without a source"):
        load_framework(str(unsourced))
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: megatronn\nname: bad\n")
    with pytest.raises(TrainsimError, match="extends"):
        load_framework(str(bad))
    # the llm-foundry preset is the fsdp preset with llm-foundry's model code
    lf = load_framework("llm-foundry")
    assert lf.dp_engine == "fsdp1" and lf.fused_cross_entropy and lf.train_metric_passes == 2


def test_nemo_automodel_trains_bf16_stored_parameters_under_fsdp2():
    """NeMo AutoModel's benchmark recipes: FSDP2 over bf16-stored parameters, torch Adam's states in bf16, bf16
    reduce-scatter, the loss on the bf16 logits; the same job as torchtitan (fp32 sharded master, fp32 states and
    reduce, fp32 logits copy) keeps less state and a smaller logits peak."""
    fw = load_framework("nemo-automodel")
    assert (fw.dp_engine, fw.main_params_dtype, fw.exp_avg_dtype, fw.grad_reduce_dtype) == ("fsdp2", "param", "bf16",
                                                                                          "param")
    assert fw.cross_entropy_impl == "torch_16bit" and fw.flash_kernel == "cudnn" and not fw.reshard_after_forward
    from trainsim.predictor import memory_report

    auto = memory_report(job("nemo-automodel", zero_stage=3)).per_stage[0]
    titan = memory_report(job("torchtitan", zero_stage=3)).per_stage[0]
    assert auto.optimizer_bytes < titan.optimizer_bytes / 1.9
    assert auto.activations_bytes < titan.activations_bytes


def test_cli_nemo_automodel_predicts_a_moe_job(capsys):
    code, out, _ = run(["predict", "-m", "qwen3-30b-a3b", "--gbs", "64", "-n", "8", "--ep", "8",
                        "--framework", "nemo-automodel", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["job"]["framework"]["name"] == "nemo-automodel" and data["iteration_time_s"] > 0


def test_alibi_models_attend_eagerly_in_transformers_model_code():
    """transformers' ALiBi models (BLOOM, MPT, Baichuan-13B) have no SDPA or flash attention: under the stacks that
    run transformers' model code the path is eager; an explicit backend and Megatron-DeepSpeed's own BLOOM code keep
    theirs."""
    def path(framework: str, attention: str | None = None) -> str:
        par = Parallelism(tp=1 if framework in ("hf-transformers", "deepspeed") else 4)
        return Job(model=load_model("bloom-176b").replace(num_layers=4), system=load_system("dgx-a100"),
                   parallelism=par, training=Training(global_batch_size=8, attention=attention, zero_stage=3 if
                   framework == "deepspeed" else None), num_gpus=8 * par.tp, framework=framework).attention_path

    assert path("hf-transformers") == "eager" and path("deepspeed") == "eager"
    assert path("hf-transformers", attention="flash") == "flash"
    assert path("megatron-deepspeed") != "eager"
    assert job("hf-transformers").attention_path == "flash"  # RoPE models keep SDPA's flash kernel
    # the fact travels with the profile (Framework.transformers_model_code), also into one that extends it


def test_transformers_before_4_36_attends_eagerly():
    """transformers made SDPA its default attention in 4.36 (December 2023): ``hf-transformers@4.35`` runs every
    model's eager chain (fp32 softmax on all s² scores, 6 bytes per saved score) unless a backend is asked for, and
    costs more time and memory than the SDPA default on the same plan."""
    from trainsim.estimate import estimate

    def job(framework: str, attention: str | None = None) -> Job:
        return Job(model=load_model("llama3-8b").replace(num_layers=2), system=load_system("dgx-h100"),
                   parallelism=Parallelism(), training=Training(global_batch_size=8, seq_length=4096,
                                                                attention=attention),
                   num_gpus=8, framework=framework)

    old, new = job("hf-transformers@4.35"), job("hf-transformers")
    assert old.attention_path == "eager" and new.attention_path == "flash"
    assert job("hf-transformers@4.35", attention="flash").attention_path == "flash"  # use_flash_attention_2=True
    assert old.framework.version == "4.35" and "4.36" in old.framework.sources["attention_backend"]
    assert estimate(old).iteration_time_s > estimate(new).iteration_time_s


def test_attention_sink_models_attend_eagerly_in_transformers_model_code():
    """GPT-OSS's attention sinks: transformers declares no SDPA variant (eager by default), Megatron-Core runs them
    in cuDNN's fused attention; an explicit backend (the hub's flash kernel) wins."""
    model = load_model("gpt-oss-20b").replace(num_layers=2)

    def path(framework: str, attention: str | None = None) -> str:
        ep = 1 if framework in ("hf-transformers", "fsdp") else 8
        return Job(model=model, system=load_system("dgx-h100"), parallelism=Parallelism(ep=ep),
                   training=Training(global_batch_size=8, attention=attention), num_gpus=8,
                   framework=framework).attention_path

    assert path("hf-transformers") == "eager" and path("fsdp") == "eager"
    assert path("hf-transformers", attention="flash") == "flash"
    assert path("megatron-core") == "flash" and path("torchtitan") == "flash"
    # without sinks the same model keeps SDPA's flash kernel
    assert Job(model=model.replace(attention_sinks=False), system=load_system("dgx-h100"),
               parallelism=Parallelism(), training=Training(global_batch_size=8), num_gpus=8,
               framework="hf-transformers").attention_path == "flash"


def test_a_profile_extending_a_transformers_stack_keeps_its_attention_facts(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: hf-transformers\nname: my-trainer\n")
    fw = load_framework(str(mine))
    assert fw.transformers_model_code and not load_framework("llm-foundry").transformers_model_code
    alibi = Job(model=load_model("bloom-176b").replace(num_layers=4), system=load_system("dgx-a100"),
                parallelism=Parallelism(), training=Training(global_batch_size=8), num_gpus=8, framework=fw)
    assert alibi.attention_path == "eager"
