import itertools
import warnings

import pytest

from trainsim.cost.comm import group_placements
from trainsim.errors import TrainsimError
from trainsim.schedule import get_schedule, searched_schedules
from trainsim.search.space import (
    OPEN,
    CandidateSpec,
    SearchSpace,
    build_job,
    distinct_rank_orders,
    divisors,
    enumerate_space,
    parse_values,
)
from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.spec.parallelism import DEFAULT_RANK_ORDER

MTNLG_DP = "1,2,3,4,5,6,8,10,12,15,16,20,24,30"
MTNLG_PP = "3,5,7,15,21,35,105"


# ---- parsing -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "dim", "expected"),
    [
        ("4,8,16", "tp", (4, 8, 16)),
        ("8", "tp", (8,)),
        (8, "tp", (8,)),
        ([4, 8, 8, 4], "tp", (4, 8)),
        ("512:2048:512", "num_gpus", (512, 1024, 1536, 2048)),
        ("1:4", "pp", (1, 2, 3, 4)),
        ("256..2048", "num_gpus", (256, 512, 1024, 2048)),
        ("3..20", "dp", (3, 6, 12)),
        ("1,4:6,64..128", "dp", (1, 4, 5, 6, 64, 128)),
        ("all", "tp", OPEN),
        (" * ", "pp", OPEN),
        ("0,1", "zero_stage", (0, 1)),
        ("1F1B,zb-h1", "schedule", ("1f1b", "zb-h1")),
        ("none,full", "recompute", ("none", "full")),
        ("true,false", "sequence_parallel", (True, False)),
        (True, "sequence_parallel", (True,)),
        ("pp-dp-ep-cp-tp", "rank_order", ("pp-dp-ep-cp-tp",)),
        ("2e3", "num_gpus", (2000,)),
        (None, "tp", None),
    ],
)
def test_parse_values(text, dim, expected):
    assert parse_values(text, dim) == expected


@pytest.mark.parametrize(
    ("text", "dim", "words"),
    [
        ("8:4", "tp", "backward"),
        ("4:8:0", "tp", "backward"),
        ("0..8", "tp", "doubling"),
        ("abc", "tp", "cannot read"),
        ("1.5", "pp", "whole number"),
        ("0", "tp", "not positive"),
        ("4", "zero_stage", "between 0 and 3"),
        ("4,all", "tp", "cannot be mixed"),
        ("4,,8", "tp", "empty item"),
        ("", "tp", "empty"),
        ("pipedream", "schedule", "unknown schedule"),
        ("some", "recompute", "unknown recompute"),
        ("tp-dp-pp", "rank_order", "permutation"),
        ("maybe", "sequence_parallel", "true/false"),
        ([True], "tp", "whole number"),
    ],
)
def test_parse_errors_name_the_dimension(text, dim, words):
    with pytest.raises(TrainsimError) as exc:
        parse_values(text, dim)
    assert exc.value.field == dim and words in str(exc.value)


def test_space_needs_a_gpu_count():
    with pytest.raises(TrainsimError) as exc:
        SearchSpace(model="gpt3-175b", system="dgx-a100", training={"global_batch_size": 1536})
    assert exc.value.field == "num_gpus"
    with pytest.raises(TrainsimError):
        SearchSpace(model="gpt3-175b", system="dgx-a100", training={"global_batch_size": 1536}, num_gpus="all")
    # a listed dp fixes the GPU count through tp·pp·cp·dp
    space = SearchSpace(model="gpt3-175b", system="dgx-a100", training={"global_batch_size": 1536}, dp="1,2",
                        others="default")
    assert {c.num_gpus for c in enumerate_space(space).candidates} == {1, 2}


def test_unknown_preset_and_bad_dimension_are_trainsim_errors():
    with pytest.raises(TrainsimError) as exc:
        SearchSpace(model="gpt-9", system="dgx-a100", training={"global_batch_size": 8}, num_gpus=8)
    assert exc.value.field == "model"
    with pytest.raises(TrainsimError) as exc:
        SearchSpace(model="gpt3-175b", system="dgx-a100", training={"global_batch_size": 8}, num_gpus=8, tp="x")
    assert exc.value.field == "tp"


