"""The plan lifecycle: the state machine for one Plan and its validation against live state.
Pure: no I/O or clock.

    Planned ──► Draining ──(every drained victim acked, or the deadline)──► Evicting ──► Done
                           (and every victim the plan waits for checkpointed or ended:
                            ``PlannedVictim.wait``, policies.planner.timing)
       │           │                                                            │
       └───────────┴──────────────► Aborted ◄───────────────────────────────────┘

``next_step(record, observed, now)`` looks at the stored plan (``PlanRecord``, kept in a
ConfigMap the controller owns in its own namespace) and at what the API server shows now
(``Observed``), and returns the one ``Step`` the controller should carry out. A state change is
its own step (``TRANSITION``): the controller writes it *before* doing what the new state
allows, so a controller killed at any point resumes from the stored plan.
``check(record, live, caps)`` re-validates a stored plan against live state; the controller
calls it before every write it makes for the plan and aborts the plan when it fails.

Guarantees (property tests in tests/controller/test_lifecycle.py):

- ``RESERVE`` comes before the first ``EVICT``: the target nodes are tainted for this plan and
  the preemptor pods tolerate it; in mode (a) the preemptor is also nominated (``STEER``)
  before the first ``EVICT``, so the scheduler counts it on that node.
- ``EVICT`` only names victims of the stored plan, whose observed uid still matches, that are
  neither terminating nor gone: no pod outside the plan, no pod twice.
- Before the first eviction, a victim that disappeared or a preemptor that went away (or was
  scheduled without the plan) aborts the plan, so the controller re-plans on the world as is;
  except a victim the plan waits for (``wait``), whose end is what it waits for: it is then
  simply not evicted. Once a victim is evicted, the rest are evicted too; and if the plan must
  end after part of a gang was evicted (its preemptor went away), the rest of that gang is
  still evicted until ``evict_by``: a gang is never left half-evicted by a plan.
- A plan holds until its work is done: ``Evicting`` ends ``Done`` only once every preemptor is
  bound and every victim is terminating or gone (a preemptor bound on any node the plan freed
  is success); it aborts when victims are still not evicted at ``evict_by`` or the preemptor is
  not bound by ``bind_by``. While it holds, its nodes stay reserved and its victims counted, so
  a preemptor whose node still has terminating victims is never planned again.

The record and its stored formats (``PlanRecord``, ``plan_from_annotation``, ``DrainRequest``,
the annotation names, ``PlanFormatError``/``DrainFormatError``) are in
``policies.lifecycle.plan_record``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from ckpt_preempt.policies.lifecycle.plan_record import (
    Mode,
    PlannedVictim,
    PlanRecord,
    State,
)


class AbortCause(enum.StrEnum):
    """Why a plan ends Aborted: a closed set, so the controller can count aborts by cause."""

    PREEMPTOR_GONE = "preemptor-gone"  # deleted, or replaced by a pod of another uid
    PREEMPTOR_PLACED_ELSEWHERE = "preemptor-placed-elsewhere"  # bound without the plan
    NOT_NEEDED = "not-needed"  # bound on the plan's node before any eviction
    VICTIM_GONE = "victim-gone"  # a victim went away before its eviction
    EVICTION_TIMEOUT = "eviction-timeout"  # victims still there at evictBy
    BIND_TIMEOUT = "bind-timeout"  # victims gone, the preemptor not bound by bindBy
    PLAN_INVALID = "plan-invalid"  # ``check`` failed: the plan may not act on what is live
    GANG_PDB = "gang-pdb"  # evicting would split a gang under its PodDisruptionBudget


class StepKind(enum.StrEnum):
    TRANSITION = "transition"  # write record.state = step.to_state (and nothing else)
    REQUEST_CHECKPOINT = "request-checkpoint"  # annotate step.victims with the drain request
    RESERVE = "reserve"  # taint the target nodes for this plan; the preemptor tolerates it
    EVICT = "evict"  # Eviction API for step.victims
    STEER = "steer"  # nominate (mode a) / narrow affinity and lift gates (mode b)
    WAIT = "wait"  # nothing to do before step.wait_until (or the next change)
    NONE = "none"  # terminal state


@dataclass(frozen=True, kw_only=True)
class VictimObs:
    """One planned victim as the API server shows it now. Absent from ``Observed`` = gone."""

    uid: str
    node: str | None
    terminating: bool
    acked: bool  # checkpoint-done names this plan
    drain_requested: bool  # carries this plan's drain annotation
    checkpointed: bool = False  # reports a last-checkpoint newer than the plan (timing waits)


@dataclass(frozen=True, kw_only=True)
class PreemptorObs:
    uid: str
    node: str | None  # bound node, if scheduled
    steered: bool  # nominated (mode a) / pinned and ungated (mode b)
    reserved: bool = True  # its node carries this plan's reservation taint, and it tolerates it


@dataclass(frozen=True, kw_only=True)
class Observed:
    """Keyed by planned pod uid; a key whose pod is gone or now has another uid is absent."""

    victims: Mapping[str, VictimObs]
    preemptors: Mapping[str, PreemptorObs]


@dataclass(frozen=True, kw_only=True)
class Step:
    kind: StepKind
    to_state: State | None = None
    victims: tuple[str, ...] = ()  # uids, in plan order
    reason: str = ""
    wait_until: float | None = None
    cause: AbortCause | None = None  # set exactly when to_state is ABORTED


def _transition(to: State, reason: str) -> Step:
    return Step(kind=StepKind.TRANSITION, to_state=to, reason=reason)


def _abort(cause: AbortCause, reason: str) -> Step:
    return Step(kind=StepKind.TRANSITION, to_state=State.ABORTED, reason=reason, cause=cause)


def _preemptor_problem(record: PlanRecord,
                       observed: Observed) -> tuple[AbortCause, str] | None:
    """A preemptor that is gone aborts the plan; one bound before ``Evicting`` fit without it."""
    for p in record.placements:
        seen = observed.preemptors.get(p.uid)
        if seen is None or seen.uid != p.uid:
            return AbortCause.PREEMPTOR_GONE, f"preemptor {p.namespace}/{p.name} is gone"
        if seen.node is not None and record.state is not State.EVICTING:
            return (AbortCause.PREEMPTOR_PLACED_ELSEWHERE,
                    f"preemptor {p.namespace}/{p.name} was scheduled on {seen.node} without it")
    return None


def _alive(v: PlannedVictim, observed: Observed) -> VictimObs | None:
    seen = observed.victims.get(v.uid)
    if seen is None or seen.uid != v.uid or seen.terminating:
        return None
    return seen


def _broken_gang_rest(record: PlanRecord, observed: Observed) -> tuple[str, ...]:
    """Victims still running whose gang already lost a member (only possible once Evicting)."""
    if record.state is not State.EVICTING:
        return ()
    broken = {v.gang for v in record.victims if v.gang and _alive(v, observed) is None}
    return tuple(v.uid for v in record.victims
                 if v.gang in broken and _alive(v, observed) is not None)


def next_step(record: PlanRecord, observed: Observed, now: float) -> Step:
    """The one thing to do next for this plan. See the module docstring for the guarantees."""
    if record.state.terminal:
        return Step(kind=StepKind.NONE)
    problem = _preemptor_problem(record, observed)
    if problem:
        cause, why = problem
        rest = _broken_gang_rest(record, observed)
        if rest and now < record.evict_by:  # never leave a gang half-evicted
            return Step(kind=StepKind.EVICT, victims=rest, reason=f"{why}; evicting the "
                        "rest of the gangs this plan already broke")
        return _abort(cause, why)

    if record.state in (State.PLANNED, State.DRAINING):
        # a victim the plan waits for may end (or go) by itself: that is what it waits for
        gone = [v for v in record.victims if not v.wait and _alive(v, observed) is None]
        if gone:
            v = gone[0]
            return _abort(AbortCause.VICTIM_GONE,
                          f"victim {v.namespace}/{v.name} went away before eviction; re-plan")
    if record.state is State.PLANNED:
        return _transition(State.DRAINING, "plan stored; asking victims to checkpoint")

    if record.state is State.DRAINING:
        drained = [v for v in record.victims if v.drain and _alive(v, observed) is not None]
        unasked = tuple(v.uid for v in drained if not observed.victims[v.uid].drain_requested)
        if unasked and now < record.deadline:
            return Step(kind=StepKind.REQUEST_CHECKPOINT, victims=unasked,
                        reason="checkpoint requested")
        pending = [v for v in drained if not observed.victims[v.uid].acked]
        waited = [v for v in record.victims if v.wait]
        pending += [v for v in waited if not v.drain and _waiting(v, observed)]
        if not pending:
            if waited:
                why = "every victim acknowledged, checkpointed or ended as the plan expected"
            elif drained:
                why = "every victim acknowledged its checkpoint"
            else:
                why = "no victim checkpoints on request"
            return _transition(State.EVICTING, why)
        if now >= record.deadline:
            return _transition(State.EVICTING, f"checkpoint deadline passed; "
                               f"{len(pending)} victim(s) did not acknowledge")
        return Step(kind=StepKind.WAIT, wait_until=record.deadline,
                    reason=f"waiting for {len(pending)} acknowledgement(s)")
    return _evicting_step(record, observed, now)


def _waiting(v: PlannedVictim, observed: Observed) -> bool:
    """Whether the plan still waits for ``v``'s checkpoint or end (``PlannedVictim.wait``)."""
    seen = _alive(v, observed)
    return seen is not None and not (seen.acked or seen.checkpointed)


