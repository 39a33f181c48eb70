"""The controller runs with exactly deploy/rbac/controller.yaml's permissions and with
deploy/admission's policies in force; --dry-run acts on nothing."""

from __future__ import annotations

import time

import pytest

from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    exists,
    plans,
    pod_events,
    priority_classes,
    reasons,
    running_controller,
)
from e2e.harness.trust import admission_policies, controller_rbac, reserved

pytestmark = pytest.mark.e2e


def test_controller_needs_only_its_deploy_rbac_and_passes_its_admission_policies(
        cluster, namespace, pool, gpu_nodes):
    """Drain with deadline, reservation taint and toleration, eviction, nomination, the stored
    plan, events and the Lease, all as the RBAC-limited user the policies exempt."""
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "victim", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node, checkpoint="on-request", checkpoint_seconds=2)
    kube.wait_pod_running(cluster, namespace, "victim")
    time.sleep(4)
    with controller_rbac(cluster, namespace) as api, \
            admission_policies(cluster, namespaces=[namespace], plan_namespace=namespace,
                               pool=pool), \
            running_controller(cluster, config_for(namespace), api=api) as ctl:
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
        # the controller lifts the reservation, so wait while it still runs
        kube.wait_for("the reservation taint to be lifted",
                      lambda: not reserved(cluster, node) or kube.NotYet(reserved(cluster, node)),
                      timeout=30)
        kube.wait_for("the plan to be stored as Done", lambda: [
            r.state for r in plans(cluster, namespace)] == [plan_record.State.DONE], timeout=30)
        assert ctl.metrics.loop_errors._value.get() == 0
    assert pod.spec.node_name == node
    assert [t.value for t in pod.spec.tolerations if t.key == "ckpt-preempt.io/reserved"] == [
        plans(cluster, namespace)[0].id]
    assert reasons(cluster, namespace, "victim") == [
        "CheckpointRequested", "CheckpointDeadlineExceeded", "Evicted"]


def test_dry_run_plans_and_reports_but_changes_nothing(cluster, namespace, pool, gpu_nodes):
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "victim", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node)
    kube.wait_pod_running(cluster, namespace, "victim")
    with running_controller(cluster, config_for(namespace, dry_run=True)):
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        kube.wait_event(cluster, namespace, "PreemptionPlanned", name="big", timeout=60)
        time.sleep(3)
    assert exists(cluster, namespace, "victim")
    big = cluster.core.read_namespaced_pod("big", namespace)
    assert plans(cluster, namespace) == []  # no plan stored
    assert big.spec.node_name is None and not big.status.nominated_node_name
    planned = [e for e in pod_events(cluster, namespace) if e.reason == "PreemptionPlanned"]
    assert len(planned) == 1 and planned[0].message.startswith("(dry run)")
