"""The preemptor queue of one reconcile pass, and the record a plan made for one is stored as.

``candidates`` picks the preemptors due this pass from the pending pods: single pods, or every
pending member of a gang together, in mode (a) (``PodScheduled=False/Unschedulable`` with
``preemptionPolicy: Never``) or mode (b) (the ``ckpt-preempt.io/admission`` gate), a gang only
once it is complete (``policies.model.gangs.readiness``: its declared total, and its minimum,
``Pod.gang_minimum``, a native gang's minCount or ``ckpt-preempt.io/min-members``, or a Volcano /
coscheduling PodGroup's minMember, the larger when both are known). ``Candidate.order`` is the
queue order. ``plan_record`` turns the planner's plan for a candidate into the ``PlanRecord``
that is stored, with its deadlines capped by the config.

These are apart from ``controller/planning/reconcile.py`` because they only shape data: they read
the pass's pods and snapshot and write nothing (a gang with more members than it declares is
reported through the ``warn`` callback the reconciler passes); the reconciler decides when to
plan, calls the planner and hands the plans to the write lanes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.records import ADMISSION_GATE, PodInfo
from ckpt_preempt.policies.lifecycle.plan_record import (
    MAX_WORKLOAD_KEY,
    Mode,
    PlannedPlacement,
    PlannedVictim,
    PlanRecord,
    State,
)
from ckpt_preempt.policies.model import gangs
from ckpt_preempt.policies.model.model import Plan, Pod, When
from ckpt_preempt.policies.planner import timing


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


def candidates(pods: list[PodInfo], conv: convert.Converted, planned: set[str], *,
               scope: convert.Scope, minimums: Callable[[], Mapping[str, int]],
               warn: Callable[[PodInfo, str, str], None]) -> list[Candidate]:
    """Single pods, or every pending member of a gang together (in either mode), in queue
    order. ``minimums``: PodGroup minMember by gang key (asked only when a pod is due);
    ``warn(pod, reason, message)``: a Warning about a pod's gang."""
    model = conv.snapshot.pod_by_uid
    groups: dict[tuple[Mode, str], list[PodInfo]] = {}
    waiting: set[str] = set()  # gangs with a pending member not (yet) ours to handle
    for p in pods:
        if p.node or p.deleting or p.uid in planned or not scope.covers(p):
            continue
        gang = model[p.uid].gang
        if ADMISSION_GATE in p.gates:
            groups.setdefault((Mode.ADMIT, gang or p.key), []).append(p)
        elif not p.gates and p.unschedulable and p.preemption_policy == "Never":
            groups.setdefault((Mode.NOMINATE, gang or p.key), []).append(p)
        elif gang:
            waiting.add(gang)
    out: list[Candidate] = []
    minimum_of = minimums() if groups else {}  # PodGroup minMember by gang
    for (mode, key), members in groups.items():
        first = model[members[0].uid]
        if first.gang is None:
            out.append(Candidate(mode=mode, key=key, members=tuple(members)))
            continue
        total = first.gang_total
        bound = [u for u in conv.snapshot.gangs[key].members if model[u].node is not None]
        have = len(members) + len(bound)
        declared = [m for m in (first.gang_minimum, minimum_of.get(key)) if m is not None]
        ready = gangs.readiness(have, total=total, minimum=max(declared, default=None))
        if ready is gangs.Readiness.OVERFULL:
            for p in members:
                warn(p, Reason.GANG_TOTAL_MISMATCH, f"gang {key} declares {total} members but "
                     f"{have} exist; not admitted until that is fixed")
            continue
        if key in waiting or ready is gangs.Readiness.INCOMPLETE:
            continue  # the rest of the gang is not created, or not yet unschedulable
        out.append(Candidate(mode=mode, key=key, members=tuple(members)))
    return sorted(out, key=Candidate.order)


def queued_gpus(queue: Sequence[Candidate], model: Mapping[str, Pod]) -> list[float]:
    """For each candidate in ``queue``, the GPUs (shares) the others at its priority or above
    ask for (``Snapshot.queued_gpus``: they would take what a victim's end frees)."""
    return timing.queued_gpus([
        (min(p.priority for p in c.members),
         sum(model[p.uid].gpu_share for p in c.members if p.uid in model)) for c in queue])


def plan_record(cand: Candidate, plan: Plan, conv: convert.Converted, now: float,
                cfg: Config) -> PlanRecord:
    """The record ``plan`` (made for ``cand`` at ``now``) is stored as: a new id, state
    Planned, its drain deadline capped at ``maxCheckpointSeconds``, then the eviction and bind
    deadlines after it."""
    pods = {p.uid: p for p in cand.members}
    model = conv.snapshot.pod_by_uid
    holding = conv.snapshot.gpus_by_workload
    leaving = {v.uid for g in plan.victim_groups if g.shrink for v in g.victims}
    deadline = max(now, min(plan.drain_deadline or now,
                            now + cfg.max_checkpoint_seconds))
    evict_by = deadline + cfg.eviction_timeout_seconds
    return PlanRecord(
        id=f"{int(now):x}-{uuid.uuid4().hex[:8]}", state=State.PLANNED, mode=cand.mode,
        created=now, deadline=deadline, evict_by=evict_by,
        bind_by=evict_by + cfg.bind_timeout_seconds,
        placements=tuple(PlannedPlacement(
            uid=pl.pod_uid, namespace=pods[pl.pod_uid].namespace,
            name=pods[pl.pod_uid].name, node=pl.node) for pl in plan.placements),
        victims=tuple(PlannedVictim(
            uid=v.uid, namespace=v.namespace, name=v.name, node=v.node, drain=v.drain,
            workload=model[v.uid].workload[:MAX_WORKLOAD_KEY],
            gang=(model[v.uid].gang or "")[:MAX_WORKLOAD_KEY],
            shrink=v.uid in leaving, wait=_wait(plan, v.uid),
            workload_gpus=holding.get(model[v.uid].workload, 0.0))
            for v in plan.victims),
        lost_gpu_seconds=plan.lost_gpu_seconds,
    )


def _wait(plan: Plan, uid: str) -> str:
    """What the stored plan waits for before evicting victim ``uid`` (policies.planner.timing)."""
    w = None if plan.timing is None else plan.timing.wait_for(uid)
    if w is None:
        return ""
    return "end" if w.when is When.AFTER_END else "checkpoint"
