"""Megatron-LM command lines as they are: ``trainsim predict --megatron-args FILE``.

:func:`parse_megatron_args` maps the Megatron-LM training flags that change time, memory or cost onto a job: every
flag of :data:`trainsim.cli.job_options.JOB_OPTIONS` (generated from the spec fields' flag metadata, so a flag
declared on a field is understood here too: ``--disable-bias-linear``, ``--hidden-dropout``, ``--ddp-bucket-size``
...) plus the Megatron spellings with a rule of their own in :data:`EXTRA_FLAGS` (``--group-query-attention``,
``--fp8-format``, ``--recompute-method``, ``--num-layers-per-virtual-pipeline-stage``, ``--use-flash-attn``,
``--train-iters`` ...). Flags that do not affect performance (learning rate, data paths, logging, checkpointing:
:data:`IGNORED_FLAGS`, :data:`IGNORED_PREFIXES`) are ignored with one note; flags trainsim does not know are listed
in a second note so nothing is dropped silently.

:func:`read_launch_script` reads a launch script: line continuations, comments, ``VAR=value`` / ``export VAR=...``
/ ``VAR=( ... )`` assignments and their ``$VAR``, ``${VAR}``, ``${VAR[@]}``, ``${VAR:-default}`` and ``$((...))``
expansions, and the ``torchrun ... pretrain_gpt.py ARGS`` (or ``python -m torch.distributed.run``, ``deepspeed``,
``srun python``) line, whose ``--nproc-per-node`` × ``--nnodes`` gives the GPU count.
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainsim.errors import TrainsimError
from trainsim.spec.pipeline_split import vpp_from_layers_per_chunk


@dataclass
class MegatronArgs:
    """The job described by a Megatron command line."""

    options: dict[str, Any] = field(default_factory=dict)  # job-option name → value (trainsim.cli.job_options)
    model: dict[str, Any] = field(default_factory=dict)  # Model fields without a job option
    training: dict[str, Any] = field(default_factory=dict)  # Training fields without a job option
    layers_per_virtual_stage: int | None = None
    recompute_method: str | None = None
    train_iters: int | None = None
    train_samples: int | None = None
    ignored: list[str] = field(default_factory=list)  # known not to affect performance
    unrecognised: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def all_notes(self) -> list[str]:
        """Notes to print: what was approximated, ignored and not recognised."""
        out = list(self.notes)
        if self.ignored:
            out.append(f"ignored {len(self.ignored)} flag(s) that do not affect performance: "
                       + " ".join(sorted(set(self.ignored))))
        if self.unrecognised:
            out.append("not recognised, ignored (check they do not affect performance): "
                       + " ".join(sorted(set(self.unrecognised))))
        return out


# ---- flags ------------------------------------------------------------------------------------------------------
Handler = Callable[[MegatronArgs, str | None], None]


def _fp8_format(a: MegatronArgs, v: str | None) -> None:
    a.options["fp8"] = True
    a.options["bf16"] = False  # Megatron: --fp8-format runs FP8 GEMMs on top of --bf16


def _recompute_method(a: MegatronArgs, v: str | None) -> None:
    if v not in ("uniform", "block"):
        raise TrainsimError("--recompute-method", f"unknown method {v!r}", "use uniform or block")
    a.recompute_method = v


def _checkpoint_activations(a: MegatronArgs, v: str | None) -> None:
    """Megatron-LM 2021-22: ``--checkpoint-activations`` or ``--activations-checkpoint-method uniform|block`` turn on
    full-layer checkpointing (renamed ``--recompute-granularity full --recompute-method`` in 2022)."""
    a.options["recompute_granularity"] = "full"
    if v is not None:
        _recompute_method(a, v)


#: Megatron's --recompute-modules (nargs='*'): core_attn is selective recomputation; the modules trainsim models are
#: kept; the others (mlp, layernorm, moe, shared_experts ...) are listed in a note.
MODELLED_RECOMPUTE_MODULES = ("mla_up_proj", "moe_act")


def _recompute_modules(a: MegatronArgs, values: list[str]) -> None:
    names = [n for v in values for n in v.replace(",", " ").split()]
    if "core_attn" in names and "recompute_granularity" not in a.options:
        a.options["recompute_granularity"] = "selective"
    kept = [n for n in names if n in MODELLED_RECOMPUTE_MODULES]
    if kept:
        a.options["recompute_modules"] = ",".join(kept)
    other = [n for n in names if n not in (*MODELLED_RECOMPUTE_MODULES, "core_attn")]
    if other:
        a.notes.append(f"--recompute-modules {' '.join(other)}: not modelled (only core_attn, mla_up_proj, moe_act)")


#: Megatron-FSDP / torch FSDP2 inside Megatron-LM: --data-parallel-sharding-strategy → ZeRO stage.
FSDP_SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def _fsdp(a: MegatronArgs, v: str | None) -> None:
    a.options.setdefault("zero_stage", 3)  # fully sharded unless --data-parallel-sharding-strategy says otherwise


def _sharding_strategy(a: MegatronArgs, v: str | None) -> None:
    if v not in FSDP_SHARDING:
        raise TrainsimError("--data-parallel-sharding-strategy", f"unknown strategy {v!r}",
                            f"use {', '.join(FSDP_SHARDING)}")
    a.options["zero_stage"] = FSDP_SHARDING[v]


def _int_value(flag: str, v: str | None) -> int:
    try:
        return int(str(v))
    except ValueError:
        raise TrainsimError(flag, f"expects an integer (got {v!r})", _undefined_hint(v)) from None


def _float_value(flag: str, v: str | None) -> float:
    try:
        return float(str(v))
    except ValueError:
        raise TrainsimError(flag, f"expects a number (got {v!r})", _undefined_hint(v)) from None


def _undefined_hint(v: str | None) -> str:
    if v and "$" in v:
        return "the script uses a variable it does not define: define it in the script or give the flag to trainsim"
    return "fix the value"


def _vpp_layers(a: MegatronArgs, v: str | None) -> None:
    a.layers_per_virtual_stage = _int_value("--num-layers-per-virtual-pipeline-stage", v)


def _train_iters(a: MegatronArgs, v: str | None) -> None:
    a.train_iters = _int_value("--train-iters", v)


def _train_samples(a: MegatronArgs, v: str | None) -> None:
    a.train_samples = _int_value("--train-samples", v)


def _note(text: str) -> Handler:
    def h(a: MegatronArgs, v: str | None) -> None:
        a.notes.append(text)
    return h


#: Vocabulary of a tokenizer when the command line gives no --vocab-size (Megatron reads it from the tokenizer):
#: GPT2BPETokenizer is the GPT-2 BPE (gpt2-vocab.json, 50,257 tokens; pretrain_gpt.py's default tokenizer type when
#: --vocab-file/--merge-file are given), Llama2Tokenizer the Llama 2 SentencePiece model (32,000); a Hugging Face
#: --tokenizer-model is matched by name (Llama 3: 128,256 as its config.json; Llama 2: 32,000; GPT-2: 50,257).
TOKENIZER_VOCAB: tuple[tuple[str, int], ...] = (
    (r"^gpt2bpetokenizer$", 50257), (r"^llama2tokenizer$", 32000),
    (r"llama[-_ ]?3", 128256), (r"llama[-_ ]?2", 32000), (r"(^|/)gpt2$", 50257),
)


def _set_int(option: str, flag: str) -> Handler:
    """A handler setting the job option ``option`` to the flag's integer value (an older or other spelling)."""
    def h(a: MegatronArgs, v: str | None) -> None:
        a.options[option] = _int_value(flag, v)
    return h


