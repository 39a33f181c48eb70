"""One pass of ``kueue-boost`` (``Booster.run_pass``) and the loop that runs it (``BoostLoop``).

A pass: each Workload in scope gets its pods (``pods_by_workload``: only pods of its own
namespace; a pod names its Workload by Kueue's ``kueue.x-k8s.io/workload`` annotation, else by
its controlling owner, or for plain pods itself, being among the Workload's ownerReferences),
the rule decides (``policies.kueue.boost.decide``) and a changed boost is written through the
one write path, ``Actions.set_priority_boost`` (dry-run, timeouts, audit; guarded by the
resourceVersion it decided on). Workloads outside ``namespaces`` are never written. A Workload
or pod that cannot be read is skipped with one log line (per object version). Nothing here
raises on input.

Silent pods are charged by the planner's ``unknownCheckpoint`` policy; for ``cluster-median`` the
median is taken over the pods of the Workload's own namespace (the planner takes the cluster's),
so that no pod of another namespace moves a boost. The priorities in use (the band) are the
values of every PriorityClass and WorkloadPriorityClass, and every Workload's priority, which
tenants do not write (Kueue sets it from those classes; its batch-user role only reads Workloads).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.records import PodInfo
from ckpt_preempt.controller.kueue.workloads import WORKLOAD_ANNOTATION, WorkloadInfo
from ckpt_preempt.controller.writes.actions import Conflict, WriteFailed
from ckpt_preempt.policies.kueue import boost
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.snapshot import Snapshot

log = logging.getLogger("ckpt_preempt.kueue")
DEFAULT_INTERVAL_SECONDS = 30.0  # unsaved work grows with time: decide again at least this often


@dataclass(frozen=True, kw_only=True)
class BoostSettings:
    """``namespaces``: the Workloads it may write (empty: all); ``gate_on``: whether Kueue runs
    with its ``PriorityBoost`` gate (the API does not say; off: the boosts are only logged, as
    in dry-run, since Kueue would ignore them); ``limits``: the controller config's checkpoint
    limits and ``unknownCheckpoint`` policy, so pods are read and charged as the planner does."""

    namespaces: frozenset[str] = frozenset()
    gate_on: bool = False
    dry_run: bool = False
    limits: ann.Limits = field(default_factory=ann.Limits)
    rule: boost.BoostRule = boost.DEFAULT_RULE
    interval_seconds: float = DEFAULT_INTERVAL_SECONDS

    @property
    def writes(self) -> bool:
        return self.gate_on and not self.dry_run

    def covers(self, namespace: str) -> bool:
        return not self.namespaces or namespace in self.namespaces


class BoostWriter(Protocol):
    """The one write this component makes (``controller.writes.actions.Actions``)."""

    def set_priority_boost(self, namespace: str, name: str, value: str | None, *,
                           version: str, rv: str) -> bool: ...


@dataclass(frozen=True, kw_only=True)
class BadPod:
    """A pod the trim could not read: skipped."""

    namespace: str
    name: str
    resource_version: str
    problem: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def pods_by_workload(workloads: Iterable[WorkloadInfo], pods: Iterable[PodInfo]
                     ) -> dict[str, list[PodInfo]]:
    """Each Workload's live pods, by Workload key. Every lookup is keyed by the pod's own
    namespace, so a pod never counts for a Workload of another namespace."""
    by_name: dict[tuple[str, str], WorkloadInfo] = {}
    by_owner: dict[tuple[str, str], list[WorkloadInfo]] = {}
    for w in workloads:
        by_name[(w.namespace, w.name)] = w
        for uid in w.owners:
            by_owner.setdefault((w.namespace, uid), []).append(w)
    for ws in by_owner.values():  # admitted first, then by name: deterministic
        ws.sort(key=lambda w: (not w.admitted, w.name))
    out: dict[str, list[PodInfo]] = {}
    for p in pods:
        if p.done:
            continue
        w = by_name.get((p.namespace, p.annotations.get(WORKLOAD_ANNOTATION, "")))
        if w is None:
            owned = by_owner.get((p.namespace, p.owner_uid or "")) \
                or by_owner.get((p.namespace, p.uid))
            w = owned[0] if owned else None
        if w is not None:
            out.setdefault(w.key, []).append(p)
    return out


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a pass decided for one Workload (for logs and tests)."""

    key: str
    decision: boost.Decision
    written: bool


