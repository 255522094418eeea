"""Megatron-LM command lines paste as they are (issue 15, item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import check_one_line_error, run
from trainsim.cli.megatron_args import parse_megatron_args, read_launch_script
from trainsim.errors import TrainsimError

SCRIPT = Path(__file__).resolve().parents[1] / "data" / "megatron" / "train_llama3_8b.sh"
BASE = ["predict", "-m", "llama3-8b", "-n", "8", "--gbs", "64", "--seq-length", "4096", "--json"]


def _predict(args: list[str], capsys) -> dict:
    code, out, err = run(args, capsys)
    assert code == 0, err
    return json.loads(out)


def test_launch_script_sets_the_job(capsys):
    d = _predict(["predict", "--megatron-args", str(SCRIPT), "--json"], capsys)
    j = d["job"]
    assert (j["num_gpus"], j["tp"], j["pp"], j["vpp"], j["dp"]) == (32, 2, 2, 2, 8)  # torchrun 8 x 4
    assert j["seq_length"] == 8192 and j["sequence_parallel"] and j["zero_stage"] == 1
    assert j["recompute_granularity"] == "selective" and j["overlap_grad_reduce"]
    m = j["model"]
    assert m["num_query_groups"] == 8 and m["add_bias_linear"] is False and m["swiglu"]
    assert m["untie_embeddings_and_output_weights"] and m["normalization"] == "RMSNorm"
    assert d["training"]["tokens"] == 1000 * 128 * 8192  # --train-iters × gbs × seq
    meg = d["megatron_args"]
    assert "--lr" in meg["ignored"] and "--data-path" in meg["ignored"] and "--save" in meg["ignored"]
    assert meg["unrecognised"] == []  # --moe-token-dispatcher-type alltoall: what is modelled


def test_flags_given_to_trainsim_override_the_script(capsys):
    d = _predict(["predict", "--megatron-args", str(SCRIPT), "--tp", "4", "--gbs", "256", "--json"], capsys)
    assert d["job"]["tp"] == 4 and d["job"]["global_batch_size"] == 256


@pytest.mark.parametrize("flags,check", [
    (["--group-query-attention", "--num-query-groups", "4"], lambda j: j["model"]["num_query_groups"] == 4),
    (["--disable-bias-linear"], lambda j: j["model"]["add_bias_linear"] is False),
    (["--fp8-format", "hybrid"], lambda j: j["precision"] == "fp8"),
    (["--use-flash-attn"], lambda j: j["attention"] == "flash"),
    (["--untie-embeddings-and-output-weights"], lambda j: j["model"]["untie_embeddings_and_output_weights"]),
    (["--recompute-activations"], lambda j: j["recompute_granularity"] == "selective"),
    (["--pp", "2", "--num-layers-per-virtual-pipeline-stage", "4"], lambda j: j["vpp"] == 4),
    (["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2"],
     lambda j: j["recompute_granularity"] == "full"),
    (["--lr", "3e-4", "--min-lr=3e-5", "--data-path", "a", "b", "--log-interval", "1"], lambda j: True),
    (["--cp", "2", "--cp-comm-type", "a2a"], lambda j: j["framework"]["cp_comm_type"] == "a2a"),
    (["--no-rope-fusion", "--no-bias-swiglu-fusion", "--no-bias-dropout-fusion"],
     lambda j: not (j["framework"]["fused_rope"] or j["framework"]["fused_bias_activation"]
                    or j["framework"]["fused_bias_dropout_add"])),
    (["--no-bias-gelu-fusion"], lambda j: j["framework"]["fused_bias_activation"] is False),
    (["--fp8-format", "hybrid", "--use-distributed-optimizer", "--fp8-param-gather"],
     lambda j: j["fp8_param_gather"] is True),
    (["--use-custom-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"], lambda j: j["zero_stage"] == 3),
    (["--use-torch-fsdp2"], lambda j: j["zero_stage"] == 3),
    (["--external-cuda-graph"], lambda j: j["framework"]["cuda_graphs"] is True),
    (["--cp", "2", "--cp-comm-type", "all_gather"], lambda j: j["framework"]["cp_comm_type"] == "allgather"),
])
def test_megatron_flags_on_the_command_line(flags, check, capsys):
    d = _predict([*BASE, *flags], capsys)
    assert check(d["job"]), d["job"]


def test_ignored_flags_are_one_note(capsys):
    _code, out, _ = run(["predict", "-m", "llama3-8b", "-n", "8", "--gbs", "64", "--seq-length", "4096",
                        "--lr", "1e-4", "--weight-decay", "0.1", "--save", "/ckpt"], capsys)
    notes = [line for line in out.splitlines() if line.startswith("note: ignored")]
    assert len(notes) == 1 and "--lr" in notes[0] and "--save" in notes[0]


def test_a_typo_of_an_option_is_still_an_error(capsys):
    code, _, err = run([*BASE, "--tensor-model-parallel-sise", "2"], capsys)
    check_one_line_error(code, err, "--tensor-model-parallel-sise", "--tensor-model-parallel-size")


def test_bad_values_are_one_line_errors(capsys, tmp_path):
    code, _, err = run([*BASE, "--recompute-method", "sometimes"], capsys)
    check_one_line_error(code, err, "--recompute-method")
    script = tmp_path / "run.sh"
    script.write_text("torchrun pretrain_gpt.py --num-layers $LAYERS --hidden-size 64\n")
    code, _, err = run(["predict", "--megatron-args", str(script), "--gbs", "8"], capsys)
    check_one_line_error(code, err, "--num-layers", "variable")
    code, _, err = run(["predict", "--megatron-args", str(tmp_path / "missing.sh"), "--gbs", "8"], capsys)
    check_one_line_error(code, err, "megatron_args", "not found")


def test_script_forms(tmp_path):
    s = tmp_path / "a.sh"
    s.write_text('N=4\nexport H=${HIDDEN:-256}\nARGS="--num-layers $((N*2)) --hidden-size $H"\n'
                 "python -m torch.distributed.run --nproc-per-node=4 --nnodes 2 \\\n"
                 "   /opt/Megatron-LM/pretrain_gpt.py $ARGS --bf16  # comment\n")
    tokens, gpus = read_launch_script(s)
    assert tokens == ["--num-layers", "8", "--hidden-size", "256", "--bf16"] and gpus == 8
    bare = tmp_path / "args.txt"
    bare.write_text("--num-layers 2\n--hidden-size 64 \\\n --num-attention-heads 4\n")
    assert read_launch_script(bare)[0] == ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4"]


def test_parse_maps_onto_job_options():
    a = parse_megatron_args(["--tensor-model-parallel-size", "2", "--sequence-parallel", "--seq-length=2048",
                             "--fp8-format", "e4m3", "--bf16"])
    assert a.options["tp"] == 2 and a.options["sequence_parallel"] and a.options["seq_length"] == 2048
    assert a.options["fp8"] and not a.options.get("bf16")
    gqa = parse_megatron_args(["--num-query-groups", "4"])  # Megatron ignores it without --group-query-attention
    assert "num_query_groups" not in gqa.options and "group-query-attention" in gqa.notes[0]
    with pytest.raises(TrainsimError, match="expects a value"):
        parse_megatron_args(["--num-layers"])


def test_predict_help_is_help_not_a_megatron_flag(capsys):
    code, out, err = run(["predict", "--help"], capsys)
    assert code == 0 and "--tensor-model-parallel-size" in out, err


def test_2021_script_with_quoted_options_and_srun_sh_c(capsys):
    """NVIDIA's 2021 layout: options in one string, the command in ``run_cmd``, launched by ``srun ... sh -c``;
    checkpointing by ``--activations-checkpoint-method``, the vocabulary from the GPT-2 tokenizer files,
    ``--rampup-batch-size`` with its three values."""
    script = SCRIPT.parent / "gpt3_2021_srun.sh"
    d = _predict(["predict", "--megatron-args", str(script), "-s", "dgx-a100", "-n", "128",
                  "--framework", "megatron-lm-2021", "--json"], capsys)
    j = d["job"]
    assert (j["tp"], j["pp"], j["global_batch_size"], j["precision"]) == (8, 4, 512, "fp16")
    assert j["recompute_granularity"] == "full"
    assert j["model"]["vocab_size"] == 50257  # GPT2BPETokenizer, pretrain_gpt.py's default with --merge-file
    meg = d["megatron_args"]
    assert meg["unrecognised"] == []  # '32 2000000' belong to --rampup-batch-size, '$@' is the script's own args
    assert any("vocab size 50257" in n for n in meg["notes"])


@pytest.mark.parametrize(("flags", "vocab"), [
    (["--tokenizer-type", "GPT2BPETokenizer"], 50257),
    (["--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", "/m/tokenizer.model"], 32000),
    (["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "meta-llama/Meta-Llama-3-8B"], 128256),
    (["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "/models/my-tokenizer"], None),
    (["--tokenizer-type", "GPT2BPETokenizer", "--vocab-size", "1000"], 1000),  # stated wins
])
def test_vocabulary_from_the_tokenizer(flags, vocab):
    a = parse_megatron_args(flags)
    assert a.options.get("vocab_size") == vocab


def test_old_checkpointing_flags():
    assert parse_megatron_args(["--checkpoint-activations"]).options["recompute_granularity"] == "full"
    a = parse_megatron_args(["--activations-checkpoint-method", "block", "--activations-checkpoint-num-layers", "2"])
    assert a.options["recompute_granularity"] == "full" and a.recompute_method == "block"
    assert a.options["recompute_num_layers"] == 2


def test_megatron_deepspeed_flags_select_its_stack(capsys, tmp_path):
    """``--deepspeed`` (Megatron-DeepSpeed's launch scripts: BLOOM, MT-NLG) runs the DeepSpeed engine: the script
    selects the megatron-deepspeed profile unless --framework is given; --pad-vocab-size-to states the vocabulary."""
    a = parse_megatron_args(["--deepspeed", "--deepspeed_config", "ds.json", "--zero-stage", "1",
                             "--deepspeed-activation-checkpointing", "--pad-vocab-size-to", "250880"])
    assert a.options["framework"] == "megatron-deepspeed" and a.options["vocab_size"] == 250880
    assert a.unrecognised == []
    path = tmp_path / "ds_args.txt"
    path.write_text("--deepspeed --zero-stage 1 --micro-batch-size 2\n")
    args = ["predict", "-m", "gpt3-1.7b", "-n", "8", "--gbs", "64", "--json", "--megatron-args", str(path)]
    assert _predict(args, capsys)["job"]["framework"]["name"] == "megatron-deepspeed"
    given = _predict([*args, "--framework", "megatron-core"], capsys)  # given to trainsim: wins
    assert given["job"]["framework"]["name"] == "megatron-core"


@pytest.mark.parametrize(("flags", "field"), [
    (["--cp", "3", "-n", "24", "--cp-comm-type", "a2a"], "framework.cp_comm_type"),  # 32 heads over cp 3
    (["--cp", "8", "-n", "8", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "3,4"],
     "parallelism.hierarchical_cp_sizes"),  # the levels must multiply to cp
    (["--cp", "8", "-n", "8", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "8"],
     "parallelism.hierarchical_cp_sizes"),  # two levels
])
def test_cp_settings_that_cannot_run_are_one_line_errors(flags, field, capsys):
    code, _, err = run([*BASE, *flags], capsys)
    check_one_line_error(code, err, field)


def test_hierarchical_context_parallelism_from_flags_and_pasted_megatron_args(tmp_path, capsys):
    """--cp-comm-type a2a+p2p with Megatron's --hierarchical-context-parallel-sizes (nargs='+'): all-to-all inside
    the first level, a ring over the second; without the sizes the CP ranks of one node form the all-to-all level."""
    flags = ["-n", "16", "--cp", "8", "--tp", "2", "--seq-length", "65536", "--cp-comm-type", "a2a+p2p"]
    base = [a for a in BASE if a not in ("--seq-length", "4096")]
    given = _predict([*base, *flags, "--hierarchical-context-parallel-sizes", "2,4"], capsys)["job"]
    assert given["framework"]["cp_comm_type"] == "a2a+p2p" and given["cp_levels"] == [2, 4]
    assert _predict([*base, *flags], capsys)["job"]["cp_levels"] == [4, 2]  # 8 GPUs per node / tp 2
    # CP after DP in the rank order (32 GPUs, dp 2): CP ranks are tp·dp = 4 apart, two share a node
    spread = [*base, *flags, "-n", "32", "--rank-order", "tp-dp-ep-pp-cp"]
    assert _predict(spread, capsys)["job"]["cp_levels"] == [2, 4]
    path = tmp_path / "args.txt"
    path.write_text("--context-parallel-size 8 --tensor-model-parallel-size 2 --cp-comm-type a2a+p2p "
                    "--hierarchical-context-parallel-sizes 2 4 --seq-length 65536 --bf16\n")
    pasted = _predict(["predict", "-m", "llama3-8b", "-n", "16", "--gbs", "64", "--json", "--megatron-args", str(path)],
                      capsys)["job"]
    assert pasted["cp_levels"] == [2, 4] and pasted["cp"] == 8


def test_recompute_modules_take_every_value_as_megatron_does(tmp_path, capsys):
    """Megatron's --recompute-modules is nargs='*': core_attn is selective recomputation, every module Megatron-Core
    offers (mla_up_proj, moe_act, layernorm, mlp, moe, shared_experts) is kept, an unknown name is noted (never
    mistaken for a stray argument)."""
    a = parse_megatron_args(["--recompute-modules", "core_attn", "mlp", "future_module", "--bf16"])
    assert a.options["recompute_granularity"] == "selective" and a.options["bf16"] is True
    assert a.options["recompute_modules"] == "mlp"
    assert a.unrecognised == [] and any("future_module" in n for n in a.notes)
    assert parse_megatron_args(["--recompute-modules", "moe_act", "mla_up_proj"]).options["recompute_modules"] == \
        "moe_act,mla_up_proj"
    path = tmp_path / "args.txt"
    path.write_text("--recompute-modules core_attn layernorm --micro-batch-size 1\n")
    d = _predict([*BASE, "--megatron-args", str(path)], capsys)
    assert d["job"]["recompute_granularity"] == "selective"


def test_megatron_value_spellings_and_layer_patterns():
    """Values Megatron accepts: ``--attention-backend auto`` (the profile's default), Megatron-DeepSpeed's lower-case
    norms, GQA by ``--num-key-value-heads``, RoPE by ``--use-rotary-position-embeddings``, and Megatron-Core's
    ``--moe-layer-freq`` list expressions."""
    a = parse_megatron_args(["--attention-backend", "auto", "--normalization", "rmsnorm", "--num-key-value-heads", "4",
                             "--use-rotary-position-embeddings", "--moe-layer-freq", "([0]+[1]*15)",
                             "--num-layers", "16"])
    assert "attention_backend" not in a.options and any("auto" in n for n in a.notes)
    assert a.options["normalization"] == "RMSNorm" and a.options["num_query_groups"] == 4
    assert a.options["position_embedding_type"] == "rope"
    assert (a.options["moe_first_k_dense"], a.options["moe_layer_freq"], a.options["moe_layer_offset"]) == (1, 1, 0)
    assert a.unrecognised == []
    with pytest.raises(TrainsimError, match="one entry per layer"):
        parse_megatron_args(["--moe-layer-freq", "[1]*4", "--num-layers", "8"])
    with pytest.raises(TrainsimError, match="moe-layer-freq"):
        parse_megatron_args(["--moe-layer-freq", "[1,1,0,1]"])


def test_megatron_deepspeed_moe_defaults_and_partition_method():
    """DeepSpeed-MoE in Megatron-DeepSpeed: top-1, every second layer, capacity factor 1.0 unless stated; BLOOM's
    ``type:transformer|embedding`` weighs the embedding and output layers as one layer each."""
    a = parse_megatron_args(["--deepspeed", "--num-experts", "16", "--moe-expert-parallel-size", "8",
                             "--pp-partition-method", "type:transformer|embedding"])
    o = a.options
    assert (o["moe_router_topk"], o["moe_layer_freq"], o["moe_expert_capacity_factor"], o["ep"]) == (1, 2, 1.0, 8)
    assert o["account_for_embedding_in_pipeline_split"] and o["account_for_loss_in_pipeline_split"]
    dropless = parse_megatron_args(["--deepspeed", "--num-experts", "16", "--disable-moe-token-dropping", "--topk",
                                    "2"]).options
    assert "moe_expert_capacity_factor" not in dropless and dropless["moe_router_topk"] == 2


def test_full_launch_scripts_precision_and_entry_points(tmp_path, capsys):
    """A launch script without --bf16/--fp16 trains in fp32 (Megatron's default, noted); pretrain_bert.py is a
    bidirectional encoder; pretrain_t5.py is refused with one line."""
    args = "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --micro-batch-size 1 " \
           "--global-batch-size 8"
    gpt = tmp_path / "gpt.sh"
    gpt.write_text(f"torchrun --nproc_per_node 8 pretrain_gpt.py {args} --vocab-size 1000\n")
    d = _predict(["predict", "--megatron-args", str(gpt), "--json"], capsys)
    assert d["job"]["precision"] == "fp32" and any("fp32" in n for n in d["megatron_args"]["notes"])
    assert _predict(["predict", "--megatron-args", str(gpt), "--bf16", "--json"], capsys)["job"]["precision"] == "bf16"
    bert = tmp_path / "bert.sh"
    bert.write_text(f"torchrun --nproc_per_node 8 pretrain_bert.py {args} --bf16 --vocab-file v.txt\n")
    d = _predict(["predict", "--megatron-args", str(bert), "--json"], capsys)
    assert d["job"]["model"]["causal"] is False and d["job"]["model"]["vocab_size"] == 30522
    t5 = tmp_path / "t5.sh"
    t5.write_text(f"torchrun --nproc_per_node 8 pretrain_t5.py {args}\n")
    code, _, err = run(["predict", "--megatron-args", str(t5)], capsys)
    check_one_line_error(code, err, "megatron_args", "pretrain_t5.py")


def test_script_written_deepspeed_config_and_bf16_optimizer(tmp_path, capsys):
    """A Megatron-DeepSpeed script that writes its ds_config with a here-document is read with it; bf16 at ZeRO
    stage 0 runs DeepSpeed's BF16_Optimizer, whose master weights and moments are partitioned over data parallel."""
    script = tmp_path / "bloom.sh"
    script.write_text(
        "#SBATCH --nodes=2\nZ=0\ncfg=./ds.json\ncat <<EOT > $cfg\n"
        '{"train_micro_batch_size_per_gpu": 1, "train_batch_size": 64, "zero_optimization": {"stage": $Z}, '
        '"bf16": {"enabled": true}}\nEOT\n'
        "python -m torch.distributed.run --nproc_per_node 8 --nnodes $SLURM_NNODES pretrain_gpt.py "
        "--num-layers 8 --hidden-size 4096 --num-attention-heads 32 --seq-length 1024 --vocab-size 32000 "
        "--tensor-model-parallel-size 2 --deepspeed --deepspeed_config $cfg --zero-stage $Z --bf16\n")
    d = _predict(["predict", "--megatron-args", str(script), "--json"], capsys)
    j = d["job"]
    assert (j["num_gpus"], j["micro_batch_size"], j["global_batch_size"], j["zero_stage"]) == (16, 1, 64, 0)
    assert j["framework"]["name"] == "megatron-deepspeed"
    assert "writes it to ./ds.json" in json.dumps(d)
    fp16 = _predict(["predict", "--megatron-args", str(script), "--fp16", "--json"], capsys)
    # 1.6B parameters over tp 2: fp16's optimizer keeps 12 bytes per parameter whole, bf16's an eighth (dp 8)
    assert fp16["memory"]["peak_bytes"] - d["memory"]["peak_bytes"] > 0.8e9 * 12 * 7 / 8 * 0.9


def test_moe_launch_lines_issue_experts_as_megatron_does(tmp_path, capsys):
    """Megatron-Core runs the local experts one after another (SequentialMLP) unless --moe-grouped-gemm (TE's
    GroupedLinear: one Python call, one GEMM kernel per expert); the per-expert Python loop waits on its host."""
    args = ("--num-layers 4 --hidden-size 2048 --num-attention-heads 32 --seq-length 1024 --micro-batch-size 1 "
            "--global-batch-size 64 --vocab-size 32000 --num-experts 64 --moe-router-topk 8 --moe-ffn-hidden-size 768 "
            "--expert-model-parallel-size 8 --bf16")
    loop = tmp_path / "loop.sh"
    loop.write_text(f"torchrun --nproc_per_node 8 pretrain_gpt.py {args}\n")
    d = _predict(["predict", "--megatron-args", str(loop), "--json"], capsys)
    assert d["job"]["framework"]["moe_expert_launch"] == "python_loop"
    assert any("SequentialMLP" in n for n in d["megatron_args"]["notes"])
    grouped = tmp_path / "grouped.sh"
    grouped.write_text(f"torchrun --nproc_per_node 8 pretrain_gpt.py {args} --moe-grouped-gemm\n")
    g = _predict(["predict", "--megatron-args", str(grouped), "--json"], capsys)
    assert g["job"]["framework"]["moe_expert_launch"] == "cpp_loop"
    assert g["iteration_time_s"] < d["iteration_time_s"]  # 8 local experts issued from C++, not from Python
    assert g["moe"]["per_stage"][0]["per_iteration"]["host_wait_s"] < d["moe"]["per_stage"][0]["per_iteration"][
        "host_wait_s"]


def test_flash_attention_kernels_from_the_command_line(tmp_path, capsys):
    """--flash-kernel picks the library (FlashAttention-2 is slower on an H100, not on an A100); Megatron-DeepSpeed's
    --use-flash-attn-v2 runs flash-attn 2 in place of its local attention."""
    base = ["predict", "--model", "llama3-8b", "--num-gpus", "8", "--global-batch-size", "16", "--json"]
    h100 = {k: _predict([*base, "--system", "dgx-h100", "--flash-kernel", k], capsys) for k in ("cudnn", "fa2")}
    a100 = {k: _predict([*base, "--system", "dgx-a100", "--flash-kernel", k], capsys) for k in ("cudnn", "fa2")}
    assert h100["fa2"]["job"]["framework"]["flash_kernel"] == "fa2"
    assert h100["fa2"]["iteration_time_s"] > 1.03 * h100["cudnn"]["iteration_time_s"]
    assert a100["fa2"]["iteration_time_s"] == a100["cudnn"]["iteration_time_s"]
    script = tmp_path / "mds.sh"
    script.write_text("deepspeed pretrain_gpt.py --num-layers 4 --hidden-size 2048 --num-attention-heads 16 "
                      "--seq-length 4096 --micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 "
                      "--use-flash-attn-v2 --deepspeed\n")
    d = _predict(["predict", "--megatron-args", str(script), "--json"], capsys)
    assert d["job"]["framework"]["flash_kernel"] == "fa2" and d["job"]["attention"] == "flash"
    # its FlashAttention-1 flags: the first version and the Triton port
    for flag in ("--use-flash-attn-v1", "--use-flash-attn-triton"):
        v1 = tmp_path / "mds_v1.sh"
        v1.write_text(script.read_text().replace("--use-flash-attn-v2", flag))
        d1 = _predict(["predict", "--megatron-args", str(v1), "--json"], capsys)
        assert d1["job"]["framework"]["flash_kernel"] == "fa1" and d1["job"]["attention"] == "flash"
        assert d1["iteration_time_s"] > d["iteration_time_s"]  # the default H100: twice FlashAttention-2's time


def test_ds_sequence_parallel_size_is_ulysses_context_parallelism(tmp_path, capsys):
    script = tmp_path / "ulysses.sh"
    script.write_text("deepspeed pretrain_gpt.py --num-layers 4 --hidden-size 2048 --num-attention-heads 16 "
                      "--seq-length 32768 --micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 "
                      "--ds-sequence-parallel-size 4 --use-flash-attn-v2 --deepspeed\n")
    d = _predict(["predict", "--megatron-args", str(script), "--json"], capsys)
    assert d["job"]["cp"] == 4 and d["job"]["framework"]["cp_comm_type"] == "a2a"
    assert d["breakdown_s"]["cp_comm"] > 0


def test_moe_token_dispatcher_flex_and_its_megatron_spellings(tmp_path, capsys):
    """--moe-token-dispatcher-type flex (and --moe-enable-deepep, --moe-flex-dispatcher-backend) select the
    deduplicating dispatcher; Megatron's allgather (its default) is modelled as the all-to-all with a note."""
    a = parse_megatron_args(["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep"])
    assert a.options["moe_token_dispatcher"] == "flex" and a.unrecognised == []
    assert parse_megatron_args(["--moe-enable-deepep"]).options["moe_token_dispatcher"] == "flex"
    gathered = parse_megatron_args(["--moe-token-dispatcher-type", "allgather"])
    assert "moe_token_dispatcher" not in gathered.options and any("allgather" in n for n in gathered.notes)
    moe = ["predict", "-m", "deepseek-v3", "-s", "dgx-h100", "-n", "512", "--pp", "8", "--ep", "64",
           "--decoder-last-pipeline-num-layers", "5", "--gbs", "512", "--json", "--recompute-granularity", "full"]
    flex = _predict([*moe, "--moe-token-dispatcher-type", "flex"], capsys)
    plain = _predict(moe, capsys)
    assert flex["breakdown_s"]["ep_comm"] < plain["breakdown_s"]["ep_comm"]  # EP64 spans 8 nodes
    code, _, err = run([*moe, "--moe-token-dispatcher-type", "allgather"], capsys)
    check_one_line_error(code, err, "moe_token_dispatcher")


def test_megatron_fp4_flags_select_the_nvfp4_recipe(tmp_path, capsys):
    """Megatron-Core's --fp4-format e2m1 --fp4-recipe nvfp4 on top of --bf16: FP4 GEMMs (trainsim's --fp8-recipe
    nvfp4), echoed as gemm_dtype fp4."""
    a = parse_megatron_args(["--bf16", "--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"])
    assert a.options["fp8"] is True and a.options["bf16"] is False and a.options["fp8_recipe"] == "nvfp4"
    path = tmp_path / "fp4.txt"
    path.write_text("--tensor-model-parallel-size 2 --bf16 --fp4-format e2m1 --fp4-recipe nvfp4\n")
    job = _predict(["predict", "-m", "llama3-8b", "-s", "dgx-b200", "-n", "8", "--gbs", "64", "--json",
                    "--megatron-args", str(path)], capsys)["job"]
    assert (job["precision"], job["fp8_recipe"], job["gemm_dtype"]) == ("fp8", "nvfp4", "fp4")


@pytest.mark.parametrize(("impl", "graphs"), [("transformer_engine", True), ("local", True), ("none", False)])
def test_cuda_graph_impl_is_the_cuda_graphs_switch(impl, graphs):
    """Megatron-Core's --cuda-graph-impl replaced --enable-cuda-graph; its --cuda-graph-scope values (nargs '+')
    are consumed with a note, not listed as unrecognised."""
    a = parse_megatron_args(["--cuda-graph-impl", impl, "--cuda-graph-scope", "attn", "moe_router", "--bf16"])
    assert a.options["enable_cuda_graph"] is graphs and a.options.get("bf16") is True
    assert not a.unrecognised and any("--cuda-graph-scope" in n for n in a.notes)


def test_pasted_command_lines_keep_megatron_semantics(capsys):
    """Pasted on trainsim predict: --bf16 with --fp8-format is FP8 training (bf16 parameters), Megatron's spellings
    of options trainsim also has go to the Megatron reader (--normalization rmsnorm, --attention-backend auto,
    space-separated --recompute-modules), and real Megatron-Core flags are not rejected as typos."""
    d = _predict([*BASE, "--bf16", "--fp8-format", "hybrid", "--normalization", "rmsnorm", "--attention-backend",
                  "auto", "--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp",
                  "--moe-router-dtype", "fp32", "--main-grads-dtype", "fp32", "--cross-entropy-fusion-impl", "te",
                  "--overlap-p2p-communication", "--tp-comm-overlap-cfg", "ub.yaml", "--te-rng-tracker"], capsys)
    assert d["job"]["precision"] == "fp8" and d["job"]["model"]["normalization"] == "RMSNorm"
    assert not d["megatron_args"]["unrecognised"]
    assert any("--moe-router-dtype" in n for n in d["megatron_args"]["notes"])


def test_per_layer_expert_counts_are_a_clear_refusal_and_one_count_is_read():
    with pytest.raises(TrainsimError, match="Pyramid-Residual"):
        parse_megatron_args(["--num-experts", "4", "4", "8", "8"])
    assert parse_megatron_args(["--num-experts", "8", "8"]).options["num_experts"] == 8


@pytest.mark.parametrize(("flags", "vocab"), [
    (["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "deepseek-ai/DeepSeek-V3"], 129280),
    (["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "Qwen/Qwen2.5-7B"], 151936),
    (["--vocab-size", "151643", "--extra-vocab-size", "293"], 151936),
])
def test_vocabulary_of_newer_tokenizers_and_extra_tokens(flags, vocab):
    from trainsim.cli.megatron_args import tokenizer_vocab

    a = parse_megatron_args(flags)
    got = a.options.get("vocab_size") or tokenizer_vocab(a.training.get("_tokenizer_type"),
                                                         a.training.get("_tokenizer_model"), False)
    assert got == vocab


def test_a_flag_given_to_trainsim_replaces_an_unreadable_script_value(tmp_path, capsys):
    """The fix the error names works: --num-layers given to trainsim wins over the script's undefined $NL; a
    state-space entry point is refused before its flags are read; a DeepSpeed config the script neither writes nor
    ships is named in a note, not ignored silently."""
    script = tmp_path / "train.sh"
    script.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers $NL --hidden-size 1024 "
                      "--num-attention-heads 8 --seq-length 1024 --global-batch-size 8 --vocab-size 32000 "
                      "--deepspeed_config ds_missing.json\n")
    code, out, err = run(["predict", "--megatron-args", str(script), "--num-layers", "4", "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["job"]["model"]["num_layers"] == 4
    assert any("ds_missing.json: not found" in n for n in d["megatron_args"]["notes"])
    mamba = tmp_path / "mamba.sh"
    mamba.write_text("torchrun pretrain_mamba.py --tensor-model-parallel-size ${TP}\n")
    code, _, err = run(["predict", "--megatron-args", str(mamba)], capsys)
    check_one_line_error(code, err, "pretrain_mamba.py")


def test_the_job_echo_names_the_recomputed_modules(capsys):
    d = _predict([*BASE, "--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp"], capsys)
    # core_attn is Megatron's selective recomputation itself (the granularity); the modules list keeps the others
    assert d["job"]["recompute_granularity"] == "selective" and d["job"]["recompute_modules"] == ["mlp"]
