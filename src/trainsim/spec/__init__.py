"""Job specification: model, system, parallelism, training, and the job that ties them together."""

from trainsim.spec.framework import Framework, list_frameworks, load_framework
from trainsim.spec.job import Job
from trainsim.spec.model import Model
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.presets import list_models, list_systems, load_model, load_system
from trainsim.spec.system import GPU, Network, Node, PeakFlops, System
from trainsim.spec.training import Training

__all__ = [
    "GPU",
    "Framework",
    "Job",
    "Model",
    "Network",
    "Node",
    "Parallelism",
    "PeakFlops",
    "System",
    "Training",
    "list_frameworks",
    "list_models",
    "list_systems",
    "load_framework",
    "load_model",
    "load_system",
]
