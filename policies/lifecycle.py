"""The drain state machine for one Plan and the annotations that persist it. Pure: no I/O or clock.

    Planned ──► Draining ──(every drained victim acked, or the deadline passed)──► Evicting ──► Done
       │           │                                                               │
       └───────────┴──────────────► Aborted ◄──────────────────────────────────────┘

``next_step(record, observed, now)`` looks at the persisted plan (``PlanRecord``, stored in the
preemptor's ``ckpt-preempt.io/plan`` annotation) and at what the API server shows now
(``Observed``), and returns the one ``Step`` the controller should carry out. A state change is
its own step (``TRANSITION``): the controller writes it to the API server *before* doing what
the new state allows, so a controller killed at any point resumes from the annotations.

Guarantees (checked by property tests in tests/controller/test_lifecycle.py):

- ``RESERVE`` comes before the first ``EVICT``: the target nodes are tainted for this plan and
  the preemptor pods tolerate it, so no other pending pod takes the freed GPUs.
- ``EVICT`` only names victims of the persisted plan, whose observed uid still matches, that
  are neither terminating nor gone: no pod outside the plan, no pod twice.
- Before ``Evicting``, a victim that disappeared or a preemptor that went away (or was
  scheduled elsewhere) aborts the plan, so the controller re-plans on the world as it is.
- ``Evicting`` ends by ``evict_by`` (deadline + eviction timeout): a victim that still cannot be
  evicted then (e.g. a PDB keeps answering 429) aborts the plan instead of leaving the
  preemptor stuck.

Errors: ``PlanFormatError`` / ``DrainFormatError`` (both ``ValueError``) for annotations that do
not parse strictly. Callers treat such a value as carrying no plan, and never act on it.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

PLAN_ANNOTATION = "ckpt-preempt.io/plan"  # legacy: never read; a pod carrying it gets a Warning
PLAN_DATA_KEY = "plan"  # the plan's JSON inside its ConfigMap in the controller's namespace
DRAIN_ANNOTATION = "ckpt-preempt.io/drain"
DONE_ANNOTATION = "ckpt-preempt.io/checkpoint-done"
SCHEMA = 1
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
    STEER = "steer"  # nominate / narrow affinity and lift gates of the preemptor pods
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


@dataclass(frozen=True, kw_only=True)
class PlannedPlacement:
    uid: str
    namespace: str
    name: str
    node: str


@dataclass(frozen=True, kw_only=True)
class PlanRecord:
    """The persisted plan. ``deadline``: checkpoint deadline; ``evict_by``: give up evicting."""

    id: str
    state: State
    mode: Mode
    created: float
    deadline: float
    evict_by: float
    placements: tuple[PlannedPlacement, ...]
    victims: tuple[PlannedVictim, ...]
    lost_gpu_seconds: float = 0.0
    reason: str = ""  # why it was aborted, when it was

    @property
    def victim_uids(self) -> frozenset[str]:
        return frozenset(v.uid for v in self.victims)

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
    """Before Evicting, a bound preemptor means it fit without this plan; after, only a bind
    elsewhere than planned does."""
    for p in record.placements:
        seen = observed.preemptors.get(p.uid)
        if seen is None or seen.uid != p.uid:
            return f"preemptor {p.namespace}/{p.name} is gone"
        if seen.node is not None and (seen.node != p.node or record.state is not State.EVICTING):
            return f"preemptor {p.namespace}/{p.name} was scheduled on {seen.node} without it"
    return None


def _alive(v: PlannedVictim, observed: Observed) -> VictimObs | None:
    seen = observed.victims.get(v.uid)
    if seen is None or seen.uid != v.uid or seen.terminating:
        return None
    return seen


def next_step(record: PlanRecord, observed: Observed, now: float) -> Step:
    """The one thing to do next for this plan. See the module docstring for the guarantees."""
    if record.state.terminal:
        return Step(kind=StepKind.NONE)
    problem = _preemptor_problem(record, observed)
    if problem:
        return _transition(State.ABORTED, problem)

    if record.state in (State.PLANNED, State.DRAINING):
        gone = [v for v in record.victims if _alive(v, observed) is None]
        if gone:
            v = gone[0]
            return _transition(
                State.ABORTED, f"victim {v.namespace}/{v.name} went away before eviction; re-plan"
            )
    if record.state is State.PLANNED:
        return _transition(State.DRAINING, "plan persisted; asking victims to checkpoint")

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

    # EVICTING
    to_evict = tuple(v.uid for v in record.victims if _alive(v, observed) is not None)
    if to_evict:
        if now >= record.evict_by:
            return _transition(State.ABORTED, f"{len(to_evict)} victim(s) still not evicted "
                               "at the eviction timeout; re-plan")
        if not all(observed.preemptors[p.uid].reserved for p in record.placements):
            return Step(kind=StepKind.RESERVE, reason="reserving the freed node for the "
                        "preemptor before evicting")
        return Step(kind=StepKind.EVICT, victims=to_evict, reason="evicting")
    if not all(observed.preemptors[p.uid].steered or observed.preemptors[p.uid].node == p.node
               for p in record.placements):  # bound on its planned node: nothing to steer
        return Step(kind=StepKind.STEER, reason="victims evicted; steering the preemptor")
    return _transition(State.DONE, "victims evicted and preemptor steered to its node")


# ---------------------------------------------------------------------------- serialisation


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _parse_time(value: object, what: str, err: type[ValueError]) -> float:
    if not isinstance(value, str) or "T" not in value:
        raise err(f"{what}: expected an RFC 3339 time string, got {value!r}")
    try:
        t = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError as e:
        raise err(f"{what}: {e}") from e
    if t.tzinfo is None:
        raise err(f"{what}: RFC 3339 time needs a zone offset")
    return t.timestamp()


def _str(d: Mapping, key: str, pattern: re.Pattern, err: type[ValueError]) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not pattern.match(v):
        raise err(f"{key}: invalid value {v!r}")
    return v


_UID = re.compile(r"^[A-Za-z0-9-]{1,64}$")


def _object(raw: str, err: type[ValueError], keys: set[str]) -> dict:
    try:
        d = json.loads(raw)
    except (json.JSONDecodeError, TypeError, RecursionError) as e:
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
        "lostGpuSeconds": round(r.lost_gpu_seconds, 3), "reason": r.reason,
        "placements": [{"uid": p.uid, "namespace": p.namespace, "name": p.name, "node": p.node}
                       for p in r.placements],
        "victims": [{"uid": v.uid, "namespace": v.namespace, "name": v.name, "node": v.node,
                     "drain": v.drain} for v in r.victims],
    }, separators=(",", ":"))


_PLAN_KEYS = {"v", "id", "state", "mode", "created", "deadline", "evictBy", "lostGpuSeconds",
              "reason", "placements", "victims"}


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
    if isinstance(lost, bool) or not isinstance(lost, int | float) or not math.isfinite(lost) \
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
        if set(v) != {"uid", "namespace", "name", "node", "drain"}:
            raise E(f"victims: unexpected fields {sorted(v)}")
        if not isinstance(v["drain"], bool):
            raise E(f"victims.drain: expected true or false, got {v['drain']!r}")
        victims.append(PlannedVictim(
            uid=_str(v, "uid", _UID, E), namespace=_str(v, "namespace", _NAME, E),
            name=_str(v, "name", _NAME, E), node=_str(v, "node", _NAME, E), drain=v["drain"]))
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
    if not created <= deadline <= evict_by:
        raise E("times: expected created <= deadline <= evictBy")
    return PlanRecord(
        id=_str(d, "id", _ID, E), state=state, mode=mode, created=created, deadline=deadline,
        evict_by=evict_by, placements=tuple(placements), victims=tuple(victims),
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
