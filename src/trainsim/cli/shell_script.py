"""Read a bash launch script the way bash would run it, as far as the training command is concerned.

Real Megatron-LM / Megatron-DeepSpeed launch scripts build their command from variables, arrays, defaults and
conditionals, and hand it to ``torchrun``, ``python -m torch.distributed.run``, ``deepspeed``, ``srun`` or
``mpirun``. :func:`read_script` reads such a script without running it:

- the text is cut into statements as bash does: backslash-newline joins lines; quotes (single, double, multi-line)
  and ``( ... )`` arrays keep newlines inside one statement; ``#`` starts a comment only at the start of a word and
  outside quotes (a comment ending in ``\\`` does not continue); ``;``, ``&&``, ``||``, ``|`` and ``&`` separate
  commands; here-documents are kept aside (a ``cat <<EOT > FILE`` body is the content of FILE: a DeepSpeed config
  written by the script is found that way);
- assignments ``VAR=...``, ``VAR+=...``, ``VAR=( ... )``, ``VAR+=( ... )`` (with ``export``, ``local``,
  ``declare``, ``readonly``) and the expansions ``$VAR``, ``${VAR}``, ``${VAR[@]}``, ``${VAR:-word}`` (nested),
  ``${VAR:=word}``, ``${VAR:+word}``, ``$((arithmetic))``, ``$(pwd)`` / backquotes; ``#SBATCH --nodes`` / ``-N``,
  ``--ntasks-per-node`` and ``--gres=gpu:N`` give ``$SLURM_NNODES`` and friends;
- ``if`` / ``elif`` / ``else`` / ``fi`` with ``[ ]`` / ``[[ ]]`` tests on strings and integers (``=``, ``==``,
  ``!=``, ``-eq`` ..., ``-z``, ``-n``, ``!``, ``&&``, ``||``, also inside one ``[[ ]]``) and ``(( arithmetic ))``
  take the branch bash would take; a file test (``-f``, ``-d``, ``-e``) is taken as true (the script's files are
  where it expects them); any other condition takes its first branch, with a note; ``exit`` ends the script,
  except inside a branch whose condition could not be decided (a usage check on positional arguments); ``case``
  blocks read the arm bash takes (an unexpanded subject: its ``*`` arm); function bodies are skipped;
- ``$((...))`` evaluates integers with nested parentheses, comparisons, ``&&`` / ``||`` / ``!`` and ``c ? a : b``;
- the launch is the first command whose program is a launcher (``torchrun``, ``python``, ``deepspeed``, ``srun``,
  ``mpirun``, ``bash -c``, ``eval`` ...) and which names a training entry point (``pretrain_gpt.py`` ...), also
  after a wrapper that runs its argument (``bindpcie``, ``numactl``); redirections and pipes after it are dropped.
  ``--nproc-per-node`` × ``--nnodes`` (torchrun), ``--num_gpus`` × ``--num_nodes`` (deepspeed) or ``--ntasks`` /
  ``-n`` / ``-np`` (srun, mpirun; not when they start torchrun) give the GPU count.
"""

from __future__ import annotations

import ast
import fnmatch
import operator
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainsim.errors import TrainsimError, read_text

#: Programs that start (or wrap) the training process.
LAUNCHERS = frozenset({"torchrun", "deepspeed", "srun", "mpirun", "mpiexec", "bash", "sh", "eval", "exec", "nohup",
                       "time", "env", "numactl", "nsys", "accelerate", "uv", "apptainer", "singularity", "jsrun"})
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
ENTRY = re.compile(r"(pretrain_\w+\.py|train\w*\.py|megatron\S*\.py)$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?=)")
_DECLARE = ("export", "local", "declare", "readonly", "typeset")
_REDIRECT = re.compile(r"^(\d*>&\d*-?|\d*>>?|&>>?|\d*<|<<<)(.*)$")


