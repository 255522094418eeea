"""The framework-profile tables of docs/model.md, rendered from the ``Framework`` class and the shipped presets (one
owner: the docs cannot drift from the profiles; ``python scripts/doc_tables.py model-profiles`` prints them and a
test checks the page)."""

from __future__ import annotations

from typing import Any

from trainsim.spec.framework import META_FIELDS, Framework, list_frameworks, load_framework

#: Extra words for a field's row of the field table, after its description.
FIELD_NOTES: dict[str, str] = {
    "pipeline_schedules": "virtual stages are offered when one of them runs several chunks per rank",
}


def _cell(value: Any, field: str) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "—"
    if value is None:
        return "None"
    if field == "host_dispatch_s":
        return f"{value * 1e6:g} µs"
    if "_bytes" in field:
        return f"{value / 1e9:g} GB"
    if isinstance(value, float) and value.is_integer() and field.endswith("_params"):
        return str(int(value))
    return str(value)


def stack_fields() -> list[str]:
    """Stack fields in declaration order (the profile's metadata left out)."""
    return [name for name in Framework.model_fields if name not in META_FIELDS]


def fields_table() -> str:
    """The field table: one row per stack field with its description."""
    lines = ["| field | meaning |", "|---|---|"]
    for name in stack_fields():
        text = Framework.model_fields[name].description or ""
        if name in FIELD_NOTES:
            text = f"{text}; {FIELD_NOTES[name]}"
        lines.append(f"| `{name}` | {text} |")
    return "\n".join(lines)


def profiles_table() -> str:
    """The shipped-profile table: one column per preset, one row per field (its version first)."""
    names = list_frameworks()
    profiles = [load_framework(n) for n in names]
    lines = ["| field | " + " | ".join(f"`{n}`" for n in names) + " |", "|---" * (len(names) + 1) + "|",
             "| `version` | " + " | ".join(p.version for p in profiles) + " |"]
    for name in stack_fields():
        lines.append(f"| `{name}` | " + " | ".join(_cell(getattr(p, name), name) for p in profiles) + " |")
    return "\n".join(lines)
