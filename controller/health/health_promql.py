"""The PromQL of GPU health: the direct queries, and the recording rules that precompute them.

One set of query groups, built from the rules data (``policies.model.health.DEFAULT_RULES``), feeds
both query modes (``healthQueryMode``):

- ``direct``: each refresh sends the coverage query and one query per group (``rule_queries``):
  Prometheus evaluates every ``rate()`` over the window for every GPU at each refresh.
- ``recorded``: Prometheus' rule evaluation runs the same expressions every
  ``evaluation_interval`` and records only their answers (``recording_rules``): the firing GPUs
  as ``ckpt_preempt:gpu_health_finding`` (label ``ckpt_preempt_rule_group``: the group's first
  rule), and the coverage count per node as ``ckpt_preempt:gpu_health_reporting`` (label
  ``ckpt_preempt_window``: the rate window the file was generated with). A refresh
  then selects those two small metrics (``RECORDED_QUERIES``). They lag by up to one
  evaluation interval (plus the group's evaluation time).

The window and the hostname labels are baked into the rules file: regenerate it when
``healthWindowSeconds`` or ``healthHostnameLabels`` change. The committed default
(deploy/dcgm/recording-rules.yaml) is what ``python -m
ckpt_preempt.controller.health.health_promql``
prints with the defaults; ``--format prometheusrule`` wraps the same groups in a
prometheus-operator ``PrometheusRule`` (monitoring.coreos.com/v1; github.com/prometheus-operator/
prometheus-operator Documentation/api-reference/api.md @ c29c5ec). Rules file format:
prometheus.io/docs/prometheus/2.42/configuration/recording_rules/.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import yaml

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.policies.model import health as ph
from ckpt_preempt.policies.model.health import Reading, Rule

RULES_GROUP = "ckpt-preempt-gpu-health"
RECORDED_FINDING = "ckpt_preempt:gpu_health_finding"
RECORDED_REPORTING = "ckpt_preempt:gpu_health_reporting"
GROUP_LABEL = "ckpt_preempt_rule_group"
WINDOW_LABEL = "ckpt_preempt_window"  # on the coverage series: the rate window baked in
PROMETHEUS_RULE_API = "monitoring.coreos.com/v1"
DEFAULT_RULES_NAME = "ckpt-preempt-gpu-health"


@dataclass(frozen=True)
class QueryGroup:
    """Rules reading one field the same way share one query, filtered by the loosest of their
    thresholds; `name` is the first member's name."""

    name: str
    expr: str
    members: tuple[str, ...]


def _floor(rule: Rule) -> tuple[float, bool]:
    """A value below which the rule cannot fire: (bound, strict). XID codes are positive."""
    return (0.0, True) if rule.codes else (rule.threshold, rule.strict)


def query_groups(rules: Iterable[Rule], window_s: float) -> tuple[QueryGroup, ...]:
    """The queries, for every GPU at once, each returning only the GPUs where one of its rules
    may fire (``Rule.fires`` decides)."""
    groups: dict[tuple, list[Rule]] = {}
    for r in rules:
        groups.setdefault((r.metric, r.reading, r.scale), []).append(r)
    out = []
    for (metric, reading, scale), members in groups.items():
        # No aggregation: it would cost Prometheus as much again as the selection, and only
        # the few series that pass the filter come back (several for one GPU: the highest).
        value = f"rate({metric}[{window_text(window_s)}])" if reading is Reading.RATE else metric
        if scale != 1.0:
            value += f" * {scale:g}"
        bound = min(_floor(r)[0] for r in members)
        strict = all(_floor(r)[1] for r in members if _floor(r)[0] == bound)
        out.append(QueryGroup(name=members[0].name,
                              expr=f"{value} {'>' if strict else '>='} {bound:g}",
                              members=tuple(r.name for r in members)))
    return tuple(out)


def window_text(window_s: float) -> str:
    return f"{int(window_s)}s"


def rule_queries(rules: Iterable[Rule], window_s: float) -> dict[str, str]:
    """Rule name -> its direct query (shared within a group)."""
    return {name: g.expr for g in query_groups(rules, window_s) for name in g.members}


def coverage_query(labels: Iterable[str]) -> str:
    """How many GPUs of each node report: those exporting the XID field, which
    dcgm-exporter's default counters enable (etc/default-counters.csv @ 4.5.3-4.8.2)."""
    return f"count by ({', '.join(labels)}) ({ph.XID})"


# The recorded mode's two queries: (coverage, findings).
RECORDED_QUERIES = (RECORDED_REPORTING, RECORDED_FINDING)


def recording_rules(rules: Iterable[Rule], window_s: float,
                    labels: Iterable[str]) -> dict:
    """The rules file (one group, evaluated at Prometheus' global evaluation_interval)."""
    recorded = [{"record": RECORDED_REPORTING, "expr": coverage_query(labels),
                 "labels": {WINDOW_LABEL: window_text(window_s)}}]
    recorded += [{"record": RECORDED_FINDING, "expr": g.expr, "labels": {GROUP_LABEL: g.name}}
                 for g in query_groups(rules, window_s)]
    return {"groups": [{"name": RULES_GROUP, "rules": recorded}]}


def prometheus_rule(rules: Iterable[Rule], window_s: float, labels: Iterable[str],
                    name: str = DEFAULT_RULES_NAME) -> dict:
    """The same groups as a prometheus-operator PrometheusRule object."""
    return {"apiVersion": PROMETHEUS_RULE_API, "kind": "PrometheusRule",
            "metadata": {"name": name}, "spec": recording_rules(rules, window_s, labels)}


def render(doc: dict, window_s: float, labels: Sequence[str]) -> str:
    head = ("# Generated by `python -m ckpt_preempt.controller.health.health_promql` from "
            "policies/model/health.py DEFAULT_RULES\n"
            f"# (window {int(window_s)}s, hostname labels {', '.join(labels)}): do not edit; "
            "regenerate when they change.\n")
    return head + yaml.safe_dump(doc, sort_keys=False, width=200)


def main(argv: list[str] | None = None) -> int:
    defaults = Config()
    ap = argparse.ArgumentParser(
        prog="python -m ckpt_preempt.controller.health.health_promql",
        description="Print the Prometheus recording rules of GPU health (healthQueryMode: "
                    "recorded).")
    ap.add_argument("--window-seconds", type=float, default=defaults.health_window_seconds,
                    help="healthWindowSeconds (default %(default)g)")
    ap.add_argument("--hostname-labels", default=",".join(defaults.health_hostname_labels),
                    help="healthHostnameLabels, comma-separated (default %(default)s)")
    ap.add_argument("--format", choices=("rules", "prometheusrule"), default="rules",
                    help="a Prometheus rules file, or a prometheus-operator PrometheusRule")
    ap.add_argument("--name", default=DEFAULT_RULES_NAME, help="the PrometheusRule's name")
    args = ap.parse_args(argv)
    labels = [x.strip() for x in args.hostname_labels.split(",") if x.strip()]
    if args.window_seconds < 1 or not labels:
        print("health_promql: --window-seconds must be >= 1 and --hostname-labels must name a "
              "label", file=sys.stderr)
        return 2
    doc = (prometheus_rule(ph.DEFAULT_RULES, args.window_seconds, labels, args.name)
           if args.format == "prometheusrule"
           else recording_rules(ph.DEFAULT_RULES, args.window_seconds, labels))
    sys.stdout.write(render(doc, args.window_seconds, labels))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
