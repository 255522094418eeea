"""Every fenced ``trainsim`` command of README.md and docs/*.md runs (issue 15, item 8).

One test per command (``README.md:41#1 predict`` is the second trainsim command of the fence opening on line 41),
run in this process through ``trainsim.cli.main`` in a temporary working directory per fence; commands of one fence
run in order, so a later one reads what an earlier one wrote. How fences, paths and ``<!-- docs-test: ... -->``
markers are read: ``tests/docs_commands.py``. ``pytest tests/test_docs_commands.py --durations=10`` lists the
slowest commands.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import subprocess
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

from docs_commands import ROOT, Block, DocCommand, DocsSyntaxError, all_blocks, blocks_of
from trainsim.cli import main

try:
    BLOCKS: list[Block] = all_blocks()
    COMMANDS: list[DocCommand] = [DocCommand(b, s) for b in BLOCKS for s in b.commands]
    PARSE_ERROR: str | None = None
except DocsSyntaxError as exc:  # reported by test_the_docs_parse, not as a collection error
    BLOCKS, COMMANDS, PARSE_ERROR = [], [], str(exc)


def _shared() -> Path | None:
    from conftest import shared_dir

    return shared_dir()


class _Skip(Exception):
    pass


@dataclass
class Outcome:
    """What running one command gave: ``ok``, ``fail`` (with the message to show) or ``skip`` (with the reason)."""

    status: str
    message: str = ""


def _rewrite(token: str, workdir: Path, tmp: Path) -> str:
    """One argument with its paths moved into ``workdir`` and ``tmp`` (outputs) or resolved (repository and shared
    inputs)."""
    if token.startswith("-") and "=" in token:
        flag, _, value = token.partition("=")
        return f"{flag}={_rewrite(value, workdir, tmp)}"
    if token.startswith("/tmp/"):
        return str(tmp / token[len("/tmp/"):])
    if token.startswith("../shared/"):
        shared = _shared()
        if shared is None:
            raise _Skip(f"{token} needs ../shared (the shared data) beside the repository")
        return str(shared / token[len("../shared/"):])
    if token and not token.startswith("-") and not (workdir / token).exists() and (ROOT / token).exists():
        return str(ROOT / token)
    return token


class BlockRunner:
    """Runs the steps of one fence in order, once, in its own working directory.

    ``/tmp`` is one folder per page (a page is read top to bottom, like a tutorial): before a fence runs, the setup
    commands of the fences above it on the same page run too (``mkdir``/``tar`` of a file a later fence reads).
    """

    def __init__(self, block: Block, workdir: Path, page_tmp: Path,
                 setups_done: dict[tuple[str, int], Outcome | None], earlier: list[Block]) -> None:
        self.block = block
        self.workdir = workdir
        self.page_tmp = page_tmp
        self.setups_done = setups_done
        self.pos = 0
        self.outcomes: dict[int, Outcome] = {}
        self.blocked: Outcome | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        page_tmp.mkdir(parents=True, exist_ok=True)
        try:
            for name, source in block.files:
                target = Path(_rewrite(source, workdir, page_tmp))
                if not target.exists():
                    raise FileNotFoundError(f"docs-test file: {source} does not exist")
                (workdir / name).parent.mkdir(parents=True, exist_ok=True)
                (workdir / name).symlink_to(target)
        except _Skip as exc:
            self.blocked = Outcome("skip", str(exc))
        except OSError as exc:
            self.blocked = Outcome("fail", f"{block.id}: {exc}")
        for other in earlier:
            for k, step in enumerate(other.steps):
                if step.kind == "setup" and self.blocked is None:
                    self.blocked = self._setup(other, k, workdir.parent / other.id.replace(":", "-"))

    def outcome(self, index: int) -> Outcome:
        """The outcome of the block's trainsim command number ``index`` (running the steps before it first)."""
        while index not in self.outcomes:
            step = self.block.steps[self.pos]
            self.pos += 1
            if step.kind == "setup" and self.blocked is None:
                self.blocked = self._setup(self.block, self.pos - 1, self.workdir)
            elif step.kind == "trainsim":
                self.outcomes[step.index] = self.blocked or self._run(step.text)
        return self.outcomes[index]

    def _setup(self, block: Block, pos: int, workdir: Path) -> Outcome | None:
        """Run setup step ``pos`` of ``block`` (in that block's working directory) unless it ran already."""
        key = (block.id, pos)
        if key in self.setups_done:  # ran (or was skipped) for an earlier fence: the same outcome
            return self.setups_done[key]
        self.setups_done[key] = outcome = self._run_setup(block, pos, workdir)
        return outcome

    def _run_setup(self, block: Block, pos: int, workdir: Path) -> Outcome | None:
        """Run one setup step: ``None`` when it ran, else why not (a skip for missing shared data, or a failure)."""
        text = block.steps[pos].text
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            argv = [_rewrite(t, workdir, self.page_tmp) for t in shlex.split(text)]
        except _Skip as exc:
            return Outcome("skip", str(exc))
        done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, check=False)
        if done.returncode:
            return Outcome("fail", f"{block.id}: setup `{text}` failed ({done.returncode}):\n{done.stderr[-2000:]}")
        return None

    def _run(self, text: str) -> Outcome:
        block = self.block
        for needle, reason in block.skip_matching:
            if needle in text:
                return Outcome("skip", reason)
        if block.skip:
            return Outcome("skip", block.skip)
        try:
            argv = [_rewrite(t, self.workdir, self.page_tmp) for t in shlex.split(text)[1:]]
        except _Skip as exc:
            return Outcome("skip", str(exc))
        redirect = None
        if ">" in argv:
            k = argv.index(">")
            argv, redirect = argv[:k], argv[k + 1]
        out, err = io.StringIO(), io.StringIO()
        code: int | str = 0
        tb = ""
        cwd = os.getcwd()
        os.chdir(self.workdir)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    main(argv)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                except Exception:
                    code, tb = "an exception", traceback.format_exc()
        finally:
            os.chdir(cwd)
        if redirect:
            (self.workdir / redirect).write_text(out.getvalue())
        stderr = err.getvalue()
        shown = f"{block.id}: `{text}`\nran as: trainsim {shlex.join(argv)}\n"
        if block.error:
            lines = [ln for ln in stderr.splitlines() if ln.strip()]
            if code == 2 and len(lines) == 1 and lines[0].startswith("error:"):
                return Outcome("ok")
            got = f"expected one error line and exit 2, got exit {code}:\n{stderr[-3000:]}{tb}"
            return Outcome("fail", shown + got)
        if code != 0 or "Traceback" in stderr:
            return Outcome("fail", shown + f"exit {code}; stderr:\n{stderr[-3000:]}{tb}")
        if argv[:1] == ["predict"] and not block.unfit and not _fits(out.getvalue(), "--json" in argv):
            return Outcome("fail", shown + "the plan does not fit in GPU memory: show a plan that fits (or mark the "
                           "fence `<!-- docs-test: unfit REASON -->` where the point is the out-of-memory plan)")
        return Outcome("ok")


