"""Test doubles for the reconciler: a recording fake of ``controller.writes.actions.Actions`` and a
fake
watch cache with the shape of ``controller.kube.watch.ClusterCache``, plus small builders that go
through ``records.pod_info`` / ``node_info`` / ``pdb_info`` so tests read like API objects.

``RecordingActions`` mirrors the real choke point (``Actions._write``): in dry-run nothing but
Events is written; leadership (``may_write``) is asked before every write, Events included;
then the write happens, or fails the way the test asked (``fail``, ``block``). Every attempt is
recorded in order (``calls``). With a ``FakeCache`` it also applies each write to the cache the
way the API server would, so several passes of the reconciler converge: stored plans become
``StoredPlan`` objects, evicted pods start terminating, taints and tolerations appear.
Methods that the real ``Actions`` turns into no-ops without writing (a terminating pod, a drain
already requested, a nomination already standing) are no-ops here too, and not recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ckpt_preempt.controller.kube import records
from ckpt_preempt.controller.kube.informer import ChangeLog, Changes
from ckpt_preempt.controller.kube.records import ADMISSION_GATE, NodeInfo, PdbInfo, PodInfo
from ckpt_preempt.controller.kube.watch import StoredPlan
from ckpt_preempt.controller.writes.actions import Blocked, Conflict, NotLeader
from ckpt_preempt.controller.writes.write_bodies import has_reservation_toleration, plan_object_name
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.lifecycle.plan_record import PlanRecord
from ckpt_preempt.policies.model.annotations import RESERVED_TAINT
from ckpt_preempt.policies.model.times import rfc3339

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


class FixedGroups:
    """``group_crds.GroupObjects``' reading side over a fixed mapping."""

    def __init__(self, minimums: Mapping[str, int] | None = None) -> None:
        self._minimums = dict(minimums or {})

    def minimums(self) -> dict[str, int]:
        return dict(self._minimums)


# --------------------------------------------------------------------------------- builders


def pod(name: str, *, ns: str = "team", node: str | None = None, priority: int = 10,
        gpus: int = 8, started: float = T0 - 3600, annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None, pending: bool = False,
        gates: Iterable[str] = (), deleting: bool = False, priority_class: str = "",
        uid: str | None = None, nominated: str | None = None,
        tolerations: Iterable[Mapping] = (), owner: str | None = None) -> PodInfo:
    """A pod as the watch cache keeps it. ``pending``: PodScheduled=False/Unschedulable with
    ``preemptionPolicy: Never`` (a mode (a) preemptor). ``owner``: its controlling owner's
    uid (a Job)."""
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {
            "cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}}}],
        "priority": priority, "priorityClassName": priority_class,
        "schedulingGates": [{"name": g} for g in gates], "tolerations": list(tolerations)}
    status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
    if node:
        spec["nodeName"] = node
        status["startTime"] = rfc3339(started)
    if pending:
        spec["preemptionPolicy"] = "Never"
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable"}]
    if nominated:
        status["nominatedNodeName"] = nominated
    meta = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", "resourceVersion": "1",
            "creationTimestamp": rfc3339(started), "labels": dict(labels or {}),
            "annotations": dict(annotations or {})}
    if deleting:
        meta["deletionTimestamp"] = rfc3339(T0)
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "job",
                                    "uid": owner, "controller": True}]
    return records.pod_info({"metadata": meta, "spec": spec, "status": status})


def node(name: str, *, gpus: int = 8, taints: Iterable[Mapping] = ()) -> NodeInfo:
    return records.node_info({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": list(taints)},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi",
                                   "nvidia.com/gpu": str(gpus)}}})


def pdb(name: str, *, ns: str = "team", match: Mapping[str, str], allowed: int) -> PdbInfo:
    return records.pdb_info({"metadata": {"name": name, "namespace": ns},
                             "spec": {"selector": {"matchLabels": dict(match)}},
                             "status": {"disruptionsAllowed": allowed}})


def reservation(plan_id: str) -> dict:
    return {"key": RESERVED_TAINT, "value": plan_id, "effect": "NoSchedule"}


# ------------------------------------------------------------------------------- the cache


