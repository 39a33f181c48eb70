"""The chart's hwprobe own-node admission policy names hwprobe's keys as literals (YAML cannot
import Python): they must be the keys hwprobe writes and the planner reads."""

import re
from pathlib import Path

from ckpt_preempt.hwprobe.report import LABEL_PREFIX
from ckpt_preempt.policies.model.gpu_use import ANNOTATION as GPU_USE_ANNOTATION
from ckpt_preempt.policies.model.topology import ANNOTATION

TEMPLATE = Path(__file__).resolve().parents[2] / "deploy/helm/ckpt-preempt/templates/hwprobe.yaml"


def _variable(name: str) -> str:
    """The CEL string literal a policy variable is set to."""
    m = re.search(rf"- name: {name}\n\s+expression: \"'([^']+)'\"", TEMPLATE.read_text())
    assert m, f"variable {name} not found in {TEMPLATE}"
    return m.group(1)


def test_policy_keys_are_the_python_constants():
    assert _variable("annotation") == ANNOTATION
    assert _variable("gpuUseAnnotation") == GPU_USE_ANNOTATION
    assert _variable("labelPrefix") == LABEL_PREFIX


def test_policy_messages_name_the_same_keys():
    text = TEMPLATE.read_text()
    assert f"only change labels under {LABEL_PREFIX}\n" in text
    assert (f"only change the annotations {ANNOTATION} and\n        {GPU_USE_ANNOTATION}\n"
            in text)