def _tokenizer(key: str) -> Handler:
    def h(a: MegatronArgs, v: str | None) -> None:
        a.training[key] = v if v is not None else True
    return h


#: Megatron flags beyond the job options (spellings with a rule of their own: the job options themselves come from
#: the spec fields' flags): flag → (takes a value, handler).
EXTRA_FLAGS: dict[str, tuple[bool, Handler]] = {
    "--group-query-attention": (False, lambda a, v: a.training.__setitem__("_gqa", True)),
    "--fp8-format": (True, _fp8_format),
    "--fp8-hybrid": (False, _fp8_format),
    "--recompute-method": (True, _recompute_method),
    "--recompute-activations": (False, lambda a, v: a.options.__setitem__("recompute_granularity", "selective")),
    "--num-layers-per-virtual-pipeline-stage": (True, _vpp_layers),
    "--use-flash-attn": (False, lambda a, v: a.options.__setitem__("attention", "flash")),
    "--train-iters": (True, _train_iters),
    "--train-samples": (True, _train_samples),
    "--rampup-batch-size": (True, _note("--rampup-batch-size ignored: the prediction is for the full global batch")),
    "--moe-grouped-gemm": (False, _note("--moe-grouped-gemm: expert GEMMs are modelled one per expert")),
    "--use-torch-fsdp2": (False, _fsdp),
    "--use-custom-fsdp": (False, _fsdp),
    "--use-megatron-fsdp": (False, _fsdp),
    "--data-parallel-sharding-strategy": (True, _sharding_strategy),
    "--checkpoint-activations": (False, _checkpoint_activations),
    "--activations-checkpoint-method": (True, _checkpoint_activations),
    "--activations-checkpoint-num-layers": (True, _set_int("recompute_num_layers",
                                                           "--activations-checkpoint-num-layers")),
    "--checkpoint-num-layers": (True, _set_int("recompute_num_layers", "--checkpoint-num-layers")),
    # Megatron-DeepSpeed (BLOOM, MT-NLG): --deepspeed runs the DeepSpeed engine (its pipeline engine, ZeRO from
    # --zero-stage); --deepspeed_config and the activation-checkpointing switches belong to it
    "--deepspeed": (False, lambda a, v: a.options.__setitem__("framework", "megatron-deepspeed")),
    "--deepspeed_config": (True, lambda a, v: None),
    "--deepspeed-config": (True, lambda a, v: None),
    "--deepspeed-activation-checkpointing": (False, lambda a, v: None),
    # Megatron-DeepSpeed (BLOOM): the padded vocabulary, stated
    "--pad-vocab-size-to": (True, _set_int("vocab_size", "--pad-vocab-size-to")),
    "--tokenizer-type": (True, _tokenizer("_tokenizer_type")),
    "--tokenizer-model": (True, _tokenizer("_tokenizer_model")),
    "--merge-file": (True, _tokenizer("_merge_file")),
}