def _fits(stdout: str, is_json: bool) -> bool:
    """Whether a ``predict`` output says the plan fits in memory."""
    if is_json:
        return bool(json.loads(stdout)["memory"]["fits"])
    return "does NOT fit" not in stdout


@pytest.fixture(scope="module")
def runners() -> dict[str, BlockRunner]:
    """One runner per fence, shared by the tests of its commands."""
    return {}


@pytest.fixture(scope="module")
def page_setups() -> dict[str, dict[tuple[str, int], Outcome | None]]:
    """The setup steps already run, per page, with their outcome (``None``: ran)."""
    return {}


@pytest.fixture(scope="module")
def docs_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docs")


def test_the_docs_parse():
    assert PARSE_ERROR is None, PARSE_ERROR
    assert len(COMMANDS) >= 20


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_documented_command_runs(command: DocCommand, runners: dict[str, BlockRunner],
                                 page_setups: dict[str, dict[tuple[str, int], Outcome | None]],
                                 docs_tmp: Path) -> None:
    block = command.block
    if block.id not in runners:
        page_blocks = [b for b in BLOCKS if b.page == block.page]
        earlier = page_blocks[:page_blocks.index(block)]
        runners[block.id] = BlockRunner(block, docs_tmp / block.id.replace(":", "-"),
                                        docs_tmp / f"tmp-{block.page.name}",
                                        page_setups.setdefault(block.page.name, {}), earlier)
    result = runners[block.id].outcome(command.step.index)
    if result.status == "skip":
        pytest.skip(result.message)
    assert result.status == "ok", result.message


# --- the extractor itself ---------------------------------------------------------------------------------------

def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text)
    return page


def test_extractor_reads_console_prompts_continuations_comments_and_loops(tmp_path):
    page = _page(tmp_path, "\n".join([
        "```console",
        "$ trainsim predict -m a \\",
        "      --gbs 8   # a comment",
        "output line trainsim not a command",
        "$ mkdir -p /tmp/x && trainsim whatif t.parquet; python -m pytest",
        "```",
        "```bash",
        "for g in 4 8; do for n in 1 2; do",
        "  trainsim search --gpus-per-node $g -n ${n}",
        "done; done",
        "```",
        "```text",
        "trainsim profile [flags] --out TABLE",
        "```",
    ]))
    first, loop = blocks_of(page)
    assert [(s.kind, s.text) for s in first.steps] == [
        ("trainsim", "trainsim predict -m a        --gbs 8"), ("setup", "mkdir -p /tmp/x"),
        ("trainsim", "trainsim whatif t.parquet"), ("not-run", "python -m pytest")]
    assert [s.text for s in loop.commands] == [f"trainsim search --gpus-per-node {g} -n {n}"
                                               for g in (4, 8) for n in (1, 2)]