@dataclass
class LaunchCommand:
    """The training command a launch script runs."""

    args: list[str]  # the entry point's arguments, as its argparse sees them
    gpus: int | None  # processes the launcher starts, when the script says
    launcher: str | None = None  # the launching program (torchrun, deepspeed, srun ...)
    entry: str | None = None  # the training entry point (pretrain_gpt.py ...); None for a file of bare arguments
    files: dict[str, str] = field(default_factory=dict)  # files the script writes with a here-document
    notes: list[str] = field(default_factory=list)


# ---- statements -------------------------------------------------------------------------------------------------
@dataclass
class _Heredoc:
    delimiter: str
    strip_tabs: bool
    expand: bool


def _statements(text: str) -> tuple[list[str], list[tuple[str, str, bool]]]:
    """The script cut into simple statements, and the here-documents ``(statement, body)`` it contains."""
    out: list[str] = []
    heredocs: list[tuple[str, str, bool]] = []  # (statement, body, expand its variables)
    buf: list[str] = []
    i, n = 0, len(text)
    quote: str | None = None  # "'", '"' or '`'
    depth = 0  # open ( ... ) not inside quotes: arrays, subshells, $( ... )
    pending: list[_Heredoc] = []

    def flush() -> None:
        s = "".join(buf).strip()
        buf.clear()
        if s:
            out.append(s)

    def at_word_start() -> bool:
        return not buf or buf[-1] in " \t\n;&|()"

    while i < n:
        c = text[i]
        if quote == "'":
            buf.append(c)
            if c == "'":
                quote = None
            i += 1
            continue
        if c == "\\" and i + 1 < n:
            if text[i + 1] == "\n":  # line continuation (also inside double quotes)
                i += 2
                continue
            buf.append(text[i:i + 2])
            i += 2
            continue
        if quote is not None:  # double quotes or backquotes
            buf.append(c)
            if c == quote:
                quote = None
            i += 1
            continue
        if c in "'\"`":
            quote = c
            buf.append(c)
            i += 1
            continue
        if c == "#" and at_word_start():
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth = max(0, depth - 1)
        if c == "<" and text.startswith("<<", i) and not text.startswith("<<<", i):
            m = re.match(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2", text[i:])
            if m:
                pending.append(_Heredoc(m.group(3), m.group(1) == "-", not m.group(2)))
                buf.append(text[i:i + m.end()])
                i += m.end()
                continue
        if c == "\n":
            if depth > 0:
                buf.append(" ")
                i += 1
                continue
            statement = "".join(buf).strip()
            flush()
            i += 1
            for doc in pending:  # here-document bodies follow the line that opened them
                lines: list[str] = []
                while i < n:
                    end = text.find("\n", i)
                    line = text[i:end if end >= 0 else n]
                    i = end + 1 if end >= 0 else n
                    if (line.lstrip("\t") if doc.strip_tabs else line) == doc.delimiter:
                        break
                    lines.append(line)
                heredocs.append((statement, "\n".join(lines) + "\n", doc.expand))
            pending.clear()
            continue
        if depth == 0 and c in ";&|":
            two = text[i:i + 2]
            if c == "&" and (two == "&>" or (buf and buf[-1] in "<>")):
                buf.append(c)  # a redirection (&>, 2>&1), not a separator
                i += 1
                continue
            if two in ("&&", "||") and re.match(r"\s*(if|elif|while|until)\s", "".join(buf)):
                buf.append(f" {two} ")  # a condition's tests stay together
                i += 2
                continue
            if two == ";;":  # the end of a case item
                flush()
                out.append(";;")
                i += 2
                continue
            flush()
            i += 2 if two in ("&&", "||") else 1
            continue
        buf.append(c)
        i += 1
    flush()
    return out, heredocs


# ---- expansion --------------------------------------------------------------------------------------------------
_OPS: dict[type, Callable[[int, int], int]] = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
                                               ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv,
                                               ast.Mod: operator.mod, ast.Pow: operator.pow}


_COMPARE: dict[type, Callable[[int, int], bool]] = {ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Lt: operator.lt,
                                                    ast.LtE: operator.le, ast.Eq: operator.eq, ast.NotEq: operator.ne}
_TERNARY = re.compile(r"^(?P<cond>[^?]+)\?(?P<yes>[^:]+):(?P<no>.+)$")