#: Flags known not to change time, memory or cost (their value, if any, is skipped).
IGNORED_FLAGS = frozenset({
    "--weight-decay", "--clip-grad", "--split", "--vocab-file", "--mock-data", "--distributed-backend",
    "--distributed-timeout-minutes", "--dataloader-type", "--num-workers", "--use-mcore-models",
    "--rotary-base", "--rotary-percent", "--rotary-seq-len-interpolation-factor", "--rope-scaling-factor",
    "--use-rope-scaling", "--use-rotary-position-embeddings", "--norm-epsilon", "--apply-query-key-layer-scaling",
    "--attention-softmax-in-fp32", "--hysteresis", "--initial-loss-scale", "--min-loss-scale",
    "--finetune", "--use-checkpoint-args", "--override-opt_param-scheduler", "--manual-gc", "--manual-gc-interval",
    "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-router-pre-softmax", "--timing-log-level",
    "--no-create-attention-mask-in-dataloader",
    "--use-cpu-initialization", "--min-lr", "--profile", "--profile-step-start", "--profile-step-end",
    "--profile-ranks", "--async-save", "--no-save-optim", "--no-save-rng", "--exit-signal-handler",
    "--fp8-amax-history-len", "--fp8-amax-compute-algo", "--fp8-margin", "--fp8-interval", "--swiglu-fusion",
    "--num-dataset-builder-threads", "--object-storage-cache-path", "--legacy-tokenizer",
})
IGNORED_PREFIXES = ("--lr", "--log-", "--log", "--wandb-", "--tensorboard", "--eval-", "--save", "--load",
                    "--data-", "--tokenizer-", "--adam-", "--sgd-", "--init-method", "--ckpt-", "--exit-",
                    "--no-load-", "--loss-scale", "--valid-", "--test-", "--train-data", "--seed", "--dist-ckpt",
                    "--pretrained-", "--use-dist-ckpt", "--retro-", "--bert-", "--t5-", "--vision-", "--ict-",
                    "--biencoder-", "--one-logger", "--straggler-", "--enable-one-logger", "--inprocess-",
                    "--rerun-", "--result-rejected", "--check-for-", "--error-injection", "--iter-per-epoch")


