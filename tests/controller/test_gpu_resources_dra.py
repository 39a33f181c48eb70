"""DRA GPUs: ResourceClaims and ResourceSlices as the cache reads them
(controller/kube/resource_claims.py), and a pod's claim names (records.pod_info)."""

from __future__ import annotations

import threading

import pytest
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core.gpu_resources import DEFAULT, GpuResources
from ckpt_preempt.controller.kube import records
from ckpt_preempt.controller.kube import resource_claims as rc

DRIVER = "gpu.nvidia.com"


def claim(name: str, *, results=None, requests=()) -> dict:
    d = {"metadata": {"name": name, "namespace": "ns"},
         "spec": {"devices": {"requests": list(requests)}}, "status": {}}
    if results is not None:
        d["status"]["allocation"] = {"devices": {"results": [
            {"request": "r", "driver": drv, "pool": "p", "device": f"gpu-{i}"}
            for i, drv in enumerate(results)]}}
    return d


def exactly(cls: str = DRIVER, **kw) -> dict:
    return {"name": "r", "exactly": {"deviceClassName": cls, **kw}}


@pytest.mark.parametrize(("d", "gpus", "allocated"), [
    (claim("a", results=[DRIVER, DRIVER, "nic.example.com"]), 2, True),
    (claim("a", results=[]), 0, True),
    (claim("p", requests=[exactly(count=4)]), 4, False),
    (claim("p", requests=[exactly()]), 1, False),  # ExactCount, count defaults to 1
    (claim("p", requests=[exactly(allocationMode="All")]), 1, False),  # node-dependent: 1
    (claim("p", requests=[exactly("other.example.com", count=4)]), 0, False),
    (claim("p", requests=[exactly(count=2), exactly(count=1)]), 3, False),
    (claim("p", requests=[{"name": "r", "firstAvailable": [
        {"name": "big", "deviceClassName": DRIVER, "count": 4},
        {"name": "small", "deviceClassName": DRIVER, "count": 2}]}]), 2, False),
    (claim("p", requests=[{"name": "r", "firstAvailable": [
        {"name": "gpu", "deviceClassName": DRIVER, "count": 4},
        {"name": "cpu", "deviceClassName": "cpu.example.com"}]}]), 0, False),
    (claim("p", requests=["junk", {"name": "r"}]), 0, False),
])
def test_claim_gpus_allocated_or_asked(d, gpus, allocated):
    got = rc.claim_info(d, DEFAULT)
    assert (got.gpus, got.allocated) == (gpus, allocated)


def test_pod_claim_names_from_spec_and_status():
    d = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
         "spec": {"containers": [], "resourceClaims": [
             {"name": "direct", "resourceClaimName": "shared"},
             {"name": "tmpl", "resourceClaimTemplateName": "t"},
             {"name": "not-yet", "resourceClaimTemplateName": "t"}]},
         "status": {"resourceClaimStatuses": [{"name": "tmpl", "resourceClaimName": "p-tmpl-x"}]}}
    assert records.pod_info(d).claims == ("p-tmpl-x", "shared")
    off = GpuResources(dra_drivers=frozenset(), device_classes=frozenset())
    assert records.pod_info(d, off).claims == ()


def slice_(name: str, node: str | None, n: int, *, driver=DRIVER, pool="p", gen=1) -> dict:
    spec = {"driver": driver, "pool": {"name": pool, "generation": gen, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(n)]}
    if node:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    return {"metadata": {"name": name}, "spec": spec}


def test_node_gpus_from_the_newest_generation_of_node_local_gpu_slices():
    slices = [rc.slice_info(d, DEFAULT) for d in [
        slice_("old", "n1", 8, pool="n1", gen=1), slice_("new", "n1", 4, pool="n1", gen=2),
        slice_("n2", "n2", 2, pool="n2"), slice_("nic", "n2", 5, driver="nic.example.com",
                                                  pool="n2"),
        slice_("net", None, 16, pool="net")]]
    assert rc.node_gpus(slices) == {"n1": 4, "n2": 2}


class Store:
    def __init__(self, items: dict) -> None:
        self._items, self.synced = items, "inner"

    def items(self):
        return list(self._items.values())

    def get(self, key):
        return self._items.get(key)


def test_pods_and_nodes_read_with_their_dra_gpus():
    pod = records.pod_info({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {
            "cpu": "1", "nvidia.com/gpu": "1"}}}],
            "resourceClaims": [{"name": "g", "resourceClaimName": "c1"},
                               {"name": "h", "resourceClaimName": "missing"}]}})
    plain = records.pod_info({"metadata": {"name": "q", "namespace": "ns", "uid": "v"},
                              "spec": {"containers": []}})
    claims = Store({"ns/c1": rc.claim_info(claim("c1", results=[DRIVER] * 2), DEFAULT)})
    pods = rc.PodsWithClaims(Store({"ns/p": pod, "ns/q": plain}), claims)
    assert pods.get("ns/p").requests.gpus == 3 and pods.get("ns/p").requests.cpu_milli == 1000
    assert pods.get("ns/q") is plain and pods.get("ns/none") is None
    assert pods.synced == "inner"  # the informer's own attributes pass through
    node = records.node_info({"metadata": {"name": "n1"}, "status": {"allocatable": {
        "nvidia.com/gpu": "1"}}})
    nodes = rc.NodesWithSlices(Store({"n1": node}), Store({"s": rc.slice_info(
        slice_("s", "n1", 4), DEFAULT)}))
    assert [n.allocatable.gpus for n in nodes.items()] == [5]
    listed_pods, listed_nodes = rc.with_dra([pod], [node], claims.items(),
                                            [rc.slice_info(slice_("s", "n1", 4), DEFAULT)])
    assert listed_pods[0].requests.gpus == 3 and listed_nodes[0].allocatable.gpus == 5


def test_an_api_not_served_reads_as_empty_and_other_errors_propagate():
    def absent(**_):
        raise ApiException(status=404)

    def broken(**_):
        raise ApiException(status=500)

    stop = threading.Event()
    stop.set()
    resp = rc.tolerant(absent, stop)(watch=True)
    assert b'"items": []' in resp.data and list(resp.stream()) == []
    with pytest.raises(ApiException):
        rc.tolerant(broken, stop)()


def test_the_cache_watches_claims_and_slices_only_with_dra_on():
    from kubernetes import client

    from ckpt_preempt.controller.kube.watch import ClusterCache

    on = ClusterCache(client.ApiClient(), plan_namespace="ns")
    assert [i.kind for i in on.informers][-2:] == ["resourceclaims", "resourceslices"]
    assert isinstance(on.pods, rc.PodsWithClaims) and isinstance(on.nodes, rc.NodesWithSlices)
    off = ClusterCache(client.ApiClient(), plan_namespace="ns", gpus=GpuResources(
        dra_drivers=frozenset(), device_classes=frozenset()))
    assert "resourceclaims" not in [i.kind for i in off.informers]
    assert off.pods in off.informers and off.nodes in off.informers
