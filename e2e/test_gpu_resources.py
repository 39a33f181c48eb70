"""GPU resources beyond ``nvidia.com/gpu`` on the local control plane: MIG slices count as their
fraction of a GPU, and DRA pods count the GPUs their ResourceClaims hold or ask for
(controller/core/gpu_resources.py, controller/kube/resource_claims.py).

The DRA test runs the real path: a DeviceClass and a ResourceSlice published for a kwok node
(driver ``gpu.nvidia.com``), pods with a ResourceClaimTemplate; kube-controller-manager's
resourceclaim controller makes the claims and kube-scheduler allocates them (DRA is GA and on
by default in v1.37.2: pkg/features/kube_features.go DynamicResourceAllocation, locked to its
default since 1.35; resource.k8s.io/v1 is served by default: pkg/controlplane/instance.go
stableAPIGroupVersionsEnabledByDefault).
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.explain import explain_live
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    plan_of,
    priority_classes,
    running_controller,
)

pytestmark = pytest.mark.e2e

MIG = "nvidia.com/mig-3g.40gb"  # 3 of an A100/H100's 7 compute slices
MIG_SHARE = 428 / 1000  # controller/core/gpu_resources.py: 3 * 1000 // 7 thousandths
DRIVER = "gpu.nvidia.com"
RUN_SECONDS = 4.0  # victims run this long before the preemptor comes


def _node(c: kube.Cluster, name: str, pool: str, extra: dict[str, str]) -> str:
    body = kube.node_body(name, gpus=0, pool=pool)
    for part in ("capacity", "allocatable"):
        body["status"][part].update(extra)
    c.core.create_node(body)

    def ready():
        n = c.core.read_node(name)
        ok = {x.type: x.status for x in n.status.conditions or []}.get("Ready") == "True"
        taints = [t.key for t in n.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]
        return True if ok and not taints else kube.NotYet(f"ready={ok} taints={taints}")
    kube.wait_for(f"node {name} Ready (kwok)", ready, timeout=60)
    return name


def _start(pod: client.V1Pod) -> float:
    return pod.status.start_time.timestamp()


def _lost_per_second(c: kube.Cluster, ns: str, preemptor: str, starts: dict[str, float]):
    """(plan, its lost GPU-seconds per second of the victim's run, bounded both ways by the
    one-second resolution of startTime)."""
    plan = kube.wait_for("a stored plan", lambda: plan_of(c, ns, preemptor), timeout=60)
    assert len(plan.victims) == 1
    age = plan.created - starts[plan.victims[0].name]
    return plan, plan.lost_gpu_seconds / (age + 1), plan.lost_gpu_seconds / max(age - 1, 0.5)


def test_mig_pods_count_their_fraction_of_a_gpu(cluster, namespace, pool):
    """A kwok node advertising two 3g MIG slices, both taken by low-priority pods; a third
    such pod preempts one, and the plan charges 3/7 of a GPU for the victim's run."""
    if not cluster.has_kwok:
        pytest.skip("needs kwok nodes")
    priority_classes(cluster)
    node = _node(cluster, f"{pool}-mig", pool, {MIG: "2"})
    try:
        starts = {}
        for name in ("a", "b"):
            body = kube.pod_body(name, pool=pool, priority_class=LOW)
            body["spec"]["containers"][0]["resources"] = {"requests": {MIG: "1"},
                                                          "limits": {MIG: "1"}}
            cluster.core.create_namespaced_pod(namespace, body)
        for name in ("a", "b"):
            starts[name] = _start(kube.wait_pod_running(cluster, namespace, name))
        time.sleep(RUN_SECONDS)
        with running_controller(cluster, config_for(namespace)):
            body = kube.pod_body("pre", pool=pool, priority_class=HIGH_NEVER)
            body["spec"]["containers"][0]["resources"] = {"requests": {MIG: "1"},
                                                          "limits": {MIG: "1"}}
            cluster.core.create_namespaced_pod(namespace, body)
            plan, low, high = _lost_per_second(cluster, namespace, "pre", starts)
            assert low <= MIG_SHARE * 1.01 and high >= MIG_SHARE * 0.99, plan
            assert kube.wait_pod_running(cluster, namespace, "pre", timeout=60).spec.node_name \
                == node
    finally:
        kube.delete_nodes(cluster, [node])


def _ensure(create, *args) -> None:
    try:
        create(*args)
    except ApiException as e:
        if e.status != 409:
            raise


def _claim_pod(name: str, pool: str, priority_class: str) -> dict:
    body = kube.pod_body(name, pool=pool, priority_class=priority_class)
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return body


def test_dra_pods_count_the_gpus_of_their_claims(cluster, namespace, pool):
    """A kwok node with two DRA GPUs (a ResourceSlice of gpu.nvidia.com) held by a low-priority
    pod's allocated claim; a pending preemptor's claim asks for two more. The controller counts
    both (the node advertises no nvidia.com/gpu at all): `explain` on the live cluster shows
    the victim and its two GPUs; the controller evicts it, charges its two GPUs, and the
    scheduler allocates the freed devices to the preemptor."""
    if not cluster.has_kwok:
        pytest.skip("needs kwok nodes")
    priority_classes(cluster)
    dra = client.ResourceV1Api(cluster.api)
    _ensure(dra.create_device_class, {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
    node = _node(cluster, f"{pool}-dra", pool, {})
    slice_name = f"{node}-gpus"
    dra.create_resource_slice({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": slice_name},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}"} for i in range(2)]}})
    try:
        dra.create_namespaced_resource_claim_template(namespace, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "two-gpus"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 2}}]}}}})
        cluster.core.create_namespaced_pod(namespace, _claim_pod("victim", pool, LOW))
        starts = {"victim": _start(kube.wait_pod_running(cluster, namespace, "victim",
                                                         timeout=60))}
        time.sleep(RUN_SECONDS)
        cluster.core.create_namespaced_pod(namespace, _claim_pod("pre", pool, HIGH_NEVER))
        kube.wait_pod_unschedulable(cluster, namespace, "pre")
        shown = explain_live.explain(cluster.api, namespace, "pre", config_for(namespace))
        assert [(v.name, v.gpus) for v in shown.plan.victims] == [("victim", 2)], shown.plan
        with running_controller(cluster, config_for(namespace)) as ctl:
            plan, low, high = _lost_per_second(cluster, namespace, "pre", starts)
            assert low <= 2 * 1.01 and high >= 2 * 0.99, plan  # two whole GPUs for its run
            assert kube.wait_pod_running(cluster, namespace, "pre", timeout=90).spec.node_name \
                == node
            assert ctl.cache.nodes.get(node).allocatable.gpus == 2
    finally:
        dra.delete_resource_slice(slice_name)
        kube.delete_nodes(cluster, [node])

