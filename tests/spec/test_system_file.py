"""The system YAML is a strict schema with consistent unit suffixes (issue 15, item 5)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import yaml

from cli_helpers import check_one_line_error, run
from trainsim.errors import TrainsimError, TrainsimWarning
from trainsim.spec.presets import list_systems, load_system
from trainsim.spec.system_file import (
    DEPRECATED_KEYS,
    GPUFile,
    HostFile,
    NetworkFile,
    NodeFile,
    PeakTflops,
    SystemFile,
)

GOOD = """
name: mine
gpu: {name: X, generation: hopper, peak_tflops: {fp32: 60, tf32: 400, fp16: 800, bf16: 800},
      vector_tflops: 60, hbm_bandwidth_tb_s: 3, hbm_capacity_gb: 96, num_sms: 100}
node: {gpus_per_node: 4, nvlink_bandwidth_gb_s: 200}
network: {nics_per_node: 4, nic_bandwidth_gbit_s: 100}
"""


def _write(tmp_path: Path, text: str) -> str:
    f = tmp_path / "sys.yaml"
    f.write_text(text)
    return str(f)


def test_units_follow_the_suffix(tmp_path):
    s = load_system(_write(tmp_path, GOOD))
    assert s.node.nvlink_bandwidth == pytest.approx(200e9)  # GB/s: bytes
    assert s.network.nic_bandwidth == pytest.approx(100e9 / 8)  # Gb/s: bits
    assert s.gpu.hbm_bandwidth == pytest.approx(3e12)


@pytest.mark.parametrize("old,new", [(old, new) for sec in DEPRECATED_KEYS.values() for old, new in sec.items()])
def test_old_names_are_deprecated_aliases(tmp_path, old, new):
    new_system = load_system(_write(tmp_path, GOOD))
    with pytest.warns(TrainsimWarning, match=f"{old}.*deprecated.*{new}"):
        old_system = load_system(_write(tmp_path, GOOD.replace(new, old)))
    assert old_system == new_system
    both = GOOD.replace(f"{new}:", f"{old}: 1, {new}:")
    with pytest.raises(TrainsimError, match="together"):
        load_system(_write(tmp_path, both))


@pytest.mark.parametrize("typo,field", [
    ("nvlink_bandwith_gb_s: 1, ", "system.node.nvlink_bandwith_gb_s"),
    ("latency_ms: 1, ", "system.network.latency_ms"),
])
def test_unknown_keys_are_errors(tmp_path, typo, field):
    section = "node: {" if "nvlink" in typo else "network: {"
    with pytest.raises(TrainsimError) as exc:
        load_system(_write(tmp_path, GOOD.replace(section, section + typo)))
    assert exc.value.field == field and "unknown field" in str(exc.value)


def test_unknown_top_level_key_is_an_error(tmp_path):
    with pytest.raises(TrainsimError, match=r"system\.price_per_gpu: unknown field"):
        load_system(_write(tmp_path, GOOD + "price_per_gpu: 3\n"))


def test_unknown_generation_is_an_error(tmp_path):
    with pytest.raises(TrainsimError, match=r"system\.gpu\.generation: unknown GPU generation.*ampere, hopper"):
        load_system(_write(tmp_path, GOOD.replace("hopper", "hoper")))


def test_missing_generation_is_an_error(tmp_path):
    with pytest.raises(TrainsimError, match=r"system\.gpu\.generation: is required"):
        load_system(_write(tmp_path, GOOD.replace("generation: hopper, ", "")))


def test_cli_reports_a_bad_system_file_on_one_line(tmp_path, capsys):
    path = _write(tmp_path, GOOD.replace("nvlink_bandwidth_gb_s: 200", "nvlink_bandwidth_gb_s: -1"))
    code, _, err = run(["predict", "-m", "gpt3-1.7b", "-n", "4", "--gbs", "8", "--system", path], capsys)
    check_one_line_error(code, err, "system.node.nvlink_bandwidth_gb_s")


@pytest.mark.parametrize("name", list_systems())
def test_presets_use_the_current_names(name):
    from importlib import resources

    text = (resources.files("trainsim") / "presets" / "systems" / f"{name}.yaml").read_text()
    data = yaml.safe_load(text)
    assert set(data) <= set(SystemFile.model_fields), name  # no deprecated or unknown top-level key
    SystemFile(**data)  # strict: no deprecated or unknown key below either
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainsimWarning)
        load_system(name)


def test_every_field_is_documented():
    doc = (Path(__file__).parents[2] / "docs" / "systems.md").read_text()
    for section, cls in (("", SystemFile), ("gpu.", GPUFile), ("gpu.peak_tflops.", PeakTflops),
                         ("node.", NodeFile), ("network.", NetworkFile), ("host.", HostFile)):
        for name in cls.model_fields:
            if name in ("gpu", "node", "network", "host", "peak_tflops"):
                continue
            assert re.search(rf"`{re.escape(section + name)}`", doc), f"{section}{name} is not in docs/systems.md"
    for renames in DEPRECATED_KEYS.values():
        for old in renames:
            assert old in doc


def test_host_section_is_optional_and_in_si_units(tmp_path):
    assert load_system(_write(tmp_path, GOOD)).host is None
    s = load_system(_write(tmp_path, GOOD + "host: {link_bandwidth_gb_s: 63, memory_bandwidth_gb_s: 76.8}\n"))
    assert s.host is not None and s.host.link_bandwidth == pytest.approx(63e9)
    assert s.host.memory_bandwidth == pytest.approx(76.8e9)
    typo = "host: {link_bandwidth_gb_s: 63, memory_bandwidth_gb_s: 1, pcie_gb_s: 1}\n"
    with pytest.raises(TrainsimError, match=r"system\.host\.pcie_gb_s: unknown field"):
        load_system(_write(tmp_path, GOOD + typo))
