"""The NVML edge on the mock libnvidia-ml.so.1, through the real pynvml and the real CLI."""

import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from e2e.harness.mock_nvml import REPO

CLI = "ckpt_preempt.hwprobe.cli"
pytestmark = pytest.mark.mocknvml

def nv_everywhere(n, level):
    return [" ".join("X" if a == b else level for b in range(n)) for a in range(n)]


L40S_ROWS = [  # NVML's PCI bus order 17,18,31,32 (socket 0), B1,B2,CA,CB (socket 1)
    "X NODE NODE NODE SYS SYS SYS SYS", "NODE X NODE NODE SYS SYS SYS SYS",
    "NODE NODE X NODE SYS SYS SYS SYS", "NODE NODE NODE X SYS SYS SYS SYS",
    "SYS SYS SYS SYS X NODE NODE NODE", "SYS SYS SYS SYS NODE X NODE NODE",
    "SYS SYS SYS SYS NODE NODE X NODE", "SYS SYS SYS SYS NODE NODE NODE X",
]

PROFILES = [
    # profile, spec, verified, matrix, domains, nvswitch, clique
    pytest.param("h100", "hgx-h100-8", True, nv_everywhere(8, "NV18"), [list(range(8))], True,
                 None, id="h100"),
    pytest.param("a100", "dgx-a100-8", True, nv_everywhere(8, "NV12"), [list(range(8))], True,
                 None, id="a100"),
    pytest.param("b200", "hgx-b200-8", True, nv_everywhere(8, "NV18"), [list(range(8))], True,
                 None, id="b200"),
    pytest.param("gb200", "gb200-tray", True, nv_everywhere(4, "NV18"), [[0, 1, 2, 3]], True,
                 "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.4", id="gb200"),
    pytest.param("gb300", "gb200-tray", True, nv_everywhere(4, "NV18"), [[0, 1, 2, 3]], True,
                 "7b4e2d3f-0e5c-4f32-9b88-2c3d4e5f6071.7", id="gb300"),
    pytest.param("l40s", "l40s-pcie", True, L40S_ROWS, [[i] for i in range(8)], False, None,
                 id="l40s"),
    pytest.param("t4", "l40s-pcie", False,
                 ["X PIX PXB PHB", "PIX X PXB PHB", "PXB PXB X PHB", "PHB PHB PHB X"],
                 [[0], [1], [2], [3]], False, None, id="t4"),
    pytest.param("h100-nvl", "h100-nvl", True,
                 ["X NV12 SYS SYS", "NV12 X SYS SYS", "SYS SYS X NV12", "SYS SYS NV12 X"],
                 [[0, 1], [2, 3]], False, None, id="h100-nvl"),
    pytest.param("h200-single", "single-gpu", True, ["X"], [[0]], False, None, id="h200-single"),
]


@pytest.mark.parametrize(
    ("profile", "spec", "verified", "rows", "domains", "nvswitch", "clique"), PROFILES)
def test_profile(mocknvml, profile, spec, verified, rows, domains, nvswitch, clique):
    doc = mocknvml.report(profile, "--expect", spec)
    assert doc["schema"] == "hwprobe/v1"
    assert doc["matrix"] == rows
    assert doc["nvlink_domains"] == domains
    assert doc["nvswitch"] is nvswitch
    assert doc["clique"] == clique
    assert doc["verified"] is verified, doc["findings"]
    assert all(g["uuid"] and g["bus_id"] and g["compute_capability"] for g in doc["gpus"])
    verify = mocknvml.run(profile, "verify", "--expect", spec)
    assert verify.returncode == (0 if verified else 1), verify.stdout


def test_h100_show(mocknvml):
    out = mocknvml.run("h100", "show").stdout
    assert "GPU0  X     NV18  NV18  NV18  NV18  NV18  NV18  NV18  0-55" in out
    assert "NVLink: NVSwitch; 1 domain(s)" in out
    assert "GPUs 0,1,2,3,4,5,6,7: NV18, ~450.0 GB/s per pair per direction" in out