def arith(expr: str, env: dict[str, str]) -> str | None:
    """Integer shell arithmetic over numbers and variables (``+ - * / % **``, comparisons, ``&& || !`` and
    ``c ? a : b`` as bash evaluates them); ``None`` when it cannot be evaluated."""
    text = re.sub(r"\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), expr)
    text = re.sub(r"!(?!=)", " not ", text.replace("&&", " and ").replace("||", " or "))
    if (t := _TERNARY.match(text.strip())) is not None:
        text = f"({t['yes']}) if ({t['cond']}) else ({t['no']})"

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return int(not ev(node.operand))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return int(_COMPARE[type(node.ops[0])](ev(node.left), ev(node.comparators[0])))
        if isinstance(node, ast.BoolOp):
            values = [ev(v) for v in node.values]
            return int(all(values) if isinstance(node.op, ast.And) else any(values))
        if isinstance(node, ast.IfExp):
            return ev(node.body) if ev(node.test) else ev(node.orelse)
        raise ValueError(expr)

    try:
        return str(ev(ast.parse(text.strip(), mode="eval")))
    except (ValueError, SyntaxError, ZeroDivisionError, TypeError):
        return None


def _skip_quoted(text: str, i: int, quotes: str = "'\"") -> int | None:
    """Index after the quoted string or backslash escape starting at ``i``; ``None`` when none starts there."""
    c = text[i]
    if c == "\\":
        return i + 2
    if c not in quotes:
        return None
    j = i + 1
    while j < len(text) and text[j] != c:
        j += 2 if c != "'" and text[j] == "\\" else 1
    return j + 1


def _matching(text: str, start: int, open_: str, close: str) -> int:
    """Index of the bracket closing the one opened just before ``start`` (quotes respected)."""
    depth, i = 1, start
    while i < len(text):
        after = _skip_quoted(text, i)
        if after is not None:
            i = after
            continue
        if text.startswith(open_, i):
            depth += 1
        elif text.startswith(close, i):
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _unquote(word: str) -> str:
    try:
        parts = shlex.split(word)
    except ValueError:
        return word
    return " ".join(parts)


def _command_substitution(cmd: str, env: dict[str, str]) -> str:
    words = cmd.split()
    if not words:
        return ""
    if words[0] == "pwd":
        return "."
    if words[0] == "echo":
        return _unquote(expand(" ".join(words[1:]), env))
    return ""  # other commands (hostname, scontrol, date, python -c ...) do not set training flags


def expand(text: str, env: dict[str, str]) -> str:
    """``text`` with its parameter, arithmetic and command expansions done (single-quoted text left as is)."""
    out: list[str] = []
    i, n = 0, len(text)
    in_double = False
    while i < n:
        c = text[i]
        if c == "'" and not in_double:
            end = text.find("'", i + 1)
            end = n - 1 if end < 0 else end
            out.append(text[i:end + 1])
            i = end + 1
            continue
        if c == '"':
            in_double = not in_double
            out.append(c)
            i += 1
            continue
        if c == "\\" and i + 1 < n:
            if text[i + 1] == "$":
                out.append("$")
            else:
                out.append(text[i:i + 2])
            i += 2
            continue
        if c == "`":
            end = text.find("`", i + 1)
            end = n if end < 0 else end
            out.append(_command_substitution(text[i + 1:end], env))
            i = end + 1
            continue
        if c != "$" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if text.startswith("$((", i):
            close = _matching(text, i + 2, "(", ")")  # single parentheses: $((a / (b*c))) nests
            end = close - 1 if close >= 0 else -1
            if end < 0:
                out.append(text[i:])
                break
            value = arith(expand(text[i + 3:end], env), env)
            out.append(value if value is not None else text[i:end + 2])
            i = end + 2
            continue
        if nxt == "(":
            end = _matching(text, i + 2, "(", ")")
            end = n if end < 0 else end
            out.append(_command_substitution(text[i + 2:end], env))
            i = end + 1
            continue
        if nxt == "{":
            end = _matching(text, i + 2, "{", "}")
            if end < 0:
                out.append(text[i:])
                break
            out.append(_brace(text[i + 2:end], env, text[i:end + 1]))
            i = end + 1
            continue
        if nxt.isdigit():  # the script's own arguments: kept as written (a path placeholder, say)
            out.append(text[i:i + 2])
            i += 2
            continue
        if nxt in "@*#?$!-":
            out.append({"#": "0", "?": "0"}.get(nxt, ""))  # no arguments when the script is read here
            i += 2
            continue
        m = _NAME.match(text, i + 1)
        if m is None:
            out.append(c)
            i += 1
            continue
        name = m.group(0)
        out.append(env[name] if name in env else "$" + name)
        i = m.end()
    return "".join(out)


def _brace(body: str, env: dict[str, str], whole: str) -> str:
    """``${...}``: name, array, default/assign/alternative words; other operators give the variable's value."""
    if body.startswith("#"):
        value = env.get(body[1:])
        return str(len(value)) if value is not None else whole
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|\d+)(\[[^\]]*\])?", body)
    if m is None:
        return whole
    name, rest = m.group(1), body[m.end():]
    value = env.get(name)
    if name.isdigit():
        value = None  # positional parameters: the script is read without arguments
    op = re.match(r"(:?[-=+?])", rest)
    if op:
        word = rest[op.end():]
        empty = value is None or (op.group(1).startswith(":") and value == "")
        kind = op.group(1)[-1]
        if kind in "-=":
            if empty:
                value = _unquote(expand(word, env))
                if kind == "=":
                    env[name] = value
            return value if value is not None else ""
        if kind == "+":
            return "" if empty else _unquote(expand(word, env))
        return value if value is not None else whole
    return whole if value is None else value


