"""What-if straggler analysis of training traces (``trainsim whatif``).

Implements "Understanding Stragglers in Large Model Training Using What-if Analysis" (OSDI'25): rebuild the
dependency model of a traced job, re-simulate it with every operation at its idealized duration, and compare.
The main entry points are :func:`analyze_trace` (the CLI's analysis) and :class:`WhatIf` (custom what-if
experiments).
"""

from __future__ import annotations

from trainsim.whatif.analysis import analyze, analyze_trace
from trainsim.whatif.idealize import IdealizeConfig
from trainsim.whatif.model import DependencyModel, build_dependency_model
from trainsim.whatif.result import JSON_KEYS, WhatIfResult
from trainsim.whatif.session import CustomResult, WhatIf, parse_steps, pp_comm_free, stage_like_others
from trainsim.whatif.synthetic import TraceOpTimes, synthetic_trace
from trainsim.whatif.verdict import VERDICTS, VerdictRule

__all__ = [
    "JSON_KEYS",
    "VERDICTS",
    "CustomResult",
    "DependencyModel",
    "IdealizeConfig",
    "TraceOpTimes",
    "VerdictRule",
    "WhatIf",
    "WhatIfResult",
    "analyze",
    "analyze_trace",
    "build_dependency_model",
    "parse_steps",
    "pp_comm_free",
    "stage_like_others",
    "synthetic_trace",
]