def test_l40s_show_has_no_nvlink(mocknvml):
    out = mocknvml.run("l40s", "show").stdout
    assert "NV" not in out.split("Legend:")[0]
    assert "NVLink: no NVLink peers" in out


def test_gb200_show_has_the_clique(mocknvml):
    out = mocknvml.run("gb200", "show").stdout
    assert "Fabric: clique 6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.4" in out
    assert "GPU0  X     NV18  NV18  NV18  0-71          0              2" in out


def test_h100_details(mocknvml):
    doc = mocknvml.report("h100")
    gpu = doc["gpus"][0]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["architecture"] == "Hopper" and gpu["compute_capability"] == "9.0"
    assert gpu["active_links"] == 18
    assert {link["remote_type"] for link in gpu["links"]} == {"SWITCH"}
    assert {link["version"] for link in gpu["links"]} == {"4.0"}  # enum 6, not "6"
    assert gpu["unavailable"]["gpu_numa_id"] == "NotSupported"
    pair = doc["pairs"][0]
    assert pair["p2p"] == {"read": "OK", "write": "OK", "nvlink": "OK", "atomics": "OK",
                           "pci": "OK"}
    assert pair["expected_gbps"] == 450.0


def test_single_gpu_vm_degrades_without_errors(mocknvml):
    doc = mocknvml.report("h200-single")
    gpu = doc["gpus"][0]
    assert gpu["active_links"] == 0 and len(gpu["links"]) == 18
    assert gpu["fabric"] is None and gpu["unavailable"]["fabric"] == "NotSupported"
    assert "NVLink: no NVLink peers (links present, none active)" in mocknvml.run(
        "h200-single", "show").stdout


# Each fault the mock can inject, and the finding verify must print for it.
FAULTS = [
    pytest.param("h100", "hgx-h100-8", {"nvlink_down": [{"gpu": 3, "link": 7}]},
                 ["GPU3 link 7 inactive", "GPU0↔GPU3 NV17 expected NV18"], id="NVLink down"),
    pytest.param("h100", "hgx-h100-8",
                 {"nvlink_errors": [{"gpu": 1, "link": 4, "counter": 2, "value": 17}]},
                 ["CRC errors on GPU1 link 4: 17 (max 0)"], id="CRC error counter"),
    pytest.param("a100", "dgx-a100-8",
                 {"nvlink_errors": [{"gpu": 5, "link": 0, "counter": 0, "value": 3}]},
                 ["replay errors on GPU5 link 0: 3 (max 0)"], id="replay error counter"),
    pytest.param("h100", "hgx-h100-8", {"p2p_disabled": [[2, 6]]},
                 ["GPU2↔GPU6 P2P over NVLink DISABLED_BY_REGKEY"], id="P2P disabled"),
    pytest.param("h100", "hgx-h100-8", {"gpu_lost": [2]},
                 ["GPU2 unreadable: GpuIsLost"], id="GPU lost"),
    pytest.param("h100", "hgx-h100-8", {"hidden_gpus": 1},
                 ["expected 8 GPUs, found 7"], id="GPU missing from the bus"),
    pytest.param("gb200", "gb200-tray", {"fabric": [{"gpu": 1, "state": 2, "status": 0}]},
                 ["GPU1 not attached to the NVLink fabric (state IN_PROGRESS"],
                 id="fabric not attached"),
    pytest.param("gb200", "gb200-tray", {"unsupported": ["nvmlDeviceGetGpuFabricInfoV"]},
                 ["GPU0 fabric info unavailable (NotSupported)"], id="fabric info unsupported"),
    pytest.param("h100-nvl", "h100-nvl",
                 {"nvlink_down": [{"gpu": 0, "link": n} for n in range(12)]},
                 ["GPU0: 0 of 12 NVLinks active", "NVLink domain sizes [1, 2] expected 2"],
                 id="NVL bridge failed"),
]