def is_ignored(flag: str) -> bool:
    """Whether a flag is known not to affect performance."""
    return flag in IGNORED_FLAGS or flag.startswith(IGNORED_PREFIXES)


def _job_flags() -> dict[str, Any]:
    from trainsim.cli.job_options import JOB_OPTIONS

    return {flag: opt for opt in JOB_OPTIONS for flag in opt.flags if flag.startswith("--")}


def _is_flag(token: str) -> bool:
    return token.startswith("--") and len(token) > 2


def parse_megatron_args(tokens: list[str]) -> MegatronArgs:
    """Map Megatron-LM training arguments onto job options (see the module docstring)."""
    job_flags = _job_flags()
    out = MegatronArgs()
    i = 0

    def value(takes: bool, flag: str, inline: str | None) -> str | None:
        """The value of ``flag``: inline (``--flag=v``) or the next token, which it consumes."""
        nonlocal i
        if not takes:
            return None
        if inline is not None:
            return inline
        if i < len(tokens) and not _is_flag(tokens[i]):
            i += 1
            return tokens[i - 1]
        raise TrainsimError(flag, "expects a value", f"give {flag} VALUE")

    def rest(inline: str | None) -> list[str]:
        """The further values of the current flag, which it consumes (Megatron has no positional arguments: every
        token up to the next flag belongs to it, e.g. ``--data-path W1 P1``, ``--rampup-batch-size 16 16 N``)."""
        nonlocal i
        start = i
        while inline is None and i < len(tokens) and not _is_flag(tokens[i]):
            i += 1
        return tokens[start:i]

    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not _is_flag(token):
            out.unrecognised.append(token)
            continue
        flag, inline = token, None
        if "=" in token:
            flag, inline = token.split("=", 1)

        if flag == "--recompute-modules":  # nargs='*' in Megatron: every value up to the next flag
            _recompute_modules(out, [inline] if inline is not None else rest(inline))
            continue
        opt = job_flags.get(flag)
        if opt is not None:
            if opt.section == "job" and opt.name in ("model", "system"):
                out.unrecognised.append(flag)
                value(True, flag, inline)
                continue
            if opt.kind is bool:
                out.options[opt.name] = True
                continue
            v = value(True, flag, inline)
            if opt.kind is int:
                out.options[opt.name] = _int_value(flag, v)
            elif opt.kind is float:
                out.options[opt.name] = _float_value(flag, v)
            else:
                out.options[opt.name] = v
            continue
        if flag in EXTRA_FLAGS:
            takes, handler = EXTRA_FLAGS[flag]
            handler(out, value(takes, flag, inline))
            if takes:
                rest(inline)  # further values belong to it too
            continue
        rest(inline)  # not a flag trainsim models: skip its values
        if is_ignored(flag):
            out.ignored.append(flag)
        else:
            out.unrecognised.append(flag)
    _resolve(out)
    return out


def _resolve(a: MegatronArgs) -> None:
    """Megatron's rules between flags."""
    gqa = a.training.pop("_gqa", False)
    if "num_query_groups" in a.options and not gqa:
        a.notes.append("--num-query-groups without --group-query-attention is ignored by Megatron: multi-head "
                       "attention modelled")
        a.options.pop("num_query_groups")
    if a.options.get("fp8") and a.options.get("bf16"):
        a.options["bf16"] = False
    kind = a.training.pop("_tokenizer_type", None)
    name = a.training.pop("_tokenizer_model", None)
    merges = a.training.pop("_merge_file", None)
    if "vocab_size" not in a.options:
        vocab = tokenizer_vocab(kind, name, merges is not None)
        if vocab is not None:
            a.options["vocab_size"] = vocab
            source = kind or name or "GPT2BPETokenizer: --merge-file"
            a.notes.append(f"vocab size {vocab} from the tokenizer ({source})")


