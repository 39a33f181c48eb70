"""The plan lifecycle: the state machine for one Plan, its validation against live state, and
the formats that persist it. Pure: no I/O or clock.

    Planned ──► Draining ──(every drained victim acked, or the deadline)──► Evicting ──► Done
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
  scheduled without the plan) aborts the plan, so the controller re-plans on the world as is.
  Once a victim is evicted, the rest are evicted too; and if the plan must end after part of
  a gang was evicted (its preemptor went away), the rest of that gang is still evicted until
  ``evict_by``: a gang is never left half-evicted by a plan.
- A plan holds until its work is done: ``Evicting`` ends ``Done`` only once every preemptor is
  bound and every victim is terminating or gone (a preemptor bound on any node the plan freed
  is success); it aborts when victims are still not evicted at ``evict_by`` or the preemptor is
  not bound by ``bind_by``. While it holds, its nodes stay reserved and its victims counted, so
  a preemptor whose node still has terminating victims is never planned again.

Errors: ``PlanFormatError`` / ``DrainFormatError`` (both ``ValueError``) for values that do
not parse strictly. Callers treat such a value as carrying no plan, and never act on it.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

PLAN_ANNOTATION = "ckpt-preempt.io/plan"  # legacy: never read; a pod carrying it gets a Warning
PLAN_DATA_KEY = "plan"  # the plan's JSON inside its ConfigMap in the controller's namespace
DRAIN_ANNOTATION = "ckpt-preempt.io/drain"
DONE_ANNOTATION = "ckpt-preempt.io/checkpoint-done"
SCHEMA = 2  # 2: plans live in ConfigMaps; bindBy and victims' workload keys
MAX_WORKLOAD_KEY = 1024  # a victim's workload and gang keys are any string up to this long
_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class State(enum.StrEnum):
    PLANNED = "Planned"
    DRAINING = "Draining"
    EVICTING = "Evicting"
    DONE = "Done"
    ABORTED = "Aborted"

    @property
    def terminal(self) -> bool:
        return self in (State.DONE, State.ABORTED)


class Mode(enum.StrEnum):
    """How the preemptor reaches its node: (a) nominatedNodeName, (b) narrow affinity + ungate."""

    NOMINATE = "nominate"
    ADMIT = "admit"


class StepKind(enum.StrEnum):
    TRANSITION = "transition"  # write record.state = step.to_state (and nothing else)
    REQUEST_CHECKPOINT = "request-checkpoint"  # annotate step.victims with the drain request
    RESERVE = "reserve"  # taint the target nodes for this plan; the preemptor tolerates it
    EVICT = "evict"  # Eviction API for step.victims
    STEER = "steer"  # nominate (mode a) / narrow affinity and lift gates (mode b)
    WAIT = "wait"  # nothing to do before step.wait_until (or the next change)
    NONE = "none"  # terminal state


class PlanFormatError(ValueError):
    """The ``ckpt-preempt.io/plan`` annotation does not parse; nothing may act on it."""


class DrainFormatError(ValueError):
    """The ``ckpt-preempt.io/drain`` annotation does not parse."""


@dataclass(frozen=True, kw_only=True)
class PlannedVictim:
    uid: str
    namespace: str
    name: str
    node: str
    drain: bool  # ask it to checkpoint first
    workload: str = ""  # the victim's workload key (gang, owner or pod), for fairness history
    gang: str = ""  # its gang, if any: once one member is evicted, the rest always follow


@dataclass(frozen=True, kw_only=True)
class PlannedPlacement:
    uid: str
    namespace: str
    name: str
    node: str


@dataclass(frozen=True, kw_only=True)
class PlanRecord:
    """The stored plan. ``deadline``: checkpoint deadline; ``evict_by``: give up evicting;
    ``bind_by``: give up waiting for the preemptor to bind once its victims are evicted."""

    id: str
    state: State
    mode: Mode
    created: float
    deadline: float
    evict_by: float
    bind_by: float
    placements: tuple[PlannedPlacement, ...]
    victims: tuple[PlannedVictim, ...]
    lost_gpu_seconds: float = 0.0
    reason: str = ""  # why it was aborted, when it was

    @property
    def victim_uids(self) -> frozenset[str]:
        return frozenset(v.uid for v in self.victims)

    @property
    def nodes(self) -> frozenset[str]:
        """The nodes this plan frees (its placements' nodes)."""
        return frozenset(p.node for p in self.placements)

    @property
    def anchor(self) -> PlannedPlacement:
        """The placement Events about the whole plan are reported on (lowest name)."""
        return min(self.placements, key=lambda p: (p.namespace, p.name))

    def with_state(self, state: State, reason: str = "") -> PlanRecord:
        return replace(self, state=state, reason=reason or self.reason)


@dataclass(frozen=True, kw_only=True)
class VictimObs:
    """One planned victim as the API server shows it now. Absent from ``Observed`` = gone."""

    uid: str
    node: str | None
    terminating: bool
    acked: bool  # checkpoint-done names this plan
    drain_requested: bool  # carries this plan's drain annotation


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


def _transition(to: State, reason: str) -> Step:
    return Step(kind=StepKind.TRANSITION, to_state=to, reason=reason)


def _preemptor_problem(record: PlanRecord, observed: Observed) -> str | None:
    """A preemptor that is gone aborts the plan; one bound before ``Evicting`` fit without it."""
    for p in record.placements:
        seen = observed.preemptors.get(p.uid)
        if seen is None or seen.uid != p.uid:
            return f"preemptor {p.namespace}/{p.name} is gone"
        if seen.node is not None and record.state is not State.EVICTING:
            return f"preemptor {p.namespace}/{p.name} was scheduled on {seen.node} without it"
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
        rest = _broken_gang_rest(record, observed)
        if rest and now < record.evict_by:  # never leave a gang half-evicted
            return Step(kind=StepKind.EVICT, victims=rest, reason=f"{problem}; evicting the "
                        "rest of the gangs this plan already broke")
        return _transition(State.ABORTED, problem)

    if record.state in (State.PLANNED, State.DRAINING):
        gone = [v for v in record.victims if _alive(v, observed) is None]
        if gone:
            v = gone[0]
            return _transition(
                State.ABORTED, f"victim {v.namespace}/{v.name} went away before eviction; re-plan"
            )
    if record.state is State.PLANNED:
        return _transition(State.DRAINING, "plan stored; asking victims to checkpoint")

    if record.state is State.DRAINING:
        drained = [v for v in record.victims if v.drain]
        unasked = tuple(v.uid for v in drained if not observed.victims[v.uid].drain_requested)
        if unasked and now < record.deadline:
            return Step(kind=StepKind.REQUEST_CHECKPOINT, victims=unasked,
                        reason="checkpoint requested")
        pending = [v for v in drained if not observed.victims[v.uid].acked]
        if not pending:
            return _transition(State.EVICTING, "every victim acknowledged its checkpoint"
                               if drained else "no victim checkpoints on request")
        if now >= record.deadline:
            return _transition(State.EVICTING, f"checkpoint deadline passed; "
                               f"{len(pending)} victim(s) did not acknowledge")
        return Step(kind=StepKind.WAIT, wait_until=record.deadline,
                    reason=f"waiting for {len(pending)} acknowledgement(s)")
    return _evicting_step(record, observed, now)


def _evicting_step(record: PlanRecord, observed: Observed, now: float) -> Step:
    pre = [(p, observed.preemptors[p.uid]) for p in record.placements]
    to_evict = tuple(v.uid for v in record.victims if _alive(v, observed) is not None)
    bound = [(p, seen.node) for p, seen in pre if seen.node is not None]
    if bound and to_evict and len(to_evict) == len(record.victims):
        p, node = bound[0]  # nothing evicted yet, and it was scheduled anyway: not needed
        return _transition(State.ABORTED, f"preemptor {p.namespace}/{p.name} was scheduled on "
                           f"{node} before any eviction; the plan is not needed")
    if to_evict:
        if now >= record.evict_by:
            return _transition(State.ABORTED, f"{len(to_evict)} victim(s) still not evicted "
                               "at the eviction timeout; re-plan")
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
        return _transition(State.ABORTED, "victims evicted but the preemptor was not bound "
                           "by the bind timeout")
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


# ---------------------------------------------------------------------------- serialisation


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _time(t: float) -> str:
    # Round to whole milliseconds in integer arithmetic: formatting through a float timestamp can
    # land on either side of a millisecond far from 1970 and break text -> time -> text round trips.
    instant = _EPOCH + timedelta(milliseconds=round(t * 1000))
    return instant.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_time(value: object, what: str, err: type[ValueError]) -> float:
    if not isinstance(value, str) or "T" not in value:
        raise err(f"{what}: expected an RFC 3339 time string, got {value!r}")
    try:
        t = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError as e:
        raise err(f"{what}: {e}") from e
    if t.tzinfo is None:
        raise err(f"{what}: RFC 3339 time needs a zone offset")
    try:  # the instant must be writable back (_time): within datetime's range in UTC
        datetime.fromtimestamp(t.timestamp(), tz=UTC)
    except (OverflowError, ValueError, OSError) as e:
        raise err(f"{what}: out of range") from e
    return t.timestamp()


def _finite(x: int | float) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:  # an int beyond float's range
        return False


def _workload(v: object, what: str, err: type[ValueError]) -> str:
    if not isinstance(v, str) or len(v) > MAX_WORKLOAD_KEY:
        raise err(f"{what}: expected a string of at most {MAX_WORKLOAD_KEY} characters")
    return v


def _str(d: Mapping, key: str, pattern: re.Pattern, err: type[ValueError]) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not pattern.fullmatch(v):
        raise err(f"{key}: invalid value {v!r}")
    return v


_UID = re.compile(r"^[A-Za-z0-9-]{1,64}$")


def _object(raw: str, err: type[ValueError], keys: set[str]) -> dict:
    try:
        d = json.loads(raw)
    except (ValueError, TypeError, RecursionError) as e:  # ValueError: also ints > 4300 digits
        raise err(f"not JSON: {e}") from e
    if not isinstance(d, dict):
        raise err("expected a JSON object")
    if set(d) != keys:
        missing, extra = sorted(keys - set(d)), sorted(set(d) - keys)
        raise err(f"fields differ from the schema (missing {missing}, unknown {extra})")
    return d


def plan_to_annotation(r: PlanRecord) -> str:
    return json.dumps({
        "v": SCHEMA, "id": r.id, "state": r.state.value, "mode": r.mode.value,
        "created": _time(r.created), "deadline": _time(r.deadline), "evictBy": _time(r.evict_by),
        "bindBy": _time(r.bind_by),
        "lostGpuSeconds": round(r.lost_gpu_seconds, 3), "reason": r.reason,
        "placements": [{"uid": p.uid, "namespace": p.namespace, "name": p.name, "node": p.node}
                       for p in r.placements],
        "victims": [{"uid": v.uid, "namespace": v.namespace, "name": v.name, "node": v.node,
                     "drain": v.drain, "workload": v.workload, "gang": v.gang}
                    for v in r.victims],
    }, separators=(",", ":"))


_PLAN_KEYS = {"v", "id", "state", "mode", "created", "deadline", "evictBy", "bindBy",
              "lostGpuSeconds", "reason", "placements", "victims"}
_VICTIM_KEYS = {"uid", "namespace", "name", "node", "drain", "workload", "gang"}


def plan_from_annotation(raw: str) -> PlanRecord:
    """Strict inverse of ``plan_to_annotation``; ``PlanFormatError`` names what is wrong."""
    E = PlanFormatError
    d = _object(raw, E, _PLAN_KEYS)
    if d["v"] != SCHEMA:
        raise E(f"v: unsupported schema {d['v']!r} (expected {SCHEMA})")
    try:
        state, mode = State(d["state"]), Mode(d["mode"])
    except ValueError as e:
        raise E(str(e)) from e
    lost = d["lostGpuSeconds"]
    if isinstance(lost, bool) or not isinstance(lost, int | float) or not _finite(lost) \
            or lost < 0:
        raise E(f"lostGpuSeconds: invalid value {lost!r}")
    if not isinstance(d["reason"], str):
        raise E("reason: expected a string")
    for key in ("placements", "victims"):
        if not isinstance(d[key], list) or not all(isinstance(x, dict) for x in d[key]):
            raise E(f"{key}: expected a list of objects")
    placements = []
    for p in d["placements"]:
        if set(p) != {"uid", "namespace", "name", "node"}:
            raise E(f"placements: unexpected fields {sorted(p)}")
        placements.append(PlannedPlacement(
            uid=_str(p, "uid", _UID, E), namespace=_str(p, "namespace", _NAME, E),
            name=_str(p, "name", _NAME, E), node=_str(p, "node", _NAME, E)))
    victims = []
    for v in d["victims"]:
        if set(v) != _VICTIM_KEYS:
            raise E(f"victims: unexpected fields {sorted(v)}")
        if not isinstance(v["drain"], bool):
            raise E(f"victims.drain: expected true or false, got {v['drain']!r}")
        victims.append(PlannedVictim(
            uid=_str(v, "uid", _UID, E), namespace=_str(v, "namespace", _NAME, E),
            name=_str(v, "name", _NAME, E), node=_str(v, "node", _NAME, E), drain=v["drain"],
            workload=_workload(v["workload"], "workload", E), gang=_workload(v["gang"], "gang", E)))
    if not placements:
        raise E("placements: a plan places at least one pod")
    uids = [v.uid for v in victims]
    if len(set(uids)) != len(uids):
        raise E("victims: a pod is listed twice")
    if set(uids) & {p.uid for p in placements}:
        raise E("victims: a preemptor is listed as its own victim")
    created = _parse_time(d["created"], "created", E)
    deadline = _parse_time(d["deadline"], "deadline", E)
    evict_by = _parse_time(d["evictBy"], "evictBy", E)
    bind_by = _parse_time(d["bindBy"], "bindBy", E)
    if not created <= deadline <= evict_by <= bind_by:
        raise E("times: expected created <= deadline <= evictBy <= bindBy")
    return PlanRecord(
        id=_str(d, "id", _ID, E), state=state, mode=mode, created=created, deadline=deadline,
        evict_by=evict_by, bind_by=bind_by, placements=tuple(placements), victims=tuple(victims),
        lost_gpu_seconds=float(lost), reason=d["reason"],
    )


@dataclass(frozen=True, kw_only=True)
class DrainRequest:
    """The victim's ``ckpt-preempt.io/drain`` annotation: please checkpoint before ``deadline``."""

    plan: str
    requested: float
    deadline: float


def drain_to_annotation(d: DrainRequest) -> str:
    return json.dumps({"plan": d.plan, "requested": _time(d.requested),
                       "deadline": _time(d.deadline)}, separators=(",", ":"))


def drain_from_annotation(raw: str) -> DrainRequest:
    E = DrainFormatError
    d = _object(raw, E, {"plan", "requested", "deadline"})
    req = _parse_time(d["requested"], "requested", E)
    deadline = _parse_time(d["deadline"], "deadline", E)
    if deadline < req:
        raise E("deadline: before requested")
    return DrainRequest(plan=_str(d, "plan", _ID, E), requested=req, deadline=deadline)


def acked(annotations: Mapping[str, str], plan_id: str) -> bool:
    """Whether ``checkpoint-done`` acknowledges exactly this plan (anything else is not an ack)."""
    return annotations.get(DONE_ANNOTATION, "").strip() == plan_id


def drain_requested(annotations: Mapping[str, str], plan_id: str) -> bool:
    raw = annotations.get(DRAIN_ANNOTATION)
    if raw is None:
        return False
    try:
        return drain_from_annotation(raw).plan == plan_id
    except DrainFormatError:
        return False
