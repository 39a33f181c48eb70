"""The controller runs with exactly deploy/rbac/controller.yaml's permissions; --dry-run acts
on nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from e2e import kube
from e2e.test_controller_support import (
    HIGH_NEVER,
    LOW,
    config_for,
    exists,
    pod_events,
    priority_classes,
    reasons,
    running_controller,
)

pytestmark = pytest.mark.e2e
RBAC = Path(__file__).resolve().parents[1] / "deploy/rbac/controller.yaml"
USER = "ckpt-preempt-controller"


@pytest.fixture
def controller_rbac(cluster, namespace):
    """deploy/rbac/controller.yaml, bound to the e2e user instead of the ServiceAccount and
    with the Lease Role in the test namespace."""
    docs = {d["kind"]: d for d in yaml.safe_load_all(RBAC.read_text())}
    subject = [{"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"}]
    role = {**docs["ClusterRole"], "metadata": {"name": f"e2e-{namespace}"}}
    binding = {**docs["ClusterRoleBinding"], "metadata": {"name": f"e2e-{namespace}"},
               "roleRef": {**docs["ClusterRoleBinding"]["roleRef"], "name": f"e2e-{namespace}"},
               "subjects": subject}
    lease_role = {**docs["Role"], "metadata": {"name": "lease", "namespace": namespace}}
    lease_binding = {**docs["RoleBinding"], "metadata": {"name": "lease", "namespace": namespace},
                     "roleRef": {**docs["RoleBinding"]["roleRef"], "name": "lease"},
                     "subjects": subject}
    cluster.rbac.create_cluster_role(role)
    cluster.rbac.create_cluster_role_binding(binding)
    cluster.rbac.create_namespaced_role(namespace, lease_role)
    cluster.rbac.create_namespaced_role_binding(namespace, lease_binding)
    yield cluster.client_for(USER)
    cluster.rbac.delete_cluster_role_binding(f"e2e-{namespace}")
    cluster.rbac.delete_cluster_role(f"e2e-{namespace}")


def test_controller_needs_only_its_deploy_rbac(cluster, namespace, pool, gpu_nodes,
                                               controller_rbac):
    """Drain with deadline, reservation taint, eviction, nomination, events and the Lease, all
    as the RBAC-limited user."""
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "victim", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node, checkpoint="on-request", checkpoint_seconds=2)
    kube.wait_pod_running(cluster, namespace, "victim")
    time.sleep(4)
    with running_controller(cluster, config_for(namespace), api=controller_rbac) as ctl:
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)

        def lifted():
            taints = cluster.core.read_node(node).spec.taints or []
            return not any(t.key == "ckpt-preempt.io/reserved" for t in taints) or kube.NotYet(
                str(taints))

        # the controller lifts the reservation, so wait while it still runs
        kube.wait_for("the reservation taint to be lifted", lifted, timeout=30)
        assert ctl.metrics.loop_errors._value.get() == 0
    assert pod.spec.node_name == node
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
    assert "ckpt-preempt.io/plan" not in (big.metadata.annotations or {})
    assert big.spec.node_name is None
    planned = [e for e in pod_events(cluster, namespace) if e.reason == "PreemptionPlanned"]
    assert len(planned) == 1 and planned[0].message.startswith("(dry run)")