class Booster:
    """The pass; keeps only which bad objects it reported and the resourceVersions it wrote
    at (so a write its informer has not yet seen is not sent again)."""

    def __init__(self, writer: BoostWriter, settings: BoostSettings) -> None:
        self.writer = writer
        self.settings = settings
        self._reported: set[tuple[str, str, str]] = set()
        self._sent: dict[str, tuple[str, str | None]] = {}  # key -> (rv decided on, value)

    def _skip(self, kind: str, key: str, rv: str, problem: str) -> None:
        if (kind, key, rv) not in self._reported:
            self._reported.add((kind, key, rv))
            log.warning("kueue: %s %s skipped: %s", kind, key, problem)

    def run_pass(self, *, now: float, version: str | None,
                 workloads: Iterable[WorkloadInfo | None],
                 pods: Iterable[PodInfo | BadPod | None],
                 class_values: Iterable[int | None]) -> list[Outcome]:
        """Decide every Workload in scope and write the boosts that change. ``version``: the
        Workload API version served (None: Kueue is not there, nothing is done)."""
        if version is None:
            return []
        good_workloads = []
        for w in workloads:
            if w is None:
                continue
            if w.problem is not None:
                self._skip("workload", w.key, w.resource_version, w.problem)
            else:
                good_workloads.append(w)
        good_pods = []
        for p in pods:
            if isinstance(p, BadPod):
                self._skip("pod", p.key, p.resource_version, p.problem)
            elif p is not None:
                good_pods.append(p)
        in_use = {v for v in class_values if v is not None} | {w.priority for w in good_workloads}
        scoped = [w for w in good_workloads if self.settings.covers(w.namespace)]
        members = pods_by_workload(scoped, (p for p in good_pods
                                            if self.settings.covers(p.namespace)))
        model = {p.uid: convert.to_pod(p, now, self.settings.limits, True)[0]
                 for ps in members.values() for p in ps}
        ages: dict[str, float | None] = {}
        out = []
        for w in sorted(scoped, key=lambda w: w.key):
            if w.namespace not in ages:
                ages[w.namespace] = self._unknown_age(w.namespace, good_pods, now)
            pods_of = [model[p.uid] for p in members.get(w.key, ())]
            d = boost.decide(w.as_rule_input(), pods_of, now=now, priorities_in_use=in_use,
                             unknown_age=ages[w.namespace], rule=self.settings.rule)
            out.append(Outcome(key=w.key, decision=d, written=d.write and self._write(w, d,
                                                                                   version)))
        return out

    def _unknown_age(self, namespace: str, pods: Iterable[PodInfo], now: float) -> float | None:
        """The planner's assumed age of an unreported checkpoint (``Snapshot``'s own), over
        this namespace's pods only."""
        policy = self.settings.limits.unknown_checkpoint
        if policy.kind != "cluster-median":
            return policy.seconds
        own = tuple(convert.to_pod(p, now, self.settings.limits, True)[0] for p in pods
                    if p.namespace == namespace and not p.done)
        return Snapshot(now=now, nodes=(), pods=own, unknown_checkpoint=policy
                        ).unknown_checkpoint_age

    def _write(self, w: WorkloadInfo, d: boost.Decision, version: str) -> bool:
        if self._sent.get(w.key) == (w.resource_version, d.value):
            return False  # sent at this version already; the watch has not caught up
        log.info("kueue: %s %s: boost %s -> %s (unsaved %.0f GPU-s, cap %d)", w.key,
                 "writes" if self.settings.writes else "would write (dry-run or gate off)",
                 w.annotation, d.value, d.unsaved_gpu_seconds, d.cap)
        try:
            written = self.writer.set_priority_boost(w.namespace, w.name, d.value,
                                                     version=version, rv=w.resource_version)
        except Conflict as e:
            log.info("kueue: %s; deciding again on the next pass", e)
            return False
        except WriteFailed as e:
            log.warning("kueue: %s; trying again on the next pass", e)
            return False
        self._sent[w.key] = (w.resource_version, d.value)
        return written


class BoostLoop:
    """The informers (Workloads, WorkloadPriorityClasses, PriorityClasses, pods) and a pass
    after each change, at least every ``interval_seconds``."""

    def __init__(self, booster: Booster, *, workloads, classes, priority_classes, pods,
                 changed: threading.Event, clock: Callable[[], float] = time.time) -> None:
        self.booster = booster
        self.workloads, self.classes = workloads, classes
        self.priority_classes, self.pods = priority_classes, pods
        self.changed = changed
        self.clock = clock

    @property
    def informers(self) -> tuple:
        return (self.workloads, self.classes, self.priority_classes, self.pods)

    def run(self, stop: threading.Event) -> None:
        for i in self.informers:
            i.start()
        try:
            while not stop.is_set():
                self.changed.wait(self.booster.settings.interval_seconds)
                self.changed.clear()
                if stop.is_set() or not all(i.synced.is_set() for i in self.informers):
                    continue
                self.booster.run_pass(
                    now=self.clock(), version=self.workloads.version,
                    workloads=self.workloads.items(), pods=self.pods.items(),
                    class_values=[*self.classes.items(), *self.priority_classes.items()])
        finally:
            for i in self.informers:
                i.stop()


def safe_pod_info(trim: Callable[[Mapping], PodInfo]) -> Callable[[Mapping], PodInfo | BadPod]:
    """``trim`` that returns a ``BadPod`` instead of raising."""
    def trimmed(d: Mapping) -> PodInfo | BadPod:
        try:
            return trim(d)
        except Exception as e:  # any shape the API lets through: skipped, never fatal
            meta = d.get("metadata") if isinstance(d.get("metadata"), Mapping) else {}
            return BadPod(namespace=str(meta.get("namespace") or ""),
                          name=str(meta.get("name") or ""),
                          resource_version=str(meta.get("resourceVersion") or ""),
                          problem=f"{type(e).__name__}: {e}")
    return trimmed