# ---- conditions -------------------------------------------------------------------------------------------------
def _test(words: list[str]) -> bool | None:
    """A ``[ ]`` / ``[[ ]]`` expression over already expanded words; ``None`` when it cannot be decided."""
    for sep in ("||", "-o"):
        if sep in words:
            k = words.index(sep)
            a, b = _test(words[:k]), _test(words[k + 1:])
            return True if (a or b) else (None if a is None or b is None else False)
    for sep in ("&&", "-a"):
        if sep in words and not (len(words) == 2 and words[0] == "-a"):
            k = words.index(sep)
            a, b = _test(words[:k]), _test(words[k + 1:])
            return False if (a is False or b is False) else (None if a is None or b is None else True)
    if words and words[0] == "!":
        r = _test(words[1:])
        return None if r is None else not r
    if len(words) == 1:
        return words[0] != "" and not words[0].startswith("$")
    if len(words) == 2:
        op, arg = words
        if op == "-z":
            return None if arg.startswith("$") else arg == ""
        if op == "-n":
            return None if arg.startswith("$") else arg != ""
        if op in ("-f", "-d", "-e", "-s", "-r", "-x", "-w"):
            return True  # the script's files are where it expects them
        return None
    if len(words) == 3:
        a, op, b = words
        if "$" in a or "$" in b:
            return None
        if op in ("=", "=="):
            return re.fullmatch(_glob(b), a) is not None
        if op == "!=":
            return re.fullmatch(_glob(b), a) is None
        ints = {"-eq": operator.eq, "-ne": operator.ne, "-gt": operator.gt, "-ge": operator.ge,
                "-lt": operator.lt, "-le": operator.le}
        if op in ints:
            try:
                return bool(ints[op](int(a), int(b)))
            except ValueError:
                return None
    return None


def _glob(pattern: str) -> str:
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)


def _condition(words: list[str]) -> bool | None:
    """An ``if`` condition: tests (``[ ]``, ``[[ ]]``, ``test``, ``true``, ``false``) joined by ``&&`` / ``||``
    (left to right, as bash does), each possibly negated by ``!``; ``None`` when a part cannot be decided."""
    if len(words) >= 2 and words[0] == "((" and words[-1] == "))":  # (( arithmetic )): true when non-zero
        value = arith(" ".join(words[1:-1]), {})
        return None if value is None else value != "0"
    result: bool | None = None
    op: str | None = None
    part: list[str] = []
    for w in [*_split_double_brackets(words), "||END"]:
        if w not in ("&&", "||", "||END"):
            part.append(w)
            continue
        value = _one_condition(part)
        if op is None:
            result = value
        elif op == "&&":
            result = False if (result is False or value is False) else (None if None in (result, value) else True)
        else:
            result = True if (result or value) else (None if None in (result, value) else False)
        op, part = w, []
    return result