@pytest.mark.parametrize(("profile", "spec", "faults", "expected"), FAULTS)
def test_verify_catches_injected_fault(mocknvml, profile, spec, faults, expected):
    done = mocknvml.run(profile, "verify", "--expect", spec, faults=faults)
    assert done.returncode == 1, done.stdout + done.stderr
    for line in expected:
        assert f"  - {line}" in done.stdout, (line, done.stdout)


def test_verify_catches_rising_counters(mocknvml):
    faults = {"nvlink_errors": [{"gpu": 1, "link": 4, "counter": 2, "value": 0, "step": 5}]}
    done = mocknvml.run("h100", "verify", "--expect", "hgx-h100-8", "--samples", "2",
                        "--interval", "0", faults=faults)
    assert done.returncode == 1
    assert "  - CRC errors rising on GPU1 link 4 (0 -> 5)" in done.stdout


def test_unsupported_fields_degrade_per_field(mocknvml):
    faults = {"unsupported": ["nvmlDeviceGetCpuAffinity", "nvmlDeviceGetNvLinkVersion"]}
    doc = mocknvml.report("h100", faults=faults)
    gpu = doc["gpus"][0]
    assert gpu["cpu_affinity"] is None and gpu["unavailable"]["cpu_affinity"] == "NotSupported"
    assert gpu["links"][0]["version"] is None
    assert doc["matrix"][0].startswith("X NV18")  # speed still gives the bandwidth
    assert doc["pairs"][0]["expected_gbps"] == 450.0