class Store:
    """One kind of object, keyed like the real Informer: ``.items()``, ``.get(key)`` and
    ``.drain()`` (its ``ChangeLog``, which ``controller.kube.cluster_model`` reads)."""

    def __init__(self, key: Callable[[Any], str]) -> None:
        self._key = key
        self.objects: dict[str, Any] = {}
        self._log = ChangeLog()

    def put(self, *objs: Any) -> None:
        for o in objs:
            k = self._key(o)
            self._log.put(k, k in self.objects)
            self.objects[k] = o

    def remove(self, key: str) -> None:
        self.objects.pop(key, None)
        self._log.delete(key)

    def drain(self) -> Changes:
        return self._log.drain(self.objects)

    def items(self) -> list[Any]:
        return list(self.objects.values())

    def get(self, key: str) -> Any:
        return self.objects.get(key)


class FakeCache:
    """``ClusterCache``'s shape: ``pods`` (by ns/name), ``nodes`` (by name), ``pdbs`` (by
    ns/name), ``plans`` (``StoredPlan`` by ConfigMap name) and ``groups`` (PodGroup minimums
    by gang key)."""

    def __init__(self, *, pods: Iterable[PodInfo] = (), nodes: Iterable[NodeInfo] = (),
                 pdbs: Iterable[PdbInfo] = (), group_minimums: Mapping[str, int] | None = None,
                 ) -> None:
        self.groups = FixedGroups(group_minimums)
        self.pods = Store(lambda p: p.key)
        self.nodes = Store(lambda n: n.name)
        self.pdbs = Store(lambda b: f"{b.namespace}/{b.name}")
        self.plans = Store(lambda s: s.name)
        self.podgroups = None  # native PodGroups: the API is not served
        self.pods.put(*pods)
        self.nodes.put(*nodes)
        self.pdbs.put(*pdbs)
        self._rv = 100

    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def store_plan(self, record: PlanRecord) -> str:
        """Put a plan ConfigMap in place as if an earlier controller had written it."""
        rv = self.next_rv()
        self.plans.put(StoredPlan(name=plan_object_name(record.id), resource_version=rv,
                                  raw=plan_record.plan_to_annotation(record)))
        return rv

    def plan(self, plan_id: str) -> PlanRecord | None:
        obj = self.plans.get(plan_object_name(plan_id))
        return None if obj is None else plan_record.plan_from_annotation(obj.raw)

    def pod_by_uid(self, uid: str) -> PodInfo | None:
        return next((p for p in self.pods.items() if p.uid == uid), None)

    def change_pod(self, uid: str, **changes: Any) -> None:
        p = self.pod_by_uid(uid)
        if p is not None:  # every change is a new resourceVersion, as on the server
            self.pods.put(replace(p, **{"resource_version": self.next_rv(), **changes}))

    def bind(self, uid: str, node_name: str) -> None:
        self.change_pod(uid, node=node_name, unschedulable=False, phase="Running")

    def ack(self, uid: str, plan_id: str) -> None:
        p = self.pod_by_uid(uid)
        assert p is not None
        self.change_pod(uid, annotations={**p.annotations, plan_record.DONE_ANNOTATION: plan_id})

    def finish_terminating(self) -> None:
        """The kubelets are done: terminating pods disappear."""
        for p in self.pods.items():
            if p.deleting:
                self.pods.remove(p.key)


# ----------------------------------------------------------------------------- the actions


@dataclass(frozen=True, kw_only=True)
class Call:
    """One write attempt that reached the choke point. ``outcome``: "ok", "dry-run" (skipped),
    "not-leader", or the name of the exception the test made it raise."""

    verb: str  # the Actions method name ("emit" for Events)
    target: str  # pod key, node name, or plan id
    plan: str = ""
    reason: str = ""  # Events: the reason
    warning: bool = False
    message: str = ""
    outcome: str = "ok"
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


@dataclass
class _Failure:
    verb: str
    error: Callable[[], BaseException]
    target: str | None
    times: int | None  # None: every time


