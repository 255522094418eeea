"""Measurement rows of sources other than the packaged four (issue 11 item 6): any CSV/Parquet in the schema of
shared/data/published/measurements.csv is turned into jobs by documented rules, unpredictable rows are reported."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from cli_helpers import check_one_line_error, run
from trainsim.predictor import memory_report
from trainsim.spec import Job
from trainsim.spec.framework import list_frameworks
from trainsim.validation.measurements import (
    MEASURED_COLUMNS,
    load_table,
    measured_iteration_time,
    model_flops,
)
from trainsim.validation.report import render_markdown, run_validation
from trainsim.validation.row_rules import family_of, infer_framework, notes_flags
from trainsim.validation.rows import balanced_first_last, weighted_layout

SCHEMA = ["id", "source", "model", "L", "h", "heads", "kv_heads", "ffn", "vocab", "seq", "global_batch", "micro_batch",
          "tp", "pp", "vpp", "dp", "cp", "sp", "recompute", "zero", "gpu", "num_gpus", "gpus_per_node", "nic_per_node",
          "nic_gbps", "precision", *MEASURED_COLUMNS, "notes"]


def row(rid: str, **cells: object) -> dict[str, object]:
    """A small GPT row on 8 H100s (1.3B-like), overridden by ``cells``."""
    base: dict[str, object] = {"id": rid, "source": "Some lab blog", "model": "GPT 1.3B", "L": 24, "h": 2048,
                               "heads": 16, "seq": 2048, "global_batch": 64, "tp": 1, "pp": 1, "gpu": "H100-SXM5-80GB",
                               "num_gpus": 8, "measured_iter_s": 1.0}
    return base | cells


def write(tmp_path, rows: list[dict[str, object]], name: str = "m.csv", drop: tuple[str, ...] = ()):
    extra = [c for r in rows for c in r if c not in SCHEMA]  # extension columns (framework, ep, ...)
    table = pd.DataFrame(rows).reindex(columns=[c for c in [*SCHEMA, *dict.fromkeys(extra)] if c not in drop])
    path = tmp_path / name
    if name.endswith(".parquet"):
        table.to_parquet(path)
    else:
        table.to_csv(path, index=False)
    return path


def one(tmp_path, **cells: object):
    table = load_table(write(tmp_path, [row("x_1", **cells)]))
    assert not table.skipped, table.skipped
    return table.rows[0]


# ---- framework inference ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("source", "notes", "expected"), [
    ("BigScience Megatron-DeepSpeed BLOOM run", "", "megatron-deepspeed"),  # before DeepSpeed
    ("Microsoft DeepSpeed ZeRO-3 blog", "", "deepspeed"),
    ("a paper", "trained with ZeRO-3 offload-free", "deepspeed"),
    ("NVIDIA NeMo performance summary", "", "nemo"),
    ("Megatron-Bridge recipes", "", "nemo"),
    ("NVIDIA-NeMo/Automodel performance summary", "NeMo AutoModel PyTorch backend", "nemo-automodel"),
    ("torchtitan paper (FSDP2 + TP)", "", "torchtitan"),  # before FSDP
    ("PyTorch FSDP paper", "", "fsdp"),
    ("MosaicML llm-foundry benchmarks", "", "llm-foundry"),  # Composer's FSDP with llm-foundry's model code
    ("HF accelerate FSDP run", "", "fsdp"),
    ("Hugging Face transformers Trainer", "", "hf-transformers"),
    ("Megatron-LM paper 2021", "", "megatron-lm-2021"),
    ("Megatron-LM paper 2022", "", "megatron-lm-2021@3.0"),  # the asynchronous TP all-reduce of the 2022 code
    ("Megatron-LM README 2024", "", "megatron-core"),
    ("Megatron-Core scaling", "", "megatron-core"),
    # 2023: Megatron-LM's legacy megatron/model code (--transformer-impl local was the default until 2024) ...
    ("Megatron-LM benchmark 2023", "", "megatron-lm-2021@3.0"),
    # ... unless the run names Transformer Engine or Megatron-Core models, or Megatron-Core itself
    ("Megatron-LM benchmark 2023", "--transformer-impl transformer_engine", "megatron-core"),
    ("Megatron-LM benchmark 2023", "--use-mcore-models", "megatron-core"),
    ("Megatron-Core scaling 2023", "", "megatron-core"),
    ("Megatron-LM (no year)", "", "megatron-core"),
    ("Megatron-LM README 2024", "--use-legacy-models", "megatron-lm-2021@3.0"),
    # vTrain (MICRO 2024) measured Megatron-LM's legacy layers (its model code: FusedScaleMaskSoftmax, apex LayerNorm)
    ("vTrain (Bang et al., MICRO 2024) multi-node validation", "", "megatron-lm-2021@3.0"),
    ("a blog", "run with NeMo 24.12", "nemo"),  # notes when the source names nothing
    ("Megatron-DeepSpeed", "compared with NeMo", "megatron-deepspeed"),  # source before notes
])
def test_framework_keyword_table(source, notes, expected):
    name, rule = infer_framework(None, source, notes)
    assert name == expected, rule
    assert "fallback" not in rule


@pytest.mark.parametrize(("cell", "expected"), [
    ("nemo@24.07", "nemo@24.07"), ("NeMo 25.04", "nemo"), ("PyTorch FSDP2", "fsdp"), ("Megatron-LM 2022",
                                                                                       "megatron-lm-2021@3.0"),
    ("HF transformers", "hf-transformers"), ("DeepSpeed ZeRO-3", "deepspeed"),
])
def test_framework_column_in_words_is_matched_by_the_keyword_table(cell, expected):
    name, rule = infer_framework(cell, "a source naming nothing", "")
    assert name == expected and "framework column" in rule


def test_fp8_megatron_lm_run_is_on_transformer_engine_whatever_its_year():
    assert infer_framework(None, "Megatron-LM 2023 blog", "")[0] == "megatron-lm-2021@3.0"
    assert infer_framework(None, "Megatron-LM 2023 blog", "", fp8=True)[0] == "megatron-core"
    assert infer_framework(None, "Megatron-LM 2021", "", fp8=True)[0] == "megatron-lm-2021"  # no FP8 then anyway
    # a framework written in words takes the year from the source
    assert infer_framework("Megatron-LM", "A cluster study (2023)", "")[0] == "megatron-lm-2021@3.0"
    assert infer_framework("Megatron-LM", "vTrain (MICRO 2024) validation runs", "")[0] == "megatron-lm-2021@3.0"


def test_legacy_megatron_row_reads_flash_attention_and_fp8_from_the_row(tmp_path):
    legacy = one(tmp_path, source="Megatron-LM runs, 2023")
    assert legacy.job.framework.name == "megatron-lm-2021" and legacy.job.framework.async_tp_grad_reduce
    assert legacy.job.attention_path != "flash"
    flash = one(tmp_path, source="Megatron-LM runs, 2023", notes="--use-flash-attn --bf16")
    assert flash.job.attention_path == "flash" and any("attention" in a for a in flash.assumptions)
    assert one(tmp_path, source="Megatron-LM runs, 2023", precision="fp8").job.framework.name == "megatron-core"


def test_framework_column_wins_and_fallback_is_reported():
    assert infer_framework("torchtitan", "NVIDIA NeMo", "")[0] == "torchtitan"
    name, rule = infer_framework(None, "some blog", "no stack named")
    assert name == "megatron-core" and "fallback" in rule


@pytest.mark.parametrize("source", ["Llama Team 2024 'The Llama 3 Herd of Models'", "Meta: Llama 3.1 405B training",
                                    "Llama 3 pre-training at Meta (paper section 3.3)"])
def test_llama3_paper_uses_its_profile_when_shipped(source):
    name, _ = infer_framework(None, source, "")
    assert name == ("meta-llama3" if "meta-llama3" in list_frameworks() else "megatron-core")


def test_parallelism_the_profile_lacks_selects_the_extended_stack():
    assert infer_framework(None, "DeepSpeed ZeRO-3", "", (8, 1, 1))[0] == "megatron-deepspeed"  # TP via Megatron
    assert infer_framework(None, "DeepSpeed ZeRO-3", "", (1, 4, 1))[0] == "deepspeed"  # its own pipeline engine
    assert infer_framework(None, "PyTorch FSDP", "", (1, 4, 1))[0] == "torchtitan"
    assert infer_framework(None, "PyTorch FSDP", "", (1, 1, 1))[0] == "fsdp"


def test_meta_without_llama3_is_not_the_llama3_stack():
    assert infer_framework(None, "PyTorch FSDP paper (Meta AI)", "")[0] == "fsdp"


def test_framework_reaches_the_job_and_is_reported(tmp_path):
    m = one(tmp_path, source="Hugging Face transformers")
    assert m.job.framework.name == "hf-transformers"
    assert any("framework hf-transformers" in a for a in m.assumptions)
    assert one(tmp_path, framework="fsdp").job.framework.name == "fsdp"


# ---- empty cells: the framework's defaults ------------------------------------------------------------------------
def test_empty_cells_take_the_framework_defaults(tmp_path):
    nemo = one(tmp_path, source="NeMo", tp=2)
    assert nemo.job.training.precision == "bf16"
    assert nemo.job.parallelism.sequence_parallel  # NeMo recipes: SP with TP
    assert nemo.job.training.zero_stage == 1  # distributed optimizer
    assert nemo.job.training.micro_batch_size == 1
    mcore = one(tmp_path, source="Megatron-Core", tp=2)
    assert not mcore.job.parallelism.sequence_parallel and mcore.job.training.zero_stage == 0
    old = one(tmp_path, source="Megatron-LM 2021")
    assert old.job.training.precision == "fp16" and not old.job.training.overlap_p2p_comm
    assert one(tmp_path, source="PyTorch FSDP").job.training.zero_stage == 3
    stated = one(tmp_path, source="NeMo", tp=2, sp="off", precision="FP8", micro_batch=2, zero="none")
    assert not stated.job.parallelism.sequence_parallel and stated.job.training.precision == "fp8"
    assert stated.job.training.micro_batch_size == 2 and stated.job.training.zero_stage == 0


@pytest.mark.parametrize(("cells", "field", "expected"), [
    ({"zero": "ZeRO-3"}, "zero_stage", 3), ({"zero": "3 (FSDP)"}, "zero_stage", 3),
    ({"zero": "FULL_SHARD", "source": "PyTorch FSDP"}, "zero_stage", 3),
    ({"zero": "distributed optimizer"}, "zero_stage", 1), ({"zero": "stage 2", "source": "DeepSpeed"}, "zero_stage", 2),
    ({"recompute": "full (uniform, every layer)"}, "recompute_granularity", "full"),
    ({"recompute": "activation checkpointing"}, "recompute_granularity", "full"),
    ({"recompute": "Selective"}, "recompute_granularity", "selective"),
    ({"precision": "FP8 (MXFP8)", "gpu": "B200"}, "fp8_recipe", "mxfp8"),
    ({"precision": "FP8-MX", "gpu": "B200"}, "fp8_recipe", "mxfp8"),  # NeMo performance-summary labels
    ({"precision": "FP8-CS"}, "fp8_recipe", "tensorwise"),
    ({"precision": "bf16_with_fp8_current_scaling_mixed"}, "fp8_recipe", "tensorwise"),  # Megatron-Bridge
    ({"precision": "fp8 delayed scaling"}, "fp8_recipe", "delayed"),
    ({"precision": "Float8 rowwise", "source": "torchtitan"}, "fp8_recipe", "blockwise"),
    ({"precision": "FP8"}, "fp8_recipe", None),
    ({"precision": "bfloat16"}, "precision", "bf16"),
    ({"precision": "Float8 (rowwise)", "source": "torchtitan"}, "precision", "fp8"),
    ({"precision": "FP8 E4M3 (hybrid)"}, "precision", "fp8"),
    ({"precision": "AMP", "source": "Megatron-LM 2021"}, "precision", "fp16"),  # the framework's default 16-bit type
    ({"precision": "mixed precision", "source": "NeMo"}, "precision", "bf16"),
])
def test_cells_written_in_words(tmp_path, cells, field, expected):
    assert getattr(one(tmp_path, **cells).job.training, field) == expected


def test_unreadable_cell_is_reported(tmp_path):
    table = load_table(write(tmp_path, [row("ok_1"), row("z_1", zero="sometimes")]))
    assert [s.id for s in table.skipped] == ["z_1"] and table.skipped[0].reason.startswith("zero:")


def test_gpt_presets_under_nemo_train_without_dropout(tmp_path):
    gpt3 = one(tmp_path, model="GPT-3 175B", L=96, h=12288, heads=96, vocab=51200, num_gpus=512, tp=8, pp=8, vpp=6,
               global_batch=2048, source="NVIDIA NeMo performance summary").job.model
    assert gpt3.hidden_dropout == 0.0 and gpt3.vocab_size == 51200 and not gpt3.swiglu
    bloom = one(tmp_path, model="BLOOM 176B", L=70, h=14336, heads=112, tp=4, pp=12, num_gpus=384, global_batch=2048,
                source="BigScience Megatron-DeepSpeed").job
    assert bloom.model.position_embedding_type == "alibi" and bloom.model.hidden_dropout == 0.0


def test_an_moe_run_short_of_memory_recomputes_modules_before_layers(tmp_path):
    """DeepSeek-V3 on 256 GB200s as Megatron-Bridge runs it (PP 8 with 4 virtual stages, MXFP8) but with EP 16 (16
    local experts): without recomputation it would not fit; Megatron-Core's fine-grained recomputation of the MLA
    up-projections suffices, so no layer is recomputed whole."""
    m = one(tmp_path, source="Megatron-Bridge performance summary 25.11 (2025)", model="DeepSeek-V3", L=61, h=7168,
            heads=128, ffn=18432, vocab=129280, seq=4096, global_batch=4096, micro_batch=1, tp=1, pp=8, vpp=4,
            gpu="GB200", num_gpus=256, precision="fp8 (FP8-MX)", notes="EP16")
    tr = m.job.training
    assert tr.recompute_modules == ("mla_up_proj",) and tr.recompute_granularity == "none"
    assert any(a.startswith("recompute modules mla_up_proj (unstated") for a in m.assumptions)
    assert memory_report(m.job).fits
    assert not memory_report(m.job.replace(training=tr.replace(recompute_modules=()))).fits
    # a dense model has no such modules: Megatron's block recomputation, as before
    dense = one(tmp_path, source="Megatron-Core 2024", model="GPT 6.7B", L=32, h=4096, heads=32, seq=4096,
                global_batch=256, tp=2, zero="none", micro_batch=4)
    assert dense.job.training.recompute_modules == () and dense.job.training.recompute_granularity == "full"


def test_unstated_recompute_is_the_lightest_that_fits(tmp_path):
    cells = {"source": "Megatron-Core 2024", "model": "GPT 6.7B", "L": 32, "h": 4096, "heads": 32, "seq": 4096,
             "global_batch": 256, "tp": 2, "zero": "none"}  # stated: no distributed optimizer to turn on first
    assert one(tmp_path, **cells, micro_batch=1).job.training.recompute_granularity == "none"  # fits without
    m = one(tmp_path, **cells, micro_batch=4)  # does not fit without recomputation: the run ran, so it recomputed
    # Megatron's block method: full recomputation of the fewest layers per chunk with which the run fits
    n = m.job.training.recompute_num_layers
    assert m.job.training.recompute_granularity == "full" and n is not None and 1 <= n < 32
    assert any(f"recompute full of {n} layers" in a and "fits in memory" in a for a in m.assumptions)
    old = one(tmp_path, **(cells | {"source": "Megatron-LM 2021"}), micro_batch=1)  # s² scores kept: selective suffices
    assert old.job.training.recompute_granularity == "selective"
    stated = one(tmp_path, **cells, micro_batch=4, recompute="none")  # a stated value is never changed
    assert stated.job.training.recompute_granularity == "none"
    free = one(tmp_path, **(cells | {"zero": None}), micro_batch=4)  # unstated: the distributed optimizer comes first
    assert free.job.training.zero_stage == 1 and free.job.training.recompute_granularity == "none"
    # torchtitan's selective checkpointing is op-level: it saves memory with flash attention too, so it comes first
    titan = one(tmp_path, source="torchtitan", model="Llama 3.1 8B", L=32, h=4096, heads=32, kv_heads=8, ffn=14336,
                vocab=128256, seq=8192, global_batch=16, micro_batch=2)
    assert titan.job.training.recompute_granularity == "selective"


def test_unstated_micro_batch_is_the_local_batch_for_sharded_and_hf_stacks(tmp_path):
    """FSDP, DeepSpeed, Hugging Face and torchtitan runs process the local batch at once unless a record says
    otherwise (no gradient accumulation by default); halved until it fits. Megatron stacks keep micro-batch 1."""
    cells = {"model": "GPT 1.3B", "global_batch": 64, "num_gpus": 8, "recompute": "full"}  # local batch 8
    fsdp = one(tmp_path, **cells, source="PyTorch FSDP blog")
    assert fsdp.job.training.micro_batch_size == 8 and fsdp.job.num_microbatches == 1
    megatron = one(tmp_path, **cells, source="Megatron-Core 2024")
    assert megatron.job.training.micro_batch_size == 1
    stated = one(tmp_path, **cells, source="PyTorch FSDP blog", micro_batch=2)
    assert stated.job.training.micro_batch_size == 2
    big = {"model": "Llama 2 7B", "L": 32, "h": 4096, "heads": 32, "seq": 4096, "global_batch": 512,
           "num_gpus": 8, "gpu": "A100-SXM4-80GB", "recompute": "none", "source": "Hugging Face transformers"}
    halved = one(tmp_path, **big)  # 64 sequences per GPU without recomputation cannot fit
    assert 1 <= halved.job.training.micro_batch_size < 64 and 64 % halved.job.training.micro_batch_size == 0
    assert any("would not fit" in a for a in halved.assumptions)


# ---- GPUs ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("gpu", "system", "capacity_gb"), [
    ("H200", "hgx-h200", None), ("NVIDIA H200 141GB HBM3e", "hgx-h200", None), ("B200", "dgx-b200", None),
    ("A100-SXM4-80GB", "dgx-a100", None), ("A100 40GB", "dgx-a100", 40 * 2**30 / 1e9),
    ("H100 80GB HBM3", "dgx-h100", None),
])
def test_gpu_names_map_to_system_presets(tmp_path, gpu, system, capacity_gb):
    m = one(tmp_path, gpu=gpu)
    assert m.job.system.name == system
    if capacity_gb is not None:
        assert m.job.system.gpu.hbm_capacity / 1e9 == pytest.approx(capacity_gb)
        assert m.job.system.gpu.hbm_bandwidth == pytest.approx(1555e9)


def test_gb200_tray_is_not_the_nvlink_domain(tmp_path):
    m = one(tmp_path, gpu="GB200", gpus_per_node=4, nic_per_node=4, nic_gbps=400, num_gpus=64)
    assert m.job.system.name == "nvl72-gb200"
    assert m.job.system.gpus_per_node == 72
    assert m.job.system.network.nics_per_node == 72  # one NIC per GPU, as in the tray
    h100 = one(tmp_path, gpus_per_node=4, nic_per_node=2, nic_gbps=200)
    assert h100.job.system.gpus_per_node == 4 and h100.job.system.network.nics_per_node == 2
    assert h100.job.system.network.nic_bandwidth == pytest.approx(200e9 / 8)


@pytest.mark.parametrize("gpu", ["MI300X", "H100 PCIe", "TPU v5p"])
def test_unknown_gpu_is_reported_not_a_crash(tmp_path, gpu):
    table = load_table(write(tmp_path, [row("ok_1"), row("bad_1", gpu=gpu)]))
    assert [r.id for r in table.rows] == ["ok_1"]
    assert [s.id for s in table.skipped] == ["bad_1"]
    assert table.skipped[0].reason.startswith("gpu:") and gpu in table.skipped[0].reason


# ---- models -------------------------------------------------------------------------------------------------------
def test_model_families_from_the_name(tmp_path):
    llama3 = one(tmp_path, model="Llama 3 8B", L=32, h=4096, heads=32, kv_heads=8, ffn=14336).job.model
    assert llama3.swiglu and llama3.normalization == "RMSNorm" and llama3.vocab_size == 128256
    assert not llama3.add_bias_linear and llama3.untie_embeddings_and_output_weights
    qwen = one(tmp_path, model="Qwen2.5 1.5B").job.model
    assert qwen.add_qkv_bias and qwen.vocab_size == 151936
    nemotron = one(tmp_path, model="Nemotron-4 15B").job.model
    assert not nemotron.swiglu and nemotron.vocab_size == 256000 and nemotron.position_embedding_type == "rope"
    assert one(tmp_path, model="BLOOM 1B").job.model.position_embedding_type == "alibi"
    gpt = one(tmp_path).job.model
    assert gpt.vocab_size == 50257 and gpt.position_embedding_type == "learned_absolute" and gpt.ffn_size == 4 * 2048
    assert family_of("LLaMA 30B").name == "llama"  # Llama 1 30B is not Llama 3


def test_moe_rows_use_the_preset_of_their_shape_or_are_reported(tmp_path):
    mix = one(tmp_path, model="Mixtral 8x7B", L=32, h=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000, tp=1, pp=1,
              num_gpus=64, global_batch=256, source="NeMo")
    assert mix.job.model.num_experts == 8
    table = load_table(write(tmp_path, [row("moe_1", model="Foo-MoE 10B")]))
    assert not table.rows and "mixture-of-experts" in table.skipped[0].reason


# ---- pipeline split -----------------------------------------------------------------------------------------------
def test_126_layers_over_pp16_count_embedding_and_loss(tmp_path):
    m = one(tmp_path, model="Llama 3 405B", L=126, h=16384, heads=128, kv_heads=8, ffn=53248, vocab=128256, seq=8192,
            tp=8, pp=16, num_gpus=16384, global_batch=2048, framework="megatron-core", zero=1, gpu="H100")
    par = m.job.parallelism
    assert par.account_for_embedding_in_pipeline_split and par.account_for_loss_in_pipeline_split
    assert m.job.layers_per_stage == (7, *[8] * 14, 7)


def test_empty_vpp_takes_the_stacks_documented_interleaving(tmp_path):
    llama = dict(model="Llama 3 405B", L=126, h=16384, heads=128, kv_heads=8, ffn=53248, vocab=128256, seq=8192,
                 tp=8, pp=16, num_gpus=16384, global_batch=2048, gpu="H100")
    meta = one(tmp_path, source="Llama Team, The Llama 3 Herd of Models", **llama)
    assert meta.job.framework.name == "meta-llama3"
    assert meta.job.parallelism.vpp == 8  # one slot (layer, embedding or loss) per chunk: 128 / 16
    assert any(a.startswith("vpp 8") for a in meta.assumptions)
    stated = one(tmp_path, source="Llama Team, The Llama 3 Herd of Models", vpp=2, **llama)
    assert stated.job.parallelism.vpp == 2  # a stated value is never changed
    megatron = one(tmp_path, framework="megatron-core", zero=1, **llama)
    assert megatron.job.parallelism.vpp == 1  # Megatron: an empty cell is not interleaved


def test_first_last_stage_layers_from_the_notes_or_balanced_or_reported(tmp_path):
    m = one(tmp_path, L=29, pp=4, notes="uneven split: first stage 5 layers, last stage 8 layers")
    assert m.job.layers_per_stage == (5, 8, 8, 8)
    # unstated: the middle stages take the fewest layers that leave the first and last no more (61 over 16: 4 each,
    # first 3, last 2, as DeepSeek-V3's 61 layers over 16 pipeline ranks must split unevenly)
    m = one(tmp_path, L=61, pp=16, num_gpus=16, global_batch=32)
    assert m.job.layers_per_stage == (3, *[4] * 14, 2)
    assert any(a.startswith("first/last stage layers 3/2 (unstated") for a in m.assumptions)
    # two pipeline ranks have no middle stage: a split is found or none, never a search without end
    assert balanced_first_last(61, 2, 4) is None and balanced_first_last(61, 2, 1) == (31, 30, 31)
    # interleaved, no first/last split whose counts are multiples of vpp: a layout weighing the embedding and the
    # loss as one layer each, as even as that allows (DeepSeek-V3's 61 layers over 2 ranks of 4 chunks: 63 units)
    assert weighted_layout(61, 2, 4) == "E" + "t" * 6 + "|" + "|".join(["t" * 8] * 6) + "|" + "t" * 7 + "L"
    m = one(tmp_path, L=61, pp=2, vpp=4, num_gpus=16, global_batch=32)
    assert m.job.virtual_stage_layers == (6, *[8] * 6, 7)
    assert any(a.startswith("pipeline layout Etttttt|") and "unstated" in a for a in m.assumptions)
    m = one(tmp_path, L=61, pp=16, vpp=2, num_gpus=16, global_batch=32)  # 32 chunks: the first holds the embedding
    assert m.job.virtual_stage_layers == (0, *[2] * 30, 1)
    assert weighted_layout(61, 4, 1) is None and weighted_layout(3, 4, 2) is None  # not interleaved; too few layers
    table = load_table(write(tmp_path, [row("odd_1", L=5, pp=4, vpp=2, num_gpus=8, global_batch=32)]))
    assert not table.rows and table.skipped[0].reason.startswith("L:")  # 7 units over 8 chunks: reported


# ---- engines ------------------------------------------------------------------------------------------------------
def test_deepspeed_zero3_row_is_predicted(tmp_path):
    path = write(tmp_path, [row("ds_1", source="DeepSpeed ZeRO-3 tutorial", zero=3, gpu="A100-SXM4-40GB",
                                num_gpus=16, global_batch=64, recompute="full")])
    report = run_validation(measurements=path)
    assert [r.id for r in report.rows] == ["ds_1"] and not report.skipped
    m = load_table(path).rows[0]
    assert m.job.dp_engine == "deepspeed-zero" and m.job.training.zero_stage == 3
    assert report.rows[0].fits and report.rows[0].predicted_s > 0


# ---- measured time ------------------------------------------------------------------------------------------------
def test_measured_time_from_each_measured_column(tmp_path):
    cells = {"measured_iter_s": None}
    base = one(tmp_path, measured_iter_s=2.5)
    assert base.measured_iter_s == 2.5
    tok = one(tmp_path, **cells, measured_tokens_per_s_per_gpu=4096.0)
    assert tok.measured_iter_s == pytest.approx(64 * 2048 / (4096.0 * 8))
    model = base.job.model
    flops = 12.0 * 64 * 2048 * 24 * 2048**2 * ((1 + 1 + 2048 / 2048) + 4 + 50257 / (2 * 24 * 2048))
    assert model_flops(model, 64, 2048, 50257) == pytest.approx(flops)
    tf = one(tmp_path, **cells, measured_tflops_per_gpu=400.0)
    assert tf.measured_iter_s == pytest.approx(flops / (400e12 * 8))
    peak = 989.4e12  # H100 dense bf16: the MFU denominator, also for FP8 runs
    for mfu in (0.4, 40):
        m = one(tmp_path, **cells, measured_mfu=mfu, precision="fp8")
        assert m.measured_iter_s == pytest.approx(flops / (0.4 * peak * 8))
    first = one(tmp_path, measured_iter_s=3.0, measured_tokens_per_s_per_gpu=1.0)  # iter_s wins
    assert first.measured_iter_s == 3.0


def test_row_without_a_measured_value_is_reported(tmp_path):
    table = load_table(write(tmp_path, [row("ok_1"), row("none_1", measured_iter_s=None)]))
    assert [s.id for s in table.skipped] == ["none_1"] and "measured" in table.skipped[0].reason


def test_sc21_hardware_flop_formula_only_for_sc21_rows():
    from trainsim.spec.model import Model

    model = Model(num_layers=24, hidden_size=2048, num_attention_heads=16, vocab_size=51200)
    sc21 = 96.0 * 64 * 2048 * 24 * 2048**2 * (1 + 2048 / (6 * 2048) + 51200 / (16 * 24 * 2048))
    cells = {"measured_iter_s": None, "measured_tflops_per_gpu": 100.0, "vocab": 51200}
    assert measured_iteration_time(pd.Series(row("sc21_x", **cells)), model) == pytest.approx(sc21 / (100e12 * 8))
    other = measured_iteration_time(pd.Series(row("lab_x", **cells)), model)
    assert other == pytest.approx(model_flops(model, 64, 2048, 51200) / (100e12 * 8))
    assert other != pytest.approx(sc21 / (100e12 * 8))


# ---- report, memory flag, files -----------------------------------------------------------------------------------
def test_report_lists_unpredicted_and_unfit_rows(tmp_path):
    path = write(tmp_path, [row("ok_1"), row("gpu_1", gpu="MI250X"),
                            row("oom_1", model="Llama 2 70B", L=80, h=8192, heads=64, kv_heads=8, ffn=28672,
                                vocab=32000, num_gpus=8, global_batch=8, seq=4096)])
    report = run_validation(measurements=path)
    assert {r.id for r in report.rows} == {"ok_1", "oom_1"}
    assert [r.id for r in report.unfit()] == ["oom_1"]
    assert [s.id for s in report.skipped] == ["gpu_1"]
    assert all(r.held_out_s is None for r in report.rows)  # shipped constants, no refit
    text = render_markdown(report)
    assert "## Rows not predicted" in text and "| gpu_1 |" in text
    assert "Predicted not to fit although they ran" in text and "oom_1" in text
    assert "## Assumptions per row" in text


def test_parquet_files_are_read(tmp_path):
    table = load_table(write(tmp_path, [row("pq_1")], name="m.parquet"))
    assert [r.id for r in table.rows] == ["pq_1"]


def test_file_options_are_checked(tmp_path):
    path = write(tmp_path, [row("ok_1")])
    with pytest.raises(ValueError, match="held-out"):
        run_validation(measurements=path, held_out=True)
    with pytest.raises(ValueError, match="packaged"):
        run_validation(measurements=path, refit=True)


def test_packaged_table_has_no_unpredicted_row():
    assert load_table().skipped == ()
    assert load_table().path is None


# ---- CLI ----------------------------------------------------------------------------------------------------------
def test_cli_validates_a_file_and_reports_skipped_rows(tmp_path, capsys):
    path = write(tmp_path, [row("ok_1", source="NeMo", gpu="H200"), row("bad_1", gpu="MI300X")])
    code, out, err = run(["validate", "--measurements", str(path), "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert [r["id"] for r in data["rows"]] == ["ok_1"] and data["rows"][0]["framework"] == "nemo"
    assert data["not_predicted"][0]["id"] == "bad_1" and data["measurements"] == str(path)
    code, out, err = run(["validate", "--measurements", str(path)], capsys)
    assert code == 0 and "not predicted: bad_1: gpu:" in out


@pytest.mark.parametrize("problem", ["missing-column", "no-measured-column", "no-file", "duplicate-id", "held-out"])
def test_cli_file_problems_are_one_line_errors(tmp_path, capsys, problem):
    args = ["validate", "--measurements"]
    if problem == "missing-column":
        args += [str(write(tmp_path, [row("a_1")], drop=("heads",)))]
        words = ["'heads'", "add the column"]
    elif problem == "no-measured-column":
        args += [str(write(tmp_path, [row("a_1")], drop=MEASURED_COLUMNS))]
        words = ["measured_iter_s"]
    elif problem == "no-file":
        args += [str(tmp_path / "missing.csv")]
        words = ["missing.csv"]
    elif problem == "duplicate-id":
        args += [str(write(tmp_path, [row("a_1"), row("a_1")]))]
        words = ["'id'", "a_1"]
    else:
        args += [str(write(tmp_path, [row("a_1")])), "--held-out"]
        words = ["--held-out"]
    code, _out, err = run(args, capsys)
    check_one_line_error(code, err, *words)


def test_generic_rules_reproduce_every_packaged_row(tmp_path):
    """The packaged rows under ids no source default knows: framework from the source text, settings from the notes'
    Megatron flags and the framework defaults give the same jobs and measured times as the hand-written defaults."""
    from importlib import resources

    from trainsim.estimate import estimate

    with (resources.files("trainsim") / "data" / "published" / "measurements.csv").open() as f:
        table = pd.read_csv(f)
    legacy = {m.id: m for m in load_table().rows}
    table["id"] = "x" + table["id"]
    path = tmp_path / "renamed.csv"
    table.to_csv(path, index=False)
    generic = load_table(path)
    assert not generic.skipped
    assert len(generic.rows) == len(legacy) == 39
    for m in generic.rows:
        old = legacy[m.id[1:]]
        assert m.job.framework.name == old.job.framework.name, m.id
        assert m.measured_iter_s == pytest.approx(old.measured_iter_s, rel=1e-12), m.id
        assert estimate(m.job).iteration_time_s == pytest.approx(estimate(old.job).iteration_time_s, rel=1e-9), m.id


def test_megatron_flags_in_the_notes_fill_empty_cells(tmp_path):
    m = one(tmp_path, source="Megatron-Core", tp=2, notes="ran with --overlap-param-gather --tp-comm-overlap "
            "--recompute-granularity selective --micro-batch-size 2")
    tr = m.job.training
    assert m.job.parallelism.sequence_parallel and tr.zero_stage == 1  # implied by the two overlap flags
    assert tr.overlap_param_gather and tr.tp_comm_overlap and tr.recompute_granularity == "selective"
    assert tr.micro_batch_size == 2
    cell = one(tmp_path, source="Megatron-Core", tp=2, sp="off", notes="--sequence-parallel in other runs")
    assert not cell.job.parallelism.sequence_parallel  # a cell wins over the notes


def test_deepspeed_tflops_use_eq3_with_the_recompute_factor(tmp_path):
    from trainsim.validation.measurements import eq3_flops

    cells = {"source": "Megatron-DeepSpeed", "measured_iter_s": None, "measured_tflops_per_gpu": 150.0,
             "vocab": 50257}
    full = one(tmp_path, **cells, recompute="full")
    assert full.measured_iter_s == pytest.approx(eq3_flops(full.job.model, 64, 2048, 50257, True) / (150e12 * 8))
    none = one(tmp_path, **cells, recompute="none")
    assert none.measured_iter_s == pytest.approx(full.measured_iter_s * 3 / 4)


def test_numbers_written_with_separators_and_percent(tmp_path):
    m = one(tmp_path, num_gpus="1,024", global_batch="2,048", measured_iter_s=None, measured_mfu="41%",
            gpu="H100", tp=8, pp=4)
    assert m.job.num_gpus == 1024
    ref = one(tmp_path, num_gpus=1024, global_batch=2048, measured_iter_s=None, measured_mfu=0.41, gpu="H100", tp=8,
              pp=4)
    assert m.measured_iter_s == pytest.approx(ref.measured_iter_s)


def test_column_names_with_spaces_are_read(tmp_path):
    path = write(tmp_path, [row("p_1")])
    lines = path.read_text().splitlines()
    path.write_text("\n".join([", ".join(lines[0].split(",")), *lines[1:]]) + "\n")
    assert [r.id for r in load_table(path).rows] == ["p_1"]


def test_blackwell_only_file_reports_the_constants_it_used(tmp_path):
    path = write(tmp_path, [row("bw_1", gpu="B200", source="NeMo"), row("bw_2", gpu="GB200", gpus_per_node=4,
                                                                        source="NeMo")], name="bw.parquet")
    report = run_validation(measurements=path)
    assert {r.id for r in report.rows} == {"bw_1", "bw_2"}
    assert set(report.calibrations) == {"blackwell"}
    assert "| gemm_efficiency |" in render_markdown(report)


def test_megatron_tflops_convention_follows_the_code_year(tmp_path):
    """SC'21 Eq. 3 (recompute counted) for the 2021 code; model FLOPs for Megatron-LM from 2022 on."""
    from trainsim.validation.measurements import eq3_flops, model_flops

    cells = {"measured_iter_s": None, "measured_tflops_per_gpu": 150.0, "vocab": 50257, "recompute": "full"}
    old = one(tmp_path, source="Megatron-LM 2021", **cells)
    assert old.measured_iter_s == pytest.approx(eq3_flops(old.job.model, 64, 2048, 50257, True) / (150e12 * 8))
    new = one(tmp_path, source="Megatron-LM 2023", **cells)
    assert new.job.framework.label == "megatron-lm-2021@3.0"
    assert new.measured_iter_s == pytest.approx(model_flops(new.job.model, 64, 2048, 50257) / (150e12 * 8))
    assert not any("Eq. 3" in a for a in new.assumptions)


