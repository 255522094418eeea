import pytest

from trainsim.errors import TrainsimError
from trainsim.spec import Model, load_model
from trainsim.spec.model import megatron_swiglu_ffn


def test_llama2_7b_parameter_count_matches_the_published_model():
    # 6,738,415,616 parameters in the Hugging Face checkpoint of Llama-2-7b
    assert load_model("llama2-7b").num_params == 6_738_415_616


def test_gqa_and_untied_head_parameter_count_of_llama3_8b():
    # 8,030,261,248 parameters in Meta-Llama-3-8B
    assert load_model("llama3-8b").num_params == 8_030_261_248


def test_moe_total_and_active_parameters_of_mixtral():
    m = load_model("mixtral-8x7b")
    assert m.num_params == pytest.approx(46.7e9, rel=0.01)
    assert m.num_active_params == pytest.approx(12.9e9, rel=0.01)
    assert m.num_moe_layers == 32


def test_defaults_follow_megatron():
    m = Model(num_layers=2, hidden_size=1024, num_attention_heads=16, vocab_size=1000)
    assert m.ffn_size == 4096 and m.head_dim == 64 and m.query_groups == 16
    assert m.padded_vocab_size(1) == 1024 and m.padded_vocab_size(8) == 1024
    assert m.padded_vocab_size(16) == 2048
    sw = Model(num_layers=2, hidden_size=4096, num_attention_heads=32, vocab_size=1000, swiglu=True)
    assert sw.ffn_size == megatron_swiglu_ffn(4096) == 10880


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"num_layers": 0}, "model.num_layers"),
        ({"hidden_size": -5}, "model.hidden_size"),
        ({"num_query_groups": 5}, "model.num_query_groups"),
        ({"hidden_size": 1000, "num_attention_heads": 16}, "model.hidden_size"),
        ({"num_experts": 2, "moe_router_topk": 4}, "model.moe_router_topk"),
        ({"bogus": 1}, "model.bogus"),
    ],
)
def test_invalid_models_name_the_field(fields, field):
    base = {"num_layers": 2, "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 1000}
    with pytest.raises(TrainsimError) as exc:
        Model(**{**base, **fields})
    assert exc.value.field == field
    assert "fix:" in str(exc.value)


@pytest.mark.parametrize(("groups", "picked", "field"), [
    (8, None, "model.moe_router_group_topk"),   # both or neither
    (7, 4, "model.moe_router_num_groups"),      # 7 does not divide 256 experts
    (8, 9, "model.moe_router_num_groups"),      # more groups picked than exist
    (64, 1, "model.moe_router_num_groups"),     # 1 group of 4 experts cannot hold top-8
])
def test_group_limited_routing_is_checked(groups, picked, field):
    with pytest.raises(TrainsimError, match=field.replace(".", r"\.")):
        load_model("deepseek-v3").replace(moe_router_num_groups=groups, moe_router_group_topk=picked)
