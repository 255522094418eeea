"""Compare the collective model with published nccl-tests bus bandwidths (comparison only, nothing is fitted).

The public numbers live in ``trainsim/data/public/nccl_tests.csv`` with their source URLs. For each row the model
prices the same collective, buffer size and communicator (ranks packed ``gpus_per_node`` to a node, as nccl-tests
launches them) with the system preset's calibrated constants, and reports nccl-tests' bus bandwidth
(``algbw·2(n−1)/n`` for all-reduce, ``algbw·(n−1)/n`` for all-gather / reduce-scatter).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import NamedTuple

import pandas as pd

from trainsim.cost.calibration import calibration_for
from trainsim.cost.comm import Placement, nccl_links
from trainsim.cost.nccl import Reduction, choose
from trainsim.io.frames import rows_as
from trainsim.spec.presets import load_system

DATA_FILE = "nccl_tests.csv"

#: Public results we looked for and could not source precisely enough to add a row (said in VALIDATION.md).
NOT_SOURCED = (
    "Not in the table, for want of numbers we could source precisely: the Perlmutter (A100, 4 GPUs and 4",
    "Slingshot-11 NICs per node) nccl-tests data described in NERSC's and others' papers — the PCCL paper",
    "(Singh et al., arXiv 2504.18658) reports NCCL's all-gather/reduce-scatter up to 5.7x slower than its",
    "hierarchical algorithms on Perlmutter at scale, and De Sensi et al. (SC24, arXiv 2408.14090) up to 50%",
    "of all-reduce goodput lost to network noise at 1,024 GPUs on Leonardo (A100, InfiniBand HDR), but the",
    "texts available to us give no per-size bus bandwidths — and NVIDIA's own published DGX A100/H100",
    "multi-node nccl-tests tables. Both point the same way as the 2-node H100 rows above: NCCL's tuner model,",
    "which `trainsim.cost.nccl` reproduces, is optimistic for multi-node collectives, increasingly so at scale.",
)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One published point and the model's prediction for it."""

    id: str
    system: str
    collective: str
    ranks: int
    nodes: int
    nbytes: float
    published_busbw: float  # bytes/s
    predicted_busbw: float  # bytes/s
    algorithm: str
    protocol: str
    source_url: str
    low: float | None = None
    high: float | None = None

    @property
    def error(self) -> float:
        """Relative error of the predicted bus bandwidth."""
        return self.predicted_busbw / self.published_busbw - 1.0


def load_public() -> pd.DataFrame:
    """The published nccl-tests rows shipped with trainsim."""
    path = resources.files("trainsim") / "data" / "public" / DATA_FILE
    with path.open() as fh:
        return pd.read_csv(fh)


class _PublicRow(NamedTuple):
    """The columns of the published-results file that :func:`compare` reads (bounds are NaN when not given)."""

    id: str
    system: str
    collective: Reduction  # the file holds only reductions trainsim models
    ranks: int
    nodes: int
    nbytes: float
    busbw_gb_s: float
    busbw_low_gb_s: float
    busbw_high_gb_s: float
    source_url: str


def compare() -> list[Comparison]:
    """Predicted against published bus bandwidth for every public row."""
    out = []
    for r in rows_as(load_public(), _PublicRow):
        system = load_system(str(r.system))
        calib = calibration_for(system.gpu.generation)
        ranks, nodes = int(r.ranks), int(r.nodes)
        place = Placement(ranks, -(-ranks // nodes), nodes)
        links = nccl_links(place, system, calib, nodes)
        choice = choose(r.collective, float(r.nbytes), links)
        low = float(r.busbw_low_gb_s) * 1e9 if pd.notna(r.busbw_low_gb_s) else None
        high = float(r.busbw_high_gb_s) * 1e9 if pd.notna(r.busbw_high_gb_s) else None
        out.append(Comparison(str(r.id), str(r.system), str(r.collective), ranks, nodes, float(r.nbytes),
                              float(r.busbw_gb_s) * 1e9, choice.busbw(r.collective, float(r.nbytes), ranks),
                              choice.algorithm, choice.protocol, str(r.source_url), low, high))
    return out


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def nccl_section() -> str:
    """Markdown section: predicted vs published nccl-tests bus bandwidth per size, with sources."""
    rows = compare()
    sources: dict[str, int] = {}
    lines = [
        "## Collectives against public nccl-tests results",
        "",
        "The collective model (`trainsim.cost.nccl`: NCCL's ring/tree/NVLS × LL/LL128/Simple choice, calibrated",
        "NVLink/network efficiencies) against published nccl-tests bus bandwidths. These numbers are **not** used",
        "for fitting. Ranges are shown as published; the error is against their midpoint.",
        "",
        "| case | system | collective | ranks (nodes) | size | published busbw (GB/s) | predicted (GB/s) "
        "| NCCL choice | error | source |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in rows:
        ref = sources.setdefault(c.source_url, len(sources) + 1)
        pub = f"{c.published_busbw / 1e9:.0f}"
        if c.low is not None and c.high is not None:
            pub = f"{c.low / 1e9:.0f}–{c.high / 1e9:.0f}"
        lines.append(f"| {c.id} | {c.system} | {c.collective} | {c.ranks} ({c.nodes}) | {_size(c.nbytes)} | {pub} "
                     f"| {c.predicted_busbw / 1e9:.0f} | {c.algorithm}/{c.protocol} | {c.error:+.0%} | [{ref}] |")
    errors = [abs(c.error) for c in rows]
    if errors:
        lines += ["", f"Mean |error| {sum(errors) / len(errors):.0%}, max {max(errors):.0%} over {len(rows)} points."]
    lines += ["", "Sources:"]
    lines += [f"[{i}] {url}" for url, i in sources.items()]
    lines += ["", *NOT_SOURCED]
    return "\n".join(lines) + "\n"
