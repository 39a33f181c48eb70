"""The extender against the real kube-scheduler from the test bench: NVLink filtering, a
fill that ends less fragmented than default scoring, and an extender that is down or hung
(``ignorable``, ``httpTimeout``) not wedging scheduling."""

from __future__ import annotations

import json
import random

import pytest

from ckpt_preempt.controller.kube.records import TOPOLOGY_ANNOTATION as TOPOLOGY
from ckpt_preempt.policies.model.topology import SCHEMA
from e2e.harness import kube
from e2e.harness.extender_run import (
    metric,
    running_extender,
    silent_listener,
    stop,
)
from e2e.harness.extender_run import scheduler_config as extender_config

pytestmark = pytest.mark.e2e
GPUS_PER_NODE = 8
NVLINK_REQUIRED = {"ckpt-preempt.io/nvlink": "required"}


def _topology(domains: list[list[int]]) -> dict:
    return {TOPOLOGY: json.dumps({"schema": SCHEMA, "gpu_count": GPUS_PER_NODE,
                                  "nvlink_domains": domains})}


def test_nvlink_required_pods_go_only_where_a_free_domain_is_sure(
        cluster, namespace, pool, gpu_nodes, scheduler_config, tmp_path):
    """`split` (two 4-GPU domains, 2 GPUs busy: 6 free, but the busy ones may sit one in each
    domain) is emptier, so default scoring would prefer it; `whole` (one 8-GPU domain, 4 busy)
    surely has 4 NVLink-connected GPUs free. The 4-GPU NVLink pod goes to `whole`; the next
    one fits nowhere and says why; a pod without the requirement still uses `split`."""
    (split,) = gpu_nodes(1, prefix=f"{pool}-split", annotations=_topology([[0, 1, 2, 3],
                                                                          [4, 5, 6, 7]]))
    (whole,) = gpu_nodes(1, prefix=f"{pool}-whole", annotations=_topology([list(range(8))]))
    kube.create_pod(cluster, namespace, "busy-split", gpus=2, pool=pool, node_name=split)
    kube.create_pod(cluster, namespace, "busy-whole", gpus=4, pool=pool, node_name=whole)
    kube.wait_pod_running(cluster, namespace, "busy-split")
    kube.wait_pod_running(cluster, namespace, "busy-whole")
    with running_extender(cluster, tmp_path) as (_, url):
        scheduler_config(extender_config(url))
        kube.create_pod(cluster, namespace, "nv1", gpus=4, pool=pool, annotations=NVLINK_REQUIRED)
        assert kube.wait_pod_running(cluster, namespace, "nv1").spec.node_name == whole
        kube.create_pod(cluster, namespace, "nv2", gpus=4, pool=pool, annotations=NVLINK_REQUIRED)
        pod = kube.wait_pod_unschedulable(cluster, namespace, "nv2")
        message = kube.condition(pod, "PodScheduled").message
        assert "to be sure of one NVLink domain of 4" in message, message
        kube.create_pod(cluster, namespace, "plain", gpus=4, pool=pool)
        assert kube.wait_pod_running(cluster, namespace, "plain").spec.node_name == split
        assert metric(url, 'ckpt_preempt_extender_filtered_nodes_total{resolvable="true"}') >= 1


# A pod sequence (GPUs each) from a fixed seed: ~60 % of the pool's GPUs, sizes as in the
# openb trace's GPU pods (mostly 1-2 GPUs, some 4 and 8).
FILL_NODES = 6
CPU_PER_GPU = 4  # cores per GPU asked, so default scoring (LeastAllocated on CPU) sees the pods


def fill_sequence(seed: int = 10) -> list[int]:
    rng = random.Random(seed)
    seq, total = [], 0
    while total < 0.6 * FILL_NODES * GPUS_PER_NODE:
        g = rng.choices((1, 2, 4, 8), weights=(5, 3, 2, 1))[0]
        seq.append(g)
        total += g
    return seq


