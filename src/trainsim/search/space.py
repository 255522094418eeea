"""The design space of a search: which values each dimension takes, and the enumeration of valid candidates.

Every dimension (:data:`DIMENSIONS`) is either

- **listed**: one value or several (``4,8,16``), ranges ``a:b[:step]`` (arithmetic, inclusive) or ``a..b``
  (doubling: ``256..2048`` is 256, 512, 1024, 2048);
- **open** (``all``): every value that is valid for this dimension given the ones enumerated before it, in the
  order of :data:`DIMENSIONS` (so open values never cause skips on their own: ``tp`` divides the heads and the GPU
  count, ``pp`` the layers and the GPUs left, ``mbs`` the global batch per replica, ...), except GPipe
  (:data:`OPEN_SCHEDULES`) and context parallelism below :data:`MIN_TOKENS_PER_CP_RANK` tokens per rank, which must
  be listed;
- **not given**: open when ``others="open"`` (the default), else held at its default (the training template's
  micro-batch size, recompute mode and ZeRO stage; tp = pp = vpp = cp = ep = 1; no sequence parallelism; Megatron's
  rank order).

Every combination is validated as a :class:`~trainsim.spec.job.Job`; invalid ones are skipped and counted by the
field their error names. Combinations that cannot differ in any prediction are merged: the schedule without pipeline
parallelism, sequence parallelism without tensor parallelism, rank orders that place every communication group
identically (:func:`~trainsim.cost.comm.group_placements`; listed orders merged this way are counted as equivalent, the
permutations behind an open rank order are not), and selective recomputation where it changes neither the layer work,
the activation memory nor the FLOPs (counted as equivalent).
"""

from __future__ import annotations

import itertools
import math
import re
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, NamedTuple, cast

from pydantic import Field, field_validator, model_validator

from trainsim.errors import TrainsimError, TrainsimWarning
from trainsim.parallel.axes import DEFAULT_RANK_ORDER, ORDER_AXES, Axis, Group, normalize_rank_order
from trainsim.parallel.layout import Layout
from trainsim.schedule import SCHEDULE_NAMES, default_schedule, get_schedule, searched_schedules
from trainsim.spec.base import Spec
from trainsim.spec.flags import spec_flags
from trainsim.spec.framework import Framework, load_framework
from trainsim.spec.job import Job
from trainsim.spec.model import Model
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.system import System
from trainsim.spec.training import Training

OPEN = "all"
OPEN_WORDS = frozenset({"all", "*", "open"})

#: Search dimensions, in enumeration order (open domains depend on the dimensions before them).
DIMENSIONS: tuple[str, ...] = (
    "num_gpus", "tp", "pp", "cp", "dp", "ep", "etp", "vpp", "schedule", "micro_batch_size", "recompute", "zero_stage",
    "sequence_parallel", "rank_order", "tensor_parallel_mode", "tp_rows", "tp_inner", "summa_blocks",
)
INT_DIMENSIONS = frozenset({"num_gpus", "tp", "pp", "cp", "dp", "ep", "etp", "vpp", "micro_batch_size",
                            "zero_stage", "tp_rows", "summa_blocks"})
#: Open tensor-parallel mode domain: 1D only — list ``summa`` (``--tensor-parallel-mode 1d,summa``) to search the 2D
#: grid too (its rows, placements and panels multiply the candidates).
OPEN_TP_MODES = ("1d",)
TP_MODES = ("1d", "summa")
TP_INNER = ("row", "col")
#: Open panel count of the SUMMA grid (list more values to search it).
OPEN_SUMMA_BLOCKS = (4,)
SCHEDULES = SCHEDULE_NAMES
#: Open schedule domain with vpp = 1 (from the registry's ``searched`` flags): GPipe is left out (same bubble as 1F1B,
#: every micro-batch in flight; Megatron-LM does not implement it) — list it explicitly to include it.
OPEN_SCHEDULES = searched_schedules(1)
#: Open context parallelism keeps at least this many tokens of each sequence per rank (list larger cp explicitly).
MIN_TOKENS_PER_CP_RANK = 1024
RECOMPUTE = ("none", "selective", "full")

DimValues = tuple[Any, ...] | Literal["all"] | None

_RANGE = re.compile(r"^(-?\d+)\s*:\s*(-?\d+)(?:\s*:\s*(-?\d+))?$")
_DOUBLING = re.compile(r"^(-?\d+)\s*\.\.\s*(-?\d+)$")
_HINT = "give a value, a list (4,8,16), a range a:b[:step] (512:4096:512) or a:b doubling (256..2048), or 'all'"


