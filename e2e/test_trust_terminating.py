"""A victim that stays Terminating (a finalizer, as a real kubelet's grace period or a stuck
volume would keep it) for 30 s: exactly one eviction. The plan holds its node and its victim
until the victim is gone and the preemptor is bound; nothing else is evicted meanwhile."""

from __future__ import annotations

import time

import pytest
from kubernetes.client.rest import ApiException

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
    rfc3339,
    running_controller,
)

pytestmark = pytest.mark.e2e
HOLD = "e2e.ckpt-preempt.io/hold"
HELD_SECONDS = 30


def _evicted(c: kube.Cluster, namespace: str) -> list[str]:
    return [e.involved_object.name for e in pod_events(c, namespace) if e.reason == "Evicted"]


def _release(c: kube.Cluster, namespace: str, name: str) -> None:
    try:
        c.core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})
    except ApiException as e:
        if e.status != 404:
            raise


def test_victim_terminating_for_30s_is_evicted_once_and_the_plan_waits_for_it(
        cluster, namespace, pool, gpu_nodes):
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    held = kube.pod_body("held", gpus=8, pool=pool, priority_class=LOW, node_name=nodes[0])
    held["metadata"]["finalizers"] = [HOLD]
    cluster.core.create_namespaced_pod(namespace, held)
    kube.create_pod(cluster, namespace, "bystander", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[1], last_checkpoint=rfc3339(3600))  # i.e. at its start
    try:
        kube.wait_pod_running(cluster, namespace, "held")
        kube.wait_pod_running(cluster, namespace, "bystander")
        time.sleep(3)  # `held` checkpoints now: the cheaper victim by 3 s x 8 GPUs of work
        cluster.core.patch_namespaced_pod("held", namespace, {"metadata": {"annotations": {
            "ckpt-preempt.io/last-checkpoint": rfc3339()}}})
        with running_controller(cluster, config_for(namespace)) as ctl:
            kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool,
                            priority_class=HIGH_NEVER)
            kube.wait_for("the victim to be Terminating", lambda: cluster.core.
                          read_namespaced_pod("held", namespace).metadata.deletion_timestamp,
                          timeout=60)
            until = time.monotonic() + HELD_SECONDS
            while time.monotonic() < until:
                stored = plans(cluster, namespace)
                assert [r.state.terminal for r in stored] == [False], stored
                assert exists(cluster, namespace, "bystander")
                assert _evicted(cluster, namespace) == ["held"]
                time.sleep(1)
            _release(cluster, namespace, "held")
            pod = kube.wait_pod_running(cluster, namespace, "big", timeout=60)
            kube.wait_for("the plan to be stored as Done", lambda: [
                r.state for r in plans(cluster, namespace)] == [plan_record.State.DONE],
                timeout=30)
            assert ctl.metrics.loop_errors._value.get() == 0
    finally:
        _release(cluster, namespace, "held")
    assert pod.spec.node_name == nodes[0]
    assert exists(cluster, namespace, "bystander")
    assert _evicted(cluster, namespace) == ["held"]
    (plan,) = plans(cluster, namespace)
    assert [v.name for v in plan.victims] == ["held"]
