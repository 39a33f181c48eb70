"""The NVML-vs-DCGM comparison (pure), and the Prometheus edge's one-line failure."""

from __future__ import annotations

import argparse
import socket

import pytest

from ckpt_preempt.hwprobe import dcgm_check
from ckpt_preempt.hwprobe.dcgm_check import CHECKS, Outcome, Sample, compare, passed, render
from ckpt_preempt.hwprobe.model import GPU_COUNTERS
from tests.hwprobe import layouts

NODE = "gpu-1"
CLEAN = dict.fromkeys(GPU_COUNTERS, 0)


def machine(gpus=4, counters=None, errors=None):
    """HGX H100 GPUs with health counters; ``counters``/``errors`` keyed by GPU index."""
    counters, errors = counters or {}, errors or {}
    return layouts.make_topology([
        layouts.make_gpu(i, links=layouts.switch_links(errors=errors.get(i)),
                         counters={**CLEAN, **counters.get(i, {})}) for i in range(gpus)])


def series(topo, values=None, *, node=NODE, label="Hostname", uuid=True, bus=True, gpus=None):
    """What dcgm-exporter would expose for ``topo``: every check's metric, ``values`` overriding
    ``{(metric, gpu index): value}``."""
    values = values or {}
    out = {}
    for check in CHECKS:
        rows = []
        for gpu in topo.gpus:
            if gpus is not None and gpu.index not in gpus:
                continue
            labels = {"gpu": str(gpu.index), "device": f"nvidia{gpu.index}", label: node,
                      "modelName": gpu.name}
            if uuid:
                labels["UUID"] = gpu.uuid
            if bus:
                labels["pci_bus_id"] = gpu.bus_id
            ours = dcgm_check.nvml_value(gpu, check)
            rows.append(Sample(labels=labels,
                               value=float(values.get((check.metric, gpu.index), ours or 0))))
        out[check.metric] = rows
    return out


def outcome(results, name):
    return next(r for r in results if r.check.name == name)


def test_everything_agrees():
    topo = machine()
    results = compare(topo, series(topo), NODE)
    assert [r.outcome for r in results] == [Outcome.PASS] * len(CHECKS)
    assert results[0].line == ("PASS: dcgm ecc_dbe_volatile (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL): "
                               "4 GPUs agree")
    assert passed(results)