def _dimension_fields(spec: type) -> dict[str, str]:
    """Search dimension → field of ``spec``, from the fields' flag metadata (``Flag(..., dimension=...)``)."""
    return {f.flag.dimension: f.field for f in spec_flags(spec) if f.flag.dimension}


#: Search dimension → :class:`Parallelism` field (declared on the fields: :mod:`trainsim.spec.flags`).
PARALLELISM_DIMENSIONS: dict[str, str] = _dimension_fields(Parallelism)
#: Search dimension → :class:`Training` field (``recompute`` is ``recompute_granularity``).
TRAINING_DIMENSIONS: dict[str, str] = _dimension_fields(Training)


class CandidateSpec(NamedTuple):
    """One point of the design space (resolved: every value explicit): the GPU count, a :class:`Parallelism`
    (:attr:`parallelism`) and the training fields the search varies (:meth:`training_update`).

    Its fields are the search dimensions — the spec fields whose flag declares a ``dimension`` — and nothing else
    (a test checks it), so the plan columns of reports (:data:`~trainsim.search.result.CANDIDATE_KEYS`), the job of a
    candidate (:func:`build_job`) and the evaluated :class:`~trainsim.search.evaluate.Candidate` all follow from it.
    A tuple, not a pydantic model, because hundreds of thousands of them are hashed and sent to workers.
    """

    num_gpus: int
    tp: int
    pp: int
    vpp: int
    cp: int
    ep: int
    dp: int
    micro_batch_size: int
    schedule: str
    recompute: str
    zero_stage: int
    sequence_parallel: bool
    rank_order: str
    etp: int | None = None  # expert tensor-parallel size (None: tp)
    tensor_parallel_mode: str = "1d"
    tp_rows: int | None = None  # summa: grid rows
    tp_inner: str = "row"  # summa: the grid group on adjacent ranks
    summa_blocks: int = 4

    def parallelism_fields(self) -> dict[str, Any]:
        """The :class:`Parallelism` fields of this candidate."""
        return {name: getattr(self, dim) for dim, name in PARALLELISM_DIMENSIONS.items()}

    @property
    def parallelism(self) -> Parallelism:
        """This candidate's :class:`Parallelism` (not validated again: :func:`enumerate_space` validated it)."""
        return Parallelism.model_construct(**self.parallelism_fields())

    def training_update(self) -> dict[str, Any]:
        """The :class:`Training` fields this candidate sets (micro-batch size, recompute mode, ZeRO stage)."""
        return {name: getattr(self, dim) for dim, name in TRAINING_DIMENSIONS.items()}

    def report(self) -> dict[str, Any]:
        """The plan columns of a report: every field, with the expert tensor-parallel size resolved and the SUMMA
        grid fields only for SUMMA plans."""
        out = self._asdict()
        out["etp"] = self.etp if self.etp is not None else self.tp
        if self.tensor_parallel_mode != "summa":
            out.update(tp_rows=None, tp_inner=None, summa_blocks=None)
        return out


#: Values one arithmetic range may expand to (a typo such as 1:100000000 is refused instead of running for hours).
MAX_RANGE_VALUES = 4096


# ---- parsing ---------------------------------------------------------------------------------------------------------
def _int_item(item: str, dim: str) -> list[int]:
    text = item.strip()
    m = _RANGE.match(text)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        step = int(m.group(3)) if m.group(3) else 1
        if step <= 0 or a > b:
            raise TrainsimError(dim, f"empty or backward range {text!r}", "use a:b:step with a ≤ b and step > 0")
        count = (b - a) // step + 1
        if count > MAX_RANGE_VALUES:
            raise TrainsimError(dim, f"range {text!r} has {count:,} values (limit {MAX_RANGE_VALUES:,})",
                                "use a larger step or a doubling range a..b")
        return list(range(a, b + 1, step))
    m = _DOUBLING.match(text)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        if a <= 0 or a > b:
            raise TrainsimError(dim, f"bad doubling range {text!r}", "use a..b with 0 < a ≤ b (a, 2a, 4a, … ≤ b)")
        out = []
        while a <= b:
            out.append(a)
            a *= 2
        return out
    try:
        return [int(text)]
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise TrainsimError(dim, f"cannot read {text!r}", _HINT) from None
        if not value.is_integer():
            raise TrainsimError(dim, f"{text!r} is not a whole number", _HINT) from None
        return [int(value)]


