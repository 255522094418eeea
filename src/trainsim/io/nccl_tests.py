"""Reader for nccl-tests output (text and JSON) into trainsim's collective table.

Text output. nccl-tests prints ``#`` header lines (version, ``nThread .. nGpus ..``, one ``Rank .. on HOST device ..
NAME`` line per rank, the column header and a units line) followed by one line per message size::

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
         1048576        262144     float     sum      -1    37.52   27.95   48.91      0    36.80   28.49   49.86      0

The first ``time algbw busbw`` group is out-of-place, the second in-place. Older versions print ``error`` instead of
``#wrong`` and have no ``root`` column (and all-gather, send/recv no ``redop``); the columns are taken from the header
line, or, in a log cut before its header, from the number of fields. Launcher prefixes are stripped:
``[1,0]<stdout>:`` (Open MPI ``--tag-output``), ``0:`` (``srun --label``), ``host:`` (pdsh). Lines that are not
results (NCCL INFO/WARN, launcher noise) are ignored. Units come from the units line (``us``/``ms``/``ns``/``s``,
``GB/s``/``MB/s``); with none, microseconds and GB/s (nccl-tests' own). Several runs concatenated in one log are read
as separate runs.

JSON output. nccl-tests' ``-J FILE`` document (``version``, ``args``, ``config.devices``, ``results`` with
``out_of_place`` / ``in_place`` objects of ``time`` or ``cpu_time`` in µs and ``alg_bw`` / ``bus_bw`` in GB/s) and
rccl-tests' JSON lines (``name``, ``size``, ``time``, ``algBw``, ``busBw``, ``gpus``, ``inPlace``).

The collective comes from the ``Collective test starting:`` line, the program on a command line in the log
(``all_reduce_perf``), or JSON ``args``; the number of ranks from the ``Rank`` lines and the nodes from their host
names. :func:`comm_table` checks these against the user's ``--collective``, ``--num-gpus`` and ``--nodes``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from trainsim.errors import TrainsimError, warn

# nccl-tests program stem -> trainsim collective name (None: a collective trainsim does not model)
_PROGRAMS: dict[str, str | None] = {
    "all_reduce": "all_reduce", "allreduce": "all_reduce",
    "all_gather": "all_gather", "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "all_to_all": "all_to_all",
    "sendrecv": "send_recv", "send_recv": "send_recv",
    "broadcast": None, "reduce": None, "gather": None, "scatter": None, "hypercube": None, "alltoallv": None,
    "all_reduce_group": None,
}
SUPPORTED = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:(?=\s)|[A-Za-z][\w.\-]*:(?=\s))")
_RANK = re.compile(r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")
_PROGRAM = re.compile(r"(?<![\w])([a-z_]+?)_perf(?:_mpi)?(?![\w])")
_STARTING = re.compile(r"Collective test starting:\s*(\S+)")
_NCCL_VERSION = re.compile(r"NCCL version\s+(\d+\.\d+\.\d+)")
_LIBRARY = re.compile(r"nccl-library=(\d+)")
_TIME_UNITS = {"(ns)": 1e-9, "(us)": 1e-6, "(usec)": 1e-6, "(ms)": 1e-3, "(s)": 1.0}
_BW_UNITS = {"(GB/s)": 1e9, "(MB/s)": 1e6, "(Gb/s)": 1e9 / 8, "(B/s)": 1.0}


def collective_name(text: str) -> str | None:
    """trainsim's collective for a program or collective name (``all_reduce_perf``, ``AllReduce``, ``alltoall``).

    Raises :class:`TrainsimError` for a name that is not a collective at all; returns ``None`` for an nccl-tests
    collective that trainsim does not model (broadcast, reduce ...).
    """
    stem = Path(text.strip()).name.lower()
    stem = re.sub(r"_perf(_mpi)?$", "", stem)
    stem = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", stem)
    if stem in _PROGRAMS:
        return _PROGRAMS[stem]
    compact = stem.replace("_", "").replace("-", "")
    for name, value in _PROGRAMS.items():
        if name.replace("_", "") == compact:
            return value
    raise TrainsimError("collective", f"unknown collective {text!r}", f"use one of {', '.join(SUPPORTED)}")


def _library_version(code: int) -> str:
    """NCCL's version code (``22703``, or ``2708`` before 2.9) as ``2.27.3``."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