def tokenizer_vocab(kind: str | None, model: str | None, merge_file: bool) -> int | None:
    """Vocabulary size of a Megatron tokenizer (:data:`TOKENIZER_VOCAB`), ``None`` when not known."""
    if kind is None and merge_file:
        kind = "GPT2BPETokenizer"  # pretrain_gpt.py's args_defaults
    for text in (kind, model):
        if isinstance(text, str):
            hit = next((v for pattern, v in TOKENIZER_VOCAB if re.search(pattern, text.lower())), None)
            if hit is not None:
                return hit
    return None


def merge_into_options(given: dict[str, Any], a: MegatronArgs, gpus: int | None = None) -> dict[str, Any]:
    """Job options from the script, overridden by the flags given to trainsim (``None``/``False``: not given)."""
    from trainsim.cli.job_options import fill_unset

    out = fill_unset(given, a.options)
    if a.recompute_method == "uniform" and out.get("recompute_num_layers") is not None:
        a.notes.append("--recompute-method uniform recomputes every layer (in groups of --recompute-num-layers)")
        out["recompute_num_layers"] = None
    if gpus and out.get("num_gpus") is None:
        out["num_gpus"] = gpus
    return out


def apply_to_job(job: Any, a: MegatronArgs) -> Any:
    """The job with the Megatron settings that have no job option (model fields, vpp from layers per virtual stage,
    training tokens from --train-iters/--train-samples)."""
    model = job.model.replace(**a.model) if a.model else job.model
    training = job.training.replace(**a.training) if a.training else job.training
    par = job.parallelism
    if a.layers_per_virtual_stage:
        vpp = vpp_from_layers_per_chunk(model.num_layers, par.pp, a.layers_per_virtual_stage)
        if vpp is None:
            raise TrainsimError("--num-layers-per-virtual-pipeline-stage",
                                f"{a.layers_per_virtual_stage} does not divide the {model.num_layers // par.pp} "
                                "layers per pipeline rank", "choose a divisor of num_layers / pp")
        if vpp > 1:
            par = par.replace(vpp=vpp)
    seq = job.training.seq_length or model.seq_length
    if a.train_iters and not training.train_tokens:
        training = training.replace(train_tokens=float(a.train_iters) * training.global_batch_size * seq)
    elif a.train_samples and not training.train_tokens:
        training = training.replace(train_tokens=float(a.train_samples) * seq)
    if model is job.model and training is job.training and par is job.parallelism:
        return job
    return job.replace(model=model, training=training, parallelism=par)


# ---- launch scripts ---------------------------------------------------------------------------------------------
_ASSIGN = re.compile(r"^(?:export\s+|local\s+|declare\s+(?:-\w+\s+)?)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(\[@\]|\[\*\])?(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_ARITH = re.compile(r"\$\(\((.*?)\)\)")
_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "deepspeed", "python", "python3",
              "srun", "mpirun")
_ENTRY = re.compile(r"(pretrain_\w+\.py|train\w*\.py|megatron\S*\.py)$")

_OPS: dict[type, Callable[[int, int], int]] = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
                                               ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv,
                                               ast.Mod: operator.mod}


