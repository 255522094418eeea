"""Every fenced ``trainsim`` command in README.md and docs/*.md runs (issue 15, item 8).

DRAFT, not collected by pytest yet: the 58 commands take over 10 minutes; they need smaller sizes first.

Commands run in this process from the repository root; every output file (``--csv``, ``--trace``, ``--out`` ...) is
redirected into a temporary directory, and a later command that reads such a file gets the redirected path. A
fence can be annotated with an HTML comment on the line before it:

- ``<!-- docs-test: skip REASON -->`` — not run (hardware or data the CI lacks; say which);
- ``<!-- docs-test: replace OLD => NEW -->`` — run with ``OLD`` replaced by ``NEW`` (smaller sizes for CI; the
  page then shows the real command);
- ``<!-- docs-test: error -->`` — the commands document a user error: they must exit 2 with one line.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHARED = ROOT.parent / "shared"
#: Flags whose value is a file or directory the command writes.
OUTPUT_FLAGS = {"--csv", "--parquet", "--plot", "--trace", "--memory-timeline", "--export-ops", "--export-meta",
                "--out", "-o", "--write", "--heatmap", "--timeline", "--ideal-timeline", "--system-out", "--html",
                "--report", "--save"}
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"<!--\s*docs-test:\s*(skip|replace|error)\b(.*?)-->")


@dataclass
class Block:
    page: Path
    line: int
    commands: list[str]
    skip: str | None = None
    error: bool = False
    replace: list[tuple[str, str]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page.name}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    out: list[Block] = []
    marks: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        m = MARK.search(lines[i])
        if m:
            marks.append((m.group(1), m.group(2).strip()))
            i += 1
            continue
        f = FENCE.match(lines[i].strip())
        if not f:
            if lines[i].strip():
                marks = []
            i += 1
            continue
        lang, start = f.group(1), i + 1
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        if lang not in ("bash", "sh", "shell", "console", ""):
            marks = []
            continue
        text = re.sub(r"\\\n\s*", " ", "\n".join(body))
        commands: list[str] = []
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("$ "):
                line = line[2:]
            for part in re.split(r"\s+&&\s+", line):
                part = part.split(" # ")[0].strip()
                if part.startswith("trainsim ") or part == "trainsim":
                    commands.append(part)
        if commands:
            block = Block(page, start, commands)
            for kind, arg in marks:
                if kind == "skip":
                    block.skip = arg or "marked skip"
                elif kind == "error":
                    block.error = True
                else:
                    old, _, new = arg.partition("=>")
                    block.replace.append((old.strip(), new.strip()))
            out.append(block)
        marks = []
    return out


BLOCKS = [b for page in PAGES for b in _blocks(page)]


def test_the_docs_have_commands():
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_documented_command_runs(block: Block, tmp_path, capsys, monkeypatch):
    from cli_helpers import run

    if block.skip:
        pytest.skip(block.skip)
    monkeypatch.chdir(ROOT)
    written: dict[str, str] = {}
    for command in block.commands:
        for old, new in block.replace:
            command = command.replace(old, new)
        args = shlex.split(command)[1:]
        if ">" in args:  # shell redirection of stdout: the output is captured anyway
            args = args[: args.index(">")]
        fixed: list[str] = []
        for k, a in enumerate(args):
            if k > 0 and args[k - 1] in OUTPUT_FLAGS:
                target = tmp_path / Path(a).name
                written[a] = str(target)
                fixed.append(str(target))
            elif a in written:
                fixed.append(written[a])
            elif a.startswith("../shared/"):
                if not SHARED.exists():
                    pytest.skip(f"{a} needs ../shared beside the repository")
                fixed.append(str(SHARED / a[len("../shared/"):]))
            else:
                fixed.append(a)
        if "search" in fixed[:1] and "--no-progress" not in fixed:
            fixed.append("--no-progress")
        code, _, err = run(fixed, capsys)
        if block.error:
            lines = [line for line in err.splitlines() if line.startswith("error:")]
            assert code == 2 and len(lines) == 1, f"{block.id}: {command}\n{err}"
        else:
            assert code == 0, f"{block.id}: `{command}` failed:\n{err[-2000:]}"
