"""The health test bench itself: the real Prometheus scrapes the fixture exporter, and what the
test changes on the exporter is what a query returns, with dcgm-exporter's names and labels."""

from __future__ import annotations

from e2e.harness import promstack
from e2e.harness.promstack import DcgmFixtureExporter, read_counters

dcgm_exporter, prometheus = promstack.dcgm_exporter, promstack.prometheus

XID = "DCGM_FI_DEV_XID_ERRORS"
CRC = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"


def test_prometheus_scrapes_what_the_exporter_serves(dcgm_exporter: DcgmFixtureExporter,
                                                     prometheus):
    dcgm_exporter.add_node("gpu-a", gpus=2)
    prom = prometheus([dcgm_exporter.target], scrape_interval_s=0.5)
    prom.wait_until(f'{XID}{{Hostname="gpu-a"}}', check=lambda r: len(r) == 2)

    dcgm_exporter.set(XID, 79, gpu=1, hostname="gpu-a")
    got = prom.wait_until(f"{XID} == 79")
    labels = got[0]["metric"]
    assert labels["gpu"] == "1" and labels["Hostname"] == "gpu-a"
    assert labels["UUID"].startswith("GPU-") and labels["device"] == "nvidia1"
    assert set(labels) >= {"pci_bus_id", "modelName", "DCGM_FI_DRIVER_VERSION", "instance"}

    for _ in range(3):  # a counter that rises between scrapes has a positive rate
        dcgm_exporter.add(CRC, 100, gpu=0, hostname="gpu-a")
        now = dcgm_exporter.get(CRC, gpu=0, hostname="gpu-a")
        prom.wait_until(f'{CRC}{{gpu="0"}} >= {now:g}')
    rising = prom.wait_until(f"rate({CRC}[5s]) > 0")
    assert {s["metric"]["gpu"] for s in rising} == {"0"}

    dcgm_exporter.remove_node("gpu-a")  # gone from the exporter: stale in Prometheus at once
    prom.wait_until(XID, check=lambda r: r == [])


def test_every_counters_file_field_is_served(dcgm_exporter: DcgmFixtureExporter):
    dcgm_exporter.add_node("gpu-b", gpus=1)
    text = dcgm_exporter.render().decode()
    for field in read_counters():
        if field.kind == "label":
            assert f'{field.name}="' in text
        else:
            assert f"# TYPE {field.name} {field.kind}\n" in text
            assert f'{field.name}{{gpu="0",UUID="GPU-' in text
