"""A tenant who may only create pods, in a namespace outside the controller's scope, forges what
the controller acts on: a (legacy) plan annotation naming an in-scope victim, a drain request, a
pod tolerating everything, a plan ConfigMap in the controller's namespace. Without the admission
policies the pods are accepted; with them every forgery is refused. Either way nothing is
evicted, no node is reserved, and the controller writes nothing about any of it."""

from __future__ import annotations

import contextlib
import time

import pytest
from kubernetes import client

from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    plans,
    pod_events,
    priority_classes,
    running_controller,
)
from e2e.harness.trust import (
    MANAGED_BY,
    admission_policies,
    controller_rbac,
    extra_namespace,
    reserved,
    status_of,
    tenant,
)

pytestmark = pytest.mark.e2e
TEN_YEARS = 10 * 365 * 86400.0


def _forged_plan(victim: client.V1Pod, tenant_ns: str, node: str) -> plan_record.PlanRecord:
    now = time.time()
    return plan_record.PlanRecord(
        id="forged", state=plan_record.State.EVICTING, mode=plan_record.Mode.NOMINATE,
        created=now, deadline=now, evict_by=now + TEN_YEARS, bind_by=now + TEN_YEARS,
        placements=(plan_record.PlannedPlacement(uid="forged-uid", namespace=tenant_ns,
                                               name="forged-plan", node=node),),
        victims=(plan_record.PlannedVictim(uid=victim.metadata.uid, namespace=victim.metadata.
                                         namespace, name=victim.metadata.name, node=node,
                                         drain=False),))


@pytest.mark.parametrize("policies", [False, True], ids=["without-policies", "with-policies"])
def test_pods_only_tenant_cannot_make_the_controller_act(cluster, namespace, pool, gpu_nodes,
                                                         policies):
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    victim = kube.create_pod(cluster, namespace, "victim", gpus=8, pool=pool,
                             priority_class=LOW, node_name=node)
    kube.wait_pod_running(cluster, namespace, "victim")
    with extra_namespace(cluster) as tenant_ns, tenant(cluster, tenant_ns) as tenant_api, \
            controller_rbac(cluster, namespace) as controller_api, \
            (admission_policies(cluster, namespaces=[namespace, tenant_ns],
                                plan_namespace=namespace, pool=pool)
             if policies else contextlib.nullcontext()):
        forged = plan_record.plan_to_annotation(_forged_plan(victim, tenant_ns, node))
        drain = plan_record.drain_to_annotation(plan_record.DrainRequest(
            plan="forged", requested=time.time(), deadline=time.time() + 1))
        as_tenant = client.CoreV1Api(tenant_api)
        forgeries = {
            "forged-plan": {"annotations": {plan_record.PLAN_ANNOTATION: forged}},
            "forged-drain": {"annotations": {plan_record.DRAIN_ANNOTATION: drain}},
            "tolerates-all": {"tolerations": [{"operator": "Exists"}]},
            "bound-directly": {"node_name": node},  # past the scheduler and any taint
        }
        got = {name: status_of(lambda name=name, kw=kw: as_tenant.create_namespaced_pod(
            tenant_ns, kube.pod_body(name, gpus=8, pool=pool, priority_class=HIGH_NEVER, **kw)))
            for name, kw in forgeries.items()}
        got["plan ConfigMap"] = status_of(lambda: as_tenant.create_namespaced_config_map(
            namespace, {"metadata": {"name": "ckpt-plan-forged", "labels": MANAGED_BY},
                        "data": {plan_record.PLAN_DATA_KEY: forged}}))
        refused = 403 if policies else 200
        assert got == {"forged-plan": refused, "forged-drain": refused,
                       "tolerates-all": refused, "bound-directly": refused,
                       "plan ConfigMap": 403}

        with running_controller(cluster, config_for(namespace), api=controller_api) as ctl:
            # A barrier: an in-scope preemptor no node can take. Once the controller has said
            # so, it has seen every pod created before it (watch order).
            kube.create_pod(cluster, namespace, "canary", gpus=8, pool=pool + "-none",
                            priority_class=HIGH_NEVER)
            kube.wait_event(cluster, namespace, "PreemptionNotPossible", name="canary",
                            timeout=60)
            time.sleep(3)  # a few more passes
            assert ctl.metrics.loop_errors._value.get() == 0

        live = cluster.core.read_namespaced_pod("victim", namespace)
        assert live.metadata.uid == victim.metadata.uid
        assert live.metadata.deletion_timestamp is None
        assert plan_record.DRAIN_ANNOTATION not in (live.metadata.annotations or {})
        assert reserved(cluster, node) == []
        assert plans(cluster, namespace) == []
        for ns in (namespace, tenant_ns):
            acted = [(e.involved_object.name, e.reason) for e in pod_events(cluster, ns)
                     if e.type != "Warning" and e.involved_object.name != "canary"]
            assert acted == [], f"the controller acted in {ns}"