def _evicting_step(record: PlanRecord, observed: Observed, now: float) -> Step:
    pre = [(p, observed.preemptors[p.uid]) for p in record.placements]
    to_evict = tuple(v.uid for v in record.victims if _alive(v, observed) is not None)
    bound = [(p, seen.node) for p, seen in pre if seen.node is not None]
    if bound and to_evict and len(to_evict) == len(record.victims):
        p, node = bound[0]  # nothing evicted yet, and it was scheduled anyway: not needed
        return _abort(AbortCause.NOT_NEEDED, f"preemptor {p.namespace}/{p.name} was scheduled "
                      f"on {node} before any eviction; the plan is not needed")
    if to_evict:
        if now >= record.evict_by:
            return _abort(AbortCause.EVICTION_TIMEOUT, f"{len(to_evict)} victim(s) still not "
                          "evicted at the eviction timeout; re-plan")
        if not all(seen.reserved for _, seen in pre):
            return Step(kind=StepKind.RESERVE, reason="reserving the freed node for the "
                        "preemptor before evicting")
        if record.mode is Mode.NOMINATE and not all(seen.steered or seen.node for _, seen in pre):
            return Step(kind=StepKind.STEER, reason="nominating the preemptor before evicting")
        return Step(kind=StepKind.EVICT, victims=to_evict, reason="evicting")
    if all(seen.node is not None for _, seen in pre):
        outside = sorted({seen.node for _, seen in pre} - record.nodes)
        if outside:
            return _transition(State.DONE, f"victims evicted; preemptor bound on "
                               f"{', '.join(outside)}, which this plan did not free")
        return _transition(State.DONE, "victims evicted and preemptor bound on a node this "
                           "plan freed")
    if now >= record.bind_by:
        return _abort(AbortCause.BIND_TIMEOUT, "victims evicted but the preemptor was not "
                      "bound by the bind timeout")
    if not all(seen.steered or seen.node for _, seen in pre):
        return Step(kind=StepKind.STEER, reason="victims evicted; steering the preemptor")
    return Step(kind=StepKind.WAIT, wait_until=record.bind_by,
                reason="waiting for victims to go and the preemptor to bind")


