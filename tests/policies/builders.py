"""Builders for planner tests: make_pod(priority=…, gpus=…, checkpoint_age=…), gpu_node(...)."""

from __future__ import annotations

import itertools

from policies.model import (
    CheckpointMode,
    Node,
    NvlinkNeed,
    Pod,
    PodDisruptionBudget,
    Resources,
    Snapshot,
)
from policies.topology import NodeTopology, single_domain

NOW = 1_000_000.0
_ids = itertools.count()


def gpu_node(
    name: str, gpus: int = 8, *, cpu: int = 96_000, mem: int = 1_048_576,
    topology: NodeTopology | None = None, unschedulable: bool = False,
) -> Node:
    return Node(
        name=name,
        allocatable=Resources(cpu_milli=cpu, memory_mib=mem, gpus=gpus),
        topology=topology,
        unschedulable=unschedulable,
    )


def hgx(name: str) -> Node:
    return gpu_node(name, 8, topology=single_domain(8))


def make_pod(
    name: str | None = None, *, node: str | None = None, priority: int = 0, gpus: int = 1,
    cpu: int = 1000, mem: int = 1024, age: float = 3600.0, checkpoint_age: float | None = None,
    mode: CheckpointMode = CheckpointMode.NONE, checkpoint_seconds: float | None = None,
    gang: str | None = None, labels: dict | None = None, preemptible: bool = True,
    min_runtime: float = 0.0, nvlink: NvlinkNeed = NvlinkNeed.NONE, namespace: str = "default",
) -> Pod:
    name = name or f"pod-{next(_ids)}"
    running = node is not None
    return Pod(
        uid=f"uid-{name}",
        name=name,
        namespace=namespace,
        priority=priority,
        requests=Resources(cpu_milli=cpu, memory_mib=mem, gpus=gpus),
        node=node,
        start_time=NOW - age if running else None,
        checkpoint=mode,
        last_checkpoint=None if checkpoint_age is None else NOW - checkpoint_age,
        checkpoint_seconds=checkpoint_seconds,
        min_runtime=min_runtime,
        preemptible=preemptible,
        nvlink=nvlink,
        gang=gang,
        labels=labels or {},
    )


def pdb(name: str, selector: dict, allowed: int, namespace: str = "default"):
    return PodDisruptionBudget(
        name=name, namespace=namespace, match_labels=selector, disruptions_allowed=allowed
    )


def snapshot(nodes, pods, pdbs=(), now: float = NOW) -> Snapshot:
    return Snapshot(now=now, nodes=tuple(nodes), pods=tuple(pods), pdbs=tuple(pdbs))