@dataclass
class NcclRun:
    """One nccl-tests run: its rows and what the log says about it."""

    program: str | None = None  # e.g. all_reduce_perf
    rows: list[dict[str, Any]] = field(default_factory=list)
    ranks: dict[int, tuple[str, str]] = field(default_factory=dict)  # rank -> (host, device name)
    nccl_version: str = ""
    columns: list[str] | None = None
    time_unit: float = 1e-6
    bw_unit: float = 1e9
    skipped_lines: int = 0

    @property
    def collective(self) -> str | None:
        """trainsim's collective name, when the log names its program (``None`` also for unmodelled ones)."""
        return collective_name(self.program) if self.program else None

    @property
    def num_ranks(self) -> int | None:
        """Ranks named by the ``Rank`` lines."""
        return len(self.ranks) or None

    @property
    def num_nodes(self) -> int | None:
        """Distinct hosts of the ``Rank`` lines."""
        return len({h for h, _ in self.ranks.values()}) or None

    @property
    def device_name(self) -> str:
        """The device name of rank 0 (or the first rank listed)."""
        if not self.ranks:
            return ""
        return self.ranks[min(self.ranks)][1]


# ---- text ---------------------------------------------------------------------------------------------------------
def _strip_prefix(line: str) -> str:
    m = _PREFIX.match(line)
    return (line[m.end():] if m else line).strip()


def _default_columns(tokens: list[str]) -> list[str] | None:
    """Columns of a result line without a header, from the number of fields."""
    tail = ["time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"]
    n = len(tokens)
    if n == 13:
        return ["size", "count", "type", "redop", "root", *tail]
    if n == 12:
        return ["size", "count", "type", "root" if _is_int(tokens[3]) else "redop", *tail]
    if n == 11:
        return ["size", "count", "type", *tail]
    return None


def _is_int(s: str) -> bool:
    return bool(re.fullmatch(r"-?\d+", s))


def _num(s: str) -> float:
    if s.upper() in ("N/A", "NA", "-"):
        return math.nan
    return float(s)


def _parse_row_or_none(tokens: list[str], columns: list[str], time_unit: float,
                       bw_unit: float) -> list[dict[str, Any]] | None:
    """:func:`_parse_row`, or ``None`` for a line that is not a result row (counted as skipped by the caller)."""
    try:
        return _parse_row(tokens, columns, time_unit, bw_unit)
    except ValueError:
        return None


def _parse_row(tokens: list[str], columns: list[str], time_unit: float, bw_unit: float) -> list[dict[str, Any]]:
    """Rows (out-of-place, in-place) of one result line; raises ValueError when it is not one.

    A line whose out-of-place group is blank (nccl-tests leaves it empty when replaying traces) is read as in-place.
    """
    if len(tokens) < 2 or not _is_int(tokens[0]) or not _is_int(tokens[1]):
        raise ValueError("not a result line")
    in_place_only = False
    if len(tokens) < len(columns):
        starts = [i for i, c in enumerate(columns) if c.lower() in ("time", "cputime")]
        width = starts[1] - starts[0] if len(starts) >= 2 else 0
        if not width or len(tokens) != len(columns) - width:
            raise ValueError("not a result line")
        columns = columns[: starts[0]] + columns[starts[1]:]
        in_place_only = True
    base: dict[str, Any] = {"nbytes": int(tokens[0]), "count": int(tokens[1]), "dtype": "", "redop": "", "root": ""}
    groups: list[dict[str, float]] = []
    for name, tok in zip(columns, tokens, strict=False):
        key = name.lower()
        if key in ("type", "redop", "root"):
            base["dtype" if key == "type" else key] = tok
        elif key in ("time", "cputime"):
            groups.append({"time": _num(tok)})
        elif key in ("algbw", "busbw") and groups:
            groups[-1][key] = _num(tok)
        elif key in ("#wrong", "error", "wrong") and groups:
            groups[-1]["wrong"] = _num(tok)
    if not groups:
        raise ValueError("no time column")
    rows = []
    for i, g in enumerate(groups[:2]):  # nccl-tests prints out-of-place first, then in-place
        t = g.get("time", math.nan)
        if not (t > 0 and math.isfinite(t)):
            continue
        rows.append({**base, "in_place": i == 1 or in_place_only, "time_s": t * time_unit,
                     "algbw": g.get("algbw", math.nan) * bw_unit, "busbw": g.get("busbw", math.nan) * bw_unit,
                     "wrong": g.get("wrong", math.nan)})
    return rows