def _bool_item(item: Any, dim: str) -> bool:
    if isinstance(item, bool):
        return item
    text = str(item).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise TrainsimError(dim, f"cannot read {item!r} as true/false", "give true, false, true,false or all")


def _str_item(item: Any, dim: str) -> str:
    text = str(item).strip().lower()
    if dim == "schedule":
        if text not in SCHEDULES:
            raise TrainsimError(dim, f"unknown schedule {item!r}", f"use {', '.join(SCHEDULES)}")
    elif dim == "recompute":
        if text not in RECOMPUTE:
            raise TrainsimError(dim, f"unknown recompute mode {item!r}", f"use {', '.join(RECOMPUTE)}")
    elif dim == "tensor_parallel_mode":
        if text not in TP_MODES:
            raise TrainsimError(dim, f"unknown tensor-parallel mode {item!r}", f"use {', '.join(TP_MODES)}")
    elif dim == "tp_inner":
        if text not in TP_INNER:
            raise TrainsimError(dim, f"unknown grid placement {item!r}", "use row, col")
    elif dim == "rank_order":
        try:
            text = normalize_rank_order(text)
        except ValueError:
            raise TrainsimError(dim, f"{item!r} is not a permutation of {DEFAULT_RANK_ORDER}",
                                f"give the dimensions {', '.join(ORDER_AXES)} joined by '-', fastest-varying "
                                "first") from None
    return text