# ---- the MT-NLG grid (vTrain §V-A) ----------------------------------------------------------------------------------
def mtnlg_space(**extra):
    args = dict(model="mt-nlg-530b", system="dgx-a100",
                training=Training(global_batch_size=1920, seq_length=2048, recompute_granularity="full",
                                  train_tokens=270e9),
                tp="4,8,16", dp=MTNLG_DP, pp=MTNLG_PP, others="default")
    args.update(extra)
    return SearchSpace(**args)


def test_mtnlg_grid_has_294_valid_points_and_warns_once_per_cross_node_tp():
    en = enumerate_space(mtnlg_space())
    assert len(en.candidates) == 294 and not en.skipped and en.equivalent == 0
    assert {(c.tp, c.dp, c.pp) for c in en.candidates} == set(
        itertools.product((4, 8, 16), parse_values(MTNLG_DP, "dp"), parse_values(MTNLG_PP, "pp")))
    assert {c.num_gpus for c in en.candidates if (c.tp, c.dp, c.pp) == (8, 8, 35)} == {2240}
    # tp 16 exceeds a DGX node: allowed, warned once per candidate (14 dp × 7 pp), not once per validation
    assert en.warnings == {"parallelism.tp: tp = 16 spans nodes (8 GPUs per node): expect slow TP comm": 98}
    c = next(c for c in en.candidates if c.tp == 8)
    assert (c.micro_batch_size, c.recompute, c.zero_stage, c.vpp, c.schedule, c.rank_order) == (
        1, "full", 0, 1, "1f1b", DEFAULT_RANK_ORDER)


def test_skips_are_counted_by_field_with_an_example():
    en = enumerate_space(mtnlg_space(tp="3,8", dp="7,8", pp="35,4"))
    # tp 3 does not divide 128 heads (4 layouts); pp 4 does not divide 105 layers (tp 8: 2 layouts);
    # dp 7 does not divide the global batch 1920 (tp 8, pp 35: 1 layout)
    assert en.skipped == {"parallelism.tp": 4, "model.num_layers": 2, "training.global_batch_size": 1}
    assert "not divisible by tp = 3" in en.skipped_examples["parallelism.tp"]
    assert [(c.tp, c.dp, c.pp) for c in en.candidates] == [(8, 8, 35)]
    assert en.combinations == 8


def test_inner_dimension_skips_count_each_combination():
    # mbs 7 does not divide 1920/8; zero 2 with pp > 1 is not supported: 1 + 1 + 1 invalid of 4
    en = enumerate_space(mtnlg_space(tp=8, dp=8, pp=35, micro_batch_size="1,7", zero_stage="1,2"))
    assert en.skipped == {"training.global_batch_size": 2, "training.zero_stage": 1}
    assert [(c.micro_batch_size, c.zero_stage) for c in en.candidates] == [(1, 1)]


# ---- open domains ----------------------------------------------------------------------------------------------------
def test_open_domains_are_valid_values_given_the_outer_choices():
    space = SearchSpace(model="gpt3-175b", system="dgx-a100", num_gpus=64,
                        training=Training(global_batch_size=64), recompute="full", rank_order=DEFAULT_RANK_ORDER,
                        sequence_parallel=True)
    en = enumerate_space(space)
    assert not en.skipped  # open values never cause skips on their own here
    m = space.model
    for c in en.candidates:
        assert m.num_attention_heads % c.tp == 0 and 64 % c.tp == 0
        assert m.num_layers % (c.pp * c.vpp) == 0
        assert c.tp * c.pp * c.cp * c.dp == 64
        assert 64 % (c.micro_batch_size * c.dp) == 0
        assert get_schedule(c.schedule).accepts_chunks(c.vpp)
        assert c.schedule in searched_schedules(c.vpp) if c.pp > 1 else c.schedule == "1f1b"
        assert c.schedule != "gpipe"  # dominated by 1F1B: only when listed
        assert c.sequence_parallel == (c.tp > 1)
    # the open schedule domain is what the stack ships: Megatron-Core runs 1F1B and interleaved 1F1B only
    assert {c.schedule for c in en.candidates if c.vpp == 2} == {"interleaved"}
    assert {c.schedule for c in en.candidates if c.vpp > 2} == {"interleaved"}
    assert {c.schedule for c in en.candidates if c.vpp == 1 and c.pp > 1} == {"1f1b"}
    assert {c.tp for c in en.candidates} == {1, 2, 4, 8, 16, 32}  # divisors of 96 heads and of 64 GPUs
    assert {c.cp for c in en.candidates} == {1, 2}  # ≥ 1024 tokens per context-parallel rank at seq 2048
    assert {c.zero_stage for c in en.candidates if c.pp > 1} == {0, 1, 3}  # ZeRO-3 FSDP-style; never ZeRO-2
    assert {c.zero_stage for c in en.candidates if c.pp == 1 and c.dp > 1} == {0, 1, 2, 3}
    assert {c.zero_stage for c in en.candidates if c.dp * c.cp == 1} == {0}


