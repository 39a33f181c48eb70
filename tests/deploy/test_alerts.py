"""deploy/monitoring/: every metric an alert or the dashboard names is one the code exports (read
from the registries the code builds), every alert carries its summary, description and a
runbook_url that lands on a heading of docs/operations.md, the PrometheusRule carries the plain
file's groups, and the promtool unit tests give every alert a firing and a silent case.
promtool itself runs on these files in e2e/test_alert_rules.py."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy import monitoring as mon

RULES = mon.alert_rules()


def test_the_registries_are_read_not_listed():
    names = mon.exported_names()
    # one of each kind, from each registry: the reading covers what the alerts rely on
    assert {"ckpt_preempt_plans_total", "ckpt_preempt_is_leader",
            "ckpt_preempt_plan_latency_seconds_bucket", "ckpt_preempt_extender_requests_total",
            "hwprobe_probe_failures_total", "hwprobe_verified"} <= names
    assert "hwprobe_probe_failures" not in names  # a counter is exposed as _total only


@pytest.mark.parametrize("rule", RULES, ids=[r["alert"] for r in RULES])
def test_every_alert_names_only_exported_metrics(rule):
    named = mon.named_metrics(rule["expr"])
    assert named, "an alert on none of our metrics"
    assert named <= mon.exported_names(), f"not exported: {sorted(named - mon.exported_names())}"


def test_every_dashboard_panel_names_only_exported_metrics():
    exprs = mon.dashboard_exprs()
    assert exprs
    for expr in exprs:
        named = mon.named_metrics(expr)
        assert named, f"a panel on none of our metrics: {expr}"
        assert named <= mon.exported_names(), f"{expr}: not exported: " \
                                              f"{sorted(named - mon.exported_names())}"


def test_the_dashboard_covers_the_controllers_metrics():
    """Every controller metric but the health refresh timing has a panel."""
    shown = set().union(*(mon.named_metrics(e) for e in mon.dashboard_exprs()))
    families = {f.name for f in mon.Metrics().registry.collect()}
    covered = {f for f in families if any(n.startswith(f) for n in shown)}
    assert families - covered <= {"ckpt_preempt_health_refresh_seconds",
                                  "ckpt_preempt_health_checkpoint_requests"}


def test_every_dashboard_selector_follows_the_namespace_variable():
    """Two releases in two namespaces are shown apart: each selector of our metrics matches
    the dashboard's `namespace` variable."""
    for expr in mon.dashboard_exprs():
        selectors = re.findall(r"\b(?:ckpt_preempt|hwprobe)_[a-z_]+(\{[^}]*\})?", expr)
        assert selectors and all('namespace=~"$namespace"' in s for s in selectors), expr


def test_the_dashboard_is_a_grafana_model():
    doc = json.loads(mon.DASHBOARD.read_text())
    assert doc["uid"] and doc["title"] and doc["schemaVersion"] >= 36
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for p in doc["panels"]:
        assert p["datasource"]["uid"] == "${datasource}"
        assert {t["refId"] for t in p["targets"]} == {chr(65 + i) for i in range(len(p["targets"]))}
    assert [v["name"] for v in doc["templating"]["list"]] == ["datasource", "namespace"]


@pytest.mark.parametrize("rule", RULES, ids=[r["alert"] for r in RULES])
def test_every_alert_has_its_annotations_and_a_runbook_section(rule):
    ann = rule["annotations"]
    assert ann["summary"].strip() and ann["description"].strip()
    assert rule["labels"]["severity"] in ("warning", "critical")
    url = urlsplit(ann["runbook_url"])
    assert url.path.endswith("/docs/operations.md")
    assert url.fragment == rule["alert"].lower()
    assert url.fragment in mon.github_anchors(mon.RUNBOOK.read_text()), (
        f"docs/operations.md has no heading '{rule['alert']}'")


def test_alert_names_are_unique():
    names = [r["alert"] for r in RULES]
    assert len(names) == len(set(names))


def test_the_prometheusrule_carries_the_same_groups():
    crd = yaml.safe_load(mon.ALERTS_CRD.read_text())
    assert (crd["apiVersion"], crd["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert crd["spec"]["groups"] == mon.alert_groups()


def test_the_unit_tests_fire_and_silence_every_alert():
    doc = yaml.safe_load(mon.ALERTS_TESTS.read_text())
    assert doc["rule_files"] == [mon.ALERTS.name]
    fired, silent = set(), set()
    for case in doc["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else silent).add(check["alertname"])
    names = {r["alert"] for r in RULES}
    assert fired == names, f"no firing case: {sorted(names - fired)}"
    assert silent == names, f"no silent case: {sorted(names - silent)}"


def test_the_anchor_reader_follows_github():
    text = "# Ops\n## Alerts: what to do\n```\n# not a heading\n```\n## Alerts: what to do\n"
    assert mon.github_anchors(text) == {"ops", "alerts-what-to-do", "alerts-what-to-do-1"}


def test_the_charts_copy_of_the_alerts_is_the_same_file():
    copy = mon.REPO / "deploy" / "helm" / "ckpt-preempt" / "files" / "alerts.yaml"
    assert copy.read_text() == mon.ALERTS.read_text(), f"cp {mon.ALERTS} {copy}"