def parse_values(value: Any, dim: str) -> DimValues:
    """Normalise one dimension's input: ``None`` (not given), ``"all"`` (open) or a tuple of distinct values.

    Accepts a scalar, a sequence, or text: ``"4,8,16"``, ``"512:4096:512"``, ``"256..2048"``, ``"all"``.
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in OPEN_WORDS:
            return OPEN
        if not text:
            raise TrainsimError(dim, "empty value", _HINT)
        items: list[Any] = [t for t in text.split(",")]
        if any(not t.strip() for t in items):
            raise TrainsimError(dim, f"empty item in {value!r}", _HINT)
    elif isinstance(value, Sequence):
        items = list(value)
        if not items:
            raise TrainsimError(dim, "empty list", _HINT)
    else:
        items = [value]
    out: list[Any] = []
    for item in items:
        if isinstance(item, str) and item.strip().lower() in OPEN_WORDS:
            raise TrainsimError(dim, "'all' cannot be mixed with listed values", _HINT)
        if dim == "sequence_parallel":
            values: list[Any] = [_bool_item(item, dim)]
        elif dim in INT_DIMENSIONS:
            if isinstance(item, bool):
                raise TrainsimError(dim, f"expected a whole number, got {item!r}", _HINT)
            if isinstance(item, int):
                values = [item]
            elif isinstance(item, float) and item.is_integer():
                values = [int(item)]
            else:
                values = _int_item(str(item), dim)
            low = 0 if dim == "zero_stage" else 1
            bad = [v for v in values if v < low or (dim == "zero_stage" and v > 3)]
            if bad:
                what = "between 0 and 3" if dim == "zero_stage" else "positive"
                raise TrainsimError(dim, f"{bad[0]} is not {what}", _HINT)
        else:
            values = [_str_item(item, dim)]
        out += values
    return tuple(dict.fromkeys(out))


# ---- the space -------------------------------------------------------------------------------------------------------
class SearchSpace(Spec, frozen=True):
    """A design space: a model, a system, a training template and the values of every search dimension.

    ``model``/``system`` accept preset names. Each dimension accepts ``None`` (not given: see ``others``), ``"all"``
    (open), a value, a list, or text as on the command line (``"4,8,16"``, ``"512:4096:512"``, ``"256..2048"``).
    ``training`` gives everything else (global batch, sequence, precision, overlap flags, token budget); its
    micro-batch size, recompute mode and ZeRO stage are only the defaults used with ``others="default"``.
    """

    model: Model
    system: System
    training: Training
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    num_gpus: Any = None
    tp: Any = None
    pp: Any = None
    vpp: Any = None
    cp: Any = None
    ep: Any = None
    etp: Any = None
    dp: Any = None
    micro_batch_size: Any = None
    schedule: Any = None
    recompute: Any = None
    zero_stage: Any = None
    sequence_parallel: Any = None
    rank_order: Any = None
    tensor_parallel_mode: Any = None
    tp_rows: Any = None
    tp_inner: Any = None
    summa_blocks: Any = None
    others: Literal["open", "default"] = "open"
    framework: Framework = Field(default_factory=load_framework)

    @model_validator(mode="before")
    @classmethod
    def _stack(cls, data: Any) -> Any:
        """Resolve the framework and the training fields it decides (as a job does), once for every candidate."""
        if not isinstance(data, dict) or data.get("training") is None:
            return data
        from trainsim.spec.job import resolve_stack

        model = data.get("model")
        if isinstance(model, str):
            from trainsim.spec.presets import load_model

            model = load_model(model)
        resolved = resolve_stack({"model": model, "training": data["training"],
                                  "framework": data.get("framework")})
        return {**data, "model": model, "training": resolved["training"], "framework": resolved["framework"]}

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value: Any) -> Any:
        if isinstance(value, str):
            from trainsim.spec.presets import load_model

            return load_model(value)
        return value

    @field_validator("system", mode="before")
    @classmethod
    def _system(cls, value: Any) -> Any:
        if isinstance(value, str):
            from trainsim.spec.presets import load_system

            return load_system(value)
        return value

    @field_validator(*DIMENSIONS, mode="before")
    @classmethod
    def _dimension(cls, value: Any, info: Any) -> Any:
        return parse_values(value, info.field_name)

    @model_validator(mode="after")
    def _check(self) -> SearchSpace:
        if self.num_gpus is None and self.dp in (None, OPEN):
            raise TrainsimError("num_gpus", "the GPU count is open-ended",
                                "give --num-gpus (a value, list or range), or list --dp")
        if self.num_gpus == OPEN:
            raise TrainsimError("num_gpus", "cannot be 'all'", "give a value, a list or a range of GPU counts")
        return self

    def values(self, dim: str) -> DimValues:
        """The parsed values of a dimension (``None``: not given, ``"all"``: open)."""
        return getattr(self, dim)

    def is_open(self, dim: str) -> bool:
        """Whether the dimension takes all valid values."""
        v = self.values(dim)
        return v == OPEN or (v is None and self.others == "open")

    def describe(self) -> dict[str, Any]:
        """Each dimension as ``"all"``, ``"default"`` or its list of values (for reports)."""
        out: dict[str, Any] = {}
        for dim in DIMENSIONS:
            v = self.values(dim)
            if dim == "num_gpus" and v is None:
                out[dim] = "tp·pp·cp·dp"
            elif self.is_open(dim):
                out[dim] = OPEN
            elif v is None:
                out[dim] = "default"
            else:
                out[dim] = list(v)
        return out


# ---- enumeration -----------------------------------------------------------------------------------------------------
@dataclass
class Enumeration:
    """Valid candidates of a space, with what was skipped and why."""

    candidates: list[CandidateSpec] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    skipped_examples: dict[str, str] = field(default_factory=dict)
    equivalent: int = 0
    warnings: Counter[str] = field(default_factory=Counter)

    @property
    def combinations(self) -> int:
        """Combinations looked at: valid + skipped + merged as equivalent."""
        return len(self.candidates) + sum(self.skipped.values()) + self.equivalent


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order."""
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
    return small + large[::-1]


@lru_cache(maxsize=65536)
def _placement_key(order: str, tp: int, cp: int, ep: int, dp: int, pp: int, gpus_per_node: int) -> tuple[Any, ...]:
    places = Layout.create(tp, cp, ep, dp, pp, order, gpus_per_node).placements
    return tuple(sorted(places.items()))


@lru_cache(maxsize=65536)
def _tp_nodes(order: str, tp: int, cp: int, ep: int, dp: int, pp: int, gpus_per_node: int) -> int:
    return Layout.create(tp, cp, ep, dp, pp, order, gpus_per_node).group(Group.TP).nodes


def _full_order(perm: Sequence[Axis], nontrivial: Sequence[Axis]) -> str:
    """Put ``perm`` into the slots that the non-trivial dimensions occupy in Megatron's default order."""
    it = iter(perm)
    return "-".join(next(it) if a in nontrivial else a for a in ORDER_AXES)


