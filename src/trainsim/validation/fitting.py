"""The run ran, so it fit: the unstated choices that make a measured row's job fit in memory.

A row that leaves a setting empty gets the framework's default (:mod:`trainsim.validation.rows`); when that default
would leave the job out of memory, the choice a run of that stack must have made instead: the distributed optimizer
(:func:`sharded_optimizer_if_needed`), the lightest recomputation (:func:`recompute_that_fits`), a smaller
micro-batch for the stacks that run the local batch at once (:func:`fitting_job`), the smallest expert parallelism
for a mixture-of-experts run (:func:`expert_parallel_that_fits`), sequence parallelism with TP
(:func:`sequence_parallel_that_fits`), and, for stated offloading whose stage is not,
the stage it runs on (:func:`offload_settings`, :func:`offload_stage_that_fits`). Every choice is reported with the
row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainsim.errors import TrainsimError
from trainsim.spec.framework import Framework
from trainsim.spec.job import Job
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.training import Training


def recompute_that_fits(job: Job, build: Callable[[Training], Job]) -> tuple[Job, str | None]:
    """An unstated recomputation: the framework's default (none) when the job fits in memory; else the lightest
    recomputation that fits (selective first where it saves memory — attention keeping s² scores, or the stack's
    op-level selective checkpointing, torchtitan's default — then Megatron's block recomputation of the fewest
    layers per model chunk, then full), since the run ran."""
    from trainsim.predictor import memory_report

    if memory_report(job).fits:
        return job, None
    selective_saves = job.attention_path != "flash" or job.framework.selective_recompute == "op"
    if selective_saves:
        candidate = build(job.training.replace(recompute_granularity="selective"))
        if memory_report(candidate).fits:
            return candidate, "recompute selective (unstated; without it the run would not fit in memory)"
    modules = _recompute_modules_that_fit(job, build)
    if modules is not None:
        return modules, (f"recompute modules {','.join(modules.training.recompute_modules)} (unstated; the "
                         "lightest Megatron-Core fine-grained recomputation with which the run fits in memory)")
    partial = _fewest_recomputed_layers(job, build)
    if partial is not None:
        return partial, (f"recompute full of {partial.training.recompute_num_layers} layers per model chunk "
                         "(unstated; the fewest with which the run fits in memory)")
    candidate = build(job.training.replace(recompute_granularity="full"))
    if memory_report(candidate).fits:
        return candidate, "recompute full (unstated; without it the run would not fit in memory)"
    return job, None


def _recompute_modules_that_fit(job: Job, build: Callable[[Training], Job]) -> Job | None:
    """Megatron-Core's fine-grained recomputation (``--recompute-granularity selective --recompute-modules``) of
    the modules trainsim models, cheapest first: the expert activation (``moe_act``, elementwise), the MLA
    up-projections (``mla_up_proj``, GEMMs), both; for mixture-of-experts or MLA models under a stack running
    Megatron's layers and checkpointing (its pipeline engine), whose MoE recipes use these before recomputing whole
    layers (Megatron-Bridge's DeepSeek-V3 and Qwen3 recipes). ``None`` when none of them fits."""
    from trainsim.predictor import memory_report

    m = job.model
    if job.framework.pipeline_engine != "megatron" or not (m.is_moe or m.multi_latent_attention):
        return None
    options = [("moe_act",)] if m.is_moe else []
    if m.multi_latent_attention:
        options += [("mla_up_proj",)] + ([("mla_up_proj", "moe_act")] if m.is_moe else [])
    for modules in options:
        candidate = build(job.training.replace(recompute_modules=modules))
        if memory_report(candidate).fits:
            return candidate
    return None


def _fewest_recomputed_layers(job: Job, build: Callable[[Training], Job]) -> Job | None:
    """Megatron's block recomputation (``--recompute-method block --recompute-num-layers N``: the first N layers of
    every model chunk recomputed in full) with the smallest N that fits, where the stack runs Megatron's
    checkpointing (its pipeline engine); ``None`` when no N short of every layer fits."""
    from trainsim.predictor import memory_report

    if job.framework.pipeline_engine != "megatron":
        return None
    most = max(job.virtual_stage_layers, default=0)

    def fits(n: int) -> Job | None:
        candidate = build(job.training.replace(recompute_granularity="full", recompute_num_layers=n))
        return candidate if memory_report(candidate).fits else None

    best = fits(most - 1) if most >= 2 else None
    lo, hi = 1, most - 1  # bisect for the smallest n that fits (memory falls as n grows); ``best`` fits with hi
    while best is not None and lo < hi:
        mid = (lo + hi) // 2
        found = fits(mid)
        if found is not None:
            best, hi = found, mid
        else:
            lo = mid + 1
    return best


def sharded_optimizer_if_needed(job: Job, build: Callable[[Training], Job]) -> tuple[Job, str | None]:
    """An unstated ZeRO stage: the profile's default when the job fits; else, where that default keeps the optimizer
    states replicated, the distributed optimizer (ZeRO-1: Megatron's ``--use-distributed-optimizer``, DeepSpeed
    stage 1) when the engine offers it for the plan — it costs no compute, so a run short of memory turns it on
    before recomputing. Kept when it helps even if the job still does not fit (recomputation comes next)."""
    from trainsim.predictor import memory_report

    fw, par = job.framework, job.parallelism
    allowed = fw.max_zero_stage_with_pp if par.pp > 1 else fw.max_zero_stage
    if (job.training.zero_stage or 0) >= 1 or allowed < 1 or job.dp < 2:
        return job, None
    before = memory_report(job)
    if before.fits:
        return job, None
    candidate = build(job.training.replace(zero_stage=1))
    after = memory_report(candidate)
    if after.peak_bytes >= before.peak_bytes:
        return job, None
    return candidate, "zero 1 (unstated; the distributed optimizer, without which the run would not fit in memory)"


def fitting_job(build: Callable[[Training], Job], training: Training, notes: list[str], free_recompute: bool,
                free_mbs: bool, free_zero: bool = False) -> tuple[Job, list[str]]:
    """The row's job with its unstated choices made so that it fits in memory (the run ran): the distributed
    optimizer (:func:`sharded_optimizer_if_needed`), the lightest recomputation (:func:`recompute_that_fits`) and,
    for the stacks that run the local batch at once, the largest micro-batch that divides it (halving from the
    local batch); a run that still does not fit with an unstated stage gets the stack's fully sharded engine
    (ZeRO-3) when the stack offers it."""
    from trainsim.predictor import memory_report

    def settle(tr: Training) -> tuple[Job, str | None, str | None]:
        """(job, why recomputation, why the distributed optimizer) for these settings."""
        job, why_zero = sharded_optimizer_if_needed(build(tr), build) if free_zero else (build(tr), None)
        job, why = recompute_that_fits(job, build) if free_recompute else (job, None)
        return job, why, why_zero

    job, why, why_zero = settle(training)
    mbs = training.micro_batch_size
    while free_mbs and mbs > 1 and not memory_report(job).fits:
        mbs = next(m for m in range(mbs // 2, 0, -1) if training.micro_batch_size % m == 0)
        job, why, why_zero = settle(training.replace(micro_batch_size=mbs))
    sharded = None
    if free_zero and not memory_report(job).fits and job.framework.max_zero_stage >= 3 and (
            job.parallelism.pp == 1 or job.framework.max_zero_stage_with_pp >= 3) and job.dp > 1:
        # still short of memory with the distributed optimizer: the stack's fully sharded engine (ZeRO-3,
        # Megatron-FSDP, FSDP), the last resort before calling a run that ran out of memory
        full, why3, _ = settle(training.replace(micro_batch_size=mbs, zero_stage=3))
        if memory_report(full).fits:
            job, why, why_zero = full, why3, None
            sharded = "zero 3 (unstated; the stack's fully sharded engine, without which the run would not fit)"
    if free_mbs and mbs != training.micro_batch_size:
        notes = [f"micro_batch {mbs} (unstated; the local batch of {training.micro_batch_size} would not fit)"
                 if n.startswith("micro_batch ") else n for n in notes]
    if why is not None:
        notes = [why if n.startswith("recompute ") else n for n in notes]
    if sharded is not None:
        notes = [n for n in notes if not n.startswith("zero ")] + [sharded]
    return job, notes + ([why_zero] if why_zero else [])


def sequence_parallel_that_fits(job: Job, tr_notes: list[str], par_notes: list[str],
                                fit_with: Callable[..., tuple[Job, list[str]]]) -> tuple[Job, list[str], list[str]]:
    """An unstated sequence parallelism with TP: the stack's default (off) unless the job does not fit in memory
    even with the other unstated choices made; then on (Megatron's ``--sequence-parallel``, which costs no extra
    communication: the run ran, so it fit), where the stack offers it and it makes the job fit."""
    from trainsim.predictor import memory_report

    if memory_report(job).fits:
        return job, tr_notes, par_notes
    try:
        sp_job, sp_notes = fit_with(job.parallelism.replace(sequence_parallel=True))
    except ValueError:  # TrainsimError included: the stack has no sequence parallelism for this plan
        return job, tr_notes, par_notes
    if not memory_report(sp_job).fits:
        return job, tr_notes, par_notes
    note = "sp True (unstated; without sequence parallelism the run would not fit in memory)"
    return sp_job, sp_notes, [n for n in par_notes if not n.startswith("sp ")] + [note]


def expert_parallel_that_fits(job: Job, notes: list[str],
                               fit_with: Callable[[Parallelism, bool], tuple[Job, list[str]]]
                               ) -> tuple[Job, list[str], list[str]]:
    """An unstated expert parallelism: Megatron's default (1) when the run fits (with the lightest recomputation
    that fits, if that is unstated too); else the smallest power-of-two expert-parallel size that divides the
    experts, is a valid layout and fits without recomputation, else with it (the run ran, so its experts were spread
    over enough GPUs). Returns the job, its training notes and the parallelism note."""
    from trainsim.predictor import memory_report

    if memory_report(job).fits:
        return job, notes, []
    experts = job.model.num_experts or 1
    sizes = [2**k for k in range(1, experts.bit_length()) if experts % 2**k == 0]
    for recompute in (False, True):
        for ep in sizes:
            try:
                candidate, cand_notes = fit_with(job.parallelism.replace(ep=ep), recompute)
            except TrainsimError:
                continue
            if memory_report(candidate).fits:
                return candidate, cand_notes, [f"ep {ep} (unstated; with ep 1 the run would not fit in memory)"]
    return job, notes, []


def offload_stage_that_fits(job: Job, notes: list[str], training: Training, framework: Framework,
                             fit_with: Callable[..., tuple[Job, list[str]]],
                             record: Callable[[Training], None]) -> tuple[Job, list[str], Training]:
    """An offloading run whose stage was implied (:func:`offload_settings`) and does not fit: ZeRO-3, then ZeRO-3
    with the parameters offloaded too where the stack can, the first that fits (``record`` keeps the stage)."""
    from trainsim.predictor import memory_report

    if memory_report(job).fits:
        return job, notes, training
    steps = [(3, training.param_cpu_offload)] + ([(3, True)] if framework.param_cpu_offload else [])
    for zero, params in steps:
        tr = training.replace(zero_stage=zero, param_cpu_offload=params)
        try:
            candidate, cand_notes = fit_with(job.parallelism, True, tr)
        except TrainsimError:
            continue
        if memory_report(candidate).fits:
            record(tr)
            what = "zero 3 with the parameters offloaded too" if params else "zero 3"
            return candidate, [*cand_notes, f"{what} (unstated; with ZeRO-{training.zero_stage} the offloading "
                                            "run would not fit)"], tr
    return job, notes, training


def offload_settings(stated: dict[str, Any], framework: Framework) -> bool:
    """Complete the offloading a row states for its stack (in place): a stack whose only CPU offload moves the
    parameters too (FSDP's ``CPUOffload(offload_params=True)``, FSDP2's ``CPUOffloadPolicy``) offloads them; an
    unstated ZeRO stage under a stack that would not shard becomes 3 with offloaded parameters, else 2 (ZeRO-Offload
    is built on ZeRO-2, Ren et al. 2021). Returns whether the stage was implied this way."""
    if not (stated.get("optimizer_offload") or stated.get("param_offload")):
        return False
    if framework.param_cpu_offload and not framework.optimizer_cpu_offload:
        stated["param_offload"] = True
    if "zero" in stated or framework.default_zero_stage >= 1:
        return False
    stated["zero"] = 3 if stated.get("param_offload") else 2
    return True
