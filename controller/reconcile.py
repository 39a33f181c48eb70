"""The reconcile pass: carry every persisted plan one step further, then plan for new preemptors.

One ``tick()`` reads the watch cache (never the API server, except inside the named actions),
so a pass is cheap and a restarted controller rebuilds everything from annotations:

1. **Active plans.** Every pod carrying a non-terminal ``ckpt-preempt.io/plan`` is advanced with
   ``policies.lifecycle.next_step``. Transitions are written first, then the step's action runs.
2. **New preemptors**, in queue order (priority, then gang size, then age, then uid):
   (a) pods ``PodScheduled=False/Unschedulable`` with ``preemptionPolicy: Never``;
   (b) gangs whose members carry the ``ckpt-preempt.io/admission`` gate, once every member of
   the declared gang-total exists. Nodes targeted by active plans and their victims are held
   back from new plans.

Anything unexpected in one plan or one preemptor is logged, counted and skipped: the loop never
dies of bad input, and evicts only victims listed in a persisted plan.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from kubernetes.client.rest import ApiException

from controller import convert
from controller.actions import (
    RESERVED_TAINT,
    Actions,
    Blocked,
    Conflict,
    has_reservation_toleration,
    node_reserved_for,
)
from controller.config import Config
from controller.convert import ADMISSION_GATE, PodInfo
from controller.metrics import Metrics
from controller.watch import ClusterCache
from policies import annotations as ann
from policies import kube_default, lifecycle, preemption
from policies.lifecycle import Mode, PlanRecord, State, StepKind
from policies.model import Plan

log = logging.getLogger("ckpt_preempt.reconcile")
RESERVATION_GRACE_SECONDS = 60.0  # after evictBy, a reservation is lifted whatever happened
UNKNOWN_RESERVATION_SECONDS = 15.0  # a taint whose plan is nowhere is lifted after this
PRUNE_SECONDS = 60.0  # how often the process forgets gone pods and plans


@contextlib.contextmanager
def cycle_objects_frozen() -> Iterator[None]:
    """Keep the cyclic GC off everything alive now (the cycle's snapshot and the watch cache)
    while the queue is planned, and give it back afterwards.

    A full (generation-2) collection walks every live object; with a 40k-pod snapshot that is
    tens of milliseconds landing inside whichever plan happens to trigger it (the p99 of
    bench/plan_latency.py). Nothing is leaked: refcounting still frees frozen objects, and
    ``gc.unfreeze`` hands them back to the oldest generation.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass
class _Memory:
    """What this process did, so a stale cache never makes it repeat an action."""

    requested: set[tuple[str, str]] = field(default_factory=set)  # (plan, uid)
    evicted: set[tuple[str, str]] = field(default_factory=set)
    steered: set[tuple[str, str]] = field(default_factory=set)
    acked: set[tuple[str, str]] = field(default_factory=set)
    emitted: set[tuple] = field(default_factory=set)
    next_try: dict[str, float] = field(default_factory=dict)
    gang_waiting: dict[str, float] = field(default_factory=dict)
    blocked: dict[str, float] = field(default_factory=dict)  # victim uid -> not before
    reserved: set[tuple[str, str]] = field(default_factory=set)


@dataclass(frozen=True, kw_only=True)
class Candidate:
    mode: Mode
    key: str  # gang key, or the pod key
    members: tuple[PodInfo, ...]

    @property
    def anchor(self) -> PodInfo:
        return min(self.members, key=lambda p: p.name)

    def order(self) -> tuple:
        """1. priority (high first) 2. gang size (large first) 3. age (old first) 4. uid."""
        return (-max(p.priority for p in self.members), -len(self.members),
                min(p.created for p in self.members), self.anchor.uid)


class Reconciler:
    def __init__(self, cache: ClusterCache, actions: Actions, cfg: Config, metrics: Metrics,
                 *, clock: Callable[[], float] = time.time) -> None:
        self.cache, self.actions, self.cfg, self.metrics = cache, actions, cfg, metrics
        self.clock = clock
        self.mem = _Memory()
        self._pruned = 0.0
        self._new_plans: set[str] = set()  # created since the last prune (not yet in the cache)
        self._unknown_reservations: dict[str, float] = {}  # plan id -> first seen without plan
        self.scope = convert.Scope(namespaces=frozenset(cfg.namespaces),
                                   priority_classes=frozenset(cfg.priority_classes))
        self.limits = ann.Limits(max_checkpoint_seconds=cfg.max_checkpoint_seconds,
                                 max_min_runtime=cfg.max_min_runtime_seconds)

    # ----------------------------------------------------------------------------- one pass
    def tick(self) -> None:
        now = self.clock()
        pods = [p for p in self.cache.pods.items() if not p.done]
        by_uid = {p.uid: p for p in pods}
        active: list[tuple[PodInfo, PlanRecord, str]] = []
        previous: dict[str, str] = {}  # anchor uid -> its terminal or malformed plan value
        for p in pods:
            raw = p.annotations.get(lifecycle.PLAN_ANNOTATION)
            if raw is None:
                continue
            try:
                record = lifecycle.plan_from_annotation(raw)
            except lifecycle.PlanFormatError as e:
                self._warn_once(p, "InvalidPlan", f"{lifecycle.PLAN_ANNOTATION}: {e}; ignored "
                                "(nothing is evicted for it); the pod may be planned anew")
                previous[p.uid] = raw
                continue
            if record.state.terminal:
                previous[p.uid] = raw
            else:
                active.append((p, record, raw))
        self.metrics.active_plans.set(len(active))
        self._release_reservations(pods, now)
        for anchor, record, raw in active:
            try:
                self._advance(anchor, record, raw, by_uid, now)
            except Conflict as e:
                log.info("plan %s: %s; will re-read", record.id, e)
            except Exception:
                log.exception("plan %s: step failed", record.id)
                self.metrics.loop_errors.inc()
        self._plan_new(pods, by_uid, active, previous, now)
        if now - self._pruned > PRUNE_SECONDS:
            self._prune(by_uid, {r.id for _, r, _ in active} | self._new_plans, now)

    def _prune(self, by_uid: Mapping[str, PodInfo], live_plans: set[str], now: float) -> None:
        """Forget pods and plans that are gone, so a long-running controller stays small."""
        m = self.mem
        m.next_try = {u: t for u, t in m.next_try.items() if u in by_uid}
        m.blocked = {u: t for u, t in m.blocked.items() if u in by_uid and t > now}
        m.emitted = {k for k in m.emitted if k[0] in by_uid}
        for name in ("requested", "evicted", "steered", "acked", "reserved"):
            setattr(m, name, {k for k in getattr(m, name) if k[0] in live_plans})
        m.gang_waiting = {k: t for k, t in m.gang_waiting.items() if now - t < 86400}
        self._pruned = now
        self._new_plans = set()
        self._unknown_reservations = {k: t for k, t in self._unknown_reservations.items()
                                      if now - t < 3600}

    def _release_reservations(self, pods: list[PodInfo], now: float) -> None:
        """Lift a reservation taint once its plan is over: aborted, gone, past evictBy plus a
        grace period, or every preemptor bound (or gone)."""
        records: dict[str, tuple[PlanRecord, list[PodInfo]]] = {}
        by_uid = {p.uid: p for p in pods}
        for p in pods:
            raw = p.annotations.get(lifecycle.PLAN_ANNOTATION)
            if raw:
                with contextlib.suppress(lifecycle.PlanFormatError):
                    r = lifecycle.plan_from_annotation(raw)
                    records[r.id] = (r, [by_uid[pl.uid] for pl in r.placements
                                         if pl.uid in by_uid])
        for node in self.cache.nodes.items():
            for t in node.taints:
                if t.get("key") != RESERVED_TAINT:
                    continue
                plan = t.get("value", "")
                r, pre = records.get(plan, (None, []))
                if r is None:  # the node's watch may run ahead of the pod's: wait a little
                    since = self._unknown_reservations.setdefault(plan, now)
                    if now - since < UNKNOWN_RESERVATION_SECONDS:
                        continue
                else:
                    self._unknown_reservations.pop(plan, None)
                over = (r is None or r.state is State.ABORTED
                        or now > r.evict_by + RESERVATION_GRACE_SECONDS
                        or (r.state is State.DONE and all(p.node for p in pre)))
                if over:
                    try:
                        self.actions.unreserve(node.name, plan)
                    except (Conflict, ApiException) as e:
                        log.info("reservation on %s not lifted yet: %s", node.name, e)

    # ------------------------------------------------------------------------- active plans
    def _observe(self, r: PlanRecord, by_uid: Mapping[str, PodInfo]) -> lifecycle.Observed:
        victims = {}
        for v in r.victims:
            p = by_uid.get(v.uid)
            if p is None:
                continue
            victims[v.uid] = lifecycle.VictimObs(
                uid=p.uid, node=p.node,
                terminating=p.deleting or (r.id, v.uid) in self.mem.evicted,
                acked=lifecycle.acked(p.annotations, r.id),
                drain_requested=lifecycle.drain_requested(p.annotations, r.id)
                or (r.id, v.uid) in self.mem.requested)
        preemptors = {}
        for pl in r.placements:
            p = by_uid.get(pl.uid)
            if p is None or p.deleting:
                continue
            steered = (r.id, p.uid) in self.mem.steered or (
                p.nominated == pl.node if r.mode is Mode.NOMINATE
                else ADMISSION_GATE not in p.gates)
            node = self.cache.nodes.get(pl.node)
            reserved = not self.cfg.reserve_nodes or (r.id, p.uid) in self.mem.reserved or (
                has_reservation_toleration(p, r.id) and node is not None
                and node_reserved_for(node.taints, r.id))
            preemptors[pl.uid] = lifecycle.PreemptorObs(uid=p.uid, node=p.node, steered=steered,
                                                    reserved=reserved)
        return lifecycle.Observed(victims=victims, preemptors=preemptors)

    def _advance(self, anchor: PodInfo, r: PlanRecord, raw: str,
                 by_uid: Mapping[str, PodInfo], now: float) -> None:
        for _ in range(8):  # transitions chain within a pass; one action ends it
            observed = self._observe(r, by_uid)
            self._report_acks(r, observed, by_uid)
            step = lifecycle.next_step(r, observed, now)
            if step.kind is StepKind.TRANSITION:
                new = r.with_state(step.to_state, step.reason)
                self.actions.write_plan(anchor, new, previous=raw)
                log.info("plan %s: %s -> %s (%s)", r.id, r.state, new.state, step.reason,
                         extra={"plan": r.id, "pod": anchor.key})
                self._on_transition(anchor, r, new, observed, by_uid, now)
                r, raw = new, lifecycle.plan_to_annotation(new)
                continue
            if step.kind is StepKind.REQUEST_CHECKPOINT:
                self._request(r, step.victims, by_uid, now)
            elif step.kind is StepKind.EVICT:
                self._evict(anchor, r, step.victims, by_uid)
            elif step.kind is StepKind.STEER:
                self._steer(r, by_uid)
            elif step.kind is StepKind.RESERVE:
                for pl in r.placements:
                    self.actions.reserve(pl.node, r.id)
                    self.actions.tolerate(by_uid[pl.uid], r.id)
                    self.mem.reserved.add((r.id, pl.uid))
                continue  # evict in the same pass: the reservation is in place
            return

    def _report_acks(self, r: PlanRecord, observed: lifecycle.Observed,
                     by_uid: Mapping[str, PodInfo]) -> None:
        if r.state is not State.DRAINING:
            return
        for uid, seen in observed.victims.items():
            if seen.acked and (r.id, uid) not in self.mem.acked:
                self.mem.acked.add((r.id, uid))
                self.actions.emit(by_uid[uid], "CheckpointCompleted",
                                  f"checkpoint for plan {r.id} acknowledged")

    def _on_transition(self, anchor: PodInfo, old: PlanRecord, new: PlanRecord,
                       observed: lifecycle.Observed, by_uid: Mapping[str, PodInfo],
                       now: float) -> None:
        if new.state is State.EVICTING:
            self.metrics.drain_seconds.observe(max(0.0, now - old.created))
            for v in old.victims:
                seen = observed.victims.get(v.uid)
                if v.drain and seen is not None and not seen.acked:
                    self.actions.emit(by_uid[v.uid], "CheckpointDeadlineExceeded",
                                      f"no checkpoint acknowledgement for plan {old.id} by its "
                                      "deadline; evicting", warning=True)
        elif new.state is State.DONE:
            self.metrics.plans.labels("done").inc()
            for pl in new.placements:
                p = by_uid.get(pl.uid)
                if p is not None and new.mode is Mode.ADMIT:
                    self.actions.emit(p, "GangAdmitted",
                                      f"plan {new.id}: pinned to {pl.node} and admitted")
        elif new.state is State.ABORTED:
            self.metrics.plans.labels("aborted").inc()
            self.actions.emit(anchor, "PreemptionAborted", f"plan {new.id}: {new.reason}",
                              warning=True)
            if old.state is State.EVICTING:  # still refused at evictBy (a PDB): plan around it
                for v in old.victims:
                    seen = observed.victims.get(v.uid)
                    if seen is not None and not seen.terminating:
                        self.mem.blocked[v.uid] = now + self.cfg.blocked_victim_seconds
            for pl in new.placements:  # re-plan at once
                self.mem.next_try.pop(pl.uid, None)

    def _request(self, r: PlanRecord, uids: tuple[str, ...], by_uid: Mapping[str, PodInfo],
                 now: float) -> None:
        req = lifecycle.DrainRequest(plan=r.id, requested=now, deadline=r.deadline)
        for uid in uids:
            p = by_uid[uid]
            if self.actions.request_checkpoint(p, req):
                self.actions.emit(p, "CheckpointRequested",
                                  f"plan {r.id}: please checkpoint before "
                                  f"{lifecycle.drain_to_annotation(req)}")
            self.mem.requested.add((r.id, uid))

    def _evict(self, anchor: PodInfo, r: PlanRecord, uids: tuple[str, ...],
               by_uid: Mapping[str, PodInfo]) -> None:
        for uid in uids:
            if (r.id, uid) in self.mem.evicted:
                continue
            p = by_uid[uid]
            try:
                done = self.actions.evict(p)
            except Blocked as e:
                log.info("plan %s: %s", r.id, e, extra={"plan": r.id})
                self._warn_once(anchor, "EvictionBlocked", f"plan {r.id}: {e}")
                continue
            self.mem.evicted.add((r.id, uid))
            if done:
                self.metrics.victims.inc()
                for_ = ", ".join(f"{pl.namespace}/{pl.name}" for pl in r.placements)
                self.actions.emit(p, "Evicted", f"evicted by plan {r.id} for {for_}")

    def _steer(self, r: PlanRecord, by_uid: Mapping[str, PodInfo]) -> None:
        members = [(by_uid[pl.uid], pl.node) for pl in r.placements]
        if r.mode is Mode.NOMINATE:
            for p, node in members:
                self.actions.nominate(p, node)
        else:  # every member is pinned before any gate is lifted
            for p, node in members:
                self.actions.pin(p, node)
            for p, _ in members:
                self.actions.ungate(p)
        for p, _ in members:
            self.mem.steered.add((r.id, p.uid))

    # ---------------------------------------------------------------------------- new plans
    def _candidates(self, pods: list[PodInfo], conv: convert.Converted,
                    planned: set[str], now: float) -> list[Candidate]:
        """Single pods, or every pending member of a gang together (in either mode)."""
        model = conv.snapshot.pod_by_uid
        groups: dict[tuple[Mode, str], list[PodInfo]] = {}
        waiting: set[str] = set()  # gangs with a pending member not (yet) ours to handle
        for p in pods:
            if p.node or p.deleting or p.uid in planned or not self.scope.covers(p):
                continue
            gang = model[p.uid].gang
            if ADMISSION_GATE in p.gates:
                groups.setdefault((Mode.ADMIT, gang or p.key), []).append(p)
            elif not p.gates and p.unschedulable and p.preemption_policy == "Never":
                groups.setdefault((Mode.NOMINATE, gang or p.key), []).append(p)
            elif gang:
                waiting.add(gang)
        out: list[Candidate] = []
        for (mode, key), members in groups.items():
            first = model[members[0].uid]
            if first.gang is None:
                out.append(Candidate(mode=mode, key=key, members=tuple(members)))
                continue
            total = first.gang_total
            bound = [u for u in conv.snapshot.gangs[key].members if model[u].node is not None]
            have = len(members) + len(bound)
            if total is not None and have > total:
                for p in members:
                    self._warn_once(p, "GangTotalMismatch",
                                    f"gang {key} declares {total} members but {have} exist; "
                                    "not admitted until that is fixed")
                continue
            if key in waiting or (total is not None and have < total):
                continue  # the rest of the gang is not created, or not yet unschedulable
            out.append(Candidate(mode=mode, key=key, members=tuple(members)))
        return sorted(out, key=Candidate.order)

    def _plan_new(self, pods: list[PodInfo], by_uid: Mapping[str, PodInfo],
                  active: list[tuple[PodInfo, PlanRecord, str]], previous: Mapping[str, str],
                  now: float) -> None:
        planned = {pl.uid for _, r, _ in active for pl in r.placements}
        if not any(not p.node and not p.deleting and p.uid not in planned
                   and self.mem.next_try.get(p.uid, 0.0) <= now
                   and (ADMISSION_GATE in p.gates
                        or (p.unschedulable and p.preemption_policy == "Never"))
                   for p in pods):
            return  # nothing due: skip converting the whole cluster
        conv = convert.snapshot(now=now, nodes=self.cache.nodes.items(), pods=pods,
                                pdbs=self.cache.pdbs.items(), scope=self.scope,
                                limits=self.limits)
        with cycle_objects_frozen():
            self._plan_queue(pods, by_uid, conv, active, planned, previous, now)

    def _plan_queue(self, pods: list[PodInfo], by_uid: Mapping[str, PodInfo],
                    conv: convert.Converted, active: list[tuple[PodInfo, PlanRecord, str]],
                    planned: set[str], previous: Mapping[str, str], now: float) -> None:
        for uid, problems in conv.problems.items():  # victims' bad input is reported too
            p = by_uid.get(uid)
            if p is not None and self.scope.covers(p):
                for problem in problems:
                    self._warn_once(p, "InvalidAnnotation", problem)
        nodes = {n.name: n for n in self.cache.nodes.items()}
        reserved = {pl.node for _, r, _ in active for pl in r.placements}
        busy = {v.uid for _, r, _ in active for v in r.victims}
        busy |= {uid for uid, until in self.mem.blocked.items() if until > now}
        for cand in self._candidates(pods, conv, planned, now):
            if now < self.mem.next_try.get(cand.anchor.uid, 0.0):
                continue
            try:
                record = self._plan_one(cand, conv, nodes, frozenset(reserved), frozenset(busy),
                                        previous, now)
            except Conflict as e:
                log.info("%s: %s", cand.key, e)
                continue
            except ApiException as e:
                log.warning("%s: plan not persisted: %s", cand.key, e.reason)
                continue
            if record is not None:
                reserved |= {pl.node for pl in record.placements}
                busy |= record.victim_uids
                with contextlib.suppress(Conflict):  # the next pass re-reads and resumes
                    self._advance(cand.anchor, record, lifecycle.plan_to_annotation(record), by_uid,
                                  now)

    def _plan_one(self, cand: Candidate, conv: convert.Converted, nodes, reserved, busy,
                  previous: Mapping[str, str], now: float) -> PlanRecord | None:
        model = conv.snapshot.pod_by_uid
        snap = convert.for_preemptor(conv.snapshot, nodes, cand.members,
                                     reserved_nodes=reserved, busy_pods=busy)
        members = [model[p.uid] for p in cand.members]
        t0 = time.perf_counter()
        plan = preemption.plan(snap, members, preemption.PlannerConfig(
            drain=self.cfg.drain, max_checkpoint_seconds=self.cfg.max_checkpoint_seconds))
        self.metrics.plan_latency.observe(time.perf_counter() - t0)
        for p in cand.members:
            self.mem.next_try[p.uid] = now + self.cfg.retry_seconds
        if not plan.feasible or (cand.mode is Mode.NOMINATE and not plan.victim_groups):
            if not plan.feasible:
                self.metrics.plans.labels("infeasible").inc()
                self._note_once(cand.anchor, "PreemptionNotPossible", plan.reason)
                self._gang_timeout(cand, now)
            return None
        self.mem.gang_waiting.pop(cand.key, None)
        kd = kube_default.plan(snap, members, kube_default.KubeDefaultConfig(seed=0))
        saved = (kd.lost_gpu_seconds - plan.lost_gpu_seconds) / 3600 if kd.feasible else 0.0
        record = self._record(cand, plan, now)
        body = plan.reason
        if plan.victim_groups:
            body += (f"; victims {', '.join(f'{v.namespace}/{v.name}' for v in plan.victims)} "
                     f"on {', '.join(plan.target_nodes)}")
        if kd.feasible and plan.victim_groups:
            body += f"; kube-default would lose {kd.lost_gpu_seconds / 3600:.2f} GPU-h"
        message = f"plan {record.id}: {body}"
        if self.cfg.dry_run:
            self._note_once(cand.anchor, "PreemptionPlanned", "(dry run) " + body,
                            key=(tuple(v.uid for v in plan.victims), plan.target_nodes))
            return None
        self.actions.write_plan(cand.anchor, record, previous=previous.get(cand.anchor.uid))
        self._new_plans.add(record.id)
        self.metrics.plans.labels("planned").inc()
        self.metrics.lost_gpu_hours.inc(plan.lost_gpu_seconds / 3600)
        if saved > 0:
            self.metrics.saved_gpu_hours.inc(saved)
        for p in cand.members:
            self.actions.emit(p, "PreemptionPlanned", message)
        log.info("planned %s", record.id, extra={"plan": record.id, "preemptor": cand.key,
                                                  "victims": len(record.victims),
                                                  "lost_gpu_h": plan.lost_gpu_seconds / 3600})
        return record

    def _record(self, cand: Candidate, plan: Plan, now: float) -> PlanRecord:
        pods = {p.uid: p for p in cand.members}
        deadline = min(plan.drain_deadline or now, now + self.cfg.max_checkpoint_seconds)
        return PlanRecord(
            id=f"{int(now):x}-{uuid.uuid4().hex[:8]}", state=State.PLANNED, mode=cand.mode,
            created=now, deadline=max(deadline, now),
            evict_by=max(deadline, now) + self.cfg.eviction_timeout_seconds,
            placements=tuple(lifecycle.PlannedPlacement(
                uid=pl.pod_uid, namespace=pods[pl.pod_uid].namespace,
                name=pods[pl.pod_uid].name, node=pl.node) for pl in plan.placements),
            victims=tuple(lifecycle.PlannedVictim(uid=v.uid, namespace=v.namespace, name=v.name,
                                              node=v.node, drain=v.drain)
                          for v in plan.victims),
            lost_gpu_seconds=plan.lost_gpu_seconds,
        )

    def _gang_timeout(self, cand: Candidate, now: float) -> None:
        if cand.mode is not Mode.ADMIT:
            return
        since = self.mem.gang_waiting.setdefault(cand.key, now)
        if now - since >= self.cfg.gang_timeout_seconds:
            for p in cand.members:
                self._note_once(p, "GangTimedOut", f"gang {cand.key} could not be placed for "
                                f"{now - since:.0f}s", warning=True)

    # -------------------------------------------------------------------------------- events
    def _warn_once(self, pod: PodInfo, reason: str, message: str) -> None:
        self._note_once(pod, reason, message, warning=True)

    def _note_once(self, pod: PodInfo, reason: str, message: str, *,
                   warning: bool = False, key: object = None) -> None:
        """Once per pod, reason and `key` (default: the message) for this process."""
        k = (pod.uid, reason, message if key is None else key)
        if k not in self.mem.emitted:
            self.mem.emitted.add(k)
            self.actions.emit(pod, reason, message, warning=warning)
