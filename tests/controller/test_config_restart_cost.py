"""restartCostSeconds: the shipped default (chosen by bench/restart_cost.py) and bad values."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ckpt_preempt.controller.core import config
from ckpt_preempt.controller.kube import convert

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "ckpt-preempt"


def test_the_default_restart_charge_is_the_measured_one_everywhere_it_is_written():
    assert config.Config().restart_cost_seconds == config.RESTART_COST_SECONDS > 0
    assert convert.planner_config(config.Config()).restart_seconds == config.RESTART_COST_SECONDS
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["config"]["restartCostSeconds"] == config.RESTART_COST_SECONDS
    schema = json.loads((CHART / "values.schema.json").read_text())
    rule = schema["properties"]["config"]["properties"]["restartCostSeconds"]
    assert rule["type"] == "number" and rule["minimum"] == 0
    assert config.parse({"restartCostSeconds": 0}).restart_cost_seconds == 0  # off stays off


@pytest.mark.parametrize("bad", [-1, -0.5, "300", True, None, [300], math.inf, -math.inf,
                                 math.nan])
def test_a_bad_restart_charge_is_rejected_in_one_line(bad):
    with pytest.raises(config.ConfigError, match="restartCostSeconds") as err:
        config.parse({"restartCostSeconds": bad})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["restartCostSeconds: .inf\n", "restartCostSeconds: -60\n",
                                  "restartCostSeconds: five minutes\n"])
def test_the_controller_refuses_a_bad_restart_charge_with_one_line_and_exit_2(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    out = subprocess.run([sys.executable, "-m", "ckpt_preempt.controller.app.cli", "run",
                          "--config", str(path)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "restartCostSeconds" in out.stderr


def test_the_per_workload_restart_charge_reaches_the_planner_and_bad_values_are_refused():
    from ckpt_preempt.controller.kube import convert

    assert convert.planner_config(config.Config()).restart_workload_gpu_seconds == 0.0
    got = convert.planner_config(config.parse({"restartCostGpuSecondsPerWorkload": 300}))
    assert got.restart_workload_gpu_seconds == 300.0
    for bad in (-1, math.inf, "five"):
        with pytest.raises(config.ConfigError, match="restartCostGpuSecondsPerWorkload"):
            config.parse({"restartCostGpuSecondsPerWorkload": bad})
