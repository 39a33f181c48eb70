"""`hwprobe verify --with-prometheus URL` against a real Prometheus scraping dcgm-exporter's format.

NVML is the testbin's mock libnvidia-ml.so.1 on an HGX H100 profile whose PCI bus ids are the
fixture exporter's, so the cross-check matches GPUs by `pci_bus_id` (the fixture's UUIDs are its
own; tests/hwprobe/test_dcgm_check.py covers matching by UUID). Prometheus is the real binary
(e2e/harness/promstack.py), scraping `DcgmFixtureExporter` every second; the CLI runs as a
subprocess, as an operator would run it on the node.
"""

from __future__ import annotations

import pytest
import yaml

from e2e.harness import promstack
from e2e.harness.mock_nvml import PROFILES
from e2e.harness.promstack import DcgmFixtureExporter, FixtureGpu

pytestmark = [pytest.mark.e2e, pytest.mark.mocknvml]
dcgm_exporter, prometheus = promstack.dcgm_exporter, promstack.prometheus

NODE = "gpu-node-1"
GPUS = 8
SPEC = "gpu_count: 8\ngpu_name: H100\n"  # no max_link_errors: only the cross-check judges them
AGGREGATE_SKIP = ("SKIP: dcgm ecc_dbe_aggregate (DCGM_FI_DEV_ECC_DBE_AGG_TOTAL): no series for "
                  f"node {NODE}")


@pytest.fixture
def machine(tmp_path):
    """The h100 profile with the fixture exporter's bus ids, and a spec for it."""
    profile = yaml.safe_load((PROFILES / "h100.yaml").read_text())
    for i, gpu in enumerate(profile["gpus"]):
        gpu["bus_id"] = FixtureGpu(NODE, i).pci_bus_id.replace("00000000:", "0000:")
    path = tmp_path / "h100-fixture-buses.yaml"
    path.write_text(yaml.safe_dump(profile))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    return path, spec


def cross_check(nvml, machine, url, faults=None):
    profile, spec = machine
    return nvml.run(profile, "verify", "--expect", str(spec), "--with-prometheus", url,
                    "--node", NODE, "--prometheus-timeout", "5", faults=faults)


def scraped(prom, metric, value, gpu, label="Hostname"):
    prom.wait_until(f'{metric}{{{label}="{NODE}",gpu="{gpu}"}} == {value}')


@pytest.mark.parametrize("label", ["Hostname", "hostname"])
def test_nvml_and_dcgm_agree(nvml, machine, prometheus, label):
    with DcgmFixtureExporter(hostname_label=label) as exporter:
        exporter.add_node(NODE, gpus=GPUS)
        prom = prometheus([exporter.target])
        scraped(prom, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 0, GPUS - 1, label)
        done = cross_check(nvml, machine, prom.url)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("OK: matches spec")
    assert "PASS: dcgm ecc_dbe_volatile (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL): 8 GPUs agree" in lines
    assert "PASS: dcgm nvlink_crc_flit (DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL): " \
           "8 GPUs agree" in lines
    # the sample counters file does not enable the aggregate ECC field: nothing to compare
    assert any(line.startswith(AGGREGATE_SKIP) for line in lines)
    assert sum(line.startswith("PASS: dcgm") for line in lines) == 9


def test_differences_fail_until_dcgm_reports_the_same(nvml, machine, prometheus,
                                                      dcgm_exporter):
    faults = {"ecc_errors": [{"gpu": 2, "type": 1, "counter": 0, "value": 3}],
              "remapped_rows": [{"gpu": 5, "uncorrectable": 4, "failure": True}],
              "pcie_replay": [{"gpu": 7, "value": 120}],
              "nvlink_errors": [{"gpu": 1, "link": 4, "counter": 2, "value": 17}]}
    dcgm_exporter.add_node(NODE, gpus=GPUS)
    prom = prometheus([dcgm_exporter.target])
    scraped(prom, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 0, GPUS - 1)

    done = cross_check(nvml, machine, prom.url, faults)
    assert done.returncode == 1, done.stdout + done.stderr
    fails = [line for line in done.stdout.splitlines() if line.startswith("FAIL: dcgm")]
    assert fails == [
        "FAIL: dcgm ecc_dbe_volatile (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL): GPU2 NVML 3, DCGM 0",
        "FAIL: dcgm remapped_rows_uncorrectable (DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS): "
        "GPU5 NVML 4, DCGM 0",
        "FAIL: dcgm row_remap_failure (DCGM_FI_DEV_ROW_REMAP_FAILURE): GPU5 NVML 1, DCGM 0",
        "FAIL: dcgm pcie_replay (DCGM_FI_DEV_PCIE_REPLAY_COUNTER): GPU7 NVML 120, DCGM 0",
        "FAIL: dcgm nvlink_crc_flit (DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL): "
        "GPU1 NVML 17, DCGM 0",
    ]

    for metric, value, gpu in (("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 3, 2),
                               ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 4, 5),
                               ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 1, 5),
                               ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 120, 7),
                               ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 17, 1)):
        dcgm_exporter.set(metric, value, gpu=gpu, hostname=NODE)
        scraped(prom, metric, value, gpu)
    done = cross_check(nvml, machine, prom.url, faults)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [line for line in done.stdout.splitlines() if line.startswith("FAIL")]


def test_a_gpu_missing_from_dcgm_fails(nvml, machine, prometheus, dcgm_exporter):
    dcgm_exporter.add_node(NODE, gpus=GPUS - 1)  # dcgm-exporter lost sight of GPU7
    prom = prometheus([dcgm_exporter.target])
    scraped(prom, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 0, GPUS - 2)
    done = cross_check(nvml, machine, prom.url)
    assert done.returncode == 1
    assert ("FAIL: dcgm pcie_replay (DCGM_FI_DEV_PCIE_REPLAY_COUNTER): GPU7 "
            "(GPU-h1000000-0007-000000000007, 00000000:88:00.0) has no DCGM series"
            ) in done.stdout.splitlines()


def test_prometheus_down_is_one_line_and_exit_2(nvml, machine, prometheus, dcgm_exporter):
    dcgm_exporter.add_node(NODE, gpus=GPUS)
    prom = prometheus([dcgm_exporter.target])
    prom.stop()
    done = cross_check(nvml, machine, prom.url)
    assert done.returncode == 2
    assert done.stderr.startswith(f"hwprobe: Prometheus at {prom.url} cannot be queried: ")
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