def test_global_batch_not_a_multiple_of_dp_is_compared_at_the_measured_throughput(tmp_path):
    """OPT-175B: 2M tokens (1,024 sequences) on 992 GPUs (dp 124) - the run is predicted with 992 sequences and the
    measured time scaled by 992/1024, so the comparison is per token."""
    from trainsim.validation.rows import whole_batch

    batch, mbs, notes = whole_batch(1024, 124, 1)
    assert (batch, mbs) == (992, 1) and notes
    assert whole_batch(1024, 128, 2) == (1024, 2, [])
    assert whole_batch(100, 64, 1)[:2] == (128, 1)  # the nearest multiple, at least one step
    # fewer sequences per replica than the stated micro-batch, but a whole number: that is the micro-batch
    batch, mbs, notes = whole_batch(1024, 512, 8)
    assert (batch, mbs) == (1024, 2) and "micro_batch 2 instead of 8" in notes[0]
    cells = {"measured_iter_s": 2.0, "tp": 1, "pp": 1}
    odd = one(tmp_path, global_batch=62, num_gpus=8, **cells)  # dp 8: 62 -> 64
    assert odd.job.training.global_batch_size == 64
    assert odd.measured_iter_s == pytest.approx(2.0 * 64 / 62)
    assert any("global_batch 64 instead of 62" in a for a in odd.assumptions)
    even = one(tmp_path, global_batch=64, num_gpus=8, **cells)
    assert even.measured_iter_s == pytest.approx(2.0) and not any("instead of" in a for a in even.assumptions)