def canonical(spec: CandidateSpec, gpn: int, seq: int):
    """The key under which the enumeration merges equivalent combinations (documented rules)."""
    sched = "1f1b" if spec.pp == 1 and spec.schedule != "interleaved" else spec.schedule
    sp = spec.sequence_parallel and spec.tp > 1
    places = tuple(sorted(group_placements(spec.rank_order, spec.tp, spec.cp, spec.ep, spec.dp, spec.pp,
                                           gpn).items()))
    return (spec.num_gpus, spec.tp, spec.pp, spec.vpp, spec.cp, spec.ep, spec.dp, spec.micro_batch_size, sched,
            spec.recompute, spec.zero_stage, sp, places)


def test_open_search_covers_every_valid_combination_of_a_brute_force():
    """Every combination that validates as a Job, from generous value ranges, is in the open enumeration unless a
    documented rule merges or leaves it out (GPipe, cp below 1024 tokens per rank, ZeRO without replicas,
    selective recompute with FlashAttention, schedules the stack does not ship)."""
    model = load_model("llama2-7b").replace(num_layers=8, seq_length=4096)
    system = load_system("dgx-h100").replace(node=load_system("dgx-h100").node.replace(gpus_per_node=4))
    training = Training(global_batch_size=16, seq_length=4096, attention="unfused")
    n = 16
    space = SearchSpace(model=model, system=system, training=training, num_gpus=n)
    en = enumerate_space(space)
    got = {canonical(c, 4, 4096) for c in en.candidates}
    assert len(got) == len(en.candidates)  # no duplicates
    orders = ["-".join(p) for p in itertools.permutations(DEFAULT_RANK_ORDER.split("-"))]
    cache = {}

    def placements(tp, cp, dp, pp):
        if (tp, cp, dp, pp) not in cache:
            cache[tp, cp, dp, pp] = {tuple(sorted(group_placements(o, tp, cp, 1, dp, pp, 4).items()))
                                     for o in orders}
        return cache[tp, cp, dp, pp]

    expected = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for tp, pp, cp in itertools.product((1, 2, 4, 8, 16), (1, 2, 4, 8), (1, 2, 4, 8, 16)):
            if n % (tp * pp * cp):
                continue
            dp = n // (tp * pp * cp)
            for vpp, sched, mbs, rec, zero, sp in itertools.product(
                    (1, 2, 4, 8), ("1f1b", "zb-h1", "interleaved", "gpipe", "zb-v", "dualpipev"), (1, 2, 4, 8, 16),
                    ("none", "selective", "full"), (0, 1, 2, 3), (False, True)):
                try:
                    job = Job(model=model, system=system, num_gpus=n,
                              parallelism=Parallelism(tp=tp, pp=pp, vpp=vpp, cp=cp, dp=dp, schedule=sched,
                                                      sequence_parallel=sp),
                              training=training.replace(micro_batch_size=mbs, recompute_granularity=rec,
                                                        zero_stage=zero))
                except TrainsimError:
                    continue
                if sched == "gpipe" or 4096 // cp < 1024 or (dp * cp == 1 and zero > 0):
                    continue
                if pp > 1 and job.schedule not in job.framework.pipeline_schedules:
                    continue  # a schedule the stack does not ship: searched only when listed
                base = canonical(CandidateSpec(n, tp, pp, vpp, cp, 1, job.dp, mbs, job.schedule, rec, zero, sp,
                                               DEFAULT_RANK_ORDER), 4, 4096)[:-1]
                expected.update((*base, places) for places in placements(tp, cp, dp, pp))
    assert got == expected


