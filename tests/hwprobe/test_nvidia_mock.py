"""hwprobe on NVIDIA's own mock machines: go-nvml v0.13.4-1, pkg/nvml/mock/dgx{a100,h100,h200,b200}.

The bridge answers every NVML call from go-nvml's mock server (profiles ``dgx*.yaml`` say
``nvidia-mock: <name>``). That mock describes the GPUs (name, memory, architecture, compute
capability, MIG mode, PCI device) but implements no NVLink, topology, P2P, CPU affinity, NUMA or
fabric call, so those answer NotSupported. These tests pin the honest result: hwprobe reports
what NVML said, degrades the rest with reasons, and verify names what it cannot confirm.
"""

import json
import re

import jsonschema
import pytest

from ckpt_preempt.hwprobe.report import json_schema
from e2e.harness.mock_nvml import PROFILES

pytestmark = pytest.mark.mocknvml

MOCKS = [
    # profile, spec, name, architecture, compute capability, MiB, driver, links per GPU in spec
    pytest.param("dgxa100", "dgx-a100-8", "Mock NVIDIA A100-SXM4-40GB", "Ampere", "8.0", 40960,
                 "550.54.15", 12, id="dgxa100"),
    pytest.param("dgxh100", "hgx-h100-8", "NVIDIA H100 80GB HBM3", "Hopper", "9.0", 81920,
                 "550.54.15", 18, id="dgxh100"),
    pytest.param("dgxh200", "hgx-h200-8", "NVIDIA H200 141GB HBM3e", "Hopper", "9.0", 144384,
                 "550.54.15", 18, id="dgxh200"),
    pytest.param("dgxb200", "hgx-b200-8", "NVIDIA B200 180GB HBM3e", "Blackwell", "10.0", 184320,
                 "560.28.03", 18, id="dgxb200"),
]
UNSUPPORTED = {"nvlink", "cpu_affinity", "gpu_numa_id", "fabric"}  # not in go-nvml's mock
NOT_SUPPORTED_28 = "NotSupported (28 of 28 pairs)"


@pytest.mark.parametrize(
    ("profile", "spec", "name", "arch", "cc", "mib", "driver", "links"), MOCKS)
def test_report_is_what_nvidias_mock_says(mocknvml, profile, spec, name, arch, cc, mib, driver,
                                          links):
    doc = mocknvml.report(profile, "--expect", spec)
    jsonschema.validate(doc, json_schema())
    assert doc["gpu_count"] == 8 and doc["gpu_name"] == name
    assert doc["driver_version"] == driver
    uuids = set()
    for i, gpu in enumerate(doc["gpus"]):
        assert (gpu["name"], gpu["architecture"], gpu["compute_capability"],
                gpu["memory_mib"], gpu["mig_mode"]) == (name, arch, cc, mib, "disabled")
        assert gpu["bus_id"] == f"00000000:{i:02X}:00.0"  # the mock Device's PciBusID
        assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", gpu["uuid"])
        uuids.add(gpu["uuid"])
        # What go-nvml's mock does not implement degrades per field, with NVML's reason.
        assert gpu["links"] == [] and gpu["active_links"] == 0 and gpu["fabric"] is None
        assert gpu["cpu_affinity"] is None and gpu["gpu_numa_id"] is None
        assert {k: gpu["unavailable"][k] for k in UNSUPPORTED} == dict.fromkeys(
            UNSUPPORTED, "NotSupported")
    assert len(uuids) == 8
    assert doc["unavailable"] == {"pcie_level": NOT_SUPPORTED_28, "p2p": NOT_SUPPORTED_28}
    assert len(doc["pairs"]) == 28
    for pair in doc["pairs"]:
        assert (pair["level"], pair["pcie"], pair["nvlinks"], pair["expected_gbps"]) == (
            "N/A", None, 0, None)
        assert set(pair["p2p"].values()) == {"unknown: NotSupported"}
    # So the planner sees eight GPUs without NVLink peers, and the spec is not confirmed.
    assert doc["matrix"][0] == "X " + " ".join(["N/A"] * 7)
    assert doc["nvlink_domains"] == [[i] for i in range(8)]
    assert doc["nvswitch"] is False and doc["clique"] is None and doc["max_domain_size"] == 1
    assert doc["verified"] is False


@pytest.mark.parametrize(
    ("profile", "spec", "name", "arch", "cc", "mib", "driver", "links"), MOCKS)
def test_verify_names_what_it_cannot_confirm(mocknvml, profile, spec, name, arch, cc, mib,
                                             driver, links):
    done = mocknvml.run(profile, "verify", "--expect", spec)
    assert done.returncode == 1, done.stdout + done.stderr
    findings = [line.removeprefix("  - ") for line in done.stdout.splitlines()[1:]]
    assert findings == [
        "NVSwitch not detected (NVLink unreadable on 8 of 8 GPUs: NotSupported)",
        *[f"GPU{i} NVLink unreadable (NotSupported): cannot confirm {links} active links"
          for i in range(8)],
        "NVLink domains {0} {1} {2} {3} {4} {5} {6} {7} expected {0,1,2,3,4,5,6,7}",
    ]  # and nothing about the GPU name, count or error counters: those it could check


@pytest.mark.parametrize(
    ("profile", "spec", "name", "arch", "cc", "mib", "driver", "links"), MOCKS)