def test_unstated_zero_turns_on_the_distributed_optimizer_only_when_the_run_would_not_fit(tmp_path):
    """A run that ran fit: with the optimizer states replicated a 7B model on 8 H100s cannot, so the unstated
    stage becomes Megatron's distributed optimizer (it costs no compute, recomputation comes after it); a 13B model
    does not fit even so (fp32 gradient buffer, 16-bit weights), so it runs Megatron-FSDP (ZeRO-3)."""
    big = {"model": "GPT 7B", "L": 32, "h": 4096, "heads": 32, "source": "Megatron-Core scaling", "num_gpus": 8,
           "global_batch": 16}
    m = one(tmp_path, **big)
    assert m.job.training.zero_stage == 1
    assert any(a.startswith("zero 1 (unstated") for a in m.assumptions)
    stated = one(tmp_path, **big, zero="none")  # a stated stage is kept, even when it does not fit
    assert stated.job.training.zero_stage == 0
    bigger = one(tmp_path, **big | {"model": "GPT 13B", "L": 40, "h": 5120, "heads": 40})
    assert bigger.job.training.zero_stage == 3 and any("fully sharded" in a for a in bigger.assumptions)
    small = one(tmp_path, source="Megatron-Core scaling")  # 1.3B fits with the profile's default
    assert small.job.training.zero_stage == 0 and any("profile's default stage" in a for a in small.assumptions)