def fragmentation(used: dict[str, int], unplaced: int) -> dict[str, int]:
    """Pods that found no node, partially used nodes, the GPUs stranded on them (free but on a
    node already in use), and how many whole 8-GPU nodes are left."""
    partial = [n for n, u in used.items() if 0 < u < GPUS_PER_NODE]
    return {"unplaced_pods": unplaced, "partial_nodes": len(partial),
            "stranded_gpus": sum(GPUS_PER_NODE - used[n] for n in partial),
            "free_whole_nodes": sum(1 for u in used.values() if u == 0)}


def _placed(cluster, namespace, name):
    """The pod's node once bound, or "" once the scheduler found it no node."""
    def probe():
        pod = cluster.core.read_namespaced_pod(name, namespace)
        if pod.spec.node_name:
            return pod.spec.node_name
        cond = kube.condition(pod, "PodScheduled")
        ok = cond and cond.status == "False" and cond.reason == "Unschedulable"
        return True if ok else kube.NotYet(f"phase={pod.status.phase}")
    found = kube.wait_for(f"pod {namespace}/{name} to be bound or unschedulable", probe)
    return found if isinstance(found, str) else ""


def _fill(cluster, namespace, pool, tag) -> dict[str, int]:
    """Schedule the sequence one pod at a time; delete the pods that found no node."""
    nodes = kube.create_gpu_nodes(cluster, FILL_NODES, prefix=f"{pool}-{tag}", pool=pool)
    used, unplaced = dict.fromkeys(nodes, 0), 0
    try:
        for i, g in enumerate(fill_sequence()):
            kube.create_pod(cluster, namespace, f"{tag}{i}", gpus=g, pool=pool,
                            cpu=str(CPU_PER_GPU * g))
            node = _placed(cluster, namespace, f"{tag}{i}")
            if node:
                used[node] += g
            else:
                unplaced += 1
                cluster.core.delete_namespaced_pod(f"{tag}{i}", namespace, grace_period_seconds=0)
    finally:
        kube.delete_nodes(cluster, nodes)
    return fragmentation(used, unplaced)


def test_prioritize_fills_the_cluster_less_fragmented_than_default_scoring(
        cluster, namespace, pool, scheduler_config, tmp_path, capsys):
    """The same pod sequence, in the same order, on two identical pools: default scoring
    (LeastAllocated spreads by CPU) and default scoring plus our prioritize."""
    default = _fill(cluster, namespace, pool + "d", "d")
    with running_extender(cluster, tmp_path) as (_, url):
        scheduler_config(extender_config(url, preempt=False))
        ours = _fill(cluster, namespace, pool + "x", "x")
        served = metric(url, 'ckpt_preempt_extender_requests_total{code="200",verb="prioritize"}')
    with capsys.disabled():
        print("fill fragmentation:", json.dumps({"sequence": fill_sequence(), "default": default,
                                                 "extender": ours}))
    assert served > 0
    assert ours["unplaced_pods"] <= default["unplaced_pods"], (ours, default)
    assert ours["stranded_gpus"] < default["stranded_gpus"], (ours, default)


def test_an_extender_that_is_down_or_hung_does_not_wedge_scheduling(
        cluster, namespace, pool, gpu_nodes, scheduler_config, tmp_path):
    gpu_nodes(2)
    with running_extender(cluster, tmp_path) as (proc, url):
        scheduler_config(extender_config(url, timeout="1s"))
        kube.create_pod(cluster, namespace, "up", gpus=1, pool=pool)
        kube.wait_pod_running(cluster, namespace, "up")
        stop(proc)  # connection refused from now on
        kube.create_pod(cluster, namespace, "down", gpus=1, pool=pool)
        kube.wait_pod_running(cluster, namespace, "down", timeout=60)
    with silent_listener() as url:  # accepts, never answers: every call times out
        scheduler_config(extender_config(url, timeout="1s"))
        kube.create_pod(cluster, namespace, "hung", gpus=1, pool=pool)
        kube.wait_pod_running(cluster, namespace, "hung", timeout=60)
