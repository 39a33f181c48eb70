"""A plan as the controller stores it, and the formats that persist it. Pure: no I/O or clock.

``PlanRecord`` (its victims, placements, ``State`` and ``Mode``) is kept as JSON in a ConfigMap
the controller owns in its own namespace (``plan_to_annotation``/``plan_from_annotation``); the
drain request a victim gets is an annotation (``DrainRequest``), acknowledged by
``checkpoint-done`` (``acked``). These are apart from ``policies.lifecycle.lifecycle`` (the state
machine that reads a record and the live check before each write) because they are the data it works
on and the strict parsing of it.

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
# A drain request's plan is a plan id, or a disruption id: ``disruption/<id>``, written for a
# disruption from outside (the eviction gate, policies/disruption/eviction_gate.py; the early
# warning).
DISRUPTION_PREFIX = "disruption/"
DISRUPTION_ID_HEX = 20  # hex digits of a disruption id's hash (80 bits), after the prefix
_DRAIN_PLAN = re.compile(r"^(?:disruption/)?[a-z0-9][a-z0-9-]{0,62}$")
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
    # the victim's workload key (Pod.workload), for fairness history. Trust: only the controller
    # writes plans, and a key is counted only inside the victim's own namespace, older bare-uid
    # keys included (policies.model.model.recorded_workload, controller.planning.plans)
    workload: str = ""
    gang: str = ""  # its gang, if any: once one member is evicted, the rest always follow
    # one of the members an elastic gang gives up (policies.planner.shrink): its gang's other
    # members are no victims and are never touched; its drain request names every member that leaves
    shrink: bool = False
    # what the plan waits for before evicting it (policies.planner.timing): "" nothing, "checkpoint"
    # its next periodic checkpoint (a last-checkpoint newer than the plan), "end" its end
    wait: str = ""
    # the GPUs (shares) its workload held when the plan was made: its preemptions count for it
    # only while it holds no more (policies.planner.bound.attributable); None: not recorded
    # (plans stored before it was)
    workload_gpus: float | None = None


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


def _gpus(v: object, err: type[ValueError]) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not _finite(v) or v < 0:
        raise err(f"victims.workloadGpus: expected a number >= 0, got {v!r}")
    return float(v)


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
                     "drain": v.drain, "workload": v.workload, "gang": v.gang,
                     **({"shrink": True} if v.shrink else {}),
                     **({"wait": v.wait} if v.wait else {}),  # absent: as before timing
                     **({"workloadGpus": round(v.workload_gpus, 6)}
                        if v.workload_gpus is not None else {})}
                    for v in r.victims],
    }, separators=(",", ":"))


_PLAN_KEYS = {"v", "id", "state", "mode", "created", "deadline", "evictBy", "bindBy",
              "lostGpuSeconds", "reason", "placements", "victims"}
_VICTIM_KEYS = {"uid", "namespace", "name", "node", "drain", "workload", "gang"}
_VICTIM_OPTIONAL = {"shrink", "wait", "workloadGpus"}
WAITS = ("checkpoint", "end")  # PlannedVictim.wait when set


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
        if set(v) - _VICTIM_OPTIONAL != _VICTIM_KEYS:
            raise E(f"victims: unexpected fields {sorted(v)}")
        if v.get("wait", WAITS[0]) not in WAITS:
            raise E(f"victims.wait: expected one of {', '.join(WAITS)}, got {v['wait']!r}")
        if not isinstance(v["drain"], bool):
            raise E(f"victims.drain: expected true or false, got {v['drain']!r}")
        if v.get("shrink", False) is not False and v["shrink"] is not True:
            raise E(f"victims.shrink: expected true, got {v['shrink']!r}")
        victims.append(PlannedVictim(
            uid=_str(v, "uid", _UID, E), namespace=_str(v, "namespace", _NAME, E),
            name=_str(v, "name", _NAME, E), node=_str(v, "node", _NAME, E), drain=v["drain"],
            workload=_workload(v["workload"], "workload", E), gang=_workload(v["gang"], "gang", E),
            shrink=v.get("shrink", False), wait=v.get("wait", ""),
            workload_gpus=_gpus(v["workloadGpus"], E) if "workloadGpus" in v else None))
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
    # an elastic gang's shrink (policies.planner.shrink): the names of its members that leave, this
    # pod among them; the job runs on without them. Empty: the pod's whole workload goes.
    leaving: tuple[str, ...] = ()


MAX_LEAVING = 1024  # names in one drain request's ``leaving`` (the members on one node)


def drain_to_annotation(d: DrainRequest) -> str:
    return json.dumps({"plan": d.plan, "requested": _time(d.requested),
                       "deadline": _time(d.deadline),
                       **({"leaving": list(d.leaving)} if d.leaving else {})},
                      separators=(",", ":"))


def drain_from_annotation(raw: str) -> DrainRequest:
    E = DrainFormatError
    keys = {"plan", "requested", "deadline"}
    try:
        shrinking = "leaving" in json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        shrinking = False  # _object says what is wrong
    d = _object(raw, E, keys | {"leaving"} if shrinking else keys)
    req = _parse_time(d["requested"], "requested", E)
    deadline = _parse_time(d["deadline"], "deadline", E)
    if deadline < req:
        raise E("deadline: before requested")
    leaving = d.get("leaving", [])
    if shrinking and (not isinstance(leaving, list) or not 0 < len(leaving) <= MAX_LEAVING
                      or not all(isinstance(n, str) and _NAME.fullmatch(n) for n in leaving)
                      or len(set(leaving)) != len(leaving)):
        raise E(f"leaving: expected 1 to {MAX_LEAVING} distinct pod names")
    return DrainRequest(plan=_str(d, "plan", _DRAIN_PLAN, E), requested=req, deadline=deadline,
                        leaving=tuple(leaving))


def drain_request(record: PlanRecord, uid: str, now: float) -> DrainRequest:
    """The drain request victim ``uid`` of ``record`` gets at ``now``: on a shrink, naming
    every member of its gang that this plan takes (all on one node: ``policies.planner.shrink``)."""
    victim = next(v for v in record.victims if v.uid == uid)
    leaving = tuple(sorted(v.name for v in record.victims
                           if v.shrink and v.gang == victim.gang)) if victim.shrink else ()
    return DrainRequest(plan=record.id, requested=now, deadline=record.deadline,
                        leaving=leaving)


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


def standing_request(annotations) -> DrainRequest | None:
    """The pod's drain request, or None where it has none or a malformed one (the agent ignores
    a malformed one too, so it holds nothing)."""
    raw = annotations.get(DRAIN_ANNOTATION)
    if raw is None:
        return None
    try:
        return drain_from_annotation(raw)
    except DrainFormatError:
        return None
