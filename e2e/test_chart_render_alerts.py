"""`helm template` with `monitoring.prometheusRule.enabled`: off by default; on, one
PrometheusRule in the release namespace whose groups are deploy/monitoring/alerts.yaml's (the
alert texts, `{{ $labels.* }}` included, are passed through, not templated by helm), with the
labels the values add; the schema refuses unknown keys there."""

from __future__ import annotations

import pytest

from e2e.harness import chart
from tests.deploy import monitoring as mon

ON = {"monitoring": {"prometheusRule": {"enabled": True,
                                        "labels": {"release": "kube-prometheus-stack"}}}}


def test_no_prometheusrule_by_default():
    assert not [d for d in chart.render("r", "ops") if d["kind"] == "PrometheusRule"]


def test_the_prometheusrule_carries_the_alert_groups():
    rule = chart.find(chart.render("r", "ops", ON), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert (rule["metadata"]["name"], rule["metadata"]["namespace"]) == ("r-ckpt-preempt-alerts",
                                                                        "ops")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["labels"]["app.kubernetes.io/instance"] == "r"
    assert rule["spec"]["groups"] == mon.alert_groups()


@pytest.mark.parametrize("bad, says", [
    ("monitoring.prometheusRule.enable=true", "additional properties 'enable'"),
    ("monitoring.prometheusRule.labels.release=1", "/monitoring/prometheusRule/labels/release"),
])
def test_schema_refuses_bad_monitoring_values(bad, says):
    done = chart.template("r", "ops", None, "--set", bad)
    assert done.returncode != 0 and says in done.stderr, done.stderr