def _arith(expr: str, env: dict[str, str]) -> str:
    """Integer shell arithmetic: + - * / % and parentheses over numbers and variables."""
    text = re.sub(r"\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), expr)

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(expr)

    try:
        return str(ev(ast.parse(text.strip(), mode="eval")))
    except (ValueError, SyntaxError, ZeroDivisionError):
        return f"$(({expr}))"  # left as is: an error names it if a modelled flag needs it


def _expand(text: str, env: dict[str, str]) -> str:
    text = _ARITH.sub(lambda m: _arith(m.group(1), env), text)

    def var(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        if name in env:
            return env[name]
        if m.group(3) is not None:
            return m.group(3)
        return m.group(0)

    return _VAR.sub(var, text)


def _logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined and multi-line ``VAR=( ... )`` arrays folded into one."""
    text = re.sub(r"\\\r?\n", " ", text)
    out: list[str] = []
    pending: list[str] = []
    depth = 0
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending:
            pending.append(re.sub(r"\s#.*$", "", stripped))
            depth += stripped.count("(") - stripped.count(")")
            if depth <= 0:
                out.append(" ".join(pending))
                pending, depth = [], 0
            continue
        m = _ASSIGN.match(stripped)
        if m and m.group(2).startswith("(") and m.group(2).count("(") > m.group(2).count(")"):
            pending, depth = [stripped], m.group(2).count("(") - m.group(2).count(")")
            continue
        out.append(stripped)
    if pending:
        out.append(" ".join(pending))
    return out


def _split(text: str, origin: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise TrainsimError("megatron_args", f"cannot parse {origin} ({exc})", "check the quoting") from None


def read_launch_script(path: str | Path) -> tuple[list[str], int | None]:
    """The Megatron arguments of a launch script (or a file of bare arguments) and the GPU count it launches
    (``--nproc-per-node`` × ``--nnodes`` of torchrun, when both are known)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise TrainsimError("megatron_args", f"file not found: {p}", "give the launch script's path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainsimError("megatron_args", f"cannot read {p} ({exc})", "give a text file") from None
    env: dict[str, str] = {}
    command: list[str] | None = None
    loose: list[str] = []
    for line in _logical_lines(text):
        m = _ASSIGN.match(line)
        if m and not line.startswith("-"):
            value = m.group(2).strip()
            if value.startswith("(") and value.endswith(")"):
                value = value[1:-1]
            words = _split(_expand(value, env), str(p))
            env[m.group(1)] = " ".join(shlex.quote(w) for w in words) if value != m.group(2).strip() or \
                len(words) != 1 else words[0]
            continue
        tokens = _inline_commands(_split(_expand(line, env), str(p)), str(p))
        if not tokens:
            continue
        entry = next((k for k, t in enumerate(tokens) if _ENTRY.search(t)), None)
        if entry is not None:
            command = tokens
            launcher_args, args = tokens[:entry], tokens[entry + 1:]
            return _words(args), _gpus(launcher_args)
        if tokens[0].startswith("--"):
            loose += tokens
    if command is None and loose:
        return _words(loose), None
    raise TrainsimError("megatron_args", f"no Megatron command line found in {p}",
                        "the script needs a 'torchrun ... pretrain_gpt.py ARGS' line, or give a file of arguments")


def _inline_commands(tokens: list[str], origin: str) -> list[str]:
    """Tokens with a quoted command line opened up: ``srun ... sh -c "python pretrain_gpt.py ARGS"`` (NVIDIA's
    ``examples/pretrain_gpt3_175B.sh`` builds ``run_cmd`` and runs it so), ``bash -c '...'``, ``eval "$CMD"``."""
    out: list[str] = []
    for t in tokens:
        if any(c.isspace() for c in t) and any(_ENTRY.search(w) for w in t.split()):
            out += _split(t, origin)
        else:
            out.append(t)
    return out


def _words(tokens: list[str]) -> list[str]:
    """Split tokens that still hold several flags (a quoted ``"$ARGS"``), as Megatron's argparse would see them."""
    out: list[str] = []
    for t in tokens:
        if t in ("$@", "$*", '"$@"'):  # the script's own arguments: none when it is read here
            continue
        out += t.split() if t.startswith("--") and any(c.isspace() for c in t) else [t]
    return out


def _gpus(launcher: list[str]) -> int | None:
    values: dict[str, str] = {}
    for k, t in enumerate(launcher):
        for name in ("--nproc_per_node", "--nproc-per-node", "--nnodes", "--num_gpus", "--num_nodes"):
            if t == name and k + 1 < len(launcher):
                values[name.replace("-", "_")] = launcher[k + 1]
            elif t.startswith(name + "="):
                values[name.replace("-", "_")] = t.split("=", 1)[1]
    per_node = values.get("__nproc_per_node") or values.get("__num_gpus")
    nodes = values.get("__nnodes") or values.get("__num_nodes") or "1"
    try:
        return int(per_node) * int(nodes.split(":")[-1]) if per_node else None
    except ValueError:
        return None