def _split_double_brackets(words: list[str]) -> list[str]:
    """``[[ a && b ]]`` as ``[[ a ]] && [[ b ]]`` (and ``||``): the tests joined inside one bracket pair."""
    out: list[str] = []
    inside = False
    for w in words:
        if w == "[[":
            inside = True
        elif w == "]]":
            inside = False
        if inside and w in ("&&", "||"):
            out += ["]]", w, "[["]
            continue
        out.append(w)
    return out


def _one_condition(words: list[str]) -> bool | None:
    neg = False
    while words and words[0] == "!":
        neg, words = not neg, words[1:]
    if words and words[0] in ("[", "test", "[["):
        inner = words[1:]
        if inner and inner[-1] in ("]", "]]"):
            inner = inner[:-1]
        r = _test(inner)
    elif words in (["true"], [":"]):
        r = True
    elif words == ["false"]:
        r = False
    else:
        r = None
    return None if r is None else (r != neg)


# ---- the reader -------------------------------------------------------------------------------------------------
def _sbatch(text: str) -> dict[str, str]:
    """``$SLURM_*`` variables from the ``#SBATCH`` header."""
    env: dict[str, str] = {}
    for m in re.finditer(r"^#SBATCH\s+(.*)$", text, re.M):
        words = m.group(1).split("#")[0].split()
        for k, w in enumerate(words):
            key, _, val = w.partition("=")
            if not val and k + 1 < len(words) and not words[k + 1].startswith("-"):
                val = words[k + 1]
            if key in ("--nodes", "-N") and val:
                env["SLURM_NNODES"] = env["SLURM_JOB_NUM_NODES"] = val.split("-")[-1]
            elif key == "--ntasks-per-node" and val:
                env["SLURM_NTASKS_PER_NODE"] = val
            elif key in ("--gpus-per-node", "--gres") and val:
                count = val.split(":")[-1]
                if count.isdigit():
                    env["SLURM_GPUS_ON_NODE"] = env["SLURM_GPUS_PER_NODE"] = count
            elif key in ("--ntasks", "-n") and val:
                env["SLURM_NTASKS"] = val
    return env


def _words(statement: str, env: dict[str, str], origin: str) -> list[str]:
    try:
        return shlex.split(expand(statement, env))
    except ValueError as exc:
        raise TrainsimError("megatron_args", f"cannot parse {origin} ({exc}): {statement[:80]}",
                            "check the quoting of that line") from None


def _assign(words_text: str, env: dict[str, str], origin: str) -> bool:
    """Apply the assignments a statement makes; ``False`` when it is not (only) assignments."""
    rest = words_text.strip()
    made = False
    while rest:
        m = _ASSIGN.match(rest)
        if m is None:
            return made and not rest
        name, op = m.group(1), m.group(2)
        rest = rest[m.end():]
        if rest.startswith("("):
            end = _matching(rest, 1, "(", ")")
            end = len(rest) if end < 0 else end
            items = _words(rest[1:end], env, origin)
            value = " ".join(shlex.quote(w) for w in items)
            rest = rest[end + 1:].lstrip()
        else:
            word, rest = _first_word(rest)
            parts = _words(word, env, origin) if word else []
            value = " ".join(parts) if len(parts) != 1 else parts[0]
        if op == "+=" and name in env:
            value = f"{env[name]} {value}".strip()
        env[name] = value
        made = True
    return made


def _first_word(text: str) -> tuple[str, str]:
    """The first shell word of ``text`` (quotes and ``${...}`` / ``$(...)`` included) and what follows it."""
    i = 0
    while i < len(text):
        after = _skip_quoted(text, i, "'\"`")
        if after is None and text.startswith(("${", "$("), i):
            end = _matching(text, i + 2, text[i + 1], "}" if text[i + 1] == "{" else ")")
            after = len(text) if end < 0 else end + 1
        if after is not None:
            i = after
            continue
        if text[i].isspace():
            return text[:i], text[i:].lstrip()
        i += 1
    return text, ""