@lru_cache(maxsize=16384)
def distinct_rank_orders(tp: int, cp: int, ep: int, dp: int, pp: int, gpus_per_node: int,
                         listed: tuple[str, ...] | None = None) -> tuple[tuple[str, ...], int]:
    """Rank orders that place the communication groups differently, and how many equivalent ones were merged.

    ``listed=None``: every permutation of the dimensions larger than one (Megatron's order first).
    """
    sizes = {Axis.TP: tp, Axis.CP: cp, Axis.EP: ep, Axis.DP: dp, Axis.PP: pp}
    if listed is None:
        nontrivial = [a for a in ORDER_AXES if sizes[a] > 1]
        orders = [_full_order(p, nontrivial) for p in itertools.permutations(nontrivial)]
    else:
        orders = list(listed)
    seen: set[tuple[Any, ...]] = set()
    out = []
    for order in orders:
        key = _placement_key(order, tp, cp, ep, dp, pp, gpus_per_node)
        if key not in seen:
            seen.add(key)
            out.append(order)
    merged = len(orders) - len(out) if listed is not None else 0
    return tuple(out), merged


class _Enumerator:
    """Nested enumeration with open domains conditioned on the outer choices."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.model = space.model
        self.tr = space.training
        self.seq = self.tr.seq_length or self.model.seq_length
        self.gbs = self.tr.global_batch_size
        self.layers = self.model.num_layers
        self.uneven = space.first_stage_layers is not None or space.last_stage_layers is not None
        # the profile's split rule (trainsim.spec.pipeline_split): torchtitan's and Meta's weigh the embedding and the
        # loss as one layer each, so pipelines that divide layers + 2 are balanced too (126 layers on pp 16 × vpp 8)
        self.slots = self.layers + 2 if space.framework.pipeline_layer_split == "account-for-embedding-and-loss" \
            else self.layers
        self.heads = math.gcd(self.model.num_attention_heads, self.model.query_groups)
        self._selective_cache: dict[tuple[int, int, int, bool, int], bool] = {}

    def given(self, dim: str, default: Any) -> tuple[Any, ...] | None:
        """Listed values, the default (not given, others=default), or None for open."""
        v = self.space.values(dim)
        if self.space.is_open(dim):
            return None
        if v is None:
            return (default,)
        return v  # type: ignore[return-value]

    # open domains -------------------------------------------------------------------------------------------
    def tp_values(self, n: int | None) -> tuple[int, ...]:
        listed = self.given("tp", 1)
        if listed is not None:
            return listed
        return tuple(t for t in divisors(self.heads) if n is None or n % t == 0)

    def pp_values(self, n: int | None, tp: int) -> tuple[int, ...]:
        listed = self.given("pp", 1)
        if listed is not None:
            return listed
        rest = None if n is None else (n // tp if n % tp == 0 else None)
        if n is not None and rest is None:
            return (1,)
        cands = range(1, self.layers + 1) if self.uneven else sorted({*divisors(self.layers), *divisors(self.slots)})
        return tuple(p for p in cands if rest is None or rest % p == 0)

    def cp_values(self, n: int | None, tp: int, pp: int) -> tuple[int, ...]:
        listed = self.given("cp", 1)
        if listed is not None:
            return listed
        if n is not None and n % (tp * pp):
            return (1,)
        chunk = 2 if self.model.causal else 1
        ok = [c for c in divisors(self.seq) if self.seq % (chunk * c) == 0
              and (c == 1 or self.seq // c >= MIN_TOKENS_PER_CP_RANK)]
        if n is not None:
            ok = [c for c in ok if (n // (tp * pp)) % c == 0]
        return tuple(ok) or (1,)

    def dp_values(self, n: int | None, tp: int, pp: int, cp: int) -> tuple[int | None, ...]:
        listed = self.given("dp", None)
        if listed is not None and listed != (None,):
            return listed
        if n is None:
            return (1,)
        return (None,)  # derived from the GPU count by the job

    def ep_values(self, dp: int, cp: int, tp: int = 1) -> tuple[int, ...]:
        listed = self.given("ep", 1)
        if listed is not None:
            return listed
        if not self.model.is_moe:
            return (1,)
        experts = self.model.num_experts or 1
        etps = self.given("etp", None)
        least = 1 if etps is None else min(e or tp for e in etps)  # parallel folding: ep·etp divides tp·cp·dp
        return tuple(e for e in divisors(experts) if (tp * dp * cp) % (e * least) == 0) or (1,)

    def etp_values(self, tp: int, dp: int, cp: int, ep: int) -> tuple[int | None, ...]:
        """Expert tensor-parallel sizes: listed, or open over the divisors of tp that fold into the attention grid
        (``ep·etp`` divides ``tp·cp·dp``) and divide the expert FFN; ``None`` stands for etp = tp."""
        listed = self.given("etp", None)
        if listed is not None:
            return tuple(None if e == tp else e for e in listed)
        if not self.model.is_moe or tp == 1:
            return (None,)
        ffn = self.model.expert_ffn_size
        return tuple(None if e == tp else e for e in divisors(tp)
                     if (tp * dp * cp) % (ep * e) == 0 and ffn % e == 0) or (None,)

    def vpp_values(self, pp: int) -> tuple[int, ...]:
        listed = self.given("vpp", 1)
        if listed is not None:
            return listed
        if pp == 1 or self.uneven:
            return (1,)
        per_rank = {*(divisors(self.layers // pp) if self.layers % pp == 0 else ()),
                    *(divisors(self.slots // pp) if self.slots % pp == 0 else ())}
        # only chunk counts one of the stack's schedules runs (none but 1 for DeepSpeed's engine)
        return tuple(v for v in sorted(per_rank) if self.space.framework.runs_chunks(v)) or (1,)

    def schedule_values(self, pp: int, vpp: int) -> tuple[str, ...]:
        listed = self.given("schedule", default_schedule(vpp))
        if listed is not None:
            if pp == 1:  # without pipeline parallelism every schedule runs the same micro-batch loop
                mapped = tuple(dict.fromkeys(s if get_schedule(s).interleaves else default_schedule(1)
                                             for s in listed))
                return mapped
            return listed
        if pp == 1:
            return (default_schedule(1),)
        shipped = self.space.framework.pipeline_schedules
        # the open domain is what the stack ships (an explicit --schedule list is honoured as a what-if)
        return tuple(s for s in searched_schedules(vpp) if s in shipped) or (default_schedule(vpp),)

    def mbs_values(self, dp: int) -> tuple[int, ...]:
        listed = self.given("micro_batch_size", self.tr.micro_batch_size)
        if listed is not None:
            return listed
        if dp <= 0 or self.gbs % dp:
            return (1,)
        return tuple(divisors(self.gbs // dp))

    def recompute_values(self) -> tuple[str, ...]:
        listed = self.given("recompute", self.tr.recompute_granularity)
        if listed is not None:
            return listed
        if self.tr.recompute_num_layers is not None:
            return ("full",)
        return RECOMPUTE

    def zero_values(self, pp: int, dp: int, cp: int) -> tuple[int, ...]:
        listed = self.given("zero_stage", self.tr.zero_stage)
        if listed is not None:
            return listed
        if self.tr.overlap_param_gather:
            base: tuple[int, ...] = (1, 2, 3)
        else:
            base = (0, 1, 2, 3)
        if dp * cp == 1:  # nothing to shard over: stages 1 and 2 equal 0, stage 3 only adds gathered layers
            base = base[:1]
        if pp > 1:  # ZeRO-2 does not combine with pipelining; ZeRO-3 does, FSDP-style (gathered once per step)
            base = tuple(z for z in base if z != 2)
        return base

    def sp_values(self, tp: int) -> tuple[bool, ...]:
        listed = self.given("sequence_parallel", False)
        if tp == 1:
            return (False,)  # no effect without tensor parallelism
        if self.space.framework.shards_sequence(tp, self.model.is_moe):
            return (True,)  # the stack always shards the sequence (torchtitan's TP plan; Megatron-Core with MoE)
        if listed is not None:
            return listed
        if self.tr.tp_comm_overlap:
            return (True,)
        if self.seq % tp:
            return (False,)
        return (False, True)

    def grid_values(self, tp: int, cp: int) -> tuple[tuple[str, int | None, str, int], ...]:
        """(mode, rows, placement, panels) of the tensor-parallel grid: 1D, or SUMMA grids whose rows divide tp and
        the tokens per context-parallel rank, each with its row or column groups on adjacent ranks (the same
        placement when one of them has a single GPU) — summa only for dense models with tp > 1."""
        modes = self.given("tensor_parallel_mode", "1d")
        modes = OPEN_TP_MODES if modes is None else modes
        out: list[tuple[str, int | None, str, int]] = []
        if "1d" in modes:
            out.append(("1d", None, "row", 4))
        m = self.model
        if "summa" not in modes or tp == 1 or m.is_moe or m.multi_latent_attention or m.mtp_num_layers:
            return tuple(out)
        rows = self.given("tp_rows", None)
        rows = tuple(divisors(tp)) if rows is None or rows == (None,) else rows
        inner = self.given("tp_inner", "row")
        inner = TP_INNER if inner is None else inner
        blocks = self.given("summa_blocks", 4)
        blocks = OPEN_SUMMA_BLOCKS if blocks is None else blocks
        for r in rows:
            if tp % r or (self.seq // cp) % r:
                continue
            places = inner if 1 < r < tp else inner[:1]
            out += [("summa", r, pl, nb) for pl in places for nb in blocks]
        return tuple(out)

    def selective_is_none(self, probe: Job, tp: int, cp: int, ep: int, sp: bool, mbs: int) -> bool:
        """Whether selective recomputation changes nothing here (e.g. with FlashAttention, whose backward already
        recomputes the attention scores): same layer work, same activation memory, same hardware FLOPs."""
        key = (tp, cp, ep, sp and tp > 1, mbs)
        if key not in self._selective_cache:
            self._selective_cache[key] = self._selective_check(probe, *key)
        return self._selective_cache[key]

    def _selective_check(self, probe: Job, tp: int, cp: int, ep: int, sp: bool, mbs: int) -> bool:
        from trainsim.workload.flops import iteration_flops
        from trainsim.workload.fusion import fusion_of
        from trainsim.workload.layers import Shard, layer_work
        from trainsim.workload.memory import layer_activation_bytes

        tr, model = self.tr, self.model
        flags = (False, True) if model.is_moe else (False,)
        fusion = fusion_of(probe)
        recipe = tr.fp8_recipe if tr.precision == "fp8" else None
        for moe in flags:
            shards = [Shard(mbs, self.seq, tp, cp, ep, sp, tr.precision, probe.attention_path, mode, fusion,
                            fp8_recipe=recipe) for mode in ("none", "selective")]
            if layer_work(model, shards[0], moe) != layer_work(model, shards[1], moe):
                return False
            if layer_activation_bytes(model, shards[0], moe) != layer_activation_bytes(model, shards[1], moe):
                return False
        flops = [iteration_flops(probe.model_copy(update={"training": tr.model_copy(update={
            "recompute_granularity": mode, "micro_batch_size": mbs})})).hardware for mode in ("none", "selective")]
        return flops[0] == flops[1]

    # --------------------------------------------------------------------------------------------------------
    def prefixes(self) -> Iterator[tuple[int | None, int, int, int, int | None]]:
        """(num_gpus, tp, pp, cp, dp) combinations."""
        gpus = self.space.values("num_gpus")
        for n in (gpus if gpus not in (None, OPEN) else (None,)):
            for tp in self.tp_values(n):
                for pp in self.pp_values(n, tp):
                    for cp in self.cp_values(n, tp, pp):
                        for dp in self.dp_values(n, tp, pp, cp):
                            yield n, tp, pp, cp, dp


def enumerate_space(space: SearchSpace) -> Enumeration:
    """All valid candidates of ``space`` (deterministic order) with skip reasons and merged equivalents.

    Skips are counted where they are detected: a GPU layout (num_gpus, tp, pp, cp, dp) that is invalid whatever the
    other dimensions counts once; otherwise every invalid combination of the other dimensions counts once (times
    its rank orders).
    """
    en = _Enumerator(space)
    out = Enumeration()
    model, system, training = space.model, space.system, space.training
    gpn = system.gpus_per_node
    listed_orders = en.given("rank_order", DEFAULT_RANK_ORDER)
    first, last = space.first_stage_layers, space.last_stage_layers
    tr_base = training.model_dump()
    probe_training = training.model_copy(update={
        "micro_batch_size": 1, "zero_stage": 0, "recompute_granularity": "none", "recompute_num_layers": None,
        "overlap_param_gather": False, "tp_comm_overlap": False, "optimizer_cpu_offload": False,
        "param_cpu_offload": False})
    recompute_values = en.recompute_values()

    def skip(err: TrainsimError, count: int = 1) -> None:
        out.skipped[err.field] += count
        out.skipped_examples.setdefault(err.field, err.message)

    for n, tp, pp, cp, dp_given in en.prefixes():
        # The layout alone, with the most permissive other settings: if this fails, every combination does.
        try:
            with warnings.catch_warnings():  # warnings are counted per candidate, below
                warnings.simplefilter("ignore", TrainsimWarning)
                probe = Job(model=model, system=system, training=probe_training, num_gpus=n, framework=space.framework,
                            parallelism=Parallelism(tp=tp, pp=pp, cp=cp, dp=dp_given, first_stage_layers=first,
                                                    last_stage_layers=last))
        except TrainsimError as err:
            skip(err)
            continue
        dp, world = probe.dp, probe.world_size
        for ep, etp in ((e, t) for e in en.ep_values(dp, cp, tp) for t in en.etp_values(tp, dp, cp, e)):
            orders, merged = distinct_rank_orders(tp, cp, ep, dp, pp, gpn, listed_orders)
            per_combination = len(orders) + merged
            pipelines = [(vpp, sched) for vpp in en.vpp_values(pp) for sched in en.schedule_values(pp, vpp)]
            open_vpp = en.given("vpp", 1) is None
            grids = en.grid_values(tp, cp)
            # a grid inside one NVLink domain is placed alike whichever of its groups takes adjacent ranks
            one_domain = all(_tp_nodes(o, tp, cp, ep, dp, pp, gpn) == 1 for o in orders)
            rows_first = {(g[1], g[3]) for g in grids if g[0] == "summa" and g[2] == "row"}
            for (vpp, schedule), mbs, recompute, zero, sp, grid in itertools.product(
                    pipelines, en.mbs_values(dp), recompute_values, en.zero_values(pp, dp, cp), en.sp_values(tp),
                    grids):
                mode, rows, inner, nb = grid
                if mode == "summa" and inner == "col" and one_domain and (rows, nb) in rows_first:
                    out.equivalent += per_combination
                    continue
                if mode == "summa" and sp and False in en.sp_values(tp):
                    out.equivalent += per_combination  # the grid splits the activations anyway: sp changes nothing
                    continue
                if open_vpp and not get_schedule(schedule).accepts_microbatches(pp, en.gbs // (mbs * dp)):
                    continue  # e.g. interleaving needs micro-batches divisible by pp: not an open value for this mbs
                if (recompute == "selective" and "none" in recompute_values
                        and en.selective_is_none(probe, tp, cp, ep, sp, mbs)):
                    out.equivalent += per_combination
                    continue
                try:
                    par = Parallelism(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, dp=dp, sequence_parallel=sp,
                                      schedule=schedule, first_stage_layers=first, last_stage_layers=last,
                                      tensor_parallel_mode=cast(Any, mode), tp_rows=rows, tp_inner=cast(Any, inner),
                                      summa_blocks=nb)
                    tr = Training(**{**tr_base, "micro_batch_size": mbs, "recompute_granularity": recompute,
                                     "zero_stage": zero})
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always", TrainsimWarning)
                        job = Job(model=model, system=system, parallelism=par, training=tr, num_gpus=world,
                                  framework=space.framework)
                except TrainsimError as err:
                    skip(err, per_combination)
                    continue
                # the stack may run another stage than asked (DeepSpeed's pipeline engine: bf16 ZeRO-1 is its
                # BF16_Optimizer, stage 0): the candidate is that stage's, merged when that one is searched too
                resolved = job.training.zero_stage or 0
                if resolved != zero and resolved in en.zero_values(pp, dp, cp):
                    out.equivalent += per_combination
                    continue
                out.equivalent += merged
                for w in caught:
                    if issubclass(w.category, TrainsimWarning):
                        out.warnings[str(w.message)] += len(orders)
                out.candidates.extend(CandidateSpec(world, tp, pp, vpp, cp, ep, dp, mbs, schedule, recompute,
                                                    resolved, sp, order, etp, mode, rows, inner, nb)
                                      for order in orders)
    return out


def build_job(model: Model, system: System, training: Training, spec: CandidateSpec,
              first_stage_layers: int | None = None, last_stage_layers: int | None = None,
              validate: bool = True, framework: Framework | None = None) -> Job:
    """The :class:`Job` of one candidate; ``validate=False`` skips validation (for candidates that came out of
    :func:`enumerate_space`, which validated every one of them; ``training`` must then be resolved, as
    :class:`SearchSpace` keeps it)."""
    fw = framework or load_framework()
    fields = {**spec.parallelism_fields(), "first_stage_layers": first_stage_layers,
              "last_stage_layers": last_stage_layers}
    tr = training.model_copy(update=spec.training_update())
    if not validate:
        par = Parallelism.model_construct(**fields)
        return Job.model_construct(model=model, system=system, parallelism=par, training=tr,
                                   num_gpus=spec.num_gpus, framework=fw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainsimWarning)
        return Job(model=model, system=system, parallelism=Parallelism(**fields), training=tr,
                   num_gpus=spec.num_gpus, framework=fw)
