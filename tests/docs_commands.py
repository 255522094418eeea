"""The fenced shell commands of README.md and docs/*.md, extracted so that a test can run every ``trainsim`` one.

Used by ``tests/test_docs_commands.py`` (issue 15, item 8: docs that cannot drift from the code). A code fence whose
language is ``bash``, ``sh``, ``shell``, ``console`` or empty is read as shell: ``\\`` continues a line, `` # ``
starts a comment, ``&&`` and ``;`` separate commands, ``for V in a b; do ...; done`` loops are expanded, and in a
block with ``$ `` prompts only the prompted lines are commands (the rest is output). An unlabelled fence counts only
when a line starts with ``trainsim`` or a setup command; usage synopses belong in ```` ```text ```` fences, which are
not read.

Each command is then one of:

- ``trainsim ...``: run in the test process (``trainsim.cli.main(argv)``), in a fresh working directory per block;
- a setup command (``mkdir``, ``tar``, ``cp``, ``ln``): run as a subprocess in that directory, before the commands
  that follow it;
- an install, test or launcher command (``pip``, ``python``, ``mpirun``, ...): not run (listed in ``NOT_RUN``).

Paths are rewritten so that nothing is written outside the test's temporary directory: ``/tmp/X`` becomes
``WORKDIR/tmp/X``, ``../shared/X`` the shared data folder (the command skips when it is absent), and a relative path
that exists in the repository (``docs/examples/cluster.yaml``) and not in the working directory becomes absolute.
``> FILE`` writes the captured standard output to ``FILE``.

An HTML comment right before a fence (several may be stacked) changes how its commands are run; the page shows the
real command, the comment says openly what the test does instead:

- ``<!-- docs-test: replace "OLD" "NEW" -->``: run the block with the text ``OLD`` replaced by ``NEW`` (smaller sizes
  where the real command takes minutes);
- ``<!-- docs-test: skip REASON -->``: run none of the block's commands (say which hardware or data is missing);
- ``<!-- docs-test: skip-matching "TEXT" REASON -->``: skip the commands that contain ``TEXT``;
- ``<!-- docs-test: file NAME SOURCE -->``: before the block, place ``SOURCE`` (a repository or ``../shared`` path)
  in the working directory as ``NAME`` (a stand-in for a file that a skipped command or a GPU run would produce);
- ``<!-- docs-test: error -->``: the commands document a user error: each must exit 2 with one ``error:`` line;
- ``<!-- docs-test: unfit REASON -->``: a ``predict`` of the block may show a plan that does not fit in memory
  (otherwise that fails the test: examples are plans that fit).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL_LANGS = {"bash", "sh", "shell", "console", ""}
#: Setup commands the test runs (as a subprocess, in the block's working directory).
SETUP = {"mkdir", "tar", "cp", "ln"}
#: Commands the test does not run: installing, the test suite itself, benchmarks, launchers of GPU jobs.
NOT_RUN = {"pip", "python", "python3", "mpirun", "srun", ".", "source", "export", "git"}
FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
MARK = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*-->")


def pages() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass
class Step:
    """One command of a block: ``kind`` is ``trainsim``, ``setup`` or ``not-run``."""

    kind: str
    text: str
    index: int = 0  # position among the block's trainsim commands


@dataclass
class Block:
    """A shell fence of a page, with its ``docs-test`` markers."""

    page: Path
    line: int  # 1-based line of the opening fence
    raw: str
    skip: str | None = None
    skip_matching: list[tuple[str, str]] = field(default_factory=list)
    replace: list[tuple[str, str]] = field(default_factory=list)
    files: list[tuple[str, str]] = field(default_factory=list)
    error: bool = False
    unfit: str | None = None
    steps: list[Step] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page.name}:{self.line}"

    @property
    def commands(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "trainsim"]


@dataclass
class DocCommand:
    """One ``trainsim`` command of a block (what the test is parametrized over)."""

    block: Block
    step: Step

    @property
    def id(self) -> str:
        words = shlex.split(self.step.text)
        sub = " ".join(words[1:3] if words[1:2] == ["cluster"] else words[1:2])
        return f"{self.block.id}#{self.step.index} {sub}".strip()


class DocsSyntaxError(ValueError):
    """A fence or marker the extractor cannot read (the message names page and line)."""


def _strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (outside quotes; ``#`` must start a word)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def _split_segments(line: str) -> list[str]:
    """Split at ``&&`` and ``;`` outside quotes."""
    out, cur, quote, i = [], [], "", 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == quote:
                quote = ""
            cur.append(ch)
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch == ";" or line.startswith("&&", i):
            out.append("".join(cur).strip())
            cur = []
            i += 2 if ch == "&" else 1
            continue
        else:
            cur.append(ch)
        i += 1
    out.append("".join(cur).strip())
    return [s for s in out if s]


def _expand_loops(segs: list[str], where: str) -> list[str]:
    """Expand ``for V in WORDS; do BODY; done`` (nested too) by substituting ``$V`` / ``${V}``."""
    tokens: list[str] = []
    for s in segs:
        m = re.match(r"do\s+(.*)", s)
        tokens.extend(["do", m.group(1)] if m else [s])

    def parse(i: int, until_done: bool) -> tuple[list[str], int]:
        out: list[str] = []
        while i < len(tokens):
            s = tokens[i]
            if s == "done":
                if not until_done:
                    raise DocsSyntaxError(f"{where}: `done` without `for`")
                return out, i + 1
            m = re.fullmatch(r"for\s+(\w+)\s+in\s+(.*)", s)
            if not m:
                out.append(s)
                i += 1
                continue
            if i + 1 >= len(tokens) or tokens[i + 1] != "do":
                raise DocsSyntaxError(f"{where}: `for {m.group(1)} in ...` without `do`")
            body, i = parse(i + 2, True)
            for w in m.group(2).split():
                out.extend(re.sub(r"\$\{?" + m.group(1) + r"\b\}?", w, b) for b in body)
        if until_done:
            raise DocsSyntaxError(f"{where}: `for` without `done`")
        return out, i

    return parse(0, False)[0]


def _open_loops(line: str) -> int:
    """``for`` loops opened minus ``done`` closed in one line (comments and quotes aside)."""
    words = re.findall(r"(?:^|[;&\s])(for|done)(?=$|[;\s])", _strip_comment(line))
    return words.count("for") - words.count("done")


def _prompted(lines: list[str]) -> list[str]:
    """The commands of a ``$ ``-prompted block: prompted lines, and the lines a prompted ``for`` loop spans until its
    ``done`` (the shell's continuation prompt); everything else is output."""
    out: list[str] = []
    depth = 0
    for ln in lines:
        if depth > 0:
            out[-1] += "\n" + ln
            depth += _open_loops(ln)
        elif ln.lstrip().startswith("$ "):
            out.append(ln.lstrip()[2:])
            depth = _open_loops(out[-1])
    return "\n".join(out).splitlines()


def _steps(text: str, where: str) -> list[Step]:
    lines = re.sub(r"\\\n", " ", text).splitlines()
    if any(ln.lstrip().startswith("$ ") for ln in lines):
        lines = _prompted(lines)
    segs: list[str] = []
    for ln in lines:
        ln = _strip_comment(ln).strip()
        if ln:
            segs.extend(_split_segments(ln))
    steps: list[Step] = []
    for s in _expand_loops(segs, where):
        word = s.split()[0]
        if word == "trainsim":
            steps.append(Step("trainsim", s, sum(1 for x in steps if x.kind == "trainsim")))
        elif word in SETUP:
            steps.append(Step("setup", s))
        elif word in NOT_RUN:
            steps.append(Step("not-run", s))
        else:
            raise DocsSyntaxError(f"{where}: `{word}` is neither a trainsim command, a setup command ({sorted(SETUP)}) "
                                  f"nor one the test knows not to run ({sorted(NOT_RUN)}); fence usage text as ```text")
    return steps


def _apply_marker(block: Block, text: str, where: str) -> None:
    words = shlex.split(text)
    if not words:
        raise DocsSyntaxError(f"{where}: empty docs-test marker")
    kind, args = words[0], words[1:]
    if kind == "skip" and args:
        block.skip = " ".join(args)
    elif kind == "skip-matching" and len(args) >= 2:
        block.skip_matching.append((args[0], " ".join(args[1:])))
    elif kind == "replace" and len(args) == 2:
        block.replace.append((args[0], args[1]))
    elif kind == "file" and len(args) == 2:
        block.files.append((args[0], args[1]))
    elif kind == "error" and not args:
        block.error = True
    elif kind == "unfit" and args:
        block.unfit = " ".join(args)
    else:
        raise DocsSyntaxError(f"{where}: cannot read the marker `docs-test: {text}` (see tests/docs_commands.py)")


def blocks_of(page: Path) -> list[Block]:
    """The shell fences of ``page`` that hold at least one command, markers applied."""
    lines = page.read_text().splitlines()
    out: list[Block] = []
    marks: list[tuple[str, int]] = []
    i = 0
    while i < len(lines):
        m = MARK.search(lines[i])
        if m:
            marks.append((m.group(1), i + 1))
            i += 1
            continue
        f = FENCE.match(lines[i])
        if not f:
            if lines[i].strip() and marks:
                raise DocsSyntaxError(f"{page.name}:{marks[0][1]}: a docs-test marker must come right before a fence")
            i += 1
            continue
        lang, start, indent = f.group(2), i + 1, len(f.group(1))
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        i += 1
        if lang not in SHELL_LANGS:
            if marks:
                raise DocsSyntaxError(f"{page.name}:{marks[0][1]}: docs-test marker before a ```{lang} fence")
            continue
        if lang == "" and not any(re.match(r"(\$ )?(trainsim|" + "|".join(SETUP) + r")\b", ln.strip()) for ln in body):
            marks = []
            continue  # an unlabelled fence without commands: a diagram, a file layout
        block = Block(page, start, "\n".join(body))
        for text, line in marks:
            _apply_marker(block, text, f"{page.name}:{line}")
        marks = []
        text = block.raw
        for old, new in block.replace:
            if old not in text:
                raise DocsSyntaxError(f"{block.id}: docs-test replace: {old!r} is not in the block")
            text = text.replace(old, new)
        block.steps = _steps(text, block.id)
        if block.commands:
            out.append(block)
    return out


def all_blocks() -> list[Block]:
    """Blocks of README.md and docs/*.md that hold ``trainsim`` commands."""
    return [b for p in pages() for b in blocks_of(p)]


def all_commands() -> list[DocCommand]:
    """Every ``trainsim`` command of the docs, in page order."""
    return [DocCommand(b, s) for b in all_blocks() for s in b.commands]
