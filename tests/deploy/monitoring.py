"""What the monitoring files in deploy/monitoring/ name, and what the code exports.

``exported_names()`` builds the controller's, the extender's and hwprobe's metric registries and
reads back every series name they can expose (a counter ``x`` as ``x_total`` and ``x_created``,
a histogram as ``_bucket``, ``_count``, ``_sum``, ``_created``), labelled or not.
``named_metrics(expr)`` is every metric name of ours a PromQL expression selects.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from ckpt_preempt.controller.core.metrics import Metrics
from ckpt_preempt.controller.extender.extender import ExtenderMetrics
from ckpt_preempt.hwprobe.serve import Metrics as HwprobeMetrics

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
ALERTS_CRD = MONITORING / "alerts.prometheusrule.yaml"
ALERTS_TESTS = MONITORING / "alerts.test.yaml"
DASHBOARD = MONITORING / "dashboard.json"
RUNBOOK = REPO / "docs" / "operations.md"
# Our metric names start with these (controller and extender, hwprobe); any other identifier in
# an expression is PromQL's (a function, a keyword) or a label name.
OUR_PREFIXES = ("ckpt_preempt_", "hwprobe_")
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",),
            "histogram": ("_bucket", "_count", "_sum", "_created")}


def registries() -> list[CollectorRegistry]:
    hwprobe = CollectorRegistry()
    HwprobeMetrics.create(hwprobe)
    return [Metrics().registry, ExtenderMetrics().registry, hwprobe]


def exported_names() -> set[str]:
    names = set()
    for registry in registries():
        for family in registry.collect():
            names |= {family.name + s for s in SUFFIXES[family.type]}
    return names


def named_metrics(expr: str) -> set[str]:
    without_matchers = re.sub(r"\{[^}]*\}", "", expr)  # label names and values
    words = re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", without_matchers)
    return {w for w in words if w.startswith(OUR_PREFIXES)}


def alert_groups() -> list[dict]:
    return yaml.safe_load(ALERTS.read_text())["groups"]


def alert_rules() -> list[dict]:
    return [rule for group in alert_groups() for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings: lower case, punctuation but hyphens and
    underscores dropped, spaces as hyphens; a repeated heading gets -1, -2, ..."""
    anchors: set[str] = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        text = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in anchors:
            n += 1
            candidate = f"{slug}-{n}"
        anchors.add(candidate)
    return anchors
