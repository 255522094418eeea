"""Model shapes for compute-optimal sizing: layers × hidden size with a standard head size.

A shape keeps every architectural choice of a *template* model (vocabulary, FFN type, normalization, positions, tied
embeddings, GQA ratio) and sets the depth and width: hidden sizes are multiples of ``hidden_step`` (1024: whole
tensor-parallel-friendly head counts), heads = hidden / head size, any number of layers with the width/depth ratio
inside ``[min_aspect, max_aspect]`` (GPT-3 and Megatron-LM's model family span about 96–200). Shapes that have no
parallel layout using exactly the given GPUs (tp within an NVLink domain dividing the heads, pp dividing the layers,
dp dividing the global batch) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from trainsim.errors import TrainsimError
from trainsim.search.space import divisors
from trainsim.spec.model import Model

DEFAULT_HEAD_SIZE = 128
DEFAULT_HIDDEN_STEP = 1024
DEFAULT_MIN_ASPECT = 96.0
DEFAULT_MAX_ASPECT = 200.0


@dataclass(frozen=True)
class Shape:
    """A model shape built on a template."""

    layers: int
    hidden_size: int
    heads: int
    template: Model

    @cached_property
    def model(self) -> Model:
        """The model of this shape."""
        t = self.template
        data = t.model_dump()
        ratio = t.num_attention_heads // t.query_groups
        groups = self.heads // ratio if ratio > 1 and self.heads % ratio == 0 else None
        ffn = None
        if t.ffn_hidden_size is not None:  # keep the template's FFN/hidden ratio, rounded to 256
            ffn = max(256, round(t.ffn_hidden_size / t.hidden_size * self.hidden_size / 256) * 256)
        data.update(name=f"{t.name}-shape-{self.layers}x{self.hidden_size}", num_layers=self.layers,
                    hidden_size=self.hidden_size, num_attention_heads=self.heads, num_query_groups=groups,
                    kv_channels=None, ffn_hidden_size=ffn, source=f"shape {self.layers} layers × {self.hidden_size} "
                    f"from template {t.name}")
        return Model(**data)

    @property
    def params(self) -> int:
        """Total parameters."""
        return self.model.num_params

    @property
    def aspect(self) -> float:
        """Width/depth ratio."""
        return self.hidden_size / self.layers


def estimate_params(template: Model, layers: int, hidden: int) -> float:
    """Quick parameter count (layers · per-layer params scaled from the template, plus embeddings)."""
    per_layer = template.layer_params / template.hidden_size ** 2 * hidden ** 2
    vocab = template.padded_vocab_size() * hidden * (2 if template.untie_embeddings_and_output_weights else 1)
    return layers * per_layer + vocab


def nvlink_tp(heads: int, gpus_per_node: int) -> tuple[int, ...]:
    """Tensor-parallel sizes that divide the heads and tile an NVLink domain (so no TP group straddles two)."""
    return tuple(t for t in divisors(gpus_per_node) if heads % t == 0)


def has_layout(layers: int, heads: int, num_gpus: int, gpus_per_node: int, global_batch_size: int,
               tp_values: tuple[int, ...] | None = None) -> bool:
    """Whether some (tp, pp, dp) uses exactly ``num_gpus`` GPUs for this shape (default tp: :func:`nvlink_tp`)."""
    tps = tp_values or nvlink_tp(heads, gpus_per_node)
    for tp in tps:
        if heads % tp or num_gpus % tp:
            continue
        for pp in divisors(layers):
            if (num_gpus // tp) % pp:
                continue
            dp = num_gpus // (tp * pp)
            if global_batch_size % dp == 0:
                return True
    return False


def shape_grid(template: Model, min_params: float, max_params: float, num_gpus: int, gpus_per_node: int,
               global_batch_size: int, head_size: int = DEFAULT_HEAD_SIZE, hidden_step: int = DEFAULT_HIDDEN_STEP,
               min_aspect: float = DEFAULT_MIN_ASPECT, max_aspect: float = DEFAULT_MAX_ASPECT,
               tp_values: tuple[int, ...] | None = None) -> tuple[list[Shape], int]:
    """Shapes with ``min_params ≤ N ≤ max_params`` (by a quick count), smallest first, and how many were left out
    for lack of a parallel layout on ``num_gpus`` GPUs."""
    if hidden_step % head_size:
        raise TrainsimError("hidden_step", f"{hidden_step} is not a multiple of the head size {head_size}",
                            "use a hidden step that is a multiple of the head size")
    if min_aspect <= 0 or max_aspect < min_aspect:
        raise TrainsimError("aspect", f"bad width/depth window [{min_aspect}, {max_aspect}]", "use 0 < min ≤ max")
    if template.is_moe:
        raise TrainsimError("template", "compute-optimal sizing is defined for dense models",
                            "use a dense template model")
    shapes: list[Shape] = []
    no_layout = 0
    hidden = hidden_step
    while True:
        lo_layers = max(1, -(-hidden // max_aspect))
        hi_layers = int(hidden // min_aspect)
        if estimate_params(template, int(lo_layers), hidden) > max_params * 1.05:
            break
        heads = hidden // head_size
        for layers in range(int(lo_layers), hi_layers + 1):
            n = estimate_params(template, layers, hidden)
            if n < min_params * 0.95 or n > max_params * 1.05:
                continue
            if not has_layout(layers, heads, num_gpus, gpus_per_node, global_batch_size, tp_values):
                no_layout += 1
                continue
            shape = Shape(layers, hidden, heads, template)
            if min_params <= shape.params <= max_params:
                shapes.append(shape)
        hidden += hidden_step
        if hidden > 1_000_000:  # pragma: no cover - guard against a degenerate template
            break
    shapes.sort(key=lambda s: (s.params, s.layers))
    return shapes, no_layout
