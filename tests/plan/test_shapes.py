import pytest

from trainsim.errors import TrainsimError
from trainsim.plan.shapes import estimate_params, has_layout, nvlink_tp, shape_grid
from trainsim.spec import load_model


def test_shapes_keep_the_template_family_and_stay_in_the_window():
    tmpl = load_model("gpt3-175b")
    shapes, no_layout = shape_grid(tmpl, 20e9, 60e9, 1024, 8, 1536)
    assert shapes and no_layout >= 0
    params = [s.params for s in shapes]
    assert params == sorted(params) and params[0] >= 20e9 and params[-1] <= 60e9
    for s in shapes:
        m = s.model
        assert m.hidden_size % 1024 == 0 and m.head_dim == 128 and 96 <= s.aspect <= 200
        assert m.vocab_size == tmpl.vocab_size and m.swiglu == tmpl.swiglu and m.ffn_size == 4 * m.hidden_size
        assert abs(estimate_params(tmpl, s.layers, s.hidden_size) / s.params - 1) < 0.02
        assert has_layout(s.layers, s.heads, 1024, 8, 1536)


def test_gqa_and_ffn_ratios_follow_the_template():
    tmpl = load_model("llama3-70b")  # 64 heads, 8 KV groups, FFN 28672 = 3.5 h
    shapes, _ = shape_grid(tmpl, 30e9, 50e9, 512, 8, 1024, max_aspect=256)
    assert shapes
    for s in shapes:
        m = s.model
        assert m.num_attention_heads // m.query_groups == 8 and m.swiglu
        assert m.ffn_hidden_size % 256 == 0 and abs(m.ffn_hidden_size / m.hidden_size - 3.5) < 0.05


def test_layout_filter():
    # 3,360 GPUs with global batch 1920 and tp within a node: the pipeline must absorb the factor 7
    assert nvlink_tp(56, 8) == (1, 2, 4, 8)
    assert has_layout(91, 72, 3360, 8, 1920) and not has_layout(90, 72, 3360, 8, 1920)
    shapes, no_layout = shape_grid(load_model("gpt3-175b"), 50e9, 150e9, 3360, 8, 1920)
    assert no_layout > 0 and all(s.layers % 7 == 0 for s in shapes)


def test_shape_errors():
    with pytest.raises(TrainsimError):
        shape_grid(load_model("mixtral-8x7b"), 1e9, 2e9, 8, 8, 8)
    with pytest.raises(TrainsimError):
        shape_grid(load_model("gpt3-175b"), 1e9, 2e9, 8, 8, 8, head_size=128, hidden_step=1000)
    with pytest.raises(TrainsimError):
        shape_grid(load_model("gpt3-175b"), 1e9, 2e9, 8, 8, 8, min_aspect=300, max_aspect=100)
