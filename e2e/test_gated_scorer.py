"""A gated gang that fits without preemption is admitted where our placement scorer puts it
(policies/placement/admission.py), not where best fit would (tests/policies/
test_admission_placement.py has the same layout as a unit test, with best fit's choice)."""

from __future__ import annotations

import pytest

from ckpt_preempt.controller.kube.records import ADMISSION_GATE
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    priority_classes,
    reasons,
    running_controller,
)

pytestmark = pytest.mark.e2e


def test_gated_gang_is_admitted_onto_the_nodes_the_scorer_prefers(
        cluster, namespace, pool, gpu_nodes):
    # "roomy" has 6 of 8 GPUs free, "tight" 4. Best fit would put both 1-GPU members on
    # "tight" (4 -> 2 free: no 4-GPU pod like its occupant fits there any more, and "roomy"
    # keeps 6, room for one). Our scorer keeps a 4-GPU slot on each node: both go to "roomy".
    priority_classes(cluster)
    roomy, tight = gpu_nodes(2)
    for name, node, gpus in (("two", roomy, 2), ("four", tight, 4)):
        kube.create_pod(cluster, namespace, name, gpus=gpus, pool=pool, priority_class=LOW,
                        node_name=node)
        kube.wait_pod_running(cluster, namespace, name)
    members = [p.metadata.name for p in kube.create_gang(
        cluster, namespace, "pair", 2, gpus=1, pool=pool, priority_class=HIGH_NEVER,
        scheduling_gates=[ADMISSION_GATE])]
    with running_controller(cluster, config_for(namespace)):
        pods = [kube.wait_pod_running(cluster, namespace, m, timeout=60) for m in members]
        for m in members:  # emitted once the controller has seen the plan through (Done)
            kube.wait_event(cluster, namespace, "GangAdmitted", name=m, timeout=30)
    assert [p.spec.node_name for p in pods] == [roomy, roomy]
    for name in ("two", "four"):  # nothing was preempted
        assert kube.wait_pod_running(cluster, namespace, name).spec.node_name
        assert "Evicted" not in reasons(cluster, namespace, name)