def _is_header(tokens: list[str]) -> bool:
    lowered = [t.lower() for t in tokens]
    return "size" in lowered and "busbw" in lowered and ("time" in lowered or "cputime" in lowered)


def _set_units(run: NcclRun, tokens: list[str]) -> None:
    times = [_TIME_UNITS[t] for t in tokens if t in _TIME_UNITS]
    bws = [_BW_UNITS[t] for t in tokens if t in _BW_UNITS]
    if times:
        run.time_unit = times[0]
    if bws:
        run.bw_unit = bws[0]


def parse_text(text: str) -> list[NcclRun]:
    """Runs in nccl-tests text output (possibly several, possibly with launcher prefixes).

    Metadata lines (``Rank``, ``Collective test starting``, versions, a command line naming ``*_perf``) go to the run
    whose result table comes next; a column header starts that table.
    """
    runs: list[NcclRun] = []
    pending = NcclRun()  # metadata of the run whose table comes next
    current: NcclRun | None = None  # the run whose table is being read

    def meta() -> NcclRun:
        """The run that metadata belongs to: the current one until its first result, else the next one."""
        return current if current is not None and not current.rows else pending

    for raw in text.splitlines():
        line = _strip_prefix(raw)
        if not line:
            continue
        if line.startswith("#"):
            body = line.lstrip("#").strip()
            tokens = body.split()
            if _is_header(tokens):
                if current is not None and not current.rows:  # the same header again (printed by every rank)
                    current.columns = tokens
                    continue
                if current is not None:
                    runs.append(current)
                current, pending = pending, NcclRun()
                current.columns = tokens
            elif "(B)" in tokens:
                if current is not None and not current.rows:
                    _set_units(current, tokens)
            elif m := _RANK.search(body):
                meta().ranks.setdefault(int(m.group(1)), (m.group(2), m.group(3)))
            elif m := _STARTING.search(body):
                meta().program = m.group(1)
            elif m := _LIBRARY.search(body):
                meta().nccl_version = _library_version(int(m.group(1)))
            continue
        if m := _NCCL_VERSION.search(line):
            meta().nccl_version = m.group(1)
            continue
        tokens = line.split()
        looks_like_row = len(tokens) >= 11 and _is_int(tokens[0]) and _is_int(tokens[1])
        if current is None and looks_like_row:  # a log cut before its header
            current, pending = pending, NcclRun()
        if current is not None:
            columns = current.columns or _default_columns(tokens)
            if columns is not None:
                parsed = _parse_row_or_none(tokens, columns, current.time_unit, current.bw_unit)
                if parsed is not None:
                    current.rows += parsed
                    continue
            if looks_like_row:
                current.skipped_lines += 1
                continue
        for m in _PROGRAM.finditer(line):  # a command line naming the benchmark binary
            if m.group(1) in _PROGRAMS:
                meta().program = meta().program or m.group(0)
                break
    if current is not None and current.rows:
        runs.append(current)
    return runs


