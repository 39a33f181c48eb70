"""The mock stays faithful to real hardware: a profile read from a real machine gives, on the
mock libnvidia-ml.so.1, the report hwprobe gave on that machine, field by field.

``h200-vm`` reproduces the one-GPU H200 VM read on an H200 runner on 2026-12-04
(``e2e/gpu/results/h200-runner-20261204/gpu-suite.json``, the ``report`` hwprobe wrote from
real NVML with ``--expect single-gpu``). Fields left out, and why:

- ``uuid``: the mock makes UUIDs from the profile's prefix and the GPU index; a real UUID is
  random per board.
- ``hostname``: the name of whatever machine runs the probe, not something NVML answers.
"""

import json

import pytest

from e2e.harness.mock_nvml import REPO

pytestmark = pytest.mark.mocknvml

REAL = REPO / "e2e" / "gpu" / "results" / "h200-runner-20261204" / "gpu-suite.json"
NOT_FROM_NVML = {"hostname"}  # the probing machine's name
PER_BOARD = {"uuid"}  # the mock's synthetic UUID against the board's random one


def _fields(doc, path=""):
    """Every leaf of a report as (dotted path, value); lists by index."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _fields(value, f"{path}.{key}" if path else key)
    elif isinstance(doc, list) and doc:
        for i, value in enumerate(doc):
            yield from _fields(value, f"{path}[{i}]")
    else:
        yield path, doc


def _comparable(doc: dict) -> dict[str, object]:
    def kept(path: str) -> bool:
        last = path.rsplit(".", 1)[-1]
        return last not in NOT_FROM_NVML | PER_BOARD
    return {path: value for path, value in _fields(doc) if kept(path)}


def _real_report() -> dict:
    return json.loads(REAL.read_text())["report"]


def _differences(profile: str, mocknvml) -> dict[str, tuple[object, object]]:
    real = _comparable(_real_report())
    mock = _comparable(mocknvml.report(profile, "--expect", _real_report()["spec"]))
    return {path: (mock.get(path, "<absent>"), real.get(path, "<absent>"))
            for path in sorted(real.keys() | mock.keys()) if mock.get(path) != real.get(path)}


def test_h200_vm_profile_reports_what_the_real_h200_vm_reported(mocknvml):
    assert _differences("h200-vm", mocknvml) == {}


def test_the_comparison_covers_the_fields_that_matter():
    fields = _comparable(_real_report())
    for path in ("driver_version", "gpus[0].memory_mib", "gpus[0].compute_capability",
                 "gpus[0].cpu_affinity", "gpus[0].numa_node", "gpus[0].fabric.state",
                 "gpus[0].fabric.status", "gpus[0].unavailable.nvlink", "gpus[0].links",
                 "gpus[0].bus_id", "gpus[0].name", "matrix[0]", "verified"):
        assert path in fields, path
    assert not any(p.endswith((".uuid", "hostname")) for p in fields)


def test_h200_single_is_another_vm_type_not_this_one(mocknvml):
    """The older profile (18 links present, inactive) is kept for the VM type that shows them;
    the comparison tells it apart from the machine that was read."""
    diff = _differences("h200-single", mocknvml)
    assert "gpus[0].unavailable.nvlink" in diff
    assert "driver_version" in diff
