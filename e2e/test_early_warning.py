"""Early warning end to end (controller/planning/disruption.py) on the local control plane: a node
that
shows a disruption signal gets its checkpointing pods asked to checkpoint before anyone evicts.

- Karpenter's ``karpenter.sh/disrupted:NoSchedule`` taint: the on-request pod gets the drain
  request (a ``disruption/...`` plan, its own checkpoint-seconds as deadline) and an Event, as
  the controller's deploy RBAC user; a pod that cannot checkpoint, one in an excluded namespace
  and one outside the controller's scope get nothing; nothing is evicted, and an Eviction sent
  afterwards is not delayed by it;
- the taint flapping within the window asks nobody again; after the window it does;
- a cordon (``spec.unschedulable``) asks too;
- a replica that does not hold the Lease writes nothing, and asks once it takes over;
- a tenant can neither taint nor cordon a node, nor annotate another namespace's pod; a forged
  standing request on its own pod keeps only that pod from being asked, and delays nothing.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.controller.writes.leader import LeaseElector
from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.controller_run import config_for, reasons, running_controller
from e2e.harness.trust import controller_rbac, extra_namespace, tenant

pytestmark = pytest.mark.e2e
KARPENTER = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def taint(cluster, node: str, t: dict | None) -> None:
    """Add `t` to the node's taints, or (None) remove every karpenter.sh/disrupted taint."""
    live = cluster.core.read_node(node)
    taints = [x.to_dict() for x in live.spec.taints or [] if x.key != KARPENTER["key"]]
    body = [{k: v for k, v in x.items() if v is not None} for x in taints]
    cluster.core.patch_node(node, {"metadata": {"resourceVersion": live.metadata.resource_version},
                                   "spec": {"taints": body + ([t] if t else [])}})


def request_of(cluster, namespace: str, name: str) -> plan_record.DrainRequest | None:
    ann = cluster.core.read_namespaced_pod(name, namespace).metadata.annotations or {}
    raw = ann.get(plan_record.DRAIN_ANNOTATION)
    return plan_record.drain_from_annotation(raw) if raw else None


def wait_request(cluster, namespace: str, name: str, other_than: str = "",
                 timeout: float = 30) -> plan_record.DrainRequest:
    def probe():
        r = request_of(cluster, namespace, name)
        return r if r is not None and r.plan != other_than else kube.NotYet(r)
    return kube.wait_for(f"a drain request on {namespace}/{name}", probe, timeout=timeout)


def ack(cluster, namespace: str, name: str, plan: str) -> None:
    cluster.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {
        plan_record.DONE_ANNOTATION: plan}}})


def test_karpenter_taint_asks_the_checkpointing_pod_only_and_flapping_does_not_ask_again(
        cluster, namespace, pool, gpu_nodes):
    (node,) = gpu_nodes(1)
    with extra_namespace(cluster) as excluded, extra_namespace(cluster) as outside:
        kube.create_pod(cluster, namespace, "ckpt", gpus=4, pool=pool, node_name=node,
                        checkpoint="on-request", checkpoint_seconds=45)
        kube.create_pod(cluster, namespace, "plain", gpus=2, pool=pool, node_name=node)
        kube.create_pod(cluster, excluded, "ckpt", gpus=1, pool=pool, node_name=node,
                        checkpoint="on-request", checkpoint_seconds=45)
        kube.create_pod(cluster, outside, "ckpt", gpus=1, pool=pool, node_name=node,
                        checkpoint="on-request", checkpoint_seconds=45)
        for ns, name in ((namespace, "ckpt"), (namespace, "plain"), (excluded, "ckpt"),
                         (outside, "ckpt")):
            kube.wait_pod_running(cluster, ns, name)
        cfg = config_for(namespace, namespaces=(namespace, excluded),
                         early_warning_excluded_namespaces=(excluded,),
                         early_warning_window_seconds=8.0)
        with controller_rbac(cluster, namespace) as api, \
                running_controller(cluster, cfg, api=api) as ctl:
            time.sleep(2)
            assert request_of(cluster, namespace, "ckpt") is None  # no signal, no request
            t0 = time.time()
            taint(cluster, node, KARPENTER)
            first = wait_request(cluster, namespace, "ckpt")
            assert first.plan.startswith("disruption/")
            assert t0 - 1 <= first.requested and first.deadline - first.requested == 45
            kube.wait_event(cluster, namespace, Reason.DISRUPTION_CHECKPOINT_REQUESTED,
                            name="ckpt", timeout=10)
            time.sleep(2)
            for ns, name in ((namespace, "plain"), (excluded, "ckpt"), (outside, "ckpt")):
                assert request_of(cluster, ns, name) is None, (ns, name)
            # the agent acknowledges; the taint flaps within the window: nobody is asked again
            ack(cluster, namespace, "ckpt", first.plan)
            taint(cluster, node, None)
            time.sleep(1.5)
            taint(cluster, node, KARPENTER)
            time.sleep(3)
            assert request_of(cluster, namespace, "ckpt") == first
            assert reasons(cluster, namespace, "ckpt") == [Reason.DISRUPTION_CHECKPOINT_REQUESTED]
            # past the window, a new showing of the signal is a new round
            time.sleep(max(0.0, first.requested + 8.5 - time.time()))
            taint(cluster, node, None)
            time.sleep(1.5)
            taint(cluster, node, KARPENTER)
            second = wait_request(cluster, namespace, "ckpt", other_than=first.plan)
            assert second.plan.startswith("disruption/")
            assert ctl.metrics.loop_errors._value.get() == 0
        # early warning evicts nothing, and delays no eviction by itself
        assert "Evicted" not in reasons(cluster, namespace)
        assert cluster.core.read_namespaced_pod("ckpt", namespace).metadata.deletion_timestamp \
            is None
        kube.evict(cluster, namespace, "ckpt")  # answered at once (no 429)
        for ns in (excluded, outside):
            assert Reason.DISRUPTION_CHECKPOINT_REQUESTED not in reasons(cluster, ns)