@pytest.mark.parametrize(("cells", "stage", "where"), [
    ({"source": "DeepSpeed ZeRO-3 blog"}, 3, "source"),
    ({"source": "DeepSpeed blog", "notes": "trained with ZeRO stage 2"}, 2, "notes"),
    ({"source": "Megatron-DeepSpeed", "notes": "--zero-stage 1"}, 1, "notes"),
    ({"source": "DeepSpeed ZeRO-3 blog", "zero": "1"}, 1, None),  # the cell wins
])
def test_zero_stage_named_in_the_text(tmp_path, cells, stage, where):
    m = one(tmp_path, **cells)
    assert m.job.training.zero_stage == stage
    if where is not None:
        assert f"zero {stage} (named in the {where})" in m.assumptions


@pytest.mark.parametrize(("notes", "path", "kernel"), [
    ('attn_implementation="eager", gradient checkpointing', "eager", "fa2"),
    ("attn_implementation=sdpa", "flash", "fa2"),  # transformers 4.x's PyTorch: SDPA's flash backend
    ("FlashAttention-2", "flash", "fa2"),
    ("attn_implementation=flash_attention_3", "flash", "fa3"),
    ("cuDNN attention", "flash", "cudnn"),
    ("flash-attn 1.0.4", "flash", "fa1"),  # FlashAttention-1
])
def test_hf_attention_implementation_in_the_notes(tmp_path, notes, path, kernel):
    m = one(tmp_path, source="Hugging Face transformers Trainer", notes=notes, recompute="full")
    assert m.job.attention_path == path and m.job.framework.flash_kernel == kernel