def test_show_says_why_the_matrix_is_empty(mocknvml, profile, spec, name, arch, cc, mib, driver,
                                           links):
    out = mocknvml.run(profile, "show").stdout
    assert "GPU0  X     N/A   N/A" in out
    assert f"8 × {name}   driver {driver}" in out
    assert "NVLink: no NVLink peers (link state NotSupported on GPU 0,1,2,3,4,5,6,7)" in out
    assert f"PCIe: common ancestor unreadable: {NOT_SUPPORTED_28}; N/A in the matrix" in out
    assert f"P2P: status unreadable: {NOT_SUPPORTED_28}" in out


def test_what_the_mock_does_report_verifies(mocknvml, tmp_path):
    spec = tmp_path / "dgx-h100-inventory.yaml"
    spec.write_text("gpu_count: 8\ngpu_name: H100\n")
    done = mocknvml.run("dgxh100", "verify", "--expect", str(spec))
    assert (done.returncode, done.stdout.strip()) == (0, "OK: matches dgx-h100-inventory")
    wrong = mocknvml.run("dgxh200", "verify", "--expect", "dgx-a100-8")
    assert "  - all GPUs are 'NVIDIA H200 141GB HBM3e', expected A100" in wrong.stdout


# Faults that wrap what NVIDIA's mock answers (handles, counts, any call made NotSupported).
FAULTS = [
    pytest.param({"gpu_lost": [2]}, ["GPU2 unreadable: GpuIsLost"], id="GPU lost"),
    pytest.param({"hidden_gpus": 1}, ["expected 8 GPUs, found 7"], id="GPU missing from the bus"),
    pytest.param({"unsupported": ["nvmlDeviceGetName"]},
                 ["all GPUs are 'unknown', expected H100"], id="name unsupported"),
]


@pytest.mark.parametrize(("faults", "expected"), FAULTS)
def test_faults_wrap_nvidias_mock(mocknvml, faults, expected):
    done = mocknvml.run("dgxh100", "verify", "--expect", "hgx-h100-8", faults=faults)
    assert done.returncode == 1, done.stdout + done.stderr
    for line in expected:
        assert f"  - {line}" in done.stdout, (line, done.stdout)


def test_faults_in_the_profile_degrade_per_field(mocknvml, tmp_path):
    profile = tmp_path / "dgxb200-faulty.yaml"
    profile.write_text((PROFILES / "dgxb200.yaml").read_text() + (
        "faults:\n  unsupported: [nvmlDeviceGetMemoryInfo, nvmlDeviceGetCudaComputeCapability]\n"))
    doc = mocknvml.report(profile)
    gpu = doc["gpus"][3]
    assert gpu["memory_mib"] is None and gpu["unavailable"]["memory_mib"] == "NotSupported"
    assert gpu["compute_capability"] is None
    assert gpu["unavailable"]["compute_capability"] == "NotSupported"
    assert gpu["name"] == "NVIDIA B200 180GB HBM3e"  # the rest still comes from the mock


@pytest.mark.parametrize(("faults", "message"), [
    pytest.param({"nvlink_down": [{"gpu": 3, "link": 7}]},
                 "fault nvlink_down GPU3 link 7: go-nvml's dgxh100 mock answers "
                 "nvmlDeviceGetNvLinkState with Not Supported, nothing to inject into",
                 id="NVLink down"),
    pytest.param({"nvlink_errors": [{"gpu": 1, "link": 4, "counter": 2, "value": 17}]},
                 "fault nvlink_errors GPU1 link 4: go-nvml's dgxh100 mock answers "
                 "nvmlDeviceGetNvLinkErrorCounter with Not Supported", id="error counter"),
    pytest.param({"p2p_disabled": [[2, 6]]}, "fault p2p_disabled GPU2-GPU6", id="P2P disabled"),
    pytest.param({"fabric": [{"gpu": 1, "state": 2, "status": 0}]}, "fault fabric GPU1",
                 id="fabric"),
])
def test_link_faults_need_links_to_act_on(mocknvml, faults, message):
    """go-nvml's mock has no NVLink, P2P or fabric: such a fault is refused, never a silent pass."""
    done = mocknvml.run("dgxh100", "verify", "--expect", "hgx-h100-8", faults=faults)
    assert done.returncode == 2
    assert message in done.stderr
    assert "hwprobe: NVML unavailable: Unknown" in done.stderr


def test_unknown_nvidia_mock_is_refused(mocknvml, tmp_path):
    profile = tmp_path / "dgx-typo.yaml"
    profile.write_text("nvidia-mock: dgxh300\n")
    done = mocknvml.run(profile, "show")
    assert done.returncode == 2
    assert 'nvidia-mock "dgxh300": go-nvml ships dgxa100, dgxb200, dgxh100, dgxh200' in done.stderr


def test_annotation_on_nvidias_mock(mocknvml):
    out = mocknvml.run("dgxa100", "report", "--compact", "--expect", "dgx-a100-8").stdout
    value = json.loads(out)
    assert (value["gpu_count"], value["verified"], value["nvlink_domains"]) == (
        8, False, [[i] for i in range(8)])
    from ckpt_preempt.policies.model import topology
    parsed = topology.parse_node_topology(out)
    assert parsed.gpu_count == 8 and parsed.verified is False
    assert sorted(map(sorted, parsed.domains)) == [[i] for i in range(8)]
