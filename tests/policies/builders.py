"""Builders for planner tests: make_pod(priority=…, gpus=…, checkpoint_age=…), gpu_node(...)."""

from __future__ import annotations

import itertools

from ckpt_preempt.policies.model.model import (
    CheckpointMode,
    Node,
    NvlinkNeed,
    Pod,
    PodDisruptionBudget,
    Resources,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.model.topology import NodeTopology, single_domain

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
    gang_total: int | None = None, terminating: bool = False,
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
        gang_total=gang_total,
        labels=labels or {},
        terminating=terminating,
    )


def hgx_h100(name: str) -> Node:
    """An 8-GPU HGX H100 board: every GPU behind NVSwitch, one NVLink domain."""
    return hgx(name)


def split_domains(name: str, *sizes: int) -> Node:
    """A node whose GPUs form NVLink islands of the given sizes (e.g. 4+4 bridged pairs)."""
    domains, first = [], 0
    for size in sizes:
        domains.append(frozenset(range(first, first + size)))
        first += size
    return gpu_node(name, first, topology=NodeTopology(gpu_count=first, domains=tuple(domains)))


def pending(name: str, *, priority: int = 100, gpus: int = 1, **kw) -> Pod:
    """A pending preemptor (no node, no start time)."""
    return make_pod(name, priority=priority, gpus=gpus, **kw)


def gang(name: str, nodes, *, gpus: int = 1, priority: int = 0, namespace: str = "default",
         **kw) -> list[Pod]:
    """One bound (or, with ``None`` nodes, pending) member per entry of ``nodes``."""
    key = f"{namespace}/seed/{name}"
    return [
        make_pod(f"{name}-{i}", node=n, gpus=gpus, priority=priority, gang=key,
                 gang_total=len(nodes), namespace=namespace, **kw)
        for i, n in enumerate(nodes)
    ]


def pdb(name: str, selector: dict, allowed: int, namespace: str = "default"):
    return PodDisruptionBudget(
        name=name, namespace=namespace, match_labels=selector, disruptions_allowed=allowed
    )


def snapshot(nodes, pods, pdbs=(), now: float = NOW) -> Snapshot:
    return Snapshot(now=now, nodes=tuple(nodes), pods=tuple(pods), pdbs=tuple(pdbs))


def workload_of(name: str, namespace: str = "default") -> str:
    """The workload key (``Pod.workload``) of ``make_pod(name)``: a pod with neither gang nor
    owner is its own workload, inside its namespace."""
    return f"{namespace}/pod/uid-{name}"