@pytest.mark.parametrize(("source", "notes", "kernel"), [
    ("Hugging Face transformers Trainer", "PyTorch 2.11.0, sdpa", "cudnn"),
    ("PyTorch FSDP", "torch==2.4.1", "fa2"),
    ("PyTorch FSDP", "torch 2.1.2", "fa1"),  # SDPA's flash backend before 2.2: FlashAttention-1
    ("Hugging Face transformers Trainer", "torch 2.11, attn_implementation=flash_attention_2", "fa2"),  # named
    ("torchtitan 2025", "PyTorch 2.11", "cudnn-blackwell"),  # its own SDPA backend list, whatever the release
])
def test_the_pytorch_release_decides_sdpa_attention(tmp_path, source, notes, kernel):
    m = one(tmp_path, source=source, notes=notes, recompute="full")
    assert m.job.framework.flash_kernel == kernel


def test_fp8_param_gather_in_the_notes(tmp_path):
    m = one(tmp_path, source="NeMo 24.07 performance summary", precision="fp8", notes="fp8_param_gather=True")
    assert m.job.training.fp8_param_gather and m.job.training.zero_stage == 1
    assert not one(tmp_path, source="NeMo", precision="bf16", notes="--fp8-param-gather").job.training.fp8_param_gather
    mcore = one(tmp_path, source="Megatron-Core 2024", precision="fp8", notes="--fp8-param-gather")
    assert mcore.job.training.fp8_param_gather and mcore.job.training.zero_stage == 1  # implies the dist. optimizer


@pytest.mark.parametrize("name", ["Nemotron-H 56B", "Mamba2-Hybrid 8B", "Jamba 1.5 Large", "RWKV-7 3B"])
def test_state_space_models_are_reported_not_predicted_as_transformers(tmp_path, name):
    table = load_table(write(tmp_path, [row("ok_1"), row("ssm_1", model=name)]))
    assert [s.id for s in table.skipped] == ["ssm_1"] and "Mamba" in table.skipped[0].reason
    assert one(tmp_path, model="Nemotron-4 15B", L=32, h=6144, heads=48).job.model.num_layers == 32  # not Nemotron-H


def test_export_variant_gpus_map_to_their_presets(tmp_path):
    assert one(tmp_path, gpu="H800 SXM5 80GB").job.system.name == "hgx-h800"
    assert one(tmp_path, gpu="NVIDIA A800-SXM4-80GB").job.system.name == "hgx-a800"


@pytest.mark.parametrize("gpu", ["H100 (Grand Teton, 96GB HBM2e, 500W)", "H100 96 GB HBM2e", "NVIDIA H100 500W"])
def test_power_limited_hbm2e_h100_is_the_grand_teton_preset(tmp_path, gpu):
    """torchtitan's benchmark part (96 GB HBM2e at 2.4 TB/s, 500 W limit): its own preset, slower than the SXM5 80GB."""
    job = one(tmp_path, gpu=gpu).job
    assert job.system.name == "grand-teton-h100"
    assert job.system.gpu.hbm_bandwidth == pytest.approx(2.4e12)
    sxm = one(tmp_path, gpu="H100-SXM5-80GB").job
    assert sxm.system.name == "dgx-h100"
    assert job.system.gpu.peak_flops.bf16 < sxm.system.gpu.peak_flops.bf16
    assert one(tmp_path, gpu="H100 (94GB)").job.system.name == "dgx-h100"  # NVL-size memory alone says nothing


@pytest.mark.parametrize(("source", "notes", "zero", "fraction"), [
    ("DeepSpeed ZeRO-Offload", "", 2, 1.0),  # ZeRO-Offload is built on ZeRO-2
    ("DeepSpeed", "ZeRO-3 with offload_optimizer to cpu", 3, 1.0),
    ("Megatron-Core 2025", "--use-distributed-optimizer --optimizer-cpu-offload --optimizer-offload-fraction 0.5", 1,
     0.5),
])
def test_cpu_optimizer_offload_in_the_text(tmp_path, source, notes, zero, fraction):
    m = one(tmp_path, source=source, notes=notes, gpu="A100-SXM4-80GB")
    assert m.job.training.offloaded_fraction == fraction and m.job.training.zero_stage == zero
    assert any("optimizer offloaded to the CPU" in a for a in m.assumptions)
    assert not one(tmp_path, notes="--optimizer-offload-fraction 0.5").job.training.optimizer_cpu_offload


@pytest.mark.parametrize(("source", "notes"), [("DeepSpeed ZeRO-Infinity", ""), ("DeepSpeed ZeRO-3", "NVMe offload")])
def test_offloading_to_nvme_is_reported(tmp_path, source, notes):
    table = load_table(write(tmp_path, [row("x_1", source=source, notes=notes)]))
    assert not table.rows and "NVMe is not modelled" in table.skipped[0].reason


