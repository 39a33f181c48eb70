"""A coscheduling PodGroup (the CRD installed here, e2e/manifests/) declares its gang's
minMember: a gated gang with fewer members stays gated, and is admitted whole once minMember
members exist."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.kube.records import ADMISSION_GATE
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    config_for,
    priority_classes,
    reasons,
    running_controller,
)

pytestmark = pytest.mark.e2e

CRD = Path(__file__).parent / "manifests" / "coscheduling-podgroup-crd.yaml"
GROUP, VERSION, PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


@pytest.fixture(scope="module")
def podgroup_crd(cluster):
    """The CRD, installed once and left in place (cluster-scoped; other tests ignore it)."""
    ext = client.ApiextensionsV1Api(cluster.api)
    body = yaml.safe_load(CRD.read_text())
    try:
        ext.create_custom_resource_definition(body)
    except ApiException as e:
        if e.status != 409:
            raise

    def established():
        crd = ext.read_custom_resource_definition(body["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True"
                   for c in crd.status.conditions or [])

    kube.wait_for("the PodGroup CRD to be established", established, timeout=30)
    return client.CustomObjectsApi(cluster.api)


def _gated(c, ns, names):
    return [n for n in names if ADMISSION_GATE in [
        g.name for g in c.core.read_namespaced_pod(n, ns).spec.scheduling_gates or []]]


def _member(cluster, namespace, name, pool):
    kube.create_pod(cluster, namespace, name, gpus=1, pool=pool, priority_class=HIGH_NEVER,
                    labels={GROUP_LABEL: "pg"}, scheduling_gates=[ADMISSION_GATE])


def test_min_member_holds_a_gated_gang_until_it_is_complete(
        cluster, namespace, pool, gpu_nodes, podgroup_crd):
    priority_classes(cluster)
    gpu_nodes(1)  # room for all: nothing but the minimum holds the gang back
    podgroup_crd.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup",
        "metadata": {"name": "pg"}, "spec": {"minMember": 3}})
    first = ["w-0", "w-1"]
    for name in first:
        _member(cluster, namespace, name, pool)
    with running_controller(cluster, config_for(namespace)) as ctl:
        assert ctl.cache.wait_synced(30)
        time.sleep(4)  # several passes: two of three members are not a gang to admit
        assert _gated(cluster, namespace, first) == first
        assert ctl.cache.groups.minimums().get(f"{namespace}/coscheduling/pg") == 3
        _member(cluster, namespace, "w-2", pool)
        pods = [kube.wait_pod_running(cluster, namespace, n, timeout=60)
                for n in [*first, "w-2"]]
        for name in [*first, "w-2"]:  # sent once the plan is Done, after the binding
            kube.wait_for(f"GangAdmitted on {name}",
                          lambda name=name: "GangAdmitted" in reasons(cluster, namespace, name))
    assert len(pods) == 3
    for name in [*first, "w-2"]:
        assert "GangAdmitted" in reasons(cluster, namespace, name)
