"""FP8 training recipes (Transformer Engine / Megatron-Core ``--fp8-recipe``): what each costs besides the GEMMs.

Every FP8 GEMM input is quantized from 16-bit activations (weights once per iteration, or per micro-batch when they
are re-cast), and in backward every linear layer's output gradient (``grad_output``, with its transpose for the
weight-gradient GEMM) before its data- and weight-gradient GEMMs. The recipes differ in how the scale is found and
how many quantized copies a tensor needs:

- ``delayed``: per-tensor scale from an amax history (no extra pass); one cast kernel reads the 16-bit tensor and
  writes the FP8 tensor and its transpose (Hopper's FP8 GEMMs need both layouts): 2 + 1 + 1 bytes per element.
- ``tensorwise`` (current scaling): the amax of the tensor itself is reduced first, an extra read: 2 + 2 + 1 + 1.
- ``blockwise`` (DeepSeek-V3's fine-grained scaling: 1×128 tiles for activations, 128×128 blocks for weights):
  the row-wise and column-wise copies are quantized separately with their own scales (fp32 per 128 elements):
  2 + 2·(1 + 4/128).
- ``mxfp8`` (OCP microscaling, Blackwell tensor cores only): 32-element blocks with an 8-bit E8M0 scale; the
  column-wise copy cannot be obtained by transposing the row-wise one, so both are written: 2 + 2·(1 + 1/32).
- ``nvfp4`` (Transformer Engine's NVFP4BlockScaling, Megatron ``--fp4-format e2m1 --fp4-recipe nvfp4``; Blackwell
  only): the GEMMs run in FP4 (E2M1, half a byte) with an FP8 E4M3 scale per 16 elements and an FP32 per-tensor
  scale, so an amax pass precedes the row- and column-wise quantization (the weight-gradient operands through a
  16-point random Hadamard transform fused into that cast): 2 + 2 + 2·(0.5 + 1/16). Its GEMMs are priced at the
  GPU's FP4 peak with the FP8 GEMM efficiency (no FP4 measurement); the LM head and attention stay 16-bit.
  Recipes that keep the first and last layers in BF16 are not modelled.

Weights keep FP8 copies next to the 16-bit ones (1 byte per parameter for the per-tensor recipes, both layouts for
the block-scaled ones). A saved GEMM input keeps only the copy the backward pass needs: the weight-gradient GEMM
reads the column-wise one, and Transformer Engine's linear modules discard the row-wise data once the forward GEMM
has used it (``inputmat.update_usage(rowwise_usage=False, columnwise_usage=True)`` in
``transformer_engine/pytorch/module/{linear,layernorm_linear,grouped_linear}.py``, "not needed in backward pass"), so a
block-scaled input is saved at one copy's bytes: 1 + 4/128 (blockwise), 1 + 1/32 (mxfp8), 0.5 + 1/16 (nvfp4). The
per-tensor recipes keep the FP8 tensor (whose transpose the backward pass makes or cached): 1 byte.
Sources: Transformer Engine user guide, "Using FP8 with Transformer Engine" and the MXFP8 / block-scaling / NVFP4
recipe pages; DeepSeek-V3 technical report §3.3; OCP Microscaling Formats (MX) v1.0 specification; NVIDIA 2025
"Pretraining Large Language Models with NVFP4" (arXiv 2509.25149, §3: 16-element blocks, E4M3 block scales, FP32
tensor scale, random Hadamard transforms on the weight-gradient inputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainsim.spec.training import element_bytes

Fp8Recipe = Literal["delayed", "tensorwise", "blockwise", "mxfp8", "nvfp4"]
FP8_RECIPES: tuple[str, ...] = ("delayed", "tensorwise", "blockwise", "mxfp8", "nvfp4")


@dataclass(frozen=True, slots=True)
class RecipeCost:
    """Per-element costs of one FP8 recipe."""

    cast_bytes: float  # HBM bytes moved to quantize one element of a GEMM input (all copies)
    weight_copy_bytes: float  # extra bytes per parameter for the FP8 weight copies
    saved_input_bytes: float  # bytes per element of a GEMM input saved for the backward pass
    generations: tuple[str, ...]  # GPU generations whose tensor cores run it
    gemm_dtype: str = "fp8"  # the data type its GEMMs run in


RECIPES: dict[str, RecipeCost] = {
    "delayed": RecipeCost(4.0, 1.0, 1.0, ("hopper", "ada", "blackwell")),
    "tensorwise": RecipeCost(6.0, 1.0, 1.0, ("hopper", "ada", "blackwell")),
    "blockwise": RecipeCost(2.0 + 2 * (1 + 4 / 128), 2 * (1 + 4 / 16384), 1 + 4 / 128, ("hopper", "blackwell")),
    "mxfp8": RecipeCost(2.0 + 2 * (1 + 1 / 32), 2 * (1 + 1 / 32), 1 + 1 / 32, ("blackwell",)),
    "nvfp4": RecipeCost(4.0 + 2 * (0.5 + 1 / 16), 2 * (0.5 + 1 / 16), 0.5 + 1 / 16, ("blackwell",), "fp4"),
}


#: Recipes with one scale per tensor (``None``: Megatron's default, delayed): a stack can all-gather the quantized
#: tensor and apply the one scale after the gather (Framework.fp8_tp_gather); the block-scaled recipes' scales are
#: laid out per block of the local shard.
PER_TENSOR_FP8_RECIPES: frozenset[str | None] = frozenset({None, "delayed", "tensorwise"})


def recipe_cost(recipe: str | None) -> RecipeCost:
    """Costs of ``recipe`` (``None``: Megatron's default, delayed scaling)."""
    return RECIPES[recipe or "delayed"]


def saved_input_bytes(precision: str, fp8_recipe: str | None = None) -> float:
    """Bytes per element of a linear-layer input saved for the backward pass (FP8: the recipe's copies; else the
    training element size)."""
    if precision == "fp8":
        return recipe_cost(fp8_recipe).saved_input_bytes
    return element_bytes(precision)