def test_a_difference_fails_and_names_the_gpu_and_both_values():
    topo = machine(counters={2: {"ecc_dbe_volatile": 3}})
    results = compare(topo, series(topo, {("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2): 0}), NODE)
    bad = outcome(results, "ecc_dbe_volatile")
    assert bad.outcome is Outcome.FAIL
    assert bad.line == ("FAIL: dcgm ecc_dbe_volatile (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL): "
                        "GPU2 NVML 3, DCGM 0")
    assert not passed(results)
    assert render(results).splitlines()[0] == bad.line


def test_nvlink_counters_are_summed_over_the_links():
    topo = machine(errors={1: {0: {"crc_flit": 5, "replay": 0, "recovery": 0, "crc_data": 0},
                               7: {"crc_flit": 12, "replay": 0, "recovery": 0, "crc_data": 0}}})
    metric = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
    assert outcome(compare(topo, series(topo, {(metric, 1): 17}), NODE),
                   "nvlink_crc_flit").outcome is Outcome.PASS
    got = outcome(compare(topo, series(topo, {(metric, 1): 12}), NODE), "nvlink_crc_flit")
    assert got.detail == "GPU1 NVML 17, DCGM 12"


def test_matched_by_pci_bus_id_in_any_spelling_when_no_uuid_matches():
    topo = machine(counters={3: {"pcie_replay": 9}})
    samples = series(topo, uuid=False)
    for rows in samples.values():  # dcgm-exporter may print the short domain, any case
        for s in rows:
            s.labels["pci_bus_id"] = s.labels["pci_bus_id"].lower().replace("00000000:", "0000:")
    assert passed(compare(topo, samples, NODE))
    samples["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"][3] = Sample(
        labels=samples["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"][3].labels, value=0.0)
    assert outcome(compare(topo, samples, NODE), "pcie_replay").detail == "GPU3 NVML 9, DCGM 0"


def test_uuid_wins_over_the_bus_id():
    topo = machine(gpus=2, counters={0: {"pcie_replay": 4}})
    samples = series(topo)
    rows = samples["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
    # the series carry swapped bus ids: only the UUIDs say which GPU is which
    rows[0].labels["pci_bus_id"], rows[1].labels["pci_bus_id"] = (
        rows[1].labels["pci_bus_id"], rows[0].labels["pci_bus_id"])
    assert outcome(compare(topo, samples, NODE), "pcie_replay").outcome is Outcome.PASS


def test_lowercase_hostname_label_is_accepted():
    topo = machine()
    assert passed(compare(topo, series(topo, label="hostname"), NODE))
    assert all(r.outcome is Outcome.PASS for r in compare(topo, series(topo, label="hostname"),
                                                          NODE))


def test_other_nodes_series_are_not_ours():
    topo = machine()
    results = compare(topo, series(topo, node="gpu-2"), NODE)
    assert {r.outcome for r in results} == {Outcome.SKIP}
    assert results[0].detail.startswith("no series for node gpu-1")
    assert passed(results)  # nothing to cross-check is not a hardware fault


def test_a_gpu_dcgm_does_not_see_fails():
    topo = machine()
    got = outcome(compare(topo, series(topo, gpus={0, 1, 3}), NODE), "row_remap_failure")
    assert got.outcome is Outcome.FAIL
    assert got.detail == "GPU2 (GPU-0002, 00000000:1A:00.0) has no DCGM series"


def test_what_nvml_cannot_read_is_skipped_not_failed():
    gpus = [layouts.make_gpu(i, counters={}, unavailable={
        "ecc_dbe_volatile": "NotSupported", "ecc_dbe_aggregate": "NotSupported",
        "remapped_rows": "NotSupported", "pcie_replay": "NotSupported",
        "nvlink": "NotSupported"}) for i in range(2)]
    topo = layouts.make_topology(gpus)
    results = compare(topo, series(topo), NODE)
    assert {r.outcome for r in results} == {Outcome.SKIP}
    assert outcome(results, "row_remap_failure").detail == "NVML cannot read it (NotSupported)"


def test_partly_readable_passes_and_says_which_gpu_was_not_read():
    topo = machine(gpus=2)
    gpus = (topo.gpus[0], layouts.make_gpu(1, counters={},
                                           unavailable={"pcie_replay": "GpuIsLost"}))
    topo = layouts.make_topology(gpus)
    got = outcome(compare(topo, series(topo), NODE), "pcie_replay")
    assert (got.outcome, got.detail) == (Outcome.PASS, "1 GPU agree (NVML cannot read GPU 1)")


def test_a_metric_prometheus_has_no_series_for_is_skipped():
    topo = machine()
    samples = series(topo)
    del samples["DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"]
    got = outcome(compare(topo, samples, NODE), "ecc_dbe_aggregate")
    assert got.outcome is Outcome.SKIP
    assert "is DCGM_FI_DEV_ECC_DBE_AGG_TOTAL in dcgm-exporter's counters file" in got.detail


def test_one_query_per_metric_under_either_hostname_label():
    assert dcgm_check.selector("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 'we"ird\\') == (
        'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{Hostname="we\\"ird\\\\"} or '
        'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{hostname="we\\"ird\\\\"}')
    assert len({c.metric for c in CHECKS}) == len(CHECKS)


def test_unreachable_prometheus_is_one_line():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(dcgm_check.DcgmUnavailable) as err:
        dcgm_check.query(f"http://127.0.0.1:{port}", NODE, timeout_s=2)
    text = str(err.value)
    assert text.startswith(f"Prometheus at http://127.0.0.1:{port} cannot be queried: ")
    assert "\n" not in text


@pytest.mark.parametrize("bad", ["localhost:9090", "ftp://x", "http://", ""])
def test_url_option_rejects_non_urls(bad):
    with pytest.raises(argparse.ArgumentTypeError):
        dcgm_check.prometheus_url(bad)


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "1e9", "nan"])
def test_timeout_option_rejects_nonsense(bad):
    with pytest.raises(argparse.ArgumentTypeError):
        dcgm_check.timeout_seconds(bad)


@pytest.mark.parametrize(("flag", "value"), [("--with-prometheus", "prometheus:9090"),
                                             ("--prometheus-timeout", "0")])
def test_cli_refuses_bad_options_before_probing(capsys, flag, value):
    from ckpt_preempt.hwprobe import cli

    with pytest.raises(SystemExit) as done:
        cli.main(["verify", "--expect", "hgx-h100-8", flag, value])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and flag in err and "Traceback" not in err
