"""Carry one stored plan one step further: re-validate, observe, step, act.

Before anything is written for a plan (a transition, a drain request, a reservation, an
eviction, a nomination), the plan is checked against live state with ``lifecycle.check``: the
preemptor is in scope, every remaining victim is in scope, on its node, of strictly lower
priority, not opted out and past min-runtime, every node exists, and the plan's deadlines are
within the configured caps. A plan that fails is Aborted with a Warning and nothing else is done
for it but its cleanup. Right before the first eviction, every gang among the victims must be
evictable whole under the live PDBs; otherwise the plan aborts (and is re-planned) instead of
evicting part of a gang.

An abort is clean: the victims' drain requests are withdrawn (the agent surfaces a cancel), a
mode (a) nomination is cleared, ``PreemptionAborted`` is emitted on the preemptor and the
victims, and the reservation is lifted by the reconciler's next pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.controller.core.metrics import Metrics
from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.records import ADMISSION_GATE, NodeInfo, PdbInfo, PodInfo
from ckpt_preempt.controller.planning.plans import PlanBook
from ckpt_preempt.controller.writes.actions import Actions, Blocked
from ckpt_preempt.controller.writes.write_bodies import (
    has_reservation_toleration,
    node_reserved_for,
)
from ckpt_preempt.policies.lifecycle import lifecycle, plan_record
from ckpt_preempt.policies.lifecycle.lifecycle import AbortCause, StepKind
from ckpt_preempt.policies.lifecycle.plan_record import Mode, PlanRecord, State
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.native_gangs import NativeGroup
from ckpt_preempt.policies.planner import preemption

log = logging.getLogger("ckpt_preempt.advance")
MAX_STEPS_PER_PASS = 8  # transitions chain within a pass; an action that needs the world to
#                         move (evict, request, steer after eviction) ends it


@dataclass
class Memory:
    """What this process did, so a stale cache never makes it repeat an action.

    Plans are advanced side by side (``controller/writes/write_lanes.py``): a task adds only keys of
    its own plan, preemptors and victims (no other task of the pass has them), each with one
    set or dict operation; ``once`` is the one check-then-add, and it holds a lock. Whole-set
    reads and rewrites (``reconcile._prune``, ``plans.restriction``) happen between batches."""

    requested: set[tuple[str, str]] = field(default_factory=set)  # (plan, uid)
    evicted: set[tuple[str, str]] = field(default_factory=set)
    steered: set[tuple[str, str]] = field(default_factory=set)
    acked: set[tuple[str, str]] = field(default_factory=set)
    reserved: set[tuple[str, str]] = field(default_factory=set)
    emitted: set[tuple] = field(default_factory=set)
    next_try: dict[str, float] = field(default_factory=dict)  # preemptor uid -> not before
    gang_waiting: dict[str, float] = field(default_factory=dict)
    blocked: dict[str, float] = field(default_factory=dict)  # victim uid -> not before
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def once(self, key: tuple) -> bool:
        """True the first time ``key`` is given (and it is remembered in ``emitted``)."""
        with self._lock:
            if key in self.emitted:
                return False
            self.emitted.add(key)
            return True


@dataclass(frozen=True, kw_only=True)
class NewPlan:
    """A plan just made for a preemptor (``reconcile._plan_one``), not stored yet."""

    record: PlanRecord
    key: str  # the preemptor's: pod or gang key
    members: tuple[PodInfo, ...]
    body: str  # the PreemptionPlanned message
    lost_gpu_hours: float
    saved_gpu_hours: float | None  # against kube-default, when it has a plan


@dataclass(frozen=True, kw_only=True)
class World:
    """The pass's view of the cluster (the watch cache, read once per pass)."""

    by_uid: Mapping[str, PodInfo]
    nodes: Mapping[str, NodeInfo]
    pdbs: tuple[PdbInfo, ...]
    now: float
    podgroups: Mapping[str, NativeGroup] = field(default_factory=dict)  # by <namespace>/<name>


