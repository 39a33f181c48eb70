"""The chart carries the early-warning keys to the controller's config, and its schema refuses
what controller/core/config.py would refuse (render only, with the test bench's helm)."""

from __future__ import annotations

import pytest
import yaml

from ckpt_preempt.controller.core import config
from e2e.harness import chart

pytestmark = pytest.mark.e2e


def test_early_warning_values_reach_the_controller():
    values = {"config": {"earlyWarning": False, "earlyWarningWindowSeconds": 120,
                         "earlyWarningSignals": ["example.com/maintenance:NoExecute",
                                                 "karpenter.sh/disrupted"],
                         "earlyWarningExcludedNamespaces": ["kube-system"],
                         "evictionRequestResponder": "ckpt-preempt.io/checkpoint"}}
    cm = chart.find(chart.render("r", "ops", values), "ConfigMap")
    cfg = config.parse(yaml.safe_load(cm["data"]["config.yaml"]))
    assert not cfg.early_warning and cfg.early_warning_window_seconds == 120
    assert cfg.early_warning_signals == ("example.com/maintenance:NoExecute",
                                         "karpenter.sh/disrupted")
    assert cfg.early_warning_excluded_namespaces == ("kube-system",)
    assert cfg.eviction_request_responder == "ckpt-preempt.io/checkpoint"


@pytest.mark.parametrize(("bad", "says"), [
    ("config.earlyWarningSignals={karpenter.sh/disrupted:Sometimes}",
     "/config/earlyWarningSignals"),
    ("config.earlyWarningWindowSeconds=0", "/config/earlyWarningWindowSeconds"),
    ("config.evictionRequestResponder=checkpoint", "/config/evictionRequestResponder"),
    ("config.earlyWarning=maybe", "/config/earlyWarning"),
])
def test_schema_refuses_bad_early_warning_values(bad, says):
    done = chart.template("r", "ops", None, "--set", bad)
    assert done.returncode != 0 and says in done.stderr, done.stderr
    try:  # and the controller would refuse it too
        config.parse(yaml.safe_load("{" + bad.split(".", 1)[1].replace("=", ": ", 1) + "}"))
    except (config.ConfigError, yaml.YAMLError):
        pass
    else:
        pytest.fail(f"controller/core/config.py accepts {bad}")
