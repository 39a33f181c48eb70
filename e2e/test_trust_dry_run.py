"""--dry-run over a plan a previous (real) controller left Draining: the dry-run replica evicts
nothing and writes nothing but Events, although the plan's deadline passes while it runs. A
real controller then carries out the very same plan, so there was something to refrain from."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    exists,
    plan_of,
    pod_events,
    priority_classes,
    running_controller,
)
from e2e.harness.trust import reserved, store_plan

pytestmark = pytest.mark.e2e
CHECKPOINT_SECONDS = 3.0


def _draining_plan(victim: client.V1Pod, preemptor: client.V1Pod, node: str):
    now = time.time()
    deadline = now + CHECKPOINT_SECONDS
    return plan_record.PlanRecord(
        id="left-draining", state=plan_record.State.DRAINING, mode=plan_record.Mode.NOMINATE,
        created=now, deadline=deadline, evict_by=deadline + 60, bind_by=deadline + 120,
        placements=(plan_record.PlannedPlacement(
            uid=preemptor.metadata.uid, namespace=preemptor.metadata.namespace,
            name=preemptor.metadata.name, node=node),),
        victims=(plan_record.PlannedVictim(
            uid=victim.metadata.uid, namespace=victim.metadata.namespace,
            name=victim.metadata.name, node=node, drain=True),))


def _written_state(c: kube.Cluster, namespace: str, node: str) -> dict:
    """What a write by the controller would change (resourceVersions, and the node's taints:
    kwok's heartbeats change a node's resourceVersion)."""
    return {
        "pods": {p.metadata.name: p.metadata.resource_version
                 for p in c.core.list_namespaced_pod(namespace).items},
        "configmaps": {m.metadata.name: m.metadata.resource_version
                       for m in c.core.list_namespaced_config_map(namespace).items},
        "node taints": [t.to_dict() for t in c.core.read_node(node).spec.taints or []],
    }


def test_dry_run_over_a_persisted_draining_plan_evicts_and_writes_nothing(
        cluster, namespace, pool, gpu_nodes):
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    victim = kube.create_pod(cluster, namespace, "victim", gpus=8, pool=pool, priority_class=LOW,
                             node_name=node, checkpoint="on-request",
                             checkpoint_seconds=int(CHECKPOINT_SECONDS))
    kube.wait_pod_running(cluster, namespace, "victim")
    big = kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool,
                          priority_class=HIGH_NEVER)
    kube.wait_pod_unschedulable(cluster, namespace, "big")
    record = _draining_plan(victim, big, node)
    store_plan(cluster, namespace, record)
    cluster.core.patch_namespaced_pod("victim", namespace, {"metadata": {"annotations": {
        plan_record.DRAIN_ANNOTATION: plan_record.drain_to_annotation(plan_record.DrainRequest(
            plan=record.id, requested=record.created, deadline=record.deadline))}}})
    before = _written_state(cluster, namespace, node)
    cfg = config_for(namespace)

    with running_controller(cluster, config_for(namespace, dry_run=True), identity="dry"):
        kube.wait_event(cluster, namespace, "PreemptionPlanned", name="big", timeout=60)
        time.sleep(max(0.0, record.deadline - time.time()) + 3)  # past the deadline
        after = _written_state(cluster, namespace, node)
    assert after == before
    assert reserved(cluster, node) == []
    assert not [e for e in pod_events(cluster, namespace) if e.reason == "Evicted"]
    assert all(e.reporting_instance == "dry" for e in pod_events(cluster, namespace))
    leases = [x.metadata.name for x in cluster.coordination.list_namespaced_lease(namespace).items]

    with running_controller(cluster, cfg, identity="real"):
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=60)
        kube.wait_for("the stored plan to be Done", lambda: (
            plan_of(cluster, namespace, "big") or record).state is plan_record.State.DONE,
            timeout=30)
    assert pod.spec.node_name == node
    assert not exists(cluster, namespace, "victim")
    assert plan_of(cluster, namespace, "big").id == record.id
    # Checked last, so that the rest is known to hold either way: a dry-run replica holding the
    # Lease would keep the real replicas from acting.
    assert cfg.lease_name not in leases, "the dry-run replica wrote the leader Lease"