@pytest.mark.parametrize(("source", "notes"), [
    ("DeepSpeed", "ZeRO-3, offload_param and offload_optimizer to cpu"),
    ("PyTorch FSDP", "CPU offload"),  # FSDP's only CPU offload: CPUOffload(offload_params=True)
    ("Hugging Face accelerate FSDP", "offload_params=True"),
])
def test_parameter_offloading_in_the_text(tmp_path, source, notes):
    m = one(tmp_path, source=source, notes=notes, gpu="A100-SXM4-80GB")
    assert m.job.training.param_cpu_offload and m.job.training.zero_stage == 3
    assert m.job.training.offloaded_fraction == 1.0


def test_unstated_stage_of_an_offloading_run_shards_as_far_as_it_must(tmp_path):
    llama70 = {"model": "Llama 2 70B", "L": 80, "h": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672, "vocab": 32000,
               "seq": 4096, "global_batch": 8, "recompute": "full", "gpu": "A100-SXM4-80GB"}
    small = one(tmp_path, source="DeepSpeed", notes="CPU offload", gpu="A100-SXM4-80GB")
    assert small.job.training.zero_stage == 2  # ZeRO-Offload's stage
    big = one(tmp_path, source="DeepSpeed", notes="CPU offload", **llama70)
    assert big.job.training.zero_stage == 3 and memory_report(big.job).fits
    assert any("with ZeRO-2 the offloading run would not fit" in a for a in big.assumptions)


@pytest.mark.parametrize("notes", ["--expert-model-parallel-size 8", "TP2 PP4 EP8"])
def test_expert_parallelism_in_the_notes(tmp_path, notes):
    m = one(tmp_path, model="Mixtral-8x22B", L=56, h=6144, heads=48, kv_heads=8, ffn=16384, vocab=32768, tp=2, pp=4,
            num_gpus=128, global_batch=256, notes=notes)
    assert m.job.parallelism.ep == 8 and "ep 8 (from the notes)" in m.assumptions


def test_unstated_expert_tp_falls_back_to_1_where_the_tp_grid_cannot_be_built(tmp_path):
    """Qwen3-235B on 256 H100 with TP 2, PP 8, EP 32 (Megatron-Bridge's recipe, expert TP 1): Megatron's default
    expert TP (= tp) needs ep·tp = 64 to divide the 32 GPUs of a stage, so the run had expert TP 1."""
    cells = dict(model="Qwen3-235B-A22B", L=94, h=4096, heads=64, kv_heads=4, ffn=12288, vocab=151936, seq=4096,
                 tp=2, pp=8, num_gpus=256, global_batch=2048, gpu="H100-SXM5-80GB", notes="EP32")
    m = one(tmp_path, **cells)
    assert m.job.parallelism.expert_tp == 1 and any(a.startswith("etp 1 (unstated") for a in m.assumptions)
    stated = one(tmp_path, **{**cells, "notes": "EP16 --expert-tensor-parallel-size 2"})
    assert stated.job.parallelism.expert_tp == 2  # stated and buildable: kept