def test_extractor_markers(tmp_path):
    page = _page(tmp_path, "\n".join([
        '<!-- docs-test: replace "-n 1024" "-n 64" -->',
        "<!-- docs-test: skip-matching \"--device cuda\" needs a CUDA GPU -->",
        "<!-- docs-test: file ops.parquet docs/x.parquet -->",
        "```bash",
        "trainsim profile --device cuda --out ops.parquet",
        "trainsim predict -n 1024 --op-costs ops.parquet",
        "```",
    ]))
    (block,) = blocks_of(page)
    assert block.commands[1].text == "trainsim predict -n 64 --op-costs ops.parquet"
    assert block.skip_matching == [("--device cuda", "needs a CUDA GPU")]
    assert block.files == [("ops.parquet", "docs/x.parquet")]


@pytest.mark.parametrize("text, message", [
    ('<!-- docs-test: replace "absent" "x" -->\n```bash\ntrainsim presets\n```', "is not in the block"),
    ("<!-- docs-test: frobnicate -->\n```bash\ntrainsim presets\n```", "cannot read the marker"),
    ("<!-- docs-test: error -->\n\nsome prose\n```bash\ntrainsim presets\n```", "right before a fence"),
    ("```bash\nmake trainsim\n```", "`make` is neither"),
    ("```bash\nfor g in 1 2; do\ntrainsim presets\n```", "without `done`"),
])
def test_extractor_refuses_what_it_cannot_read(tmp_path, text, message):
    with pytest.raises(DocsSyntaxError, match=message):
        blocks_of(_page(tmp_path, text))


def test_paths_go_to_the_work_directory(tmp_path):
    tmp = tmp_path / "tmp"
    assert _rewrite("/tmp/out/a.csv", tmp_path, tmp) == str(tmp / "out" / "a.csv")
    assert _rewrite("docs/examples/cluster.yaml", tmp_path, tmp) == str(ROOT / "docs/examples/cluster.yaml")
    assert _rewrite("--out=/tmp/o", tmp_path, tmp) == f"--out={tmp / 'o'}"
    assert _rewrite("mtnlg.csv", tmp_path, tmp) == "mtnlg.csv"


def test_the_system_yaml_example_is_the_file_the_readme_uses():
    import yaml

    page = (ROOT / "docs" / "systems.md").read_text()
    shown = page.split("This file is `docs/examples/my-cluster.yaml`", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(shown) == yaml.safe_load((ROOT / "docs" / "examples" / "my-cluster.yaml").read_text())


def test_a_command_that_needs_the_shared_data_skips_without_it(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "_shared", lambda: None)
    page = _page(tmp_path, "```bash\ntrainsim whatif ../shared/data/straggler-traces/trace-ST.parquet\n```")
    (block,) = blocks_of(page)
    runner = BlockRunner(block, tmp_path / "w", tmp_path / "t", set(), [])
    result = runner.outcome(0)
    assert result.status == "skip" and "../shared" in result.message


def test_a_failing_command_fails_with_the_command_and_its_error(tmp_path):
    page = _page(tmp_path, "```bash\ntrainsim predict -m no-such-model -n 8 --gbs 8\n```")
    (block,) = blocks_of(page)
    result = BlockRunner(block, tmp_path / "w", tmp_path / "t", set(), []).outcome(0)
    assert result.status == "fail"
    assert "trainsim predict -m no-such-model" in result.message and "error:" in result.message


def test_an_example_that_does_not_fit_fails_unless_marked(tmp_path):
    text = "```bash\ntrainsim predict -m llama3-8b -s dgx-a100 -n 8 --gbs 64 --seq-length 2048\n```"
    (block,) = blocks_of(_page(tmp_path, text))
    result = BlockRunner(block, tmp_path / "w", tmp_path / "t", set(), []).outcome(0)
    assert result.status == "fail" and "does not fit" in result.message
    (block,) = blocks_of(_page(tmp_path, "<!-- docs-test: unfit shows the OOM -->\n" + text))
    assert BlockRunner(block, tmp_path / "w2", tmp_path / "t2", set(), []).outcome(0).status == "ok"


def test_a_prompted_loop_spans_its_lines(tmp_path):
    page = _page(tmp_path, "\n".join([
        "```console",
        "$ for g in 4 8; do",
        "    trainsim search --gpus-per-node $g",
        "  done",
        "some output",
        "$ python scripts/x.py",
        "```",
    ]))
    (block,) = blocks_of(page)
    assert [(s.kind, s.text) for s in block.steps] == [
        ("trainsim", "trainsim search --gpus-per-node 4"), ("trainsim", "trainsim search --gpus-per-node 8"),
        ("not-run", "python scripts/x.py")]