# ---- JSON ---------------------------------------------------------------------------------------------------------
def _json_bw(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _parse_official_json(doc: dict[str, Any]) -> list[NcclRun]:
    run = NcclRun()
    args = doc.get("args") or []
    if args:
        run.program = Path(str(args[0])).name
    code = doc.get("nccl_version")
    if isinstance(code, int) and code > 0:
        run.nccl_version = _library_version(code)
    config = doc.get("config") or {}
    for i, dev in enumerate(config.get("devices") or []):
        if isinstance(dev, dict):
            run.ranks.setdefault(int(dev.get("rank", i)), (str(dev.get("hostname", "")),
                                                           str(dev.get("device_info", ""))))
    for res in doc.get("results") or []:
        if not isinstance(res, dict):
            continue
        base = {"nbytes": int(res["size"]), "count": int(res.get("count", 0)), "dtype": str(res.get("type", "")),
                "redop": str(res.get("redop", "")), "root": str(res.get("root", "")).strip()}
        for key, in_place in (("out_of_place", False), ("in_place", True)):
            part = res.get(key)
            if not isinstance(part, dict):
                continue
            t = _json_bw(part.get("time", part.get("cpu_time")))
            if not (t > 0 and math.isfinite(t)):
                continue
            run.rows.append({**base, "in_place": in_place, "time_s": t * 1e-6,
                             "algbw": _json_bw(part.get("alg_bw")) * 1e9, "busbw": _json_bw(part.get("bus_bw")) * 1e9,
                             "wrong": _json_bw(part.get("nwrong"))})
    return [run] if run.rows else []


def _parse_json_lines(records: list[dict[str, Any]]) -> list[NcclRun]:
    runs: dict[tuple[str, int], NcclRun] = {}
    for rec in records:
        name = str(rec.get("name", ""))
        gpus = int(rec.get("gpus", 0) or 0)
        run = runs.setdefault((name, gpus), NcclRun(program=name or None))
        if gpus:  # rccl-tests names no hosts
            run.ranks = {r: ("", "") for r in range(gpus)}
        t = _json_bw(rec.get("time"))
        if not (t > 0 and math.isfinite(t)):
            continue
        run.rows.append({"nbytes": int(rec["size"]), "count": int(rec.get("count", 0) or 0),
                         "dtype": str(rec.get("type", "")), "redop": str(rec.get("redop", "")), "root": "",
                         "in_place": bool(int(rec.get("inPlace", 0) or 0)), "time_s": t * 1e-6,
                         "algbw": _json_bw(rec.get("algBw")) * 1e9, "busbw": _json_bw(rec.get("busBw")) * 1e9,
                         "wrong": _json_bw(rec.get("#wrong"))})
    return [r for r in runs.values() if r.rows]


def parse_json(text: str) -> list[NcclRun]:
    """Runs in nccl-tests' ``-J`` JSON document or rccl-tests' JSON lines."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and "results" in doc:
        return _parse_official_json(doc)
    if isinstance(doc, dict) and "size" in doc:
        return _parse_json_lines([doc])
    records = []
    for line in text.splitlines():
        line = line.strip().rstrip(",")
        if not line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            return []
        if isinstance(rec, dict) and "size" in rec and "time" in rec:
            records.append(rec)
    return _parse_json_lines(records)


def parse(text: str) -> list[NcclRun]:
    """Runs in nccl-tests output, text or JSON (detected from the content)."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        runs = parse_json(text)
        if runs:
            return runs
    return parse_text(text)


def read_nccl_tests(path: str | Path) -> list[NcclRun]:
    """Runs in an nccl-tests log or JSON file."""
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        raise TrainsimError("log", f"{path} does not exist", "give the nccl-tests output file") from None
    except OSError as exc:
        raise TrainsimError("log", f"cannot read {path} ({exc})", "give a readable file") from None
    return parse(text)


# ---- table --------------------------------------------------------------------------------------------------------
def comm_table(runs: list[NcclRun], collective: str | None = None, num_gpus: int | None = None,
               nodes: int | None = None, gpu_name: str | None = None, source: str = "") -> pd.DataFrame:
    """A collective table (see :mod:`trainsim.cost.tables`) from parsed runs.

    ``collective``, ``num_gpus`` and ``nodes`` fill in what the log does not say and must agree with what it says;
    with ``collective`` given, runs of other collectives in the same log are left out. ``gpu_name`` overrides the
    device name of the log (which names the table's GPU).
    """
    from trainsim.cost.tables import COMM_COLUMNS, gpu_key, normalize

    where = f" in {source}" if source else ""
    if not runs:
        raise TrainsimError("log", f"no nccl-tests results found{where}",
                            "give the output of an nccl-tests binary (e.g. all_reduce_perf), text or -J JSON")
    wanted = None
    if collective is not None:
        wanted = collective_name(collective)
        if wanted is None:
            raise TrainsimError("collective", f"{collective!r} is not modelled by trainsim",
                                f"use one of {', '.join(SUPPORTED)}")
    if num_gpus is not None and num_gpus < 1:
        raise TrainsimError("num_gpus", "must be positive", "give the number of GPUs of the nccl-tests run")
    if nodes is not None and nodes < 1:
        raise TrainsimError("nodes", "must be positive", "give the number of nodes of the nccl-tests run")
    frames = []
    seen = []
    for run in runs:
        coll = run.collective
        if run.program and coll is None:
            seen.append(run.program)
            continue
        if coll is None:
            if wanted is None:
                raise TrainsimError("collective", f"the log{where} does not say which collective it measured",
                                    f"give --collective ({', '.join(SUPPORTED)})")
            coll = wanted
        seen.append(coll)
        if wanted is not None and coll != wanted:
            continue
        ranks = run.num_ranks
        if num_gpus is not None and ranks is not None and ranks != num_gpus:
            raise TrainsimError("num_gpus", f"the log{where} lists {ranks} ranks, not {num_gpus}",
                                f"give --num-gpus {ranks} or the log of the {num_gpus}-GPU run")
        ranks = num_gpus or ranks
        if ranks is None:
            raise TrainsimError("num_gpus", f"the log{where} does not list its ranks",
                                "give --num-gpus (the total number of GPUs of the run)")
        hosts = run.num_nodes if any(h for h, _ in run.ranks.values()) else None
        if nodes is not None and hosts is not None and hosts != nodes:
            raise TrainsimError("nodes", f"the ranks of the log{where} are on {hosts} host(s), not {nodes}",
                                f"give --nodes {hosts}")
        n_nodes = nodes or hosts or 1
        if n_nodes > ranks:
            raise TrainsimError("nodes", f"{n_nodes} nodes for {ranks} ranks", "give at most one node per rank")
        device = gpu_name if gpu_name is not None else run.device_name
        wrong = sum(1 for r in run.rows if r["wrong"] > 0)
        if wrong:
            warn("log", f"{wrong} result line(s){where} report wrong values (#wrong > 0); their times are kept")
        df = pd.DataFrame(run.rows).drop(columns=["root"])
        df = df.assign(collective=coll, ranks=ranks, nodes=n_nodes, gpu=gpu_key(device), device_name=device,
                       nccl_version=run.nccl_version, source=source)
        frames.append(df)
    if not frames:
        found = ", ".join(sorted({str(s) for s in seen}))
        if wanted is not None:
            raise TrainsimError("collective", f"the log{where} holds {found}, not {wanted}",
                                f"give --collective {found.split(', ')[0]} or the log of a {wanted} run")
        raise TrainsimError("collective", f"the log{where} holds only {found}, which trainsim does not model",
                            f"measure one of {', '.join(SUPPORTED)}")
    table = pd.concat(frames, ignore_index=True)
    return normalize(table[[c for c in COMM_COLUMNS if c in table.columns]], "comm", source or "log")
