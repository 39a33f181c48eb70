"""The recorded query mode's parts: the committed rules file is what the code generates, its
expressions are the direct mode's queries, the config key is validated, and the generator
refuses bad input in one line. A real Prometheus evaluates them in e2e/test_health_recorded.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ckpt_preempt.controller.core import config
from ckpt_preempt.controller.core.config import Config, HealthQueryMode
from ckpt_preempt.controller.health import health, health_promql
from ckpt_preempt.policies.model import health as ph

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "deploy" / "dcgm" / "recording-rules.yaml"
COMMITTED_CRD = REPO / "deploy" / "dcgm" / "recording-rules.prometheusrule.yaml"


def generated(argv: list[str], capsys) -> str:
    assert health_promql.main(argv) == 0
    return capsys.readouterr().out


def test_the_committed_rules_files_are_what_the_code_generates(capsys):
    module = "python -m ckpt_preempt.controller.health.health_promql"
    assert COMMITTED.read_text() == generated([], capsys), f"regenerate: {module} > {COMMITTED}"
    assert COMMITTED_CRD.read_text() == generated(["--format", "prometheusrule"], capsys), (
        f"regenerate: {module} --format prometheusrule > {COMMITTED_CRD}")


def test_one_recorded_finding_per_query_group_and_the_coverage_count():
    cfg = Config()
    doc = health_promql.recording_rules(ph.DEFAULT_RULES, cfg.health_window_seconds,
                                        cfg.health_hostname_labels)
    (group,) = doc["groups"]
    coverage, *findings = group["rules"]
    assert coverage == {"record": health_promql.RECORDED_REPORTING,
                        "expr": health_promql.coverage_query(cfg.health_hostname_labels),
                        "labels": {health_promql.WINDOW_LABEL: "300s"}}
    direct = health_promql.rule_queries(ph.DEFAULT_RULES, cfg.health_window_seconds)
    assert {f["expr"] for f in findings} == set(direct.values())  # the same expressions
    assert {f["record"] for f in findings} == {health_promql.RECORDED_FINDING}
    by_group = {f["labels"][health_promql.GROUP_LABEL]: f["expr"] for f in findings}
    assert len(by_group) == len(findings)  # the label tells the groups apart
    assert by_group["xid-critical"] == direct["xid-memory"] == "DCGM_FI_DEV_XID_ERRORS > 0"
    assert by_group["nvlink-crc-flit-errors"] == direct["nvlink-crc-flit-error-rate"]


def test_a_source_in_recorded_mode_reads_two_selections_and_every_rule_from_a_group():
    cfg = Config(prometheus_url="http://127.0.0.1:1", health_query_mode="recorded")
    source = health.PrometheusHealth(cfg)
    assert source.coverage == health_promql.RECORDED_REPORTING
    assert set(source.queries.values()) == {health_promql.RECORDED_FINDING}
    assert source.reads["xid-memory"] == source.reads["xid-critical"] == "xid-critical"
    assert set(source.reads) == {r.name for r in ph.DEFAULT_RULES}
    assert not health.PrometheusHealth(Config(prometheus_url=cfg.prometheus_url)).recorded


def test_the_prometheus_rule_variant_wraps_the_same_groups(capsys):
    doc = yaml.safe_load(generated(["--format", "prometheusrule", "--name", "gpu-health"],
                                   capsys))
    assert doc["kind"] == "PrometheusRule" and doc["metadata"] == {"name": "gpu-health"}
    assert doc["spec"] == yaml.safe_load(COMMITTED.read_text())


def test_a_window_and_labels_of_ones_own(capsys):
    text = generated(["--window-seconds", "60", "--hostname-labels", "hostname"], capsys)
    assert "[60s]" in text and "count by (hostname) (DCGM_FI_DEV_XID_ERRORS)" in text


@pytest.mark.parametrize("argv", [["--window-seconds", "0"], ["--hostname-labels", ","]])
def test_bad_generator_input_is_one_line_and_exit_2(argv, capsys):
    assert health_promql.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("health_promql: ")


def test_the_query_mode_key_is_validated():
    assert config.parse({"healthQueryMode": "recorded"}).health_query_mode == \
        HealthQueryMode.RECORDED
    assert Config().health_query_mode == HealthQueryMode.DIRECT
    with pytest.raises(config.ConfigError, match="healthQueryMode must be one of direct, "
                                                 "recorded, not 'sometimes'"):
        config.parse({"healthQueryMode": "sometimes"})
