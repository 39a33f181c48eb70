"""promtool on deploy/monitoring/: both alert files' rule groups pass `promtool check rules`, and
`promtool test rules deploy/monitoring/alerts.test.yaml` passes (each alert fires on a series
that should fire it and stays silent on one that should not). promtool comes with the cached
Prometheus (e2e/testbin/prometheus/build.sh); without it these skip, unless
CKPT_REQUIRE_TESTBIN=1, where they fail."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from e2e import promstack
from tests.deploy import monitoring as mon

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
