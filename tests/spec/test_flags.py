"""Flags derived from the spec (issue 10, item 5): every user-settable field has a flag, every flag sets a field, the
search dimensions are flags, and Megatron's extra spellings do not shadow a field's flag — drift fails here."""

from __future__ import annotations

import typing

import pytest

from trainsim.cli.job_options import JOB_OPTIONS, PANELS, job_from_options, section_values
from trainsim.cli.megatron_args import EXTRA_FLAGS, IGNORED_FLAGS, parse_megatron_args
from trainsim.cli.search_options import DIMENSION_FLAGS
from trainsim.errors import TrainsimError
from trainsim.search.space import DIMENSIONS
from trainsim.spec.flags import Flag, NoFlag, field_flags, no_flag_reason
from trainsim.spec.framework import Framework
from trainsim.spec.job import Job
from trainsim.spec.model import Model
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.system import Network, Node, System
from trainsim.spec.training import Training

#: Spec classes whose every field a user sets on the command line (System and Framework come from preset files; only
#: some of their fields have flags).
USER_SPECS = (Model, Parallelism, Training)
SECTION_SPECS = {"job": Job, "model": Model, "system": System, "system.node": Node, "system.network": Network,
                 "parallelism": Parallelism, "training": Training, "framework": Framework}
#: The fields issue 10 named as having no flag.
ISSUE_FIELDS = ("make_vocab_size_divisible_by", "add_bias_linear", "hidden_dropout", "attention_dropout",
                "moe_shared_expert_intermediate_size", "moe_layer_freq", "ddp_bucket_size")


@pytest.mark.parametrize("spec", USER_SPECS, ids=lambda s: s.__name__)
def test_every_user_settable_field_has_a_flag_or_says_why_not(spec):
    missing = [name for name in spec.model_fields if not field_flags(spec, name) and not no_flag_reason(spec, name)]
    assert not missing, f"{spec.__name__} fields without a Flag (or a NoFlag reason): {missing}"


@pytest.mark.parametrize("spec", USER_SPECS, ids=lambda s: s.__name__)
def test_no_field_has_both_a_flag_and_a_no_flag_reason(spec):
    both = [name for name in spec.model_fields if field_flags(spec, name) and no_flag_reason(spec, name)]
    assert not both


def test_every_flag_maps_to_a_field_of_its_section():
    for o in JOB_OPTIONS:
        spec = SECTION_SPECS[o.section]
        assert o.field in spec.model_fields, f"{o.flags[0]} sets unknown field {o.section}.{o.field}"
        declared = [f for f in field_flags(spec, o.field) if f.flag.names == o.flags]
        assert len(declared) == 1, f"{o.flags[0]} is not declared on {spec.__name__}.{o.field}"
        assert o.panel in PANELS.values()


def test_flag_names_and_option_names_are_unique():
    names = [o.name for o in JOB_OPTIONS]
    flags = [f for o in JOB_OPTIONS for f in o.flags]
    assert len(set(names)) == len(names)
    assert len(set(flags)) == len(flags)


def test_literal_fields_offer_their_values():
    for o in JOB_OPTIONS:
        ann = SECTION_SPECS[o.section].model_fields[o.field].annotation
        args = [a for a in typing.get_args(ann) if a is not type(None)] or [ann]
        literal = next((a for a in args if typing.get_origin(a) is typing.Literal), None)
        if literal is not None and not o.is_switch:
            assert o.choices == tuple(str(v) for v in typing.get_args(literal)), o.flags[0]


def test_switch_constants_are_valid_field_values():
    for o in JOB_OPTIONS:
        if o.is_switch:
            spec = SECTION_SPECS[o.section]
            if spec in USER_SPECS:  # a field of a spec built from keywords: the constant must validate
                required = {"Model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100},
                            "Training": {"global_batch_size": 8}}.get(spec.__name__, {})
                built = spec(**{**required, o.field: o.const})
                assert getattr(built, o.field) == o.const, o.flags[0]


def test_search_dimensions_are_flags():
    fed = {o.dimension for o in JOB_OPTIONS if o.dimension}
    renamed = {"recompute"}  # the dimension of --recompute-granularity
    assert set(DIMENSIONS) <= fed | renamed | {"recompute"}
    assert fed <= set(DIMENSIONS), f"flags feed unknown search dimensions: {fed - set(DIMENSIONS)}"
    assert set(DIMENSION_FLAGS.values()) | {"sequence_parallel"} == set(DIMENSIONS)


def test_megatron_extra_spellings_do_not_shadow_field_flags():
    flags = {f for o in JOB_OPTIONS for f in o.flags}
    assert not flags & set(EXTRA_FLAGS), "a field's flag is also handled as a Megatron extra: drop the extra"
    assert not flags & IGNORED_FLAGS, "a field's flag is listed as ignored by Megatron parsing"


@pytest.mark.parametrize("field", ISSUE_FIELDS)
def test_fields_named_in_issue_10_have_a_flag(field):
    spec = Training if field in Training.model_fields else Model
    assert field_flags(spec, field)


BASE = {"model": "llama3-8b", "num_gpus": 8, "global_batch_size": 16}


