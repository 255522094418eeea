"""trainsim: predict and explain the performance of distributed LLM training."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# Public API, imported lazily so that ``import trainsim`` (and the CLI) start fast.
_LAZY: dict[str, str] = {
    "TrainsimError": "trainsim.errors",
    "Model": "trainsim.spec.model",
    "System": "trainsim.spec.system",
    "Parallelism": "trainsim.spec.parallelism",
    "Training": "trainsim.spec.training",
    "Job": "trainsim.spec.job",
    "load_model": "trainsim.spec.presets",
    "load_system": "trainsim.spec.presets",
    "load_hf_config": "trainsim.io.hf",
    "predict": "trainsim.api",
    "Prediction": "trainsim.predictor",
    "search": "trainsim.search",
    "SearchSpace": "trainsim.search",
    "SearchResult": "trainsim.search",
    "plan": "trainsim.plan",
    "PlanResult": "trainsim.plan",
    "analyze_trace": "trainsim.whatif",
    "WhatIf": "trainsim.whatif",
    "WhatIfResult": "trainsim.whatif",
    "plot_search": "trainsim.search.plot",
    "plot_worker_heatmap": "trainsim.whatif.heatmap",
    "Predictor": "trainsim.service",
    "Metrics": "trainsim.service",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __dir__() -> list[str]:
    """The public API (what ``dir(trainsim)`` and tab completion show)."""
    return list(__all__)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        value = module if module.__name__ == f"trainsim.{name}" else getattr(module, name)  # search, plan: callable
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trainsim' has no attribute {name!r}")
