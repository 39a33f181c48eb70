"""Stored plans as this process sees them, and what the reconciler and ``explain`` derive from
them.

Plans live in ConfigMaps the controller owns in its own namespace (``controller.writes.actions``
writes them; tenants have no write access there, so a plan cannot be forged, replayed or
deleted by a workload). ``PlanBook`` overlays the watch cache with what this process wrote
since, because the cache may lag the process's own writes by a few milliseconds.

``restriction`` is the one step both the reconciler and ``explain POD`` apply before planning:
nodes of plans still running are reserved, their victims are held, and so are victims whose
eviction was recently blocked.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.kube.watch import StoredPlan
from ckpt_preempt.controller.writes.write_bodies import plan_object_name
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.lifecycle.plan_record import PlannedVictim, PlanRecord, State
from ckpt_preempt.policies.model.model import recorded_workload

log = logging.getLogger("ckpt_preempt.plans")


@dataclass(frozen=True, kw_only=True)
class Stored:
    record: PlanRecord
    rv: str  # the ConfigMap's resourceVersion: writes are guarded by it


@dataclass(frozen=True, kw_only=True)
class Restriction:
    """What a new plan may not use (the planner reports each exclusion with its reason)."""

    reserved_nodes: frozenset[str]  # targets of plans still running
    held_pods: frozenset[str]  # victims of plans still running
    blocked_pods: frozenset[str]  # victims whose eviction was refused lately


def _rv(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return -1


def parse(obj: StoredPlan) -> Stored:
    """Raises ``plan_record.PlanFormatError`` for data that does not parse strictly."""
    if obj.raw is None:
        raise plan_record.PlanFormatError("no plan data")
    record = plan_record.plan_from_annotation(obj.raw)
    if obj.name != plan_object_name(record.id):
        raise plan_record.PlanFormatError(f"stored as {obj.name}, not under its own id")
    return Stored(record=record, rv=obj.resource_version)


class PlanBook:
    def __init__(self) -> None:
        self._mine: dict[str, Stored] = {}  # plan id -> what this process last wrote

    def wrote(self, record: PlanRecord, rv: str | None) -> None:
        if rv is not None:
            self._mine[record.id] = Stored(record=record, rv=rv)

    def forget(self, plan_id: str) -> None:
        self._mine.pop(plan_id, None)

    def load(self, objects: Iterable[StoredPlan]) -> tuple[list[Stored], list[tuple[str, str]]]:
        """(every readable plan, newest version known; [(object name, why unreadable)])."""
        plans: dict[str, Stored] = {}
        bad: list[tuple[str, str]] = []
        for obj in objects:
            try:
                s = parse(obj)
            except Exception as e:  # whatever is stored, the loop goes on
                bad.append((obj.name, f"{type(e).__name__}: {e}"))
                continue
            plans[s.record.id] = s
        for plan_id, mine in list(self._mine.items()):
            seen = plans.get(plan_id)
            if seen is None or _rv(mine.rv) > _rv(seen.rv):
                plans[plan_id] = mine
            else:
                del self._mine[plan_id]  # the cache caught up
        return sorted(plans.values(), key=lambda s: (s.record.created, s.record.id)), bad


    def with_own_writes(self, stored: list[Stored]) -> list[Stored]:
        """`stored` with what this process wrote since it was loaded (no re-parsing)."""
        known = {s.record.id for s in stored}
        out = [self._mine.get(s.record.id, s) for s in stored]
        out += [m for plan_id, m in self._mine.items() if plan_id not in known]
        return sorted(out, key=lambda s: (s.record.created, s.record.id))


def restriction(active: Iterable[PlanRecord], blocked: Mapping[str, float],
                now: float) -> Restriction:
    active = list(active)
    return Restriction(
        reserved_nodes=frozenset(n for r in active for n in r.nodes),
        held_pods=frozenset(v.uid for r in active for v in r.victims),
        blocked_pods=frozenset(uid for uid, until in blocked.items() if until > now))


def _counted(plans: Iterable[PlanRecord], since: float) -> Iterator[PlanRecord]:
    """The plans created after `since` that reached Evicting (Done, or still Evicting)."""
    return (r for r in plans if r.created >= since and r.state in (State.DONE, State.EVICTING))


def _workload(v: PlannedVictim) -> str:
    """The workload a stored victim counts against, inside its own namespace (plans stored
    before keys were namespaced are read as the same key there: ``model.recorded_workload``)."""
    return recorded_workload(v.namespace, v.uid, v.workload)


def recent_preemptions(plans: Iterable[PlanRecord], since: float) -> dict[str, int]:
    """Workload key (``policies.model.model.Pod.workload``) -> how many plans created after `since`
    evicted it (plans that reached Evicting: Done, or still Evicting)."""
    counts: dict[str, int] = {}
    for r in _counted(plans, since):
        for key in {_workload(v) for v in r.victims}:
            counts[key] = counts.get(key, 0) + 1
    return counts


def preempted_gpus(plans: Iterable[PlanRecord], since: float) -> dict[str, float]:
    """Workload key -> the most GPUs it held at one of the preemptions ``recent_preemptions``
    counts since `since` (``PlannedVictim.workload_gpus``), for
    ``policies.planner.bound.attributable``. A workload with a counted plan that recorded no
    size (stored before sizes were) is absent: its counts stand as they are."""
    most: dict[str, float] = {}
    unrecorded: set[str] = set()
    for r in _counted(plans, since):
        for v in r.victims:
            key = _workload(v)
            if v.workload_gpus is None:
                unrecorded.add(key)
            else:
                most[key] = max(most.get(key, 0.0), v.workload_gpus)
    return {w: g for w, g in most.items() if w not in unrecorded}


def history(plans: Iterable[PlanRecord], now: float, cfg: Config) -> dict[str, Mapping]:
    """What a snapshot at ``now`` is told of past preemptions (``convert.snapshot``'s keyword
    arguments): the counts within the fairness window and within the starvation bound's, and
    the sizes they are attributed by, over the longer of the two."""
    plans = list(plans)
    fairness = now - cfg.fairness_window_seconds
    bound_window = now - cfg.preemption_bound_window_seconds
    return {"recent_preemptions": recent_preemptions(plans, since=fairness),
            "preemption_history": recent_preemptions(plans, since=bound_window),
            "preempted_gpus": preempted_gpus(plans, since=min(fairness, bound_window))}


def waiting_for_victims(plans: Iterable[PlanRecord], terminating: set[str]) -> set[str]:
    """Preemptor uids whose last aborted plan still has victims terminating: like
    kube-scheduler, never plan again for them until those victims are gone."""
    out: set[str] = set()
    for r in plans:
        if r.state is State.ABORTED and r.victim_uids & terminating:
            out |= {p.uid for p in r.placements}
    return out


def load_all(objects: Iterable[StoredPlan]) -> list[PlanRecord]:
    """Readable plans only (for ``explain``, which has no overlay)."""
    out = []
    for obj in objects:
        with contextlib.suppress(Exception):  # unreadable plans are never acted on
            out.append(parse(obj).record)
    return out