def test_selective_recompute_merges_with_none_only_when_nothing_differs():
    def space(attention):
        return SearchSpace(model="gpt3-1.7b", system="dgx-a100", num_gpus=8, others="default", tp=8,
                           recompute="none,selective,full", training=Training(global_batch_size=8,
                                                                              attention=attention))

    flash = enumerate_space(space("flash"))
    assert [c.recompute for c in flash.candidates] == ["none", "full"] and flash.equivalent == 1
    unfused = enumerate_space(space("unfused"))
    assert [c.recompute for c in unfused.candidates] == ["none", "selective", "full"]
    assert unfused.equivalent == 0


def test_merged_selective_really_predicts_the_same(tmp_path):
    from trainsim import predict

    sp = SearchSpace(model="gpt3-1.7b", system="dgx-a100", num_gpus=8, others="default", tp=2, pp=2,
                     training=Training(global_batch_size=16))
    a, b = (build_job(sp.model, sp.system, sp.training.replace(recompute_granularity=r),
                      enumerate_space(sp).candidates[0]._replace(recompute=r)) for r in ("none", "selective"))
    pa, pb = predict(a), predict(b)
    assert pa.iteration_time_s == pb.iteration_time_s and pa.memory.peak_bytes == pb.memory.peak_bytes
    assert pa.hfu == pb.hfu


def test_rank_orders_are_merged_when_they_place_every_group_the_same():
    orders, merged = distinct_rank_orders(8, 1, 1, 4, 2, 8, None)
    keys = {tuple(sorted(group_placements(o, 8, 1, 1, 4, 2, 8).items())) for o in orders}
    assert len(keys) == len(orders) and orders[0] == DEFAULT_RANK_ORDER and merged == 0
    # with tp = 1, moving tp changes nothing: a listed duplicate is merged and counted
    listed = (DEFAULT_RANK_ORDER, "cp-tp-ep-dp-pp", "pp-cp-ep-dp-tp")
    orders, merged = distinct_rank_orders(1, 1, 1, 8, 2, 8, listed)
    assert orders == (DEFAULT_RANK_ORDER, "pp-cp-ep-dp-tp") and merged == 1
    space = mtnlg_space(tp=1, dp=8, pp=3, rank_order=",".join(listed), training=Training(global_batch_size=1920))
    en = enumerate_space(space)
    assert len(en.candidates) == 2 and en.equivalent == 1 and en.combinations == 3


def test_pipeline_dimensions_collapse_without_pipeline_parallelism():
    space = SearchSpace(model="gpt3-1.7b", system="dgx-a100", num_gpus=8, others="default", tp="1,2", pp=1,
                        schedule="1f1b,gpipe,zb-h1", sequence_parallel="true,false",
                        training=Training(global_batch_size=8))
    en = enumerate_space(space)
    assert {(c.tp, c.schedule, c.sequence_parallel) for c in en.candidates} == {
        (1, "1f1b", False), (2, "1f1b", True), (2, "1f1b", False)}


def test_moe_open_expert_parallelism_divides_experts_and_replicas():
    space = SearchSpace(model="mixtral-8x7b", system="dgx-h100", num_gpus=16, others="default", tp=2, pp=1,
                        ep="all", training=Training(global_batch_size=16))
    en = enumerate_space(space)
    assert sorted({c.ep for c in en.candidates}) == [1, 2, 4, 8] and not en.skipped
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]


def test_build_job_without_validation_equals_the_validated_job():
    en = enumerate_space(mtnlg_space(tp=8, dp="8,12", pp="21,35", zero_stage="0,1"))
    sp = mtnlg_space()
    for c in en.candidates:
        a = build_job(sp.model, sp.system, sp.training, c)
        b = build_job(sp.model, sp.system, sp.training, c, validate=False)
        assert a.model_dump() == b.model_dump() and a.dp == b.dp and a.layers_per_stage == b.layers_per_stage