@pytest.mark.parametrize("flags,section,field,value", [
    ({"make_vocab_size_divisible_by": 256}, "model", "make_vocab_size_divisible_by", 256),
    ({"disable_bias_linear": True}, "model", "add_bias_linear", False),
    ({"hidden_dropout": 0.0}, "model", "hidden_dropout", 0.0),
    ({"attention_dropout": 0.0}, "model", "attention_dropout", 0.0),
    ({"ddp_bucket_size": 40_000_000}, "training", "ddp_bucket_size", 40_000_000),
    ({"bidirectional": True}, "model", "causal", False),
    ({"fp8": True}, "training", "precision", "fp8"),
    ({"use_distributed_optimizer": True}, "training", "zero_stage", 1),
    ({"use_distributed_optimizer": True, "zero_stage": 3}, "training", "zero_stage", 3),
    ({"accumulate_allreduce_grads_in_fp32": True, "fp16": True}, "training", "grad_reduce_in_fp32", True),
    ({"grad_reduce_in_bf16": True}, "training", "grad_reduce_in_fp32", False),
    ({"model": "deepseek-v2", "num_gpus": 8, "ep": 8, "recompute_modules": "moe_act,mla_up_proj"}, "training",
     "recompute_modules", ("moe_act", "mla_up_proj")),
])
def test_flag_values_reach_their_field(flags, section, field, value):
    job = job_from_options({**BASE, **flags})
    assert getattr(getattr(job, section), field) == value


def test_moe_flags_reach_the_model():
    job = job_from_options({"model": "mixtral-8x7b", "num_gpus": 8, "global_batch_size": 16, "ep": 8,
                            "moe_shared_expert_intermediate_size": 2048, "moe_layer_freq": 2})
    assert job.model.moe_shared_expert_intermediate_size == 2048 and job.model.moe_layer_freq == 2
    assert job.model.num_moe_layers == job.model.num_layers // 2


def test_unit_scaled_flag():
    sections = section_values({"nic_bandwidth_gbps": 400.0})
    assert sections["system.network"]["nic_bandwidth"] == pytest.approx(400e9 / 8)
    job = job_from_options({**BASE, "nic_bandwidth_gbps": 200.0, "gpus_per_node": 4})
    assert job.system.network.nic_bandwidth == pytest.approx(25e9) and job.system.gpus_per_node == 4


def test_contradicting_switches_name_both_flags():
    with pytest.raises(TrainsimError, match="--fp16 and --bf16") as err:
        job_from_options({**BASE, "fp16": True, "bf16": True})
    assert err.value.field == "training.precision"
    with pytest.raises(TrainsimError, match="--grad-reduce-in-bf16 and --accumulate-allreduce-grads-in-fp32"):
        section_values({"grad_reduce_in_bf16": True, "accumulate_allreduce_grads_in_fp32": True})
    with pytest.raises(TrainsimError, match="ZeRO stage 1"):
        job_from_options({**BASE, "use_distributed_optimizer": True, "zero_stage": 0})


def test_megatron_command_lines_set_the_new_fields():
    a = parse_megatron_args(["--make-vocab-size-divisible-by", "64", "--hidden-dropout", "0", "--attention-dropout=0.0",
                             "--disable-bias-linear", "--ddp-bucket-size", "1000000", "--moe-layer-freq", "2",
                             "--accumulate-allreduce-grads-in-fp32"])
    assert a.options == {"make_vocab_size_divisible_by": 64, "hidden_dropout": 0.0, "attention_dropout": 0.0,
                         "disable_bias_linear": True, "ddp_bucket_size": 1_000_000, "moe_layer_freq": 2,
                         "accumulate_allreduce_grads_in_fp32": True}
    assert not a.unrecognised


def test_flag_metadata_is_checked():
    with pytest.raises(ValueError):
        Flag("num-layers", help="no leading dashes")
    assert NoFlag("why").reason == "why"


def test_the_search_candidate_is_the_searched_spec_fields():
    """A search candidate has exactly the search dimensions as fields, each one a Parallelism or Training field (or
    the GPU count): a new searched field is declared once, on the spec."""
    from trainsim.search.result import CANDIDATE_KEYS
    from trainsim.search.space import PARALLELISM_DIMENSIONS, TRAINING_DIMENSIONS, CandidateSpec

    assert set(CandidateSpec._fields) == set(DIMENSIONS)
    assert set(CandidateSpec._fields) == {"num_gpus"} | set(PARALLELISM_DIMENSIONS) | set(TRAINING_DIMENSIONS)
    assert set(PARALLELISM_DIMENSIONS.values()) <= set(Parallelism.model_fields)
    assert set(TRAINING_DIMENSIONS.values()) <= set(Training.model_fields)
    assert set(CandidateSpec._fields) <= set(CANDIDATE_KEYS)
    spec = CandidateSpec(64, 8, 2, 1, 1, 1, 4, 2, "1f1b", "full", 1, True, "tp-cp-ep-dp-pp")
    par = spec.parallelism
    assert (par.tp, par.pp, par.dp, par.sequence_parallel, par.schedule) == (8, 2, 4, True, "1f1b")
    assert spec.training_update() == {"micro_batch_size": 2, "recompute_granularity": "full", "zero_stage": 1}
