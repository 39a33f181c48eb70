"""The simulator's named policies: each name builds a planner the engine calls per preemptor.

A planner takes the snapshot, the preemptor's pods and a running plan number (kube-default
uses it as the seed of its random candidate offset) and returns a Plan.
"""

from __future__ import annotations

from collections.abc import Callable

from policies import kube_default, preemption
from policies.model import Plan, Pod, Snapshot

Planner = Callable[[Snapshot, list[Pod], int], Plan]


def _kube(snapshot: Snapshot, pods: list[Pod], n: int) -> Plan:
    return kube_default.plan(snapshot, pods, kube_default.KubeDefaultConfig(seed=n))


def _aware(drain: bool, max_ckpt: float, penalty: float) -> Planner:
    cfg = preemption.PlannerConfig(
        drain=drain, max_checkpoint_seconds=max_ckpt, record_rejections=False,
        fairness_penalty_seconds=penalty,
    )
    return lambda snapshot, pods, n: preemption.plan(snapshot, pods, cfg)


POLICIES = ("kube-default", "checkpoint-aware", "checkpoint-aware-drain")


def planner_for(name: str, max_checkpoint_seconds: float,
                fairness_penalty_seconds: float = preemption.FAIRNESS_PENALTY_SECONDS) -> Planner:
    if name == "kube-default":
        return _kube
    if name == "checkpoint-aware":
        return _aware(False, max_checkpoint_seconds, fairness_penalty_seconds)
    if name == "checkpoint-aware-drain":
        return _aware(True, max_checkpoint_seconds, fairness_penalty_seconds)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
