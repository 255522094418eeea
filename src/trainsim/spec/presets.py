"""Named presets for models and systems, stored as data files in ``trainsim/presets``."""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from trainsim.errors import TrainsimError, read_text
from trainsim.spec.model import Model
from trainsim.spec.system import System
from trainsim.spec.system_file import system_from_file_data

_PRESETS = resources.files("trainsim") / "presets"


def _names(kind: str, suffix: str) -> list[str]:
    return sorted(p.name[: -len(suffix)] for p in (_PRESETS / kind).iterdir() if p.name.endswith(suffix))


def list_models() -> list[str]:
    """Names of the model presets."""
    return _names("models", ".json")


def list_systems() -> list[str]:
    """Names of the system presets."""
    return _names("systems", ".yaml")


def _unknown(kind: str, name: str, names: list[str]) -> TrainsimError:
    close = difflib.get_close_matches(name.lower(), names, n=4, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"available: {', '.join(names)}"
    return TrainsimError(kind, f"unknown preset {name!r}", f"{hint} (or give a file path; see `trainsim presets`)")


@cache
def _model_preset(name: str) -> Model:
    data = json.loads((_PRESETS / "models" / f"{name}.json").read_text())
    return Model(**data)


def load_model(name_or_path: str | Path | Model) -> Model:
    """A model preset by name, or a file: a Hugging Face ``config.json`` or trainsim's own model JSON."""
    if isinstance(name_or_path, Model):
        return name_or_path
    text = str(name_or_path)
    if text.lower() in list_models():
        return _model_preset(text.lower())
    path = Path(text)
    if path.suffix == ".json" or path.is_dir() or path.exists():
        from trainsim.io.hf import load_hf_config, model_from_hf_config

        if path.is_dir():
            return load_hf_config(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise TrainsimError("model", f"file not found: {path}",
                                "give a preset name or a config.json path") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TrainsimError("model", f"cannot read {path} as JSON ({exc})", "check the file") from None
        if isinstance(data, dict) and "num_layers" in data and "model_type" not in data:
            return Model(**data)
        return model_from_hf_config(data, name=path.parent.name if path.name == "config.json" else path.stem)
    raise _unknown("model", text, list_models())


@cache
def _prices() -> dict[str, float]:
    return yaml.safe_load((_PRESETS / "prices.yaml").read_text())


def default_price(gpu_name: str) -> float | None:
    """Default price per GPU-hour (USD) from ``presets/prices.yaml``."""
    return _prices().get(gpu_name)


def _system_from_yaml_text(text: str, origin: str) -> System:
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        message = f"cannot parse {origin} as YAML ({exc})".replace("\n", " ")
        raise TrainsimError("system", message, "fix the file") from None
    if not isinstance(data, dict):
        raise TrainsimError("system", f"{origin} is not a mapping", "see docs/systems.md for the format")
    if "price_per_gpu_hour" not in data and isinstance(data.get("gpu"), dict):
        price = default_price(str(data["gpu"].get("name", "")))
        if price is not None:
            data = {**data, "price_per_gpu_hour": price}
    return system_from_file_data(data, origin=origin)


@cache
def _system_preset(name: str) -> System:
    return _system_from_yaml_text((_PRESETS / "systems" / f"{name}.yaml").read_text(), f"preset {name}")


def load_system(name_or_path: str | Path | System) -> System:
    """A system preset by name, or a YAML file in the same format."""
    if isinstance(name_or_path, System):
        return name_or_path
    text = str(name_or_path)
    if text.lower() in list_systems():
        return _system_preset(text.lower())
    path = Path(text)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        content = read_text(path, "system", "give a preset name or a YAML path")
        return _system_from_yaml_text(content, str(path))
    raise _unknown("system", text, list_systems())
