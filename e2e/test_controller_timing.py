"""Controller scenario: a plan that waits for its victim's declared end (policies.planner.timing)
instead of evicting it, on a real control plane."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from kubernetes import client

from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model import annotations as ann
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    exists,
    plan_of,
    pod_events,
    priority_classes,
    rfc3339,
    running_controller,
)
from e2e.harness.trust import extra_namespace, tenant

pytestmark = pytest.mark.e2e


def test_a_victim_that_ends_as_declared_is_waited_for_and_never_evicted(
        cluster, namespace, pool, gpu_nodes):
    """The 8-GPU victim declares it ends 35 s after it starts; after 25 s of work, evicting it
    loses 8 × 25 GPU-s, waiting costs the 1-GPU preemptor about a minute: the plan waits
    (victim wait: end). The victim then goes by itself (deleted here, as a finished Job's pod
    would stop running): the preemptor runs, and the victim was never evicted nor asked to
    checkpoint."""
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "finisher", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node, annotations={ann.EXPECTED_END: rfc3339(-35)})
    started = time.time()
    kube.wait_pod_running(cluster, namespace, "finisher")
    time.sleep(max(0.0, 25 - (time.time() - started)))
    with running_controller(cluster, config_for(namespace)):
        kube.create_pod(cluster, namespace, "urgent", gpus=1, pool=pool,
                        priority_class=HIGH_NEVER)

        def waiting():
            rec = plan_of(cluster, namespace, "urgent")
            return rec if rec and rec.state is plan_record.State.DRAINING else kube.NotYet(
                f"plan={rec and rec.state}")
        rec = kube.wait_for("the plan to wait", waiting, timeout=30)
        assert [(v.name, v.drain, v.wait) for v in rec.victims] == [("finisher", False, "end")]
        time.sleep(3)
        assert exists(cluster, namespace, "finisher")  # not evicted while it waits
        cluster.core.delete_namespaced_pod("finisher", namespace, grace_period_seconds=0)
        pod = kube.wait_pod_running(cluster, namespace, "urgent", timeout=90)
    assert pod.spec.node_name == node
    victim_events = [e.reason for e in pod_events(cluster, namespace)
                     if e.involved_object.name == "finisher"]
    assert "Evicted" not in victim_events and "CheckpointRequested" not in victim_events


def test_a_tenants_false_end_makes_only_its_own_pod_the_victim_and_it_is_evicted_anyway(
        cluster, namespace, pool, gpu_nodes):
    """The attack on victims chosen knowing their ends (``timing.end_rate``): a tenant who may
    only create pods in its namespace declares an end its pod never reaches. Its pod is the
    older of two 8-GPU victims, so by lost work alone the honest pod is the victim (8 × ~15 GPU-s
    against 8 × ~60); with the end in view the liar's charge is the 1-GPU preemptor's wait for
    it (~40 GPU-s), so the lie makes its own pod the victim, never the honest pod cheaper. The
    liar never ends: the controller evicts it at the plan's deadline, the preemptor runs on its
    node, and the honest pod is never evicted nor asked to checkpoint."""
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    with extra_namespace(cluster) as tenant_ns, tenant(cluster, tenant_ns) as tenant_api:
        as_tenant = client.CoreV1Api(tenant_api)
        # plan time T = the liar's start + 60 s; its end is declared for T - 20 s, seen
        # (+ the 60 s report margin) at T + 40 s: the plan has 40 s to come
        declared_end = time.time() + 40
        as_tenant.create_namespaced_pod(tenant_ns, kube.pod_body(
            "liar", gpus=8, pool=pool, priority_class=LOW,
            annotations={ann.EXPECTED_END: _at(declared_end)}))
        liar = kube.wait_pod_running(cluster, tenant_ns, "liar")
        (other,) = [n for n in nodes if n != liar.spec.node_name]
        time.sleep(max(0.0, declared_end + 5 - time.time()))
        kube.create_pod(cluster, namespace, "honest", gpus=8, pool=pool, priority_class=LOW,
                        node_name=other)
        kube.wait_pod_running(cluster, namespace, "honest")
        time.sleep(max(0.0, declared_end + 20 - time.time()))
        cfg = config_for(namespace, namespaces=(namespace, tenant_ns))
        with running_controller(cluster, cfg):
            kube.create_pod(cluster, namespace, "urgent", gpus=1, pool=pool,
                            priority_class=HIGH_NEVER)
            rec = kube.wait_for("a plan for the preemptor",
                                lambda: plan_of(cluster, namespace, "urgent")
                                or kube.NotYet("no plan"), timeout=30)
            assert [(v.namespace, v.name, v.wait) for v in rec.victims] == [
                (tenant_ns, "liar", "end")]
            pod = kube.wait_pod_running(cluster, namespace, "urgent", timeout=120)
            assert pod.spec.node_name == liar.spec.node_name
            assert not exists(cluster, tenant_ns, "liar")  # evicted: it never ended
            assert exists(cluster, namespace, "honest")
        honest_events = {e.reason for e in pod_events(cluster, namespace)
                         if e.involved_object.name == "honest"}
        assert not honest_events & {"Evicted", "CheckpointRequested"}
        assert "Evicted" in {e.reason for e in pod_events(cluster, tenant_ns)
                             if e.involved_object.name == "liar"}


def _at(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

