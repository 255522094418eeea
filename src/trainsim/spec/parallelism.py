"""Parallelization plan: tensor, pipeline (with virtual stages), context, expert and data parallelism."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from trainsim.errors import TrainsimError
from trainsim.parallel.axes import DEFAULT_RANK_ORDER, ORDER_AXES, normalize_rank_order
from trainsim.schedule import SCHEDULE_NAMES, schedule_help
from trainsim.spec.base import Spec
from trainsim.spec.flags import Flag
from trainsim.spec.limits import MAX_GPUS, MAX_LAYERS

if TYPE_CHECKING:
    Schedule = str
else:  # the registered schedule names (trainsim.schedule.SCHEDULES)
    Schedule = Literal[SCHEDULE_NAMES]
#: The axes of a rank-order string, in Megatron's default order (owned by :mod:`trainsim.parallel.axes`).
DIMENSIONS: tuple[str, ...] = tuple(a.value for a in ORDER_AXES)
#: Linear-layer sharding strategies of tensor parallelism: Megatron's 1D (column/row-parallel pairs) and the 2D
#: SUMMA grid (:mod:`trainsim.workload.summa`).
TENSOR_PARALLEL_MODES = ("1d", "summa")
TensorParallelMode = Literal["1d", "summa"]


class Parallelism(Spec, frozen=True):
    """How a job is split over GPUs.

    ``dp`` may be left ``None`` and is then derived from the GPU count. ``rank_order`` lists the dimensions from the
    fastest-varying (adjacent global ranks) to the slowest, as Megatron's ``tp-cp-ep-dp-pp`` default: with it,
    tensor-parallel ranks share a node. ``first_stage_layers``/``last_stage_layers`` give an uneven split
    (Megatron's ``--decoder-first-pipeline-num-layers``/``--decoder-last-pipeline-num-layers``), also with virtual
    stages; ``account_for_embedding_in_pipeline_split``/``account_for_loss_in_pipeline_split`` count the embedding
    and the loss as a layer of the first/last virtual stage, and ``pipeline_layout`` places every layer explicitly
    (``--pipeline-model-parallel-layout``): see :mod:`trainsim.spec.pipeline_split`.
    """

    tp: Annotated[int, Flag("--tensor-model-parallel-size", "--tp", dimension="tp",
                            help="tensor parallel size")] = Field(default=1, gt=0, le=MAX_GPUS)
    pp: Annotated[int, Flag("--pipeline-model-parallel-size", "--pp", dimension="pp",
                            help="pipeline parallel size")] = Field(default=1, gt=0, le=MAX_GPUS)
    vpp: Annotated[int, Flag("--num-virtual-stages-per-pipeline-rank", "--vpp", dimension="vpp",
                             help="virtual stages per pipeline rank (interleaving)")] = Field(
        default=1, gt=0, le=MAX_LAYERS, description="virtual stages (model chunks) per pipeline rank")
    cp: Annotated[int, Flag("--context-parallel-size", "--cp", dimension="cp", help="context parallel size")] = Field(
        default=1, gt=0, le=MAX_GPUS)
    hierarchical_cp_sizes: Annotated[tuple[int, ...], Flag(
        "--hierarchical-context-parallel-sizes",
        help="--cp-comm-type a2a+p2p: the two context-parallel levels, all-to-all (adjacent ranks) then ring, "
             "e.g. 2,4 for cp 8 (default: the CP ranks of one node all-to-all)")] = Field(
        default=(), description="hierarchical context parallelism (Megatron's --hierarchical-context-parallel-sizes): "
                                "the sizes of the all-to-all level (adjacent CP ranks) and of the ring level, whose "
                                "product is cp; read with --cp-comm-type a2a+p2p")
    ep: Annotated[int, Flag("--expert-model-parallel-size", "--ep", dimension="ep",
                            help="expert parallel size")] = Field(default=1, gt=0, le=MAX_GPUS)
    dp: Annotated[int | None, Flag("--data-parallel-size", "--dp", dimension="dp", megatron=False,
                                   help="data parallel size (checked)")] = Field(default=None, gt=0, le=MAX_GPUS)
    sequence_parallel: Annotated[bool, Flag("--sequence-parallel", dimension="sequence_parallel",
                                            help="sequence parallelism")] = False
    schedule: Annotated[Schedule | None, Flag("--schedule", dimension="schedule", megatron=False,
                                              help=schedule_help)] = Field(
        default=None, description="None: interleaved when vpp > 1, else 1f1b")
    rank_order: Annotated[str, Flag("--rank-order", dimension="rank_order",
                                    help="e.g. tp-cp-ep-dp-pp")] = DEFAULT_RANK_ORDER
    first_stage_layers: Annotated[int | None, Flag("--decoder-first-pipeline-num-layers",
                                                   help="layers on the first stage")] = Field(
        default=None, ge=0, le=MAX_LAYERS)
    last_stage_layers: Annotated[int | None, Flag("--decoder-last-pipeline-num-layers",
                                                  help="layers on the last stage")] = Field(
        default=None, ge=0, le=MAX_LAYERS)
    account_for_embedding_in_pipeline_split: Annotated[bool, Flag(
        "--account-for-embedding-in-pipeline-split", help="count the embedding as a layer of the first stage")] = False
    account_for_loss_in_pipeline_split: Annotated[bool, Flag(
        "--account-for-loss-in-pipeline-split", help="count the loss as a layer of the last stage")] = False
    pipeline_layout: Annotated[str | None, Flag(
        "--pipeline-model-parallel-layout", help="layers per virtual stage, e.g. 'Et|(tt|)*30L' (Megatron syntax)")] = (
        Field(default=None,
              description="Megatron's --pipeline-model-parallel-layout, e.g. 'Et*3|(tt|)*29m|L': virtual stages "
                          "separated by '|' in virtual-stage order, t a transformer layer, E the embedding, m the MTP "
                          "layers, L the loss"))
    etp: Annotated[int | None, Flag("--expert-tensor-parallel-size", "--etp", dimension="etp",
                                    help="tensor parallel size of the expert layers (default: tp)")] = Field(
        default=None, gt=0, le=MAX_GPUS,
        description="expert tensor-parallel size (Megatron's --expert-tensor-parallel-size); None: equal to tp")
    tensor_parallel_mode: Annotated[TensorParallelMode, Flag(
        "--tensor-parallel-mode", dimension="tensor_parallel_mode", megatron=False,
        help="linear-layer sharding: 1d (Megatron, default) or summa (2D grid of --tp-rows × tp/rows GPUs)")] = Field(
        default="1d", description="linear-layer sharding: 1d (Megatron's column/row-parallel pairs) or summa (2D "
                                  "tp_rows × tp/tp_rows grid, SUMMA broadcasts pipelined against the GEMM blocks)")
    tp_rows: Annotated[int | None, Flag(
        "--tp-rows", dimension="tp_rows", megatron=False,
        help="summa: rows of the tensor-parallel grid (columns = tp/rows; default: the largest divisor "
             "≤ √tp)")] = Field(
        default=None, gt=0, le=MAX_GPUS,
        description="summa: rows R of the tensor-parallel grid (columns tp/R); None: the largest divisor of tp not "
                    "above √tp")
    summa_blocks: Annotated[int, Flag(
        "--summa-blocks", dimension="summa_blocks", megatron=False,
        help="summa: panels each GEMM is broadcast in, pipelined against the GEMM blocks (default 4)")] = Field(
        default=4, gt=0, le=256, description="summa: panels (blocks) each GEMM's inner dimension is broadcast in")
    tp_inner: Annotated[Literal["row", "col"], Flag(
        "--tp-inner", dimension="tp_inner", megatron=False,
        help="summa: grid group on adjacent ranks (inside the NVLink domain first): row (activation broadcasts, "
             "default) or col (weight broadcasts)")] = Field(
        default="row", description="summa: which grid group takes adjacent ranks (inside an NVLink domain first): "
                                   "row (the tp/R GPUs of a grid row, broadcasting activation panels) or col (the R "
                                   "GPUs of a grid column, broadcasting weight panels)")

    @field_validator("rank_order")
    @classmethod
    def _check_order(cls, value: str) -> str:
        return normalize_rank_order(value)

    @model_validator(mode="before")
    @classmethod
    def _vpp_from_layout(cls, data: Any) -> Any:
        """Virtual stages per rank from a layout when they are not given (Megatron's arguments.py derives
        ``virtual_pipeline_model_parallel_size`` from ``--pipeline-model-parallel-layout``)."""
        if isinstance(data, dict) and data.get("pipeline_layout") and data.get("vpp") in (None, 1):
            try:
                stages = len(parse_pipeline_layout(str(data["pipeline_layout"]))[0])
            except ValueError:  # reported by the field's own validator, under its name
                return data
            pp = int(data.get("pp") or 1)
            if pp > 0 and stages % pp == 0 and stages // pp > 1:
                data = {**data, "vpp": stages // pp}
        return data

    @field_validator("pipeline_layout")
    @classmethod
    def _check_layout(cls, value: str | None) -> str | None:
        if value is not None:
            parse_pipeline_layout(value)
        return value

    @model_validator(mode="after")
    def _check_cp_levels(self) -> Parallelism:
        sizes = self.hierarchical_cp_sizes
        if sizes and (len(sizes) != 2 or min(sizes) < 1 or math.prod(sizes) != self.cp):
            raise TrainsimError("parallelism.hierarchical_cp_sizes",
                                f"{','.join(map(str, sizes))} are not two levels whose product is cp = {self.cp}",
                                "give the all-to-all and the ring size, e.g. --hierarchical-context-parallel-sizes "
                                f"{min(self.cp, 2)},{max(self.cp // 2, 1)}")
        return self

    @model_validator(mode="after")
    def _check_grid(self) -> Parallelism:
        if self.tensor_parallel_mode == "1d":
            if self.tp_rows is not None and self.tp_rows != 1:
                raise TrainsimError("parallelism.tp_rows", f"--tp-rows {self.tp_rows} needs the 2D tensor-parallel "
                                    "grid", "add --tensor-parallel-mode summa, or drop --tp-rows")
            return self
        if self.tp == 1:
            raise TrainsimError("parallelism.tensor_parallel_mode", "summa needs tensor parallelism (tp = 1)",
                                "give --tp > 1 (a grid of --tp-rows × tp/tp-rows GPUs), or use "
                                "--tensor-parallel-mode 1d")
        if self.tp_rows is not None and self.tp % self.tp_rows:
            raise TrainsimError("parallelism.tp_rows", f"tp = {self.tp} is not divisible by tp_rows = {self.tp_rows}",
                                "choose --tp-rows dividing --tp (columns = tp / rows)")
        return self

    @property
    def summa(self) -> bool:
        """Whether the linear layers use the 2D SUMMA grid."""
        return self.tensor_parallel_mode == "summa" and self.tp > 1

    @property
    def grid(self) -> tuple[int, int]:
        """(rows R, columns C) of the tensor-parallel grid: ``(1, tp)`` in 1D mode (every rank one column)."""
        if not self.summa:
            return 1, self.tp
        rows = self.tp_rows if self.tp_rows is not None else default_tp_rows(self.tp)
        return rows, self.tp // rows

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel size of the expert layers (``etp``, default ``tp``)."""
        return self.etp if self.etp is not None else self.tp

    @property
    def virtual_stage_layers(self) -> tuple[int, ...] | None:
        """Transformer layers of every virtual stage (in virtual-stage order) given by :attr:`pipeline_layout`."""
        return None if self.pipeline_layout is None else parse_pipeline_layout(self.pipeline_layout)[0]

    @property
    def model_parallel_size(self) -> int:
        """GPUs holding one replica of the model: tp·pp·cp."""
        return self.tp * self.pp * self.cp


def default_tp_rows(tp: int) -> int:
    """The default rows of a ``tp``-GPU grid: the largest divisor of ``tp`` not above ``√tp`` (square when possible,
    else more columns than rows)."""
    return max(d for d in range(1, math.isqrt(tp) + 1) if tp % d == 0)


_REPEAT = re.compile(r"\(([^()]*)\)\*(\d+)|([EtmL|])\*(\d+)")


def parse_pipeline_layout(text: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Parse Megatron's ``--pipeline-model-parallel-layout`` into (transformer layers per virtual stage, the stage
    strings). ``(...)*n`` and ``X*n`` repeat; ``|`` separates virtual stages; spaces are ignored."""
    s = text.replace(" ", "")
    while True:
        expanded = _REPEAT.sub(lambda m: (m.group(1) if m.group(1) is not None else m.group(3))
                               * int(m.group(2) or m.group(4)), s)
        if expanded == s:
            break
        s = expanded
    if not s or set(s) - set("EtmL|"):
        raise ValueError(f"{text!r}: use E, t, m, L, '|' separators and (...)*n repeats (e.g. 'Et*3|(tt|)*29m|L')")
    stages = tuple(s.split("|"))
    if "E" in "".join(stages[1:]) or "L" in "".join(stages[:-1]):
        raise ValueError(f"{text!r}: E (embedding) belongs to the first virtual stage and L (loss) to the last")
    return tuple(st.count("t") for st in stages), stages
