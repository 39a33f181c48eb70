"""promtool on deploy/monitoring/: both alert files' rule groups pass `promtool check rules`, and
`promtool test rules deploy/monitoring/alerts.test.yaml` passes (each alert fires on a series
that should fire it and stays silent on one that should not). Then the real Prometheus loads
alerts.yaml and scrapes the controller's, extender's and hwprobe's registries as the code builds
and serves them: every rule evaluates without error, and a controller with no leader and a node
failing verification make their alerts pending. promtool and Prometheus come from the cache
e2e/testbin/prometheus/build.sh fills; without it these skip, unless CKPT_REQUIRE_TESTBIN=1,
where they fail."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from ckpt_preempt.controller.app import server
from ckpt_preempt.controller.core.metrics import Metrics
from ckpt_preempt.controller.extender.extender import ExtenderMetrics
from ckpt_preempt.hwprobe.serve import Metrics as HwprobeMetrics
from e2e.harness import promstack
from e2e.harness.localcluster import free_port
from tests.deploy import monitoring as mon

prometheus = promstack.prometheus

PROMTOOL_SECONDS = 120


def promtool(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    tool = promstack.prometheus_or_skip().parent / "promtool"
    return subprocess.run([str(tool), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=PROMTOOL_SECONDS, check=False)


def test_promtool_checks_the_plain_rules_file():
    out = promtool("check", "rules", mon.ALERTS, cwd=mon.MONITORING)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(mon.alert_rules())} rules found" in out.stdout


def test_promtool_checks_the_prometheusrule_groups(tmp_path):
    groups = yaml.safe_load(mon.ALERTS_CRD.read_text())["spec"]["groups"]
    plain = tmp_path / "groups.yaml"
    plain.write_text(yaml.safe_dump({"groups": groups}))
    out = promtool("check", "rules", plain, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_pass():
    out = promtool("test", "rules", mon.ALERTS_TESTS.name, cwd=mon.MONITORING)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_a_rule_that_never_fires_fails_the_unit_tests(tmp_path):
    """The unit tests can fail: with every alert's expression emptied, each firing case does."""
    doc = yaml.safe_load(mon.ALERTS.read_text())
    for rule in (r for g in doc["groups"] for r in g["rules"]):
        rule["expr"] = "vector(1) == 0"
    (tmp_path / mon.ALERTS.name).write_text(yaml.safe_dump(doc))
    (tmp_path / mon.ALERTS_TESTS.name).write_text(mon.ALERTS_TESTS.read_text())
    out = promtool("test", "rules", mon.ALERTS_TESTS.name, cwd=tmp_path)
    assert out.returncode != 0
    failed = {line.split("alertname:", 1)[1].split(",")[0].strip()
              for line in out.stdout.splitlines() + out.stderr.splitlines()
              if "alertname:" in line}
    assert failed == {r["alert"] for r in mon.alert_rules()}


def _alert_rules(url: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/api/v1/rules?type=alert", timeout=10) as r:
        return [rule for g in json.load(r)["data"]["groups"] for rule in g["rules"]]


def test_prometheus_evaluates_the_alerts_on_the_codes_own_exporters(prometheus):
    controller, extender = Metrics(), ExtenderMetrics()
    hwprobe = CollectorRegistry()
    HwprobeMetrics.create(hwprobe).verified.set(0)  # the node differs from its spec
    # controller.writes.leader stays 0: no replica leads
    served = [server.serve("127.0.0.1", free_port(), reg, healthy=lambda: True,
                           ready=lambda: True)
              for reg in (controller.registry, extender.registry, hwprobe)]
    try:
        prom = prometheus([f"127.0.0.1:{s.server_address[1]}" for s in served],
                          scrape_interval_s=0.5, rule_files=[mon.ALERTS],
                          evaluation_interval_s=0.5)
        prom.wait_until("ckpt_preempt_is_leader")
        deadline = time.monotonic() + 30
        while True:
            rules = _alert_rules(prom.url)
            states = {r["name"]: r["state"] for r in rules}
            evaluated = all(not r.get("lastEvaluation", "0001").startswith("0001") for r in rules)
            if (evaluated and states.get("CkptPreemptNoLeader") == "pending"
                    and states.get("CkptPreemptHwprobeVerifyFailing") == "pending"):
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.5)
        assert {r["name"] for r in rules} == {r["alert"] for r in mon.alert_rules()}
        assert [(r["name"], r["lastError"]) for r in rules if r["health"] != "ok"] == []
        assert states["CkptPreemptControllerAbsent"] == "inactive"  # the series is there
        assert states["CkptPreemptMultipleLeaders"] == "inactive"
    finally:
        for s in served:
            s.shutdown()