def _strip_redirections(words: list[str]) -> list[str]:
    """Words without their redirections (``> log``, ``2>&1``, ``&> log``, ``>>log``)."""
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        m = _REDIRECT.match(w)
        if m is None:
            out.append(w)
            continue
        # an operator alone takes the next word as its target, unless it duplicates a descriptor (2>&1)
        skip = not m.group(2) and not m.group(1).endswith(("&", "-")) and ">&" not in m.group(1)
    return out


def _inline_commands(words: list[str], env: dict[str, str], origin: str) -> list[str]:
    """Words with a quoted command line opened up: ``srun ... bash -c "python pretrain_gpt.py ARGS"``,
    ``eval "$CMD"`` (NVIDIA's 2021 scripts build ``run_cmd`` and run it so)."""
    out: list[str] = []
    for w in words:
        if any(c.isspace() for c in w) and any(ENTRY.search(x) for x in w.split()):
            out += _words(w, env, origin)
        else:
            out.append(w)
    return out


def _is_launcher(word: str) -> bool:
    base = word.rsplit("/", 1)[-1]
    return base in LAUNCHERS or _PYTHON.match(base) is not None


#: Programs that run their argument as the command (CPU/NUMA binding, profiling).
WRAPPERS = frozenset({"bindpcie", "numactl", "taskset", "nsys", "ncu", "chrt", "nice", "stdbuf"})


def _launch(words: list[str]) -> int | None:
    """Index of the entry point when ``words`` launch training, else ``None``."""
    k = 0
    while k < len(words) and _ASSIGN.match(words[k]):  # VAR=value cmd ...
        k += 1
    if k >= len(words):
        return None
    if ENTRY.search(words[k]):
        return k
    if not _is_launcher(words[k]):
        # a wrapper program that execs its argument (NVIDIA's bindpcie, numactl-style binders, profilers): the entry
        # point right after it
        wrapper = words[k].rsplit("/", 1)[-1] in WRAPPERS or (words[k].startswith(("/", "./", "$")) and
                                                              not words[k].endswith(".sh"))
        return k + 1 if wrapper and k + 1 < len(words) and ENTRY.search(words[k + 1]) else None
    return next((j for j in range(k + 1, len(words)) if ENTRY.search(words[j])), None)


def launcher_gpus(launcher: list[str]) -> int | None:
    """GPUs started by a launcher's arguments: torchrun ``--nproc-per-node`` × ``--nnodes``, deepspeed
    ``--num_gpus`` × ``--num_nodes``, srun / mpirun ``--ntasks`` / ``-n`` / ``-np``."""
    values: dict[str, str] = {}
    names = {"--nproc_per_node": "per_node", "--nproc-per-node": "per_node", "--num_gpus": "per_node",
             "--num-gpus": "per_node", "--nnodes": "nodes", "--num_nodes": "nodes", "--num-nodes": "nodes",
             "--ntasks": "tasks", "-np": "tasks", "-n": "tasks"}
    for k, t in enumerate(launcher):
        for name, key in names.items():
            if t == name and k + 1 < len(launcher):
                values.setdefault(key, launcher[k + 1])
            elif t.startswith(name + "="):
                values.setdefault(key, t.split("=", 1)[1])
    try:
        if "per_node" in values:
            return int(values["per_node"]) * int(values.get("nodes", "1").split(":")[-1])
        # srun / mpirun tasks are the GPUs unless they start torchrun, which starts the processes itself
        if "tasks" in values and not any(t.rsplit("/", 1)[-1] == "torchrun" or t.startswith("torch.distributed.")
                                         for t in launcher[1:]):
            return int(values["tasks"])
    except ValueError:
        return None
    return None


