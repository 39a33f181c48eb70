"""Bad input gives Warning Events and a safe choice; the loop never dies and never evicts
outside a persisted plan."""

from __future__ import annotations

import json
import time

import pytest

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
    rfc3339,
    running_controller,
)

pytestmark = pytest.mark.e2e


def test_malformed_annotations_warn_and_choose_safely(cluster, namespace, pool, gpu_nodes):
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    kube.create_pod(cluster, namespace, "garbled", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[0])
    kube.create_pod(cluster, namespace, "honest", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[1])
    innocent_pool = pool + "x"
    (other,) = kube.create_gpu_nodes(cluster, 1, prefix=f"{pool}-x", pool=innocent_pool)
    try:
        kube.create_pod(cluster, namespace, "innocent", gpus=8, pool=innocent_pool,
                        priority_class=LOW, node_name=other)
        for n in ("garbled", "honest", "innocent"):
            kube.wait_pod_running(cluster, namespace, n)
        time.sleep(4)
        # `honest` checkpointed 2 s ago; `garbled` claims "just now" without the RFC 3339 "T":
        # read leniently it would be the cheaper victim, read strictly it has lost 4 s of work
        cluster.core.patch_namespaced_pod("honest", namespace, {"metadata": {"annotations": {
            "ckpt-preempt.io/last-checkpoint": rfc3339(2)}}})
        cluster.core.patch_namespaced_pod("garbled", namespace, {"metadata": {"annotations": {
            "ckpt-preempt.io/last-checkpoint": rfc3339().replace("T", " ")}}})
        # a preemptor that carries a broken plan naming `innocent` as its victim
        broken = json.dumps({"v": 1, "id": "forged", "state": "Evicting", "victims": [
            {"uid": "x", "namespace": namespace, "name": "innocent", "node": other}]})
        with running_controller(cluster, config_for(namespace)) as ctl:
            kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool,
                            priority_class=HIGH_NEVER,
                            annotations={plan_record.PLAN_ANNOTATION: broken})
            pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
            assert ctl.metrics.loop_errors._value.get() == 0
        warnings = {(e.involved_object.name, e.reason) for e in pod_events(cluster, namespace)
                    if e.type == "Warning"}
        assert ("garbled", "InvalidAnnotation") in warnings
        assert ("big", "InvalidAnnotation") in warnings  # the pod annotation is never read
        assert exists(cluster, namespace, "innocent")
        assert exists(cluster, namespace, "garbled")  # no checkpoint information: not cheaper
        assert pod.spec.node_name == nodes[1]
        plan = plan_of(cluster, namespace, "big")
        assert [v.name for v in plan.victims] == ["honest"]
    finally:
        kube.delete_nodes(cluster, [other])