def test_describe_tells_open_default_and_listed():
    d = mtnlg_space().describe()
    assert d["tp"] == [4, 8, 16] and d["micro_batch_size"] == "default" and d["num_gpus"] == "tp·pp·cp·dp"
    d = SearchSpace(model="gpt3-175b", system="dgx-a100", num_gpus=64, training={"global_batch_size": 64},
                    pp="all", others="default").describe()
    assert d["pp"] == "all" and d["tp"] == "default" and d["num_gpus"] == [64]


def test_open_pipeline_domains_follow_the_profile_split_rule():
    # Megatron's even split needs pp·vpp | 126; torchtitan's and Meta's rule weighs the embedding and the loss as a
    # layer each, so pp 16 × vpp 8 (Llama 3 405B as Meta ran it) is a balanced candidate too
    def plans(framework):  # type: ignore[no-untyped-def]
        space = SearchSpace(model="llama3-405b", system="dgx-h100", num_gpus=8192,
                            training=Training(global_batch_size=2048, seq_length=8192), tp=8, pp="all", vpp="all",
                            cp=1, micro_batch_size=1, recompute="none", sequence_parallel=True, framework=framework)
        return {(c.pp, c.vpp) for c in enumerate_space(space).candidates}

    megatron, meta = plans("megatron-core"), plans("meta-llama3")
    assert (16, 8) in meta and (16, 2) in meta and all(126 % (pp * vpp) == 0 for pp, vpp in megatron)
    assert not any(pp == 16 for pp, _ in megatron) and megatron <= meta


def test_open_schedule_domain_follows_the_stack():
    """torch.distributed.pipelining ships ZB-V and DualPipeV (torchtitan); DeepSpeed's engine 1F1B without chunks."""
    def schedules(framework: object) -> dict[int, set[str]]:
        space = SearchSpace(model="gpt3-175b", system="dgx-a100", num_gpus=64, tp=8, pp=8, cp=1,
                            training=Training(global_batch_size=64), recompute="full", framework=framework,
                            micro_batch_size=1, zero_stage=0, rank_order=DEFAULT_RANK_ORDER)
        out: dict[int, set[str]] = {}
        for c in enumerate_space(space).candidates:
            out.setdefault(c.vpp, set()).add(c.schedule)
        return out

    # torchtitan's own split weighs embedding and loss as layers, which the V schedules cannot balance on this model
    titan = schedules({"name": "torchtitan", "pipeline_layer_split": "even"})
    assert titan[2] == {"interleaved", "zb-v", "dualpipev"} and titan[1] == {"1f1b"}
    assert schedules("megatron-deepspeed") == {1: {"1f1b"}}


def test_a_stage_the_stack_runs_as_another_is_searched_as_that_one():
    """Megatron-DeepSpeed's pipeline engine runs bf16 ZeRO-1 as its BF16_Optimizer (stage 0): with both stages
    searched the ZeRO-1 candidate is merged into stage 0's; asked alone it is stage 0's, with the warning."""
    def space(zero: str) -> SearchSpace:
        return SearchSpace(model="llama2-13b", system="dgx-a100", num_gpus=32, others="default", tp=2, pp=2,
                           zero_stage=zero, framework="megatron-deepspeed", training=Training(global_batch_size=64))

    both = enumerate_space(space("0,1"))
    assert {c.zero_stage for c in both.candidates} == {0} and both.equivalent >= 1
    alone = enumerate_space(space("1"))
    assert [c.zero_stage for c in alone.candidates] == [0] * len(alone.candidates) and alone.candidates
    assert any("BF16_Optimizer" in w for w in alone.warnings)
    fp16 = enumerate_space(SearchSpace(model="llama2-13b", system="dgx-a100", num_gpus=32, others="default", tp=2,
                                       pp=2, zero_stage="0,1", framework="megatron-deepspeed",
                                       training=Training(global_batch_size=64, precision="fp16")))
    assert {c.zero_stage for c in fp16.candidates} == {0, 1} and fp16.equivalent == 0