def read_script(path: str | Path) -> LaunchCommand:
    """The training command of a launch script, or of a file of bare arguments (see the module docstring)."""
    p = Path(path)
    text = read_text(p, "megatron_args", "give the launch script's path", "give a text file")
    origin = str(p)
    env = _sbatch(text)
    env.setdefault("PWD", ".")
    statements, heredocs = _statements(text)
    docs = {s: (body, expands) for s, body, expands in heredocs}
    files: dict[str, str] = {}
    notes: list[str] = []
    loose: list[str] = []
    stack: list[tuple[bool, bool]] = []  # open if blocks: (this branch is read, a branch was taken)
    assumed: list[int] = []  # depths of open if blocks read on a condition that could not be decided
    skip_depth = 0  # inside a function body (or a case block inside one)
    cases: list[_Case] = []  # open case blocks, innermost last
    for raw in statements:
        s = raw
        first = _first(s)
        if skip_depth:
            if first in ("esac", "}"):
                skip_depth -= 1
            elif first == "case" or _FUNCTION.match(s):
                skip_depth += 1
            continue
        if _FUNCTION.match(s):
            skip_depth = 1  # function bodies are not read
            continue
        if cases:
            step = cases[-1].step(s, first)
            if step is None:
                if first == "esac":
                    cases.pop()
                continue
            s, first = step, _first(step)
        if first == "case" and all(a for a, _ in stack):
            words = _words(s, env, origin)
            subject = words[1] if len(words) > 2 else ""
            if "$" in subject:
                notes.append(f"launch script: case subject '{subject}' not evaluated: only its * arm was read")
            cases.append(_Case(subject))
            continue
        if first in ("then", "do"):
            s = s[len(first):].strip()
            first = _first(s)
        if first in ("if", "elif"):
            if first == "elif":  # a new branch of the innermost block: its own condition decides
                assumed[:] = [d for d in assumed if d != len(stack)]
            if stack_if(stack, first, s[len(first):], env, origin, notes):
                assumed.append(len(stack))
            continue
        if first == "else":
            if stack:
                stack[-1] = (not stack[-1][1], True)
            s = s[4:].strip()
            first = _first(s)
        if first in ("", "fi", "done", "esac", ";;", "}", "{", "for", "while", "until", "select"):
            if first == "fi" and stack:
                assumed[:] = [d for d in assumed if d < len(stack)]
                stack.pop()
            continue  # a loop's body is read once, as straight-line code
        if not all(a for a, _ in stack):
            continue
        if first == "exit":
            if assumed:  # in a branch whose condition could not be decided (a usage check, a debug mode)
                continue
            break
        body = s
        while _first(body) in _DECLARE:
            body = body.split(None, 1)[1] if len(body.split(None, 1)) > 1 else ""
            while body.startswith("-"):  # declare -a, export -n ...
                body = body.split(None, 1)[1] if len(body.split(None, 1)) > 1 else ""
        if body and _assign(body, env, origin):
            continue
        if raw in docs:  # cat <<EOT > FILE: the body is FILE's content
            words = _words(re.sub(r"<<-?\s*(['\"]?)[A-Za-z_][A-Za-z0-9_]*\1", " ", s), env, origin)
            target = next((words[k + 1] for k, w in enumerate(words[:-1]) if w in (">", ">>")), None)
            if target is not None:
                body, expands = docs[raw]
                files[target] = expand(body, env) if expands else body
            continue
        words = [w for w in _strip_redirections(_inline_commands(_words(s, env, origin), env, origin))
                 if w not in ("&", ";")]
        if not words:
            continue
        entry = _launch(words)
        if entry is not None:
            launcher, args = words[:entry], words[entry + 1:]
            gpus = launcher_gpus(launcher)
            name = _launcher_name(launcher)
            if gpus is None:
                notes.append(gpu_note(name))
            return LaunchCommand(_split_flags(args), gpus, name, words[entry].rsplit("/", 1)[-1], files, notes)
        if words[0].startswith("--"):
            loose += words
    if loose:
        return LaunchCommand(_split_flags(loose), None, None, None, files, notes)
    others = sorted({w for w in re.findall(r"[\w./-]+\.sh\b", text) if Path(w).name != p.name})
    hint = f" (it runs {', '.join(others[:3])}: give that script)" if others else ""
    raise TrainsimError("megatron_args", f"no Megatron command line found in {p}{hint}",
                        "the script needs a 'torchrun ... pretrain_gpt.py ARGS' line, or give a file of arguments")