class RecordingActions:
    """Same methods and signatures as ``controller.writes.actions.Actions`` (tests check that)."""

    def __init__(self, cache: FakeCache | None = None, *, dry_run: bool = False,
                 clock: Callable[[], float] = lambda: T0) -> None:
        self.cache = cache
        self.dry_run = dry_run
        self.clock = clock
        self.calls: list[Call] = []
        self.leader = True
        self._lose_leadership_on: set[str] = set()
        self._failures: list[_Failure] = []
        self._blocked: set[str] = set()  # pod uids whose eviction is refused (a PDB)
        self.before_write: Callable[[Call], None] | None = None  # an oracle may look first
        self._lock = threading.RLock()  # plans are written side by side (write_lanes.py)

    # --------------------------------------------------------------------- test controls
    def fail(self, verb: str, error: Callable[[], BaseException], *, target: str | None = None,
             times: int | None = None) -> None:
        """Make `verb` (on `target`, or any) raise `error()`, `times` times or always."""
        self._failures.append(_Failure(verb=verb, error=error, target=target, times=times))

    def block(self, *uids: str) -> None:
        """Evictions of these pods are refused through every retry (``Blocked``)."""
        self._blocked |= set(uids)

    def lose_leadership_on(self, verb: str) -> None:
        """From the first `verb` attempted on, this replica is no longer the leader."""
        self._lose_leadership_on.add(verb)

    # ------------------------------------------------------------------------ inspection
    @property
    def writes(self) -> list[Call]:
        """Successful writes other than Events, in order."""
        return [c for c in self.calls if c.ok and c.verb != "emit"]

    @property
    def events(self) -> list[Call]:
        return [c for c in self.calls if c.ok and c.verb == "emit"]

    def verbs(self, *, events: bool = False) -> list[str]:
        return [c.verb for c in self.calls if c.ok and (events or c.verb != "emit")]

    def of(self, verb: str) -> list[Call]:
        return [c for c in self.calls if c.ok and c.verb == verb]

    def event_reasons(self, target: str | None = None) -> list[str]:
        return [c.reason for c in self.events if target is None or c.target == target]

    def warnings(self) -> list[Call]:
        return [c for c in self.events if c.warning]

    # -------------------------------------------------------------------- the choke point
    def _write(self, call: Call, apply: Callable[[], Any] = lambda: None) -> Any:
        with self._lock:  # one write at a time, as the API server applies them
            return self._write_locked(call, apply)

    def _write_locked(self, call: Call, apply: Callable[[], Any]) -> Any:
        event = call.verb == "emit"
        if self.dry_run and not event:
            self.calls.append(replace(call, outcome="dry-run"))
            return None
        if call.verb in self._lose_leadership_on:
            self.leader = False
        if not self.leader:
            self.calls.append(replace(call, outcome="not-leader"))
            raise NotLeader(f"{call.verb} {call.target} not sent")
        for f in self._failures:
            if f.verb == call.verb and f.target in (None, call.target) and f.times != 0:
                if f.times is not None:
                    f.times -= 1
                err = f.error()
                self.calls.append(replace(call, outcome=type(err).__name__))
                raise err
        if self.before_write is not None:
            self.before_write(call)
        try:
            result = apply()
        except (Blocked, Conflict) as e:
            self.calls.append(replace(call, outcome=type(e).__name__))
            raise
        self.calls.append(call)
        return result

    def _pod_changed(self, p: PodInfo, result: Any = None, **changes: Any) -> Callable[[], Any]:
        def apply() -> Any:
            if self.cache is not None:
                self.cache.change_pod(p.uid, **changes)
            return result
        return apply

    def _live(self, p: PodInfo) -> PodInfo:
        """What the API server holds for `p` now (reads go to the server in the real one)."""
        if self.cache is None:
            return p
        return self.cache.pod_by_uid(p.uid) or p

    # ----------------------------------------------------------------------- stored plans
    def create_plan(self, record: plan_record.PlanRecord) -> str | None:
        name = plan_object_name(record.id)

        def apply() -> str:
            if self.cache is None:
                return str(len(self.calls) + 1000)
            if self.cache.plans.get(name) is not None:
                raise Conflict(f"plan {record.id} exists already")
            rv = self.cache.next_rv()
            self.cache.plans.put(StoredPlan(name=name, resource_version=rv,
                                            raw=plan_record.plan_to_annotation(record)))
            return rv
        return self._write(Call(verb="create_plan", target=record.id, plan=record.id,
                                args={"state": record.state, "record": record,
                                      "victims": tuple(v.uid for v in record.victims),
                                      "nodes": tuple(sorted(record.nodes))}), apply)

    def update_plan(self, record: plan_record.PlanRecord, rv: str) -> str | None:
        name = plan_object_name(record.id)
        raw = plan_record.plan_to_annotation(record)  # the real one serialises before sending

        def apply() -> str:
            if self.cache is None:
                return str(int(rv) + 1) if rv.isdigit() else "1"
            seen = self.cache.plans.get(name)
            if seen is None or seen.resource_version != rv:
                raise Conflict(f"plan {record.id} changed")
            new = self.cache.next_rv()
            self.cache.plans.put(StoredPlan(name=name, resource_version=new, raw=raw))
            return new
        return self._write(Call(verb="update_plan", target=record.id, plan=record.id,
                                args={"state": record.state, "record": record, "rv": rv}),
                           apply)

    def delete_plan(self, plan_id: str, rv: str) -> None:
        name = plan_object_name(plan_id)

        def apply() -> None:
            if self.cache is not None:
                seen = self.cache.plans.get(name)
                if seen is not None and seen.resource_version == rv:
                    self.cache.plans.remove(name)
        self._write(Call(verb="delete_plan", target=plan_id, plan=plan_id, args={"rv": rv}),
                    apply)

    # -------------------------------------------------------------------------- the victims
    def request_checkpoint(self, pod: PodInfo, request: plan_record.DrainRequest, *,
                           only_if_unchanged: bool = False, decode: bool = True) -> bool:
        if pod.deleting or plan_record.drain_requested(pod.annotations, request.plan):
            return False
        raw = plan_record.drain_to_annotation(request)
        write = self._pod_changed(pod, True, annotations={
            **self._live(pod).annotations, plan_record.DRAIN_ANNOTATION: raw})

        def apply() -> bool:  # like the server: a stale resourceVersion is a 409, not a write
            if only_if_unchanged and self._live(pod).resource_version != pod.resource_version:
                return False
            return write()
        done = self._write(
            Call(verb="request_checkpoint", target=pod.key, plan=request.plan,
                 args={"uid": pod.uid, "deadline": request.deadline,
                       "only_if_unchanged": only_if_unchanged}), apply)
        return bool(done)

    def withdraw_checkpoint(self, pod: PodInfo, plan_id: str) -> None:
        if not plan_record.drain_requested(pod.annotations, plan_id):
            return
        rest = {k: v for k, v in self._live(pod).annotations.items()
                if k != plan_record.DRAIN_ANNOTATION}
        self._write(Call(verb="withdraw_checkpoint", target=pod.key, plan=plan_id,
                         args={"uid": pod.uid}), self._pod_changed(pod, annotations=rest))

    def evict(self, pod: PodInfo, plan_id: str = "") -> bool:
        if pod.deleting:
            return False
        if pod.uid in self._blocked:
            def apply() -> bool:
                raise Blocked(f"eviction of {pod.key} refused: 429 Too Many Requests: Cannot "
                              "evict pod as it would violate the pod's disruption budget.")
        else:
            apply = self._pod_changed(pod, True, deleting=True)
        done = self._write(Call(verb="evict", target=pod.key, plan=plan_id,
                                args={"uid": pod.uid}), apply)
        return bool(done)

    # ------------------------------------------------------------------------ the preemptor
    def nominate(self, pod: PodInfo, node: str, plan_id: str = "") -> None:
        if pod.deleting or pod.node or pod.nominated == node:
            return
        self._write(Call(verb="nominate", target=pod.key, plan=plan_id, args={"node": node}),
                    self._pod_changed(pod, nominated=node))

    def clear_nomination(self, pod: PodInfo, node: str, plan_id: str = "") -> None:
        if pod.deleting or pod.node or pod.nominated != node:
            return
        self._write(Call(verb="clear_nomination", target=pod.key, plan=plan_id,
                         args={"node": node}), self._pod_changed(pod, nominated=None))

    def pin(self, pod: PodInfo, node: str, plan_id: str = "") -> None:
        if pod.deleting or ADMISSION_GATE not in pod.gates:
            return
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        self._write(Call(verb="pin", target=pod.key, plan=plan_id, args={"node": node}),
                    self._pod_changed(pod, required_terms=(term,)))

    def ungate(self, pod: PodInfo, plan_id: str = "") -> None:
        if pod.deleting or ADMISSION_GATE not in self._live(pod).gates:
            return
        gates = tuple(g for g in self._live(pod).gates if g != ADMISSION_GATE)
        self._write(Call(verb="ungate", target=pod.key, plan=plan_id),
                    self._pod_changed(pod, gates=gates))

    def tolerate(self, pod: PodInfo, plan_id: str) -> None:
        if pod.deleting or pod.node or has_reservation_toleration(pod, plan_id):
            return
        tolerations = (*self._live(pod).tolerations,
                       {"key": RESERVED_TAINT, "operator": "Equal", "value": plan_id,
                        "effect": "NoSchedule"})
        self._write(Call(verb="tolerate", target=pod.key, plan=plan_id),
                    self._pod_changed(pod, tolerations=tolerations))

    # ------------------------------------------------------------------- node reservation
    def _node_taints(self, name: str, taints: tuple[Mapping, ...]) -> Callable[[], None]:
        def apply() -> None:
            n = self.cache.nodes.get(name) if self.cache is not None else None
            if n is not None:
                self.cache.nodes.put(replace(n, taints=taints))
        return apply

    def _live_taints(self, name: str) -> tuple[Mapping, ...] | None:
        if self.cache is None:
            return ()
        n = self.cache.nodes.get(name)
        return None if n is None else n.taints

    def reserve(self, node: str, plan_id: str) -> None:
        taints = self._live_taints(node)
        if taints is not None and reservation(plan_id) in taints:
            return
        kept = tuple(t for t in taints or () if t.get("key") != RESERVED_TAINT)
        self._write(Call(verb="reserve", target=node, plan=plan_id),
                    self._node_taints(node, (*kept, reservation(plan_id))))

    def unreserve(self, node: str, plan_id: str) -> None:
        taints = self._live_taints(node)
        if taints is None or (self.cache is not None and reservation(plan_id) not in taints):
            return
        kept = tuple(t for t in taints if t.get("key") != RESERVED_TAINT)
        self._write(Call(verb="unreserve", target=node, plan=plan_id),
                    self._node_taints(node, kept))

    # ------------------------------------------------------------------------------ events
    def emit(self, pod: PodInfo, reason: str, message: str, *, warning: bool = False) -> None:
        self._write(Call(verb="emit", target=pod.key, reason=reason, message=message,
                         warning=warning, args={"uid": pod.uid}))

    def delete_lease(self, name: str, namespace: str, rv: str) -> None:
        """(``ckpt-preempt cleanup`` only; the reconciler never deletes its Lease.)"""
        self._write(Call(verb="delete_lease", target=f"{namespace}/{name}", args={"rv": rv}))

    def set_priority_boost(self, namespace: str, name: str, value: str | None, *,
                           version: str, rv: str) -> bool:
        """(``ckpt-preempt kueue-boost`` only; the reconciler never writes Workloads.)"""
        return bool(self._write(Call(verb="set_priority_boost", target=f"{namespace}/{name}",
                                     args={"value": value, "version": version, "rv": rv}),
                                lambda: True))


# ------------------------------------------------------------------------------- a test rig


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Rig:
    """A reconciler over a fake cache, with recording actions that apply their writes."""

    def __init__(self, cache: FakeCache, **cfg: Any) -> None:
        from ckpt_preempt.controller.core.config import Config
        from ckpt_preempt.controller.core.metrics import Metrics
        from ckpt_preempt.controller.planning.reconcile import Reconciler

        self.cache = cache
        self.clock = Clock()
        self.cfg = Config(**{"namespaces": ("team",), **cfg})
        self.actions = RecordingActions(cache, dry_run=self.cfg.dry_run, clock=self.clock)
        self.metrics = Metrics()
        self.reconciler = Reconciler(cache, self.actions, self.cfg, self.metrics,
                                     clock=self.clock)

    def tick(self, at: float) -> list[Call]:
        """One pass at time `at`; returns the calls it made."""
        self.clock.now = at
        first = len(self.actions.calls)
        self.reconciler.tick()
        return self.actions.calls[first:]

    def state(self, plan_id: str) -> plan_record.State | None:
        r = self.cache.plan(plan_id)
        return None if r is None else r.state