def test_serve_exports_metrics(mocknvml):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = mocknvml.env("h100", faults={"nvlink_down": [{"gpu": 3, "link": 7}]})
    proc = subprocess.Popen(
        [sys.executable, "-m", CLI, "serve", "--no-publish", "--expect", "hgx-h100-8",
         "--interval", "0.2", "--metrics-port", str(port), "--metrics-address", "127.0.0.1"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        body = ""
        deadline = time.monotonic() + 20
        # Two probes counted means the first round was observed and its findings logged.
        while time.monotonic() < deadline and not re.search(
                r"^hwprobe_probe_seconds_count ([2-9]|\d\d)", body, re.M):
            time.sleep(0.2)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
            except OSError:
                continue
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "hwprobe_gpus 8.0" in body
    assert 'hwprobe_nvlink_active_links{gpu="3"} 17.0' in body
    assert "hwprobe_verified 0.0" in body
    assert "GPU3 link 7 inactive" in err


def test_mig_instances_are_listed(mocknvml):
    doc = mocknvml.report("a100-mig", "--expect", "dgx-a100-8")
    gpu = doc["gpus"][5]
    assert gpu["mig_mode"] == "enabled"
    assert gpu["mig_devices"] == [f"MIG-a100a1a0-0005-00000000000{i}" for i in range(3)]
    assert doc["verified"] is True  # MIG does not change the NVLink topology
    assert "GPU5: MIG enabled, 3 instance(s)" in mocknvml.run("a100-mig", "show").stdout


@pytest.mark.parametrize(("profile", "spec"), [("h100", "hgx-h100-8"), ("h100-nvl", "h100-nvl")])
def test_remote_type_unsupported_still_verifies(mocknvml, profile, spec):
    """Older drivers and VMs: no remote device type; switches and bridges are told apart by bus."""
    doc = mocknvml.report(profile, "--expect", spec,
                          faults={"unsupported": ["nvmlDeviceGetNvLinkRemoteDeviceType"]})
    assert doc["verified"] is True, doc["findings"]
    assert doc["gpus"][0]["unavailable"]["nvlink[0].remote_type"] == "NotSupported"


OWN_PROFILES = ["h100", "a100", "a100-mig", "b200", "gb200", "gb300", "l40s", "t4", "h100-nvl",
                "h200-single"]


@pytest.mark.parametrize("profile", OWN_PROFILES)
def test_profile_order_and_numa_come_from_nvml(mocknvml, profile):
    """GPU index order is NVML's PCI bus order, and each slot's NUMA node is what NVML's memory
    affinity says (the profile's `numa`), not this host's sysfs."""
    import yaml

    machine = yaml.safe_load((REPO / "hwprobe" / "profiles" / f"{profile}.yaml").read_text())
    doc = mocknvml.report(profile)
    buses = [g["bus_id"].lower() for g in doc["gpus"]]
    assert buses == sorted(buses)
    assert [g["numa_node"] for g in doc["gpus"]] == [g["numa"] for g in machine["gpus"]]


@pytest.mark.parametrize("profile", ["dgxa100", "a100"])
def test_dgx_a100_runs_nps4(mocknvml, profile):
    doc = mocknvml.report(profile)
    assert [g["numa_node"] for g in doc["gpus"]] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert all("numa_node" not in g["unavailable"] for g in doc["gpus"])
    rows = mocknvml.run(profile, "show").stdout.splitlines()[1:9]
    assert [row.split()[-2] for row in rows] == ["3", "3", "1", "1", "7", "7", "5", "5"]


def test_numa_falls_back_to_sysfs_without_memory_affinity(mocknvml):
    from pathlib import Path

    doc = mocknvml.report("a100", faults={"unsupported": ["nvmlDeviceGetMemoryAffinity"]})
    for gpu in doc["gpus"]:  # the mock's bus ids may or may not exist on this host
        domain, _, rest = gpu["bus_id"].lower().partition(":")
        entry = Path(f"/sys/bus/pci/devices/{int(domain, 16):04x}:{rest}/numa_node")
        host = int(entry.read_text()) if entry.exists() else None
        want = host if host is not None and host >= 0 else None
        assert gpu["numa_node"] == want
        if want is None:
            assert gpu["unavailable"]["numa_node"] == "NotSupported; no sysfs entry"


def test_health_counters_are_read(mocknvml):
    clean = mocknvml.report("h100")["gpus"][0]["counters"]
    assert clean == {"ecc_dbe_volatile": 0, "ecc_dbe_aggregate": 0,
                     "remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 0,
                     "row_remap_pending": 0, "row_remap_failure": 0, "pcie_replay": 0}
    faults = {"ecc_errors": [{"gpu": 2, "type": 1, "counter": 0, "value": 3},
                             {"gpu": 2, "type": 1, "counter": 1, "value": 9}],
              "remapped_rows": [{"gpu": 5, "correctable": 1, "uncorrectable": 4,
                                 "failure": True}],
              "pcie_replay": [{"gpu": 7, "value": 120}]}
    gpus = mocknvml.report("h100", faults=faults)["gpus"]
    assert (gpus[2]["counters"]["ecc_dbe_volatile"], gpus[2]["counters"]["ecc_dbe_aggregate"]) \
        == (3, 9)
    assert gpus[5]["counters"]["remapped_rows_uncorrectable"] == 4
    assert (gpus[5]["counters"]["row_remap_failure"], gpus[5]["counters"]["row_remap_pending"]) \
        == (1, 0)
    assert gpus[7]["counters"]["pcie_replay"] == 120
    assert gpus[0]["counters"] == clean


def test_health_counter_faults_are_refused_on_nvidia_mocks(mocknvml):
    done = mocknvml.run("dgxh100", "show", faults={"pcie_replay": [{"gpu": 0, "value": 5}]})
    assert done.returncode == 2
    assert "go-nvml's dgxh100 mock answers nvmlDeviceGetPcieReplayCounter with Not Supported" \
        in done.stderr


@pytest.mark.parametrize("command", ["verify", "report", "publish"])
def test_nonsense_spec_is_one_line_and_exit_2(mocknvml, tmp_path, command):
    spec = tmp_path / "minus.yaml"
    spec.write_text("gpu_count: -3\n")
    extra = ["--node", "n1"] if command == "publish" else []
    done = mocknvml.run("h100", command, "--expect", str(spec), *extra)
    assert done.returncode == 2
    # refused while the arguments are parsed, before NVML is touched: one line naming the flag
    assert done.stderr == (f"hwprobe {command}: error: argument --expect: spec minus: gpu_count "
                           f"must be a positive integer, got -3 (see hwprobe {command} --help)\n")
    assert done.stdout == ""
