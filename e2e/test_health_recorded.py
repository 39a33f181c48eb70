"""healthQueryMode recorded against the real Prometheus: its recording rules, generated from the
rules data, give the same node states as the direct queries on the same fixture data (and a
controller whose window differs from the file's says so); without the rules installed, recorded
mode is all unknown (nothing failing) and says why."""

from __future__ import annotations

import threading
from pathlib import Path

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.health import health_promql
from ckpt_preempt.controller.health.health import PrometheusHealth
from ckpt_preempt.policies.model import health as ph
from ckpt_preempt.policies.model.health import Health
from e2e.harness import kube, promstack
from e2e.harness.promstack import DcgmFixtureExporter

dcgm_exporter, prometheus = promstack.dcgm_exporter, promstack.prometheus

XID = "DCGM_FI_DEV_XID_ERRORS"
CRC = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
SCRAPE_SECONDS = 0.5
WINDOW_SECONDS = 4  # eight scrapes
CRC_PER_SCRAPE = 10  # 20/s: above 0 (degraded), below DCGM's 100/s (failing)
NODES = ("sick", "flaky", "fine-1", "fine-2")
EXPECTED = {"sick": Health.FAILING, "flaky": Health.DEGRADED, "fine-1": Health.HEALTHY,
            "fine-2": Health.HEALTHY}


def sources(url: str) -> tuple[PrometheusHealth, PrometheusHealth]:
    cfg = Config(prometheus_url=url, health_window_seconds=WINDOW_SECONDS,
                 health_query_timeout_seconds=2)
    recorded = Config(prometheus_url=url, health_window_seconds=WINDOW_SECONDS,
                      health_query_timeout_seconds=2, health_query_mode="recorded")
    return (PrometheusHealth(cfg, nodes=lambda: NODES),
            PrometheusHealth(recorded, nodes=lambda: NODES))


def rules_file(tmp_path: Path) -> Path:
    cfg = Config()
    path = tmp_path / "recording-rules.yaml"
    path.write_text(health_promql.render(
        health_promql.recording_rules(ph.DEFAULT_RULES, WINDOW_SECONDS,
                                      cfg.health_hostname_labels),
        WINDOW_SECONDS, cfg.health_hostname_labels))
    return path


def fixture_data(exporter: DcgmFixtureExporter) -> threading.Event:
    """XID 79 on sick's GPU 3, flaky's GPU 0 NVLink CRC errors rising; returns the stop."""
    for name in NODES:
        exporter.add_node(name, gpus=8)
    exporter.set(XID, 79, gpu=3, hostname="sick")
    stop = threading.Event()

    def rise() -> None:
        while not stop.is_set():
            exporter.add(CRC, CRC_PER_SCRAPE, gpu=0, hostname="flaky")
            stop.wait(SCRAPE_SECONDS)
    threading.Thread(target=rise, daemon=True, name="crc-rising").start()
    return stop


def findings(report: ph.HealthReport) -> dict[str, set[tuple[str, str]]]:
    return {n: {(g.gpu, f.rule) for g in report.node(n).gpus for f in g.findings}
            for n in NODES}


def test_recorded_mode_gives_the_direct_modes_node_states(dcgm_exporter, prometheus, tmp_path):
    stop = fixture_data(dcgm_exporter)
    try:
        prom = prometheus([dcgm_exporter.target], SCRAPE_SECONDS,
                          rule_files=[rules_file(tmp_path)])
        direct, recorded = sources(prom.url)
        got: dict[str, ph.HealthReport] = {}

        def both_as_expected():
            got["direct"], got["recorded"] = direct.refresh(), recorded.refresh()
            states = {mode: {n: r.state(n) for n in NODES} for mode, r in got.items()}
            return all(s == EXPECTED for s in states.values()) or kube.NotYet(str(states))
        kube.wait_for("both modes see sick failing, flaky degraded", both_as_expected, timeout=30)
        assert findings(got["direct"]) == findings(got["recorded"]) == {
            "sick": {("3", "xid-critical")}, "flaky": {("0", "nvlink-crc-flit-errors")},
            "fine-1": set(), "fine-2": set()}
        assert got["recorded"].node("sick").reasons == got["direct"].node("sick").reasons
        assert got["recorded"].node("fine-1").reporting == 8
        assert recorded.readiness_detail() == "health: prometheus readable"
        (group,) = prom.rule_groups()
        assert group["name"] == health_promql.RULES_GROUP
        assert {r["health"] for r in group["rules"]} == {"ok"}
        assert group["evaluationTime"] > 0
        other_window = PrometheusHealth(Config(
            prometheus_url=prom.url, health_window_seconds=2 * WINDOW_SECONDS,
            health_query_mode="recorded"), nodes=lambda: NODES)
        assert other_window.refresh().state("sick") is Health.FAILING  # still read, but:
        assert other_window.readiness_detail() == (
            f"health: prometheus readable (the recording rules' window is {WINDOW_SECONDS}s, "
            f"healthWindowSeconds {2 * WINDOW_SECONDS}s: regenerate them "
            "(python -m ckpt_preempt.controller.health.health_promql))")
    finally:
        stop.set()


def test_recorded_mode_without_the_rules_is_all_unknown_and_says_so(dcgm_exporter, prometheus):
    stop = fixture_data(dcgm_exporter)
    try:
        prom = prometheus([dcgm_exporter.target], SCRAPE_SECONDS)  # no rule files
        direct, recorded = sources(prom.url)
        kube.wait_for("direct mode sees sick failing",
                      lambda: direct.refresh().state("sick") is Health.FAILING, timeout=30)
        report = recorded.refresh()
        assert {report.state(n) for n in NODES} == {Health.UNKNOWN}
        assert not report.nodes and not report.source_up
        assert health_promql.RECORDED_REPORTING in report.problem
        detail = recorded.readiness_detail()
        assert detail.startswith("health: unknown (no ckpt_preempt:gpu_health_reporting series")
        assert "recording rules" in detail
        assert report.node("sick").reasons[0].startswith("no health data: no ckpt_preempt")
    finally:
        stop.set()