class PlanStepper:
    """Advances stored plans; one instance per reconciler (shares its memory)."""

    def __init__(self, actions: Actions, cfg: Config, metrics: Metrics, book: PlanBook,
                 mem: Memory, limits: ann.Limits, scope: convert.Scope,
                 note: Callable[..., None]) -> None:
        self.actions, self.cfg, self.metrics, self.book, self.mem = actions, cfg, metrics, book, mem
        self.limits, self.scope, self._note = limits, scope, note
        self.caps = lifecycle.Caps(max_checkpoint_seconds=cfg.max_checkpoint_seconds,
                                   eviction_timeout_seconds=cfg.eviction_timeout_seconds,
                                   bind_timeout_seconds=cfg.bind_timeout_seconds)

    # ------------------------------------------------------------------------ live checks
    def _model(self, p: PodInfo, now: float):
        pod, _ = convert.to_pod(p, now, self.limits, self.scope.covers(p))
        return pod

    def live(self, r: PlanRecord, world: World) -> lifecycle.LiveState:
        pods = {}
        for uid in [pl.uid for pl in r.placements] + [v.uid for v in r.victims]:
            p = world.by_uid.get(uid)
            if p is None:
                continue
            m = self._model(p, world.now)
            pods[uid] = lifecycle.LivePod(
                uid=uid, in_scope=self.scope.covers(p), priority=p.priority, bound=p.node,
                terminating=p.deleting,
                evictable=m.preemptible and world.now - m.start_time >= m.min_runtime)
        return lifecycle.LiveState(pods=pods, nodes=frozenset(world.nodes))

    def gang_pdb_problem(self, r: PlanRecord, world: World) -> str | None:
        """``policies.planner.preemption.gang_pdb_problem`` on the live PDBs and this plan's
        victims."""
        victims = [world.by_uid[v.uid] for v in r.victims if v.uid in world.by_uid]
        conv = convert.snapshot(now=world.now, pods=victims, pdbs=world.pdbs, scope=self.scope,
                                limits=self.limits, podgroups=world.podgroups,
                                nodes=[world.nodes[p.node] for p in victims
                                       if p.node in world.nodes])
        return preemption.gang_pdb_problem(conv.snapshot, [p.uid for p in victims])

    def observe(self, r: PlanRecord, world: World) -> lifecycle.Observed:
        victims = {}
        for v in r.victims:
            p = world.by_uid.get(v.uid)
            if p is None:
                continue
            victims[v.uid] = lifecycle.VictimObs(
                uid=p.uid, node=p.node,
                terminating=p.deleting or (r.id, v.uid) in self.mem.evicted,
                acked=plan_record.acked(p.annotations, r.id),
                drain_requested=plan_record.drain_requested(p.annotations, r.id)
                or (r.id, v.uid) in self.mem.requested,
                # a plan waiting for this victim's next periodic checkpoint takes a newer
                # last-checkpoint as done, like an ack (policies.planner.timing)
                checkpointed=bool(v.wait) and ann.checkpointed_after(p.annotations, r.created,
                                                                     world.now))
        preemptors = {}
        for pl in r.placements:
            p = world.by_uid.get(pl.uid)
            if p is None or p.deleting:
                continue
            steered = (r.id, p.uid) in self.mem.steered or (
                p.nominated == pl.node if r.mode is Mode.NOMINATE
                else ADMISSION_GATE not in p.gates)
            node = world.nodes.get(pl.node)
            reserved = not self.cfg.reserve_nodes or (r.id, p.uid) in self.mem.reserved or (
                has_reservation_toleration(p, r.id) and node is not None
                and node_reserved_for(node.taints, r.id))
            preemptors[pl.uid] = lifecycle.PreemptorObs(uid=p.uid, node=p.node, steered=steered,
                                                        reserved=reserved)
        return lifecycle.Observed(victims=victims, preemptors=preemptors)

    # ------------------------------------------------------------------------------ a pass
    def advance(self, r: PlanRecord, rv: str, world: World) -> None:
        now = world.now
        for _ in range(MAX_STEPS_PER_PASS):
            problem = lifecycle.check(r, self.live(r, world), self.caps, now)
            if problem:
                self.abort(r, rv, AbortCause.PLAN_INVALID, f"plan no longer valid: {problem}",
                           world)
                return
            observed = self.observe(r, world)
            self._report_acks(r, observed, world)
            step = lifecycle.next_step(r, observed, now)
            if step.kind is StepKind.TRANSITION:
                if step.to_state is State.ABORTED:
                    refused = r.state is State.EVICTING and now >= r.evict_by
                    self.abort(r, rv, step.cause, step.reason, world, block_victims=refused)
                    return
                new = r.with_state(step.to_state, step.reason)
                rv = self.actions.update_plan(new, rv)
                self.book.wrote(new, rv)
                log.info("plan %s: %s -> %s (%s)", r.id, r.state, new.state, step.reason,
                         extra={"plan": r.id})
                self._on_transition(r, new, observed, world)
                r = new
                continue
            if step.kind is StepKind.REQUEST_CHECKPOINT:
                self._request(r, step.victims, world)
            elif step.kind is StepKind.EVICT:
                first = not any((r.id, v.uid) in self.mem.evicted or v.uid not in world.by_uid
                                or world.by_uid[v.uid].deleting for v in r.victims)
                blocked = self.gang_pdb_problem(r, world) if first else None
                if blocked:
                    self.abort(r, rv, AbortCause.GANG_PDB, blocked, world, block_victims=True)
                    return
                self._evict(r, step.victims, world)
            elif step.kind is StepKind.STEER:
                self._steer(r, world)
                if any(world.by_uid.get(v.uid) is not None and not world.by_uid[v.uid].deleting
                       and (r.id, v.uid) not in self.mem.evicted for v in r.victims):
                    continue  # nominated before evicting: evict in the same pass
            elif step.kind is StepKind.RESERVE:
                for pl in r.placements:
                    self.actions.reserve(pl.node, r.id)
                    self.actions.tolerate(world.by_uid[pl.uid], r.id)
                    self.mem.reserved.add((r.id, pl.uid))
                continue  # evict in the same pass: the reservation is in place
            return

    def store_and_start(self, new: NewPlan, world: World) -> None:
        """Store a new plan, then carry it as far as it goes in this pass: one plan's whole
        write sequence, one task of the pass's ``write_lanes.Lanes``."""
        r = new.record
        rv = self.actions.create_plan(r)
        if rv is None:
            return
        self.book.wrote(r, rv)
        self.metrics.plans.labels("planned").inc()
        self.metrics.lost_gpu_hours.inc(new.lost_gpu_hours)
        if new.saved_gpu_hours is not None:
            self.metrics.saved_gpu_hours.inc(new.saved_gpu_hours)
        for p in new.members:
            self.actions.emit(p, Reason.PREEMPTION_PLANNED, f"plan {r.id}: {new.body}")
        log.info("planned %s", r.id, extra={"plan": r.id, "preemptor": new.key,
                                             "victims": len(r.victims),
                                             "lost_gpu_h": new.lost_gpu_hours})
        self.advance(r, rv, world)

    def abort(self, r: PlanRecord, rv: str, cause: AbortCause, reason: str, world: World, *,
              block_victims: bool = False) -> None:
        """``cause`` labels the abort metric; ``reason`` says it in words (the record, the
        Events). ``block_victims``: the victims could not be evicted (refused at evictBy, or a
        PDB would split their gang), so re-plans pass over them for ``blockedVictimSeconds``."""
        new = r.with_state(State.ABORTED, reason)
        self.book.wrote(new, self.actions.update_plan(new, rv))
        log.info("plan %s: %s -> Aborted (%s)", r.id, r.state, reason,
                 extra={"plan": r.id, "cause": cause.value})
        self.metrics.plans.labels("aborted").inc()
        self.metrics.plan_aborts.labels(cause.value).inc()
        anchor = world.by_uid.get(r.anchor.uid)
        if anchor is not None:
            self.actions.emit(anchor, Reason.PREEMPTION_ABORTED, f"plan {r.id}: {reason}",
                              warning=True)
        for v in r.victims:
            p = world.by_uid.get(v.uid)
            if p is not None and not p.deleting:
                self.actions.emit(p, Reason.PREEMPTION_ABORTED,
                                  f"plan {r.id} will not evict this pod: {reason}")
        if block_victims:
            for v in r.victims:
                p = world.by_uid.get(v.uid)
                if p is not None and not p.deleting and (r.id, v.uid) not in self.mem.evicted:
                    self.mem.blocked[v.uid] = world.now + self.cfg.blocked_victim_seconds
        for pl in r.placements:  # re-plan at once
            self.mem.next_try.pop(pl.uid, None)
        self.tidy(new, world)

    def tidy(self, r: PlanRecord, world: World) -> None:
        """After an abort (also on a later pass, or after a restart): no drain request or
        nomination of this plan is left behind."""
        if r.state is not State.ABORTED:
            return
        for v in r.victims:
            p = world.by_uid.get(v.uid)
            if p is not None and plan_record.drain_requested(p.annotations, r.id):
                self.actions.withdraw_checkpoint(p, r.id)
        if r.mode is Mode.NOMINATE:
            for pl in r.placements:
                p = world.by_uid.get(pl.uid)
                if p is not None and p.nominated == pl.node:
                    self.actions.clear_nomination(p, pl.node, r.id)

    # ---------------------------------------------------------------------------- actions
    def _report_acks(self, r: PlanRecord, observed: lifecycle.Observed, world: World) -> None:
        if r.state is not State.DRAINING:
            return
        for uid, seen in observed.victims.items():
            if (seen.acked or seen.checkpointed) and (r.id, uid) not in self.mem.acked:
                self.mem.acked.add((r.id, uid))
                self.actions.emit(world.by_uid[uid], Reason.CHECKPOINT_COMPLETED,
                                  f"checkpoint for plan {r.id} acknowledged" if seen.acked else
                                  f"checkpoint reported after plan {r.id} was made, as its "
                                  "timing expected")

    def _on_transition(self, old: PlanRecord, new: PlanRecord, observed: lifecycle.Observed,
                       world: World) -> None:
        if new.state is State.EVICTING:
            self.metrics.drain_seconds.observe(max(0.0, world.now - old.created))
            for v in old.victims:
                seen = observed.victims.get(v.uid)
                if seen is None or seen.acked or seen.checkpointed:
                    continue
                if v.drain:
                    self.actions.emit(world.by_uid[v.uid], Reason.CHECKPOINT_DEADLINE_EXCEEDED,
                                      f"no checkpoint acknowledgement for plan {old.id} by its "
                                      "deadline; evicting", warning=True)
                elif v.wait:
                    self.actions.emit(world.by_uid[v.uid], Reason.CHECKPOINT_DEADLINE_EXCEEDED,
                                      f"plan {old.id} waited for this pod's predicted {v.wait}, "
                                      "which did not come by its deadline; evicting",
                                      warning=True)
        elif new.state is State.DONE:
            self.metrics.plans.labels("done").inc()
            for pl in new.placements:
                p = world.by_uid.get(pl.uid)
                if p is not None and new.mode is Mode.ADMIT:
                    self.actions.emit(p, Reason.GANG_ADMITTED,
                                      f"plan {new.id}: pinned to {pl.node} and admitted")
            anchor = world.by_uid.get(new.anchor.uid)
            if anchor is not None:
                self.actions.emit(anchor, Reason.PREEMPTION_DONE, f"plan {new.id}: {new.reason}")

    def _request(self, r: PlanRecord, uids: tuple[str, ...], world: World) -> None:
        for uid in uids:
            p = world.by_uid[uid]
            req = plan_record.drain_request(r, uid, world.now)  # a shrink names who leaves
            if self.actions.request_checkpoint(p, req):
                self.actions.emit(p, Reason.CHECKPOINT_REQUESTED,
                                  f"plan {r.id}: please checkpoint before "
                                  f"{plan_record.drain_to_annotation(req)}")
            self.mem.requested.add((r.id, uid))

    def _evict(self, r: PlanRecord, uids: tuple[str, ...], world: World) -> None:
        anchor = world.by_uid.get(r.anchor.uid)
        for uid in uids:
            if (r.id, uid) in self.mem.evicted:
                continue
            p = world.by_uid[uid]
            try:
                done = self.actions.evict(p, r.id)
            except Blocked as e:
                log.info("plan %s: %s", r.id, e, extra={"plan": r.id})
                if anchor is not None:
                    self._note(anchor, Reason.EVICTION_BLOCKED, f"plan {r.id}: {e}", warning=True)
                continue
            if self.cfg.dry_run:
                continue
            self.mem.evicted.add((r.id, uid))
            if done:
                self.metrics.victims.inc()
                for_ = ", ".join(f"{pl.namespace}/{pl.name}" for pl in r.placements)
                self.actions.emit(p, Reason.EVICTED, f"evicted by plan {r.id} for {for_}")

    def _steer(self, r: PlanRecord, world: World) -> None:
        members = [(world.by_uid[pl.uid], pl.node) for pl in r.placements]
        if r.mode is Mode.NOMINATE:
            for p, node in members:
                self.actions.nominate(p, node, r.id)
        else:  # every member is pinned before any gate is lifted
            for p, node in members:
                self.actions.pin(p, node, r.id)
            for p, _ in members:
                self.actions.ungate(p, r.id)
        for p, _ in members:
            self.mem.steered.add((r.id, p.uid))
