"""Synthetic clusters as API objects (the JSON the API server sends), for the scale benchmarks.

``trace(pods)``: the 4,278-node spot-GPU trace cluster of bench/plan_latency.py (its generator,
imported), written out as Nodes and Pods. ``uniform(nodes, pods)``: ``nodes`` nodes of 8 GPUs,
every GPU held by a 1-8-GPU training pod (a fifth of the multi-GPU ones in gangs of 2-4), and
CPU-only pods up to ``pods``. Pods are bound and Running, with checkpoint annotations.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from bench.plan_latency import NOW, cluster
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.model import CheckpointMode, Pod, Resources
from ckpt_preempt.policies.model.times import rfc3339

GPU = "nvidia.com/gpu"
GANG_NAME, GANG_TOTAL = "scheduling.ai/gang-name", "scheduling.ai/gang-total"


def node_json(name: str, *, gpus: int, cpus: int, memory_gib: int) -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                         "resourceVersion": "1"},
            "spec": {},
            "status": {"allocatable": {"cpu": str(cpus), "memory": f"{memory_gib}Gi",
                                       GPU: str(gpus), "pods": "110"}}}


def pod_json(p: Pod, *, gang_total: int | None = None, rv: str = "1") -> dict:
    """A bound, Running pod as the API server lists it (from a ``policies.model.model.Pod``)."""
    annotations = {ann.CHECKPOINT: str(p.checkpoint)}
    if p.last_checkpoint is not None:
        annotations[ann.LAST_CHECKPOINT] = rfc3339(p.last_checkpoint)
    if p.checkpoint_seconds is not None:
        annotations[ann.CHECKPOINT_SECONDS] = f"{int(p.checkpoint_seconds)}s"
    labels = {"app": p.name.rstrip("0123456789")}
    if p.gang is not None:
        labels[GANG_NAME] = p.gang.rsplit("/", 1)[-1]
        labels[GANG_TOTAL] = str(gang_total or 1)
    r = p.requests
    requests = {"cpu": f"{r.cpu_milli}m", "memory": f"{r.memory_mib}Mi"}
    if r.gpus:
        requests[GPU] = str(r.gpus)
    started = rfc3339(p.start_time or NOW)
    return {
        "metadata": {"name": p.name, "namespace": p.namespace, "uid": p.uid,
                     "resourceVersion": rv, "creationTimestamp": started, "labels": labels,
                     "annotations": annotations},
        "spec": {"nodeName": p.node, "priority": p.priority, "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": requests}}]},
        "status": {"phase": "Running", "startTime": started},
    }


def _gang_sizes(pods: list[Pod]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for p in pods:
        if p.gang is not None:
            sizes[p.gang] = sizes.get(p.gang, 0) + 1
    return sizes


def trace(pods: int, seed: int = 3) -> tuple[list[dict], Iterator[dict]]:
    """The trace cluster with ``pods`` pods: Node objects, and Pod objects as a generator (so
    a caller that converts them at once never holds the JSON of all of them)."""
    nodes, model_pods = cluster(pods, random.Random(seed))
    sizes = _gang_sizes(model_pods)
    node_objs = [node_json(n.name, gpus=n.allocatable.gpus, cpus=n.allocatable.cpu_milli // 1000,
                           memory_gib=n.allocatable.memory_mib // 1024) for n in nodes]
    return node_objs, (pod_json(p, gang_total=sizes.get(p.gang or "")) for p in model_pods)


def uniform_pods(nodes: int, pods: int, seed: int = 3, gpus: int = 8) -> Iterator[Pod]:
    rng = random.Random(seed)
    k = 0
    modes = list(CheckpointMode)

    def make(node: str, g: int, cpu: int, gang: str | None) -> Pod:
        nonlocal k
        k += 1
        age = rng.uniform(300, 48 * 3600)
        mode = rng.choice(modes)
        return Pod(uid=f"u{k}", name=f"p{k}", namespace="ml", priority=rng.choice((0, 10, 100)),
                   requests=Resources(cpu_milli=cpu, memory_mib=cpu * 4, gpus=g), node=node,
                   start_time=NOW - age, checkpoint=mode,
                   last_checkpoint=None if mode is CheckpointMode.NONE
                   else NOW - rng.uniform(0, age),
                   checkpoint_seconds=rng.uniform(30, 300), gang=gang)

    names = [f"node-{i:05d}" for i in range(nodes)]
    gang, left = None, 0
    for name in names:
        free = gpus
        while free:
            g = min(free, rng.choice((1, 1, 2, 4, 8)))
            if g >= 2 and left == 0 and rng.random() < 0.2:
                gang, left = f"ml/g{k}", 4
            yield make(name, g, 4000 * g, gang if g >= 2 and left else None)
            if g >= 2 and left:
                left -= 1
            free -= g
    while k < pods:
        yield make(rng.choice(names), 0, 500, None)


def uniform(nodes: int, pods: int, seed: int = 3) -> tuple[list[dict], Iterator[dict]]:
    """``nodes`` nodes of 8 GPUs (96 CPUs, 1 TiB), every GPU taken, ``pods`` pods in all."""
    node_objs = [node_json(f"node-{i:05d}", gpus=8, cpus=96, memory_gib=1024)
                 for i in range(nodes)]
    # gangs here are declared as 4; a gang cut short at the end of a node run is smaller,
    # which the planner treats as a gang with members missing (it still plans for it)
    return node_objs, (pod_json(p, gang_total=4) for p in uniform_pods(nodes, pods, seed))