def test_unstated_expert_parallelism_is_the_smallest_that_fits(tmp_path):
    m = one(tmp_path, model="Mixtral-8x22B", L=56, h=6144, heads=48, kv_heads=8, ffn=16384, vocab=32768, tp=2, pp=4,
            num_gpus=128, global_batch=256)
    ep = m.job.parallelism.ep
    assert ep > 1 and f"ep {ep} (unstated; with ep 1 the run would not fit in memory)" in m.assumptions
    assert m.job.training.recompute_granularity == "none"  # expert parallelism before recomputation
    j = m.job
    assert memory_report(j).fits
    smaller = Job(model=j.model, system=j.system, parallelism=j.parallelism.replace(ep=ep // 2), training=j.training,
                  num_gpus=j.num_gpus, framework=j.framework)
    assert not memory_report(smaller).fits


@pytest.mark.parametrize(("notes", "field", "value"), [
    ("torch.compile, selective AC", "torch_compile", True),
    ("--enable-cuda-graph", "cuda_graphs", True),
    ("CUDA graphs for the whole step", "cuda_graphs", True),
    ("numbers compiled from the paper's Table 3", "torch_compile", False),
])
def test_compilation_named_in_the_notes_switches_the_profile(tmp_path, notes, field, value):
    m = one(tmp_path, source="torchtitan", notes=notes)
    assert getattr(m.job.framework, field) is value
    assert (f"{field} True (stated in the row)" in m.assumptions) is value


@pytest.mark.parametrize(("notes", "recompute"), [
    ("gradient_checkpointing=True", "full"), ("selective activation checkpointing", "selective"),
    ("gradient_checkpointing=False", "none"),
])
def test_activation_checkpointing_in_words(tmp_path, notes, recompute):
    m = one(tmp_path, source="Hugging Face accelerate", notes=notes, global_batch=8)
    assert m.job.training.recompute_granularity == recompute


@pytest.mark.parametrize(("precision", "states"), [("AMP (bf16 autocast)", 12.0), ("bf16", 4.0), ("amp_bf16", 12.0)])
def test_mixed_precision_keeps_fp32_states_for_the_bf16_parameter_stack(tmp_path, precision, states):
    m = one(tmp_path, source="Hugging Face transformers", precision=precision, global_batch=8)
    fw = m.job.framework
    assert fw.master_bytes(m.job.training.precision) + fw.state_bytes() == states
    assert ("fp32 parameters, gradients and optimizer states (mixed precision: torch.autocast)" in m.assumptions) \
        is (states == 12.0)


@pytest.mark.parametrize("cells", [{"zero": "HYBRID_SHARD"}, {"notes": "FSDP with HSDP across nodes"}])
def test_hybrid_sharding_in_words(tmp_path, cells):
    m = one(tmp_path, source="PyTorch FSDP", num_gpus=32, global_batch=64, gpu="A100-SXM4-80GB", **cells)
    assert m.job.framework.sharding_strategy == "hybrid" and m.job.training.zero_stage == 3
    assert "sharding_strategy hybrid (stated in the row)" in m.assumptions


@pytest.mark.parametrize(("notes", "vpp"), [
    ("interleaved schedule with 3 virtual stages", 3),
    ("Interleaved 1F1B, 2 virtual pipeline stages per rank", 2),
    ("--num-virtual-stages-per-pipeline-rank 4", 4),
    ("virtual_pipeline_model_parallel_size: 2", 2),
    ("TP4 PP4 VPP 3", 3),
    ("TP 2, PP 4, CP 1, VP 2 (NeMo table columns)", 2),
    ("--num-layers-per-virtual-pipeline-stage 2", 3),  # 24 layers over pp 4: 6 per rank, 3 chunks of 2
    ("no interleaving", 1),
])
def test_virtual_stages_in_the_notes(tmp_path, notes, vpp):
    m = one(tmp_path, tp=2, pp=4, num_gpus=8, notes=notes)
    assert m.job.parallelism.vpp == vpp
    assert (f"vpp {vpp} (from the notes)" in m.assumptions) == (vpp > 1)


def test_virtual_stages_in_the_notes_of_a_packaged_source_row():
    """Korthikanti rows whose notes state three virtual stages are predicted interleaved; the others not."""
    from trainsim.validation.measurements import load_measurements

    kort = {m.id: m for m in load_measurements() if m.id.startswith("kort")}
    vpp = {k: m.job.parallelism.vpp for k, m in kort.items()}
    assert vpp["kort_175B_full_recompute"] == vpp["kort_530B_sp_selective"] == 3
    assert vpp["kort_1T_full_recompute"] == vpp["kort_22B_sp_selective"] == 1
    assert "vpp 3 (from the notes)" in kort["kort_175B_full_recompute"].assumptions
    assert not any("vpp" in a for a in kort["kort_1T_full_recompute"].assumptions)


def test_a_stack_that_splits_any_layer_count_uses_its_own_rule(tmp_path):
    """BLOOM-like: 70 layers over pp 12 under Megatron-DeepSpeed follow DeepSpeed's balanced partition, not
    Megatron-Core's embedding/loss accounting."""
    m = one(tmp_path, source="BigScience Megatron-DeepSpeed", L=70, h=2048, heads=16, tp=1, pp=12, num_gpus=12,
            global_batch=48, micro_batch=1, gpu="A100-SXM4-80GB")
    assert m.job.parallelism.first_stage_layers is None and not m.job.parallelism.account_for_loss_in_pipeline_split
    assert m.job.virtual_stage_layers == (6,) * 11 + (4,)
    assert any("the stack's own pipeline split of 70 layers (type:transformer)" in a for a in m.assumptions)


@pytest.mark.parametrize(("source", "notes", "expected"), [
    ("DeepSpeed ZeRO-3 blog 2021", "", "deepspeed@0.3"),  # ZeRO-3 as released: no overlap, list collectives
    ("Narayanan et al. SC21 (DeepSpeed baseline)", "", "deepspeed@0.3"),  # a venue's two-digit year
    ("DeepSpeed ZeRO-3 blog 2023", "", "deepspeed@0.12"),  # the ZeRO-3 of today, transformers' eager attention
    ("DeepSpeed ZeRO-3 blog 2024", "", "deepspeed"),
    ("DeepSpeed ZeRO-3", "", "deepspeed"),  # no year: the current engine
])
def test_deepspeed_rows_take_the_engine_of_their_year(source, notes, expected):
    assert infer_framework(None, source, notes)[0] == expected


@pytest.mark.parametrize(("source", "expected"), [
    ("torchtitan docs/performance.md (FSDP2 on 64 A100 80GB) 2024", "torchtitan@2024"),  # fused_rmsnorm configs
    ("torchtitan paper ICLR 2025", "torchtitan"),
    ("torchtitan", "torchtitan"),  # no year: the current stack
])
def test_torchtitan_rows_take_the_norm_of_their_year(source, expected):
    assert infer_framework(None, source, "")[0] == expected


@pytest.mark.parametrize(("source", "expected"), [
    ("MosaicML llm-foundry scripts/train/benchmarking/README.md 2023", "llm-foundry@0.2"),  # Triton FA-1 for ALiBi
    ("llm-foundry MPT benchmarks 2024", "llm-foundry"),
    ("MosaicML Composer", "llm-foundry"),  # no year: the current stack
])
def test_llm_foundry_rows_take_the_attention_kernel_of_their_year(source, expected):
    assert infer_framework(None, source, "")[0] == expected


@pytest.mark.parametrize(("source", "expected"), [
    ("Hugging Face transformers fine-tuning benchmark, 2023", "hf-transformers@4.35"),  # before SDPA by default
    ("Hugging Face transformers Trainer, 2024", "hf-transformers"),
    ("transformers", "hf-transformers"),  # no year: the current stack
])
def test_transformers_rows_take_the_attention_default_of_their_year(source, expected):
    assert infer_framework(None, source, "")[0] == expected


@pytest.mark.parametrize(("source", "expected"), [
    ("DeepSpeed ZeRO-3 blog 2021", "deepspeed@0.3"),  # ZeRO-3 before its gathers overlapped
    ("DeepSpeed ZeRO-3 fine-tuning of a Hugging Face model, 2023", "deepspeed@0.12"),  # transformers <= 4.35
    ("DeepSpeed ZeRO-3, 2024", "deepspeed"),
    ("HF accelerate FSDP run 2022", "fsdp@2.1"),
    ("PyTorch FSDP2 2024", "fsdp"),
])
def test_sharded_stacks_of_2022_2023_run_the_eager_attention_of_their_transformers(source, expected):
    from trainsim.spec.framework import load_framework

    name = infer_framework(None, source, "")[0]
    assert name == expected
    attention = load_framework(name).attention_backend
    assert (attention == "local") == (name != expected.split("@")[0])  # the dated versions attend eagerly


def test_torchtitan_2024_runs_the_fused_rmsnorm_and_keeps_less_per_layer(tmp_path):
    """The 2024 train configs' Triton RMSNorm keeps its bf16 input and rstd instead of the fp32 upcast and the
    normalised tensor: a Llama 2 13B layer without checkpointing (the 64-A100 run of torchtitan's performance
    report, no activation checkpointing, local batch 2) keeps 8 bytes per hidden element less."""
    from trainsim.spec.framework import load_framework

    assert load_framework("torchtitan@2024").fused_norm and not load_framework("torchtitan").fused_norm
    cells = dict(source="torchtitan docs/performance.md (FSDP2 on 64 A100 80GB) 2024", model="Llama 2 13B", L=40,
                 h=5120, heads=40, ffn=13824, vocab=32000, seq=4096, global_batch=128, micro_batch=2, tp=1, pp=1,
                 dp=64, recompute="none", zero=3, gpu="A100-SXM4-80GB", num_gpus=64)
    new = memory_report(one(tmp_path, **cells).job)
    old = memory_report(one(tmp_path, **cells, framework="torchtitan").job)
    tokens = 2 * 4096
    saved = old.per_stage[0].activations_bytes - new.per_stage[0].activations_bytes
    assert saved == pytest.approx(40 * tokens * 5120 * 8, rel=1e-6)
    assert new.fits and not old.fits


def test_a_zero_stage_the_named_stack_lacks_yields_to_the_stack_that_ran_it():
    title = "Narayanan et al. SC21 'Efficient Large-Scale LM Training on GPU Clusters Using Megatron-LM' Table 2"
    # the title names Megatron-LM (2021: no ZeRO), the notes the run's engine
    name, rule = infer_framework(None, title, "ZeRO-3 without model parallelism", (1, 1, 1), zero=3)
    assert name == "deepspeed@0.3" and "in notes" in rule
    # nothing else named: Megatron-LM's models with ZeRO-3 ran on DeepSpeed (with TP: Megatron-DeepSpeed)
    name, rule = infer_framework(None, title, "baseline", (1, 1, 1), zero=3)
    assert name == "deepspeed@0.3" and "does not offer" in rule
    assert infer_framework(None, "Megatron-LM study 2022", "", (8, 1, 1), zero=3)[0] == "megatron-deepspeed"
    # the 2022 code has the distributed optimizer (ZeRO-1); 2021's stack without a stage stays itself
    assert infer_framework(None, "Megatron-LM study 2022", "", (8, 4, 1), zero=1)[0] == "megatron-lm-2021@3.0"
    assert infer_framework(None, title, "", (8, 4, 1))[0] == "megatron-lm-2021"


def test_first_year_reads_four_digits_and_venue_years():
    from trainsim.validation.row_rules import first_year

    assert first_year("SC'21 then 2023") == 2021 and first_year("MLSys 2023, SC21") == 2023
    assert first_year("NeurIPS 22") == 2022 and first_year("no year") is None


def test_deepspeed_ulysses_sequence_parallel_runs_are_accepted(tmp_path):
    """A DeepSpeed-Ulysses run (sequence parallelism by all-to-all) is Megatron-DeepSpeed with context parallelism
    over its all-to-all, and "flash attention" in the notes is the flash path."""
    m = one(tmp_path, source="DeepSpeed-Ulysses (Jacobs et al. 2023)", L=32, h=4096, heads=32, seq=131072,
            global_batch=1, cp=8, num_gpus=8, gpu="A100-SXM4-80GB", zero="3",
            notes="Ulysses sequence parallelism, flash attention")
    fw = m.job.framework
    assert fw.name == "megatron-deepspeed" and fw.supports_cp and fw.cp_comm_type == "a2a"
    assert m.job.parallelism.cp == 8 and m.job.attention_path == "flash" and m.job.training.zero_stage == 3


@pytest.mark.parametrize(("notes", "comm"), [("--cp-comm-type all_gather", "allgather"), ("--cp-comm-type a2a", "a2a"),
                                             ("--cp-comm-type=a2a+p2p", "a2a+p2p"),
                                             ("DeepSpeed-Ulysses style all-to-all", "a2a")])
def test_context_parallel_communication_in_the_notes(tmp_path, notes, comm):
    m = one(tmp_path, source="Megatron-Core 2024", seq=16384, cp=2, global_batch=8, notes=notes)
    assert m.job.framework.cp_comm_type == comm


def test_hierarchical_context_parallelism_in_the_notes(tmp_path):
    """--cp-comm-type a2a+p2p with --hierarchical-context-parallel-sizes in a row's notes: the two CP levels."""
    m = one(tmp_path, source="Megatron-Core 2024", seq=65536, cp=8, num_gpus=8, global_batch=8,
            notes="--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 4")
    assert m.job.framework.cp_comm_type == "a2a+p2p" and m.job.cp_levels == (2, 4)


def test_an_nvfp4_row_runs_the_fp4_recipe(tmp_path):
    """Megatron-Bridge's NVFP4 rows (precision cell 'NVFP4'): low-precision training with the nvfp4 recipe."""
    m = one(tmp_path, source="Megatron-Bridge 26.02 performance summary", gpu="GB200", num_gpus=8, seq=8192,
            global_batch=128, precision="NVFP4")
    assert m.job.training.precision == "fp8" and m.job.training.fp8_recipe == "nvfp4"


def test_recompute_modules_in_the_notes(tmp_path):
    """Megatron's --recompute-modules in a row's notes (Megatron-MoE-ModelZoo's "norm, act"): the modules apply."""
    m = one(tmp_path, model="Mixtral-8x22B", L=56, h=6144, heads=48, kv_heads=8, ffn=16384, vocab=32768, tp=2, pp=4,
            num_gpus=128, global_batch=256, recompute="selective",
            notes="EP8 --recompute-modules layernorm moe_act --bf16")
    assert m.job.training.recompute_modules == ("layernorm", "moe_act")
    assert "recompute modules layernorm,moe_act (from the notes)" in m.assumptions


def test_a_run_that_only_fits_fully_sharded_gets_the_stacks_fsdp(tmp_path):
    """Llama 3 70B on 64 GB200 without TP/PP fits only fully sharded: an unstated stage becomes Megatron-FSDP
    (ZeRO-3) after the distributed optimizer and recomputation fail; "FSDP = 1" in the notes names it."""
    cells = dict(source="NeMo 25.07 performance summary", model="Llama 3 70B", L=80, h=8192, heads=64, kv_heads=8,
                 ffn=28672, vocab=128256, seq=8192, global_batch=128, micro_batch=1, gpu="GB200", num_gpus=64,
                 precision="fp8")
    unstated = one(tmp_path, **cells)
    assert unstated.job.training.zero_stage == 3 and any("fully sharded" in a for a in unstated.assumptions)
    named = one(tmp_path, **cells, notes="FSDP = 1")
    assert named.job.training.zero_stage == 3 and "zero 3 (named in the notes)" in named.assumptions
    assert one(tmp_path, **cells | {"model": "Llama 3 8B", "L": 32, "h": 4096, "heads": 32, "ffn": 14336,
                                    "num_gpus": 8}).job.training.zero_stage == 1  # fits with the optimizer sharded


def test_the_pytorch_release_and_mixed_precision_notes_are_both_reported(tmp_path):
    m = one(tmp_path, source="Hugging Face transformers Trainer", notes="PyTorch 2.4.1", precision="AMP",
            recompute="full")
    assert m.job.framework.flash_kernel == "fa2" and m.job.framework.main_params_dtype == "fp32"
    assert "flash kernel fa2 (SDPA under PyTorch 2.4)" in m.assumptions
    assert any(a.startswith("fp32 parameters") for a in m.assumptions)


@pytest.mark.parametrize(("notes", "expected"), [
    ("no FlashAttention-2 (ALiBi)", {}),
    ("activation checkpointing not stated", {}),
    ("without activation checkpointing", {"recompute": "none"}),
    ("non-interleaved 1F1B; --virtual-pipeline-model-parallel-size 2", {"vpp": 2}),
    ("cannot use flash attention 2; gradient checkpointing", {"recompute": "full"}),
    ("torch.compile disabled", {}),
    ("no DeepEP; EP8", {"ep": 8}),
])
def test_negated_settings_in_the_notes_set_nothing(notes, expected):
    """A setting named in a negated clause is not switched on ("no FlashAttention", "... not stated"); where the
    setting has an off value, saying it was off sets that."""
    assert notes_flags(notes) == expected


def test_optimizer_state_dtypes_and_the_layout_in_the_notes(tmp_path):
    """Megatron's precision-aware optimizer flags switch the profile's state dtypes; a stated pipeline layout
    without 'm' means the run had no multi-token prediction (Megatron places MTP in the layout)."""
    m = one(tmp_path, model="DeepSeek-V3 671B", L=61, h=7168, heads=128, kv_heads=None, ffn=18432, vocab=129280,
            seq=4096, global_batch=2048, micro_batch=1, tp=1, pp=8, gpu="GB200", num_gpus=256, precision="bf16",
            notes="--expert-model-parallel-size 32 --pipeline-model-parallel-layout Et|(tt|)*30L "
                  "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16")
    fw = m.job.framework
    assert (fw.exp_avg_dtype, fw.exp_avg_sq_dtype) == ("bf16", "bf16")
    assert m.job.parallelism.pipeline_layout == "Et|(tt|)*30L" and m.job.parallelism.vpp == 4
    assert m.job.model.mtp_num_layers == 0 and "mtp 0 (the stated pipeline layout has no MTP stage)" in m.assumptions


def test_unstated_sequence_parallelism_is_on_when_the_run_would_not_fit_without_it(tmp_path):
    """Llama 3 70B with TP 8, PP 4, micro-batch 1 and 8K tokens on 80 GB H100s with its stated selective
    recomputation: without sequence parallelism the activations do not fit; the run ran, so it used it."""
    m = one(tmp_path, model="Llama 3 70B", L=80, h=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256, seq=8192,
            global_batch=512, micro_batch=1, tp=8, pp=4, num_gpus=64, source="Megatron-Core 0.6 benchmark",
            notes="--recompute-activations")
    assert m.job.parallelism.sequence_parallel
    assert any(a.startswith("sp True (unstated;") for a in m.assumptions)
    stated_off = one(tmp_path, model="Llama 3 70B", L=80, h=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256,
                     seq=8192, global_batch=512, micro_batch=1, tp=8, pp=4, num_gpus=64, sp="false",
                     source="Megatron-Core 0.6 benchmark", notes="--recompute-activations")
    assert not stated_off.job.parallelism.sequence_parallel  # a stated choice is kept


def test_a_stack_without_expert_parallelism_yields_to_its_extended_stack(tmp_path):
    """An FSDP row with expert parallelism: PyTorch FSDP (accelerate) offers no EP, torchtitan's composition does."""
    name, rule = infer_framework(None, "PyTorch FSDP2 benchmark", "", (1, 1, 1, 8))
    assert name.startswith("torchtitan") and "tp/pp/cp/ep" in rule
    assert infer_framework(None, "PyTorch FSDP2 benchmark", "", (1, 1, 1, 1))[0].startswith("fsdp")


@pytest.mark.parametrize(("model", "ffn", "kv", "family", "positions"), [
    ("Baichuan2-13B", 13696, None, "baichuan-13b", "alibi"),
    ("Baichuan 2 7B", 11008, None, "baichuan", "rope"),
    ("SomeLab-20B", 13696, None, "llama-like", "rope"),  # ffn/h 2.68: a gated MLP
    ("SomeLab-20B", None, 8, "llama-like", "rope"),  # grouped-query attention
    ("SomeLab-20B", 20480, None, "gpt", "learned_absolute"),  # 4h: GPT
])
def test_model_family_from_the_name_then_the_shape(tmp_path, model, ffn, kv, family, positions):
    m = one(tmp_path, model=model, L=40, h=5120, heads=40, ffn=ffn, kv_heads=kv, vocab=125696)
    assert any(a.startswith(f"model family {family}") for a in m.assumptions), m.assumptions
    assert m.job.model.position_embedding_type == positions
    assert m.job.model.swiglu == (family != "gpt")


def test_a_mixture_of_experts_proxy_with_fewer_layers_takes_its_preset(tmp_path):
    """Benchmark proxies of a MoE model with fewer layers (DGX Cloud's Grok-1 on 64 GPUs): the preset of the same
    name and layer shape gives experts and router, at the row's depth; an unknown MoE name is still refused."""
    m = one(tmp_path, model="Grok 1 314B (proxy, 8 layers)", L=8, h=6144, heads=48, kv_heads=8, ffn=32768,
            vocab=131072, seq=8192, global_batch=64, tp=4, num_gpus=64, notes="EP8")
    assert m.job.model.is_moe and m.job.model.num_layers == 8 and m.job.model.num_experts == 8
    assert "num_layers 8 (the row's; the preset has 64)" in m.assumptions
    table = load_table(write(tmp_path, [row("x_2", model="SomeLab MoE 8x7B", L=8, h=6144, heads=48)]))
    assert table.skipped and "mixture-of-experts" in table.skipped[0].reason


@pytest.mark.parametrize(("notes", "field", "value"), [
    ("kernel optimizations: TE + DeepEP + FlexAttn", "flash_kernel", "fa2"),  # FlexAttention priced as FA-2
    ("recipe config: attn: flex", "flash_kernel", "fa2"),
    ("recipe config: reshard_after_forward: true", "reshard_after_forward", True),
    ("recipe config: reshard_after_forward: false", "reshard_after_forward", False),
    ("loss_fn MaskedCrossEntropy fp32_upcast: true", "cross_entropy_impl", "torch"),
    ("loss_fn MaskedCrossEntropy fp32_upcast: false", "cross_entropy_impl", "torch_16bit"),
])
def test_nemo_automodel_recipe_settings_in_the_notes(tmp_path, notes, field, value):
    m = one(tmp_path, source="NVIDIA-NeMo/Automodel performance summary", notes=notes, global_batch=16)
    assert m.job.framework.name == "nemo-automodel"
    assert getattr(m.job.framework, field) == value


def test_v100_rows_run_on_the_dgx2_preset(tmp_path):
    m = one(tmp_path, gpu="V100-SXM3-32GB", precision="fp16", source="Megatron-LM paper 2019", num_gpus=32,
            gpus_per_node=16)
    assert m.job.system.name == "dgx2-v100" and m.job.training.precision == "fp16"


def test_an_unstated_or_mixed_precision_on_volta_is_fp16(tmp_path):
    """Volta has FP16 tensor cores only: an empty or unnamed mixed-precision cell is fp16 there."""
    for precision in (None, "amp"):
        m = one(tmp_path, gpu="V100-SXM3-32GB", precision=precision, source="Microsoft DeepSpeed ZeRO-3 blog",
                num_gpus=16, gpus_per_node=16, global_batch=16, zero=3)
        assert m.job.training.precision == "fp16"


def test_a_source_convention_fills_the_cells_its_documentation_gives(tmp_path):
    """vTrain's validation configs all set use_checkpoint: true, 8 GPUs and 800 Gb/s per node and GPT-2's vocabulary:
    a vTrain row that leaves those cells empty ran them (said so in its assumptions) - full recomputation where the
    generic rule would pick the lightest one that fits (none for a small model); a stated cell wins, and other
    sources keep the generic rules."""
    vtrain = one(tmp_path, source="vTrain (MICRO 2024) multi-node validation, Megatron-DeepSpeed", gpu="A100-SXM4-80GB",
                 num_gpus=16)
    assert vtrain.job.training.recompute_granularity == "full"
    assert any("use_checkpoint: true" in a for a in vtrain.assumptions)
    network = vtrain.job.system.network  # its configs' 800 Gb/s per 8-GPU node, not the DGX A100's 8 x 200 Gb/s
    assert vtrain.job.system.gpus_per_node == 8 and network.nics_per_node * network.nic_bandwidth == 800e9 / 8
    assert vtrain.job.model.vocab_size == 50257
    stated = one(tmp_path, source="vTrain (MICRO 2024)", gpu="A100-SXM4-80GB", recompute="selective")
    assert stated.job.training.recompute_granularity == "selective"
    other = one(tmp_path, source="Some lab blog 2024", gpu="A100-SXM4-80GB")
    assert other.job.training.recompute_granularity == "none"