def test_a_cordon_asks_and_a_follower_writes_nothing_until_it_leads(
        cluster, namespace, pool, gpu_nodes):
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "ckpt", gpus=8, pool=pool, node_name=node,
                    checkpoint="on-request", checkpoint_seconds=30)
    kube.wait_pod_running(cluster, namespace, "ckpt")
    cfg = config_for(namespace)
    holder = LeaseElector(kube.client_copy(cluster.api), name=cfg.lease_name,
                          namespace=cfg.lease_namespace, identity="other-replica",
                          duration=cfg.lease_duration_seconds,
                          renew_deadline=cfg.renew_deadline_seconds)
    holder.start()
    kube.wait_for("the other replica to lead", lambda: holder.is_leader, timeout=10)
    try:
        with running_controller(cluster, cfg, identity="follower") as ctl:
            time.sleep(2)  # its cache is synced; it follows
            assert not ctl.is_leader
            cluster.core.patch_node(node, {"spec": {"unschedulable": True}})
            time.sleep(4)
            assert request_of(cluster, namespace, "ckpt") is None
            assert reasons(cluster, namespace, "ckpt") == []
            holder.stop()  # releases the Lease: the follower takes over and asks
            got = wait_request(cluster, namespace, "ckpt", timeout=30)
            assert ctl.is_leader and got.plan.startswith("disruption/")
            assert got.deadline - got.requested == 30
            kube.wait_event(cluster, namespace, Reason.DISRUPTION_CHECKPOINT_REQUESTED,
                            name="ckpt", timeout=10)
    finally:
        holder.stop()
        cluster.core.patch_node(node, {"spec": {"unschedulable": False}})


def test_a_tenant_can_neither_signal_a_node_nor_reach_another_namespaces_pod(
        cluster, namespace, pool, gpu_nodes):
    """The tenant may create, get and list pods in its own namespace, nothing else. A forged
    standing drain request on its own pod changes only that pod (it is not asked again), never
    another namespace's, and delays no eviction."""
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "victim", gpus=4, pool=pool, node_name=node,
                    checkpoint="on-request", checkpoint_seconds=30)
    forged = plan_record.drain_to_annotation(plan_record.DrainRequest(
        plan="disruption/forged", requested=time.time(), deadline=time.time() + 86400))
    with extra_namespace(cluster) as own, tenant(cluster, own) as api:
        core = client.CoreV1Api(api)
        attempts = {
            "taint": lambda: core.patch_node(node, {"spec": {"taints": [KARPENTER]}}),
            "cordon": lambda: core.patch_node(node, {"spec": {"unschedulable": True}}),
            "annotate": lambda: core.patch_namespaced_pod("victim", namespace, {"metadata": {
                "annotations": {plan_record.DRAIN_ANNOTATION: forged}}}),
        }
        for what, call in attempts.items():
            with pytest.raises(ApiException) as e:
                call()
            assert e.value.status == 403, what
        live = cluster.core.read_node(node)
        assert not live.spec.unschedulable
        assert KARPENTER["key"] not in {t.key for t in live.spec.taints or []}
        core.create_namespaced_pod(own, kube.pod_body(
            "mine", gpus=4, pool=pool, node_name=node, checkpoint="on-request",
            checkpoint_seconds=30, annotations={plan_record.DRAIN_ANNOTATION: forged}))
        kube.wait_pod_running(cluster, namespace, "victim")
        kube.wait_pod_running(cluster, own, "mine")
        with running_controller(cluster, config_for(namespace, namespaces=(namespace, own))):
            time.sleep(2)
            taint(cluster, node, KARPENTER)  # the operator's taint
            asked = wait_request(cluster, namespace, "victim")
            assert asked.plan.startswith("disruption/") and asked.plan != "disruption/forged"
            time.sleep(2)
            assert request_of(cluster, own, "mine").plan == "disruption/forged"
            assert Reason.DISRUPTION_CHECKPOINT_REQUESTED not in reasons(cluster, own)
        kube.evict(cluster, own, "mine")  # its forged request holds nothing up
        kube.evict(cluster, namespace, "victim")
