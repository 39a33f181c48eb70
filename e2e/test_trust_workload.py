"""A tenant who may only create, get and list pods tries to shield a big pod behind preemptions
it did not suffer. Its small workload was preempted once (a plan stored as the controller stores
it), so with a bound of one preemption per window the workload may not be preempted again. The
tenant then creates an 8-GPU pod whose controlling owner is that workload. The history covers
only as many GPUs as the workload held when preempted (``policies.planner.bound.attributable``):
a preemptor that needs the node takes the new pod. The control: had the workload held 8 GPUs
when preempted, the same pod is held and the preemptor waits, saying why."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.model import RejectReason
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
from e2e.harness.trust import store_plan, tenant

pytestmark = pytest.mark.e2e


def _preempted_once(workload: str, namespace: str, node: str, gpus: float
                    ) -> plan_record.PlanRecord:
    """A finished plan of a minute ago that evicted a pod of ``workload`` while the workload
    held ``gpus`` GPUs."""
    then = time.time() - 60
    return plan_record.PlanRecord(
        id="earlier", state=plan_record.State.DONE, mode=plan_record.Mode.NOMINATE,
        created=then, deadline=then, evict_by=then + 30, bind_by=then + 60,
        placements=(plan_record.PlannedPlacement(uid="earlier-preemptor", namespace=namespace,
                                                 name="earlier-preemptor", node=node),),
        victims=(plan_record.PlannedVictim(uid="earlier-victim", namespace=namespace,
                                           name="earlier-victim", node=node, drain=False,
                                           workload=workload, workload_gpus=gpus),))


@pytest.mark.parametrize(("recorded", "shielded"), [
    pytest.param(1.0, False, id="workload held 1 GPU when preempted: the new pod goes"),
    pytest.param(8.0, True, id="workload held 8 GPUs when preempted: the pod is held"),
])
def test_a_tenant_cannot_shield_a_pod_behind_history_its_workload_did_not_earn(
        cluster, namespace, pool, gpu_nodes, recorded, shielded):
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    with tenant(cluster, namespace) as tenant_api:
        as_tenant = client.CoreV1Api(tenant_api)
        anchor = as_tenant.create_namespaced_pod(namespace, kube.pod_body(
            "anchor", pool=pool, priority_class=LOW, node_name=node))
        store_plan(cluster, namespace, _preempted_once(anchor.metadata.uid, namespace, node,
                                                       recorded))
        body = kube.pod_body("big", gpus=8, pool=pool, priority_class=LOW, node_name=node)
        body["metadata"]["ownerReferences"] = [{
            "apiVersion": "v1", "kind": "Pod", "name": "anchor", "uid": anchor.metadata.uid,
            "controller": True}]
        as_tenant.create_namespaced_pod(namespace, body)
    kube.wait_pod_running(cluster, namespace, "big")
    cfg = config_for(namespace, max_preemptions_per_window=1)
    with running_controller(cluster, cfg):
        kube.create_pod(cluster, namespace, "urgent", gpus=8, pool=pool,
                        priority_class=HIGH_NEVER)
        if not shielded:
            rec = kube.wait_for("a plan for the preemptor",
                                lambda: plan_of(cluster, namespace, "urgent")
                                or kube.NotYet("no plan"), timeout=30)
            assert [(v.name, v.workload, v.workload_gpus) for v in rec.victims] == [
                ("big", f"{namespace}/owner/{anchor.metadata.uid}", 8.0)]
            kube.wait_pod_running(cluster, namespace, "urgent", timeout=90)
            assert not exists(cluster, namespace, "big")
            return
        note = kube.wait_for("the preemptor told why it waits", lambda: next(
            (e for e in pod_events(cluster, namespace)
             if e.involved_object.name == "urgent"
             and e.reason == Reason.PREEMPTION_NOT_POSSIBLE), None)
            or kube.NotYet([e.reason for e in pod_events(cluster, namespace)]), timeout=30)
        assert str(RejectReason.VICTIMS_AT_BOUND) in note.message
        time.sleep(3)  # a few more cycles: still nothing planned, nothing evicted
        assert plan_of(cluster, namespace, "urgent") is None
        assert exists(cluster, namespace, "big")