# ------------------------------------------------------------------------ live re-validation


@dataclass(frozen=True, kw_only=True)
class LivePod:
    """A planned pod as the controller sees it now (its own conversion of the live object)."""

    uid: str
    in_scope: bool
    priority: int
    bound: str | None
    terminating: bool
    evictable: bool  # opt-out and min-runtime allow eviction now (admin limits applied)


@dataclass(frozen=True, kw_only=True)
class LiveState:
    """Keyed by uid; a planned pod missing here is gone."""

    pods: Mapping[str, LivePod]
    nodes: frozenset[str]


@dataclass(frozen=True, kw_only=True)
class Caps:
    """The controller's configured limits a stored plan must stay within."""

    max_checkpoint_seconds: float
    eviction_timeout_seconds: float
    bind_timeout_seconds: float
    clock_skew_seconds: float = 300.0  # a plan may not be created further in the future


def check(record: PlanRecord, live: LiveState, caps: Caps, now: float) -> str | None:
    """Why this plan may not act now, or None. Gone or terminating pods are not a violation
    here (``next_step`` handles them); everything still present is re-checked."""
    slack = 1.0  # serialisation rounds times to milliseconds
    if record.created > now + caps.clock_skew_seconds:
        return "created in the future"
    if record.deadline - record.created > caps.max_checkpoint_seconds + slack:
        return "checkpoint deadline beyond the configured cap"
    if record.evict_by - record.deadline > caps.eviction_timeout_seconds + slack:
        return "eviction deadline beyond the configured cap"
    if record.bind_by - record.evict_by > caps.bind_timeout_seconds + slack:
        return "bind deadline beyond the configured cap"
    for node in sorted(record.nodes | {v.node for v in record.victims}):
        if node not in live.nodes:
            return f"node {node} does not exist"
    floor = None
    for p in record.placements:
        seen = live.pods.get(p.uid)
        if seen is None:
            continue
        if not seen.in_scope:
            return f"preemptor {p.namespace}/{p.name} is outside the controller's scope"
        floor = seen.priority if floor is None else min(floor, seen.priority)
    for v in record.victims:
        seen = live.pods.get(v.uid)
        if seen is None or seen.terminating:
            continue
        if not seen.in_scope:
            return f"victim {v.namespace}/{v.name} is outside the controller's scope"
        if seen.bound != v.node:
            return f"victim {v.namespace}/{v.name} is not on {v.node}"
        if floor is not None and seen.priority >= floor:
            return f"victim {v.namespace}/{v.name} is not of lower priority than the preemptor"
        if not seen.evictable:
            return f"victim {v.namespace}/{v.name} may not be evicted now (opt-out or min-runtime)"
    return None