_FUNCTION = re.compile(r"^(function\s+\w+|\w+\s*\(\s*\))\s*\{?\s*$")


@dataclass
class _Case:
    """An open ``case WORD in ... esac`` block: the arm whose pattern matches ``subject`` is read (the first one, as
    bash does; an unexpanded subject matches only ``*``), the others skipped."""

    subject: str
    matched: bool = False  # an arm was taken
    active: bool = False  # inside the taken arm
    pending: list[str] = field(default_factory=list)  # patterns of the arm being opened, split at '|'

    def step(self, statement: str, first: str) -> str | None:
        """The statement to read (the part after an arm's ``)``), or ``None`` to skip it."""
        text = statement.strip()
        if text == ";;" or first == "esac":
            self.active = False
            return None
        if self.active:
            return statement
        if ")" not in text:  # an alternative of the next arm's patterns ('a|b)' arrives as 'a', 'b) ...')
            self.pending.append(text)
            return None
        head, rest = text.split(")", 1)
        patterns = [p.strip().strip("\"'").lstrip("(") for p in (*self.pending, head)]
        self.pending = []
        unknown = "$" in self.subject
        hit = any(p == "*" if unknown else fnmatch.fnmatchcase(self.subject, p) for p in patterns)
        if hit and not self.matched:
            self.matched = self.active = True
            return rest.strip().rstrip(";").strip() or None
        return None


def _first(statement: str) -> str:
    parts = statement.split(None, 1)
    return parts[0] if parts else ""


def stack_if(stack: list[tuple[bool, bool]], keyword: str, condition: str, env: dict[str, str], origin: str,
             notes: list[str]) -> bool:
    """Open an ``if`` block or move to its ``elif`` branch: the branch is read when bash would take it. True when
    the condition could not be decided (the branch is read, but an ``exit`` in it does not end the script)."""
    if keyword == "elif" and not stack:
        return False
    outer = all(a for a, _ in (stack[:-1] if keyword == "elif" else stack))
    if not outer or (keyword == "elif" and stack[-1][1]):
        if keyword == "if":
            stack.append((False, True))
        else:
            stack[-1] = (False, True)
        return False
    decided = _condition(_words(condition, env, origin))
    undecided = decided is None
    if decided is None:
        notes.append(f"launch script: condition '{condition.strip()[:60]}' not evaluated: that branch was read")
        decided = True
    if keyword == "if":
        stack.append((decided, decided))
    else:
        stack[-1] = (decided, decided)
    return undecided


def _launcher_name(launcher: list[str]) -> str | None:
    if "-m" in launcher and any(m in launcher for m in ("torch.distributed.run", "torch.distributed.launch")):
        return "torchrun"
    return next((w.rsplit("/", 1)[-1] for w in launcher if _is_launcher(w) and w.rsplit("/", 1)[-1] not in
                 ("bash", "sh", "eval", "exec", "env", "nohup", "time")), None)


def gpu_note(launcher: str | None) -> str:
    if launcher == "deepspeed":
        return ("launch script: the deepspeed launcher starts one process per GPU of every host of its hostfile, "
                "which the script does not state: give -n GPUS")
    return "launch script: the number of GPUs it launches is not stated in the script: give -n GPUS"


def _split_flags(tokens: list[str]) -> list[str]:
    """Split words that still hold several flags (a quoted ``"$ARGS"`` or an array element ``"--fp8-format
    hybrid"``), as Megatron's argparse would see them."""
    out: list[str] = []
    for t in tokens:
        if t.startswith("--") and any(c.isspace() for c in t):
            try:  # an array element keeps its own quoting ("${ARGS[@]}" of ('--layout' 'Et|t')): bash's words
                out += shlex.split(t)
            except ValueError:
                out += t.split()
        else:
            out.append(t)
    return out
