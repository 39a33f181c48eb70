"""Controller scenario: report parity (policies.planner.parity) on a real control plane. Of two
periodic pods preempted equally often (never), the one that publishes its checkpoints is held
back and the silent one goes; with ``reportParity: false`` loss alone takes the reporter."""

from __future__ import annotations

import time

import pytest

from ckpt_preempt.policies.model import annotations as ann
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    exists,
    plan_of,
    priority_classes,
    rfc3339,
    running_controller,
)

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("parity", [True, False], ids=["parity-on", "parity-off"])
def test_the_silent_periodic_pod_goes_before_the_one_that_reports(
        cluster, namespace, pool, gpu_nodes, parity):
    """Two 8-GPU periodic pods, one per node: ``silent`` started first and reports nothing (its
    whole run is charged), ``reporter`` checkpointed after it started (a few seconds charged).
    A 1-GPU preemptor needs one of them: with parity the silent one, though it loses more;
    without it the reporter. The other pod is never evicted."""
    priority_classes(cluster)
    first, second = gpu_nodes(2)
    periodic = {ann.CHECKPOINT: "periodic"}
    kube.create_pod(cluster, namespace, "silent", gpus=8, pool=pool, priority_class=LOW,
                    node_name=first, annotations=periodic)
    kube.wait_pod_running(cluster, namespace, "silent")
    kube.create_pod(cluster, namespace, "reporter", gpus=8, pool=pool, priority_class=LOW,
                    node_name=second, annotations=periodic)
    kube.wait_pod_running(cluster, namespace, "reporter")
    time.sleep(2)  # the checkpoint comes after its start (RFC 3339 has whole seconds)
    cluster.core.patch_namespaced_pod("reporter", namespace, {"metadata": {"annotations": {
        ann.LAST_CHECKPOINT: rfc3339()}}})
    time.sleep(3)
    with running_controller(cluster, config_for(namespace, report_parity=parity)):
        kube.create_pod(cluster, namespace, "urgent", gpus=1, pool=pool,
                        priority_class=HIGH_NEVER)
        rec = kube.wait_for("a plan for the preemptor",
                            lambda: plan_of(cluster, namespace, "urgent")
                            or kube.NotYet("no plan"), timeout=30)
        victim, spared, node = (("silent", "reporter", first) if parity
                                else ("reporter", "silent", second))
        assert [v.name for v in rec.victims] == [victim]
        pod = kube.wait_pod_running(cluster, namespace, "urgent", timeout=90)
        assert pod.spec.node_name == node
        assert exists(cluster, namespace, spared)
