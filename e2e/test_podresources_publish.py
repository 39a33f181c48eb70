"""The gpu-use report end to end: `hwprobe publish` (mock NVML, the real generated
PodResources service of e2e/podresources on a unix socket) writes the annotation on a kwok
node of the real API server; the controller's conversion reads the node back and the planner
uses it for an `nvlink: required` pod. Marked e2e and mocknvml."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model import gpu_use
from ckpt_preempt.policies.model.model import NvlinkNeed
from ckpt_preempt.policies.model.topology import ANNOTATION as TOPOLOGY
from ckpt_preempt.policies.planner import preemption
from ckpt_preempt.policies.planner.preemption import PlannerConfig
from tests.hwprobe.podreslib import Server, pod, server_binary
from tests.policies.builders import pending

pytestmark = [pytest.mark.e2e, pytest.mark.mocknvml]


@pytest.fixture
def kubelet():
    binary = server_binary()
    if not binary.is_file():
        why = f"PodResources test server not built ({binary}): run `make testbin`"
        if os.environ.get("CKPT_REQUIRE_TESTBIN") == "1":
            pytest.fail(f"{why} [CKPT_REQUIRE_TESTBIN=1, so this is a failure]", pytrace=False)
        pytest.skip(why)
    server = Server(binary)
    yield server
    server.stop()


def nvl(i: int) -> str:
    return f"GPU-4e100000-{i:04x}-{i:012x}"  # the h100-nvl profile's GPU i


def publish(cluster, nvml, node, socket):
    done = nvml.run("h100-nvl", "publish", "--node", node, "--kubeconfig",
                    str(cluster.kubeconfig), "--pod-resources-socket", str(socket))
    assert done.returncode == 0, done.stderr
    return done


def annotations(cluster, node):
    return cluster.core.read_node(node).metadata.annotations or {}


def test_published_next_to_the_topology_and_removed_without_a_socket(cluster, gpu_nodes, nvml,
                                                                     kubelet):
    (node,) = gpu_nodes(1, gpus=4)
    kubelet.set([pod("ml", "train", nvl(0), nvl(1))], allocatable=[nvl(i) for i in range(4)])
    done = publish(cluster, nvml, node, kubelet.socket)
    assert f"and {gpu_use.ANNOTATION}" in done.stdout
    assert "GPUs in use: 2 of 4, in 1 pod(s)" in done.stderr
    report = gpu_use.parse_gpu_use(annotations(cluster, node)[gpu_use.ANNOTATION])
    assert report.pods == (("ml", "train", frozenset({0, 1})),)

    kubelet.stop()  # the socket is gone: the annotation goes, the topology stays
    done = publish(cluster, nvml, node, kubelet.socket)
    assert "no PodResources socket at" in done.stderr
    assert gpu_use.ANNOTATION not in annotations(cluster, node)
    assert TOPOLOGY in annotations(cluster, node)


def test_the_planner_uses_the_published_report(cluster, gpu_nodes, nvml, kubelet):
    # H100 NVL: two bridged pairs. Two 1-GPU pods on GPUs 0 and 1; a 2-GPU NVLink pod fits on
    # the free pair now. Without the report the busy GPUs may split both pairs: one must go.
    (name,) = gpu_nodes(1, gpus=4)
    kubelet.set([pod("team", "a", nvl(0)), pod("team", "b", nvl(1))])
    publish(cluster, nvml, name, kubelet.socket)
    raw = cluster.api.sanitize_for_serialization(cluster.core.read_node(name))
    info = records.node_info(raw)
    pods = []
    for p in ("a", "b"):
        pods.append(records.pod_info({
            "metadata": {"name": p, "namespace": "team", "uid": f"uid-{p}",
                         "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": name, "priority": 0, "containers": [{"name": "c", "resources": {
                "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}}))
    report = gpu_use.parse_gpu_use(info.gpu_use)
    for use in (info.gpu_use, None):
        out = convert.snapshot(now=report.observed + 5,
                               nodes=[replace(info, gpu_use=use)],
                               pods=pods, pdbs=[], scope=convert.Scope(), limits=ann.Limits())
        assert out.node_problems == {}
        plan = preemption.plan(out.snapshot, [pending("hi", gpus=2, nvlink=NvlinkNeed.REQUIRED)],
                               PlannerConfig())
        assert plan.feasible
        assert len(plan.victims) == (0 if use else 1)
