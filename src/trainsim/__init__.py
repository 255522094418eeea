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
    "predict": "trainsim.predictor",
    "Prediction": "trainsim.predictor",
    "analyze_trace": "trainsim.whatif",
    "Predictor": "trainsim.service",
    "Metrics": "trainsim.service",
}

__all__ = ["__version__", *sorted(_LAZY)]

def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trainsim' has no attribute {name!r}")
