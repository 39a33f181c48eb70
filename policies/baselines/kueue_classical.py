"""Kueue's classical preemption (v0.17.0), reimplemented on our model: the baseline for clusters
that admit jobs through Kueue.

Kueue admits and preempts whole Workloads (a Workload is the whole Job: every pod of a gang goes
with it). Within one ClusterQueue it preempts as ``pkg/scheduler/preemption/preemption.go``
``classicalPreemptions`` does (paths in sigs.k8s.io/kueue@v0.17.0):

1. *candidates*: the admitted workloads the preemption policy allows
   (``common/preemption_policy.go`` ``SatisfiesPreemptionPolicy``; ``withinClusterQueue:
   LowerPriority`` assumed here, since Kueue's default, ``Never``, preempts nothing): effective
   priority strictly below the preemptor's;
2. *order* them (``common/ordering.go`` ``CandidatesOrdering``; ``candidate_key`` below);
3. *remove* them in that order from a copy of the cluster until the preemptor fits, then *add
   back*, in reverse order, every one whose return still lets it fit, never the last one removed
   (``fillBackWorkloads``): the "minimal set" step (``select``).

The order (``candidate_key``, smaller first), following ``CandidatesOrdering``:

0. workloads already evicted first (here: any of its pods terminating);
1. workloads of other ClusterQueues before the preemptor's own. The simulator has one
   ClusterQueue and no cohort, so this never separates two candidates; kept so the key reads as
   Kueue's list does;
2. (Admission Fair Sharing's LocalQueue usage: off, not modelled);
3. lower effective priority first (``pkg/util/priority/priority.go`` ``EffectivePriority``:
   priority plus the ``kueue.x-k8s.io/priority-boost`` annotation, alpha gate ``PriorityBoost``);
4. most recently admitted first (``quotaReservationTime``; here the start of the workload's
   pods, which is when its quota was last reserved);
5. a fixed tie-break: the workload key (upstream: the Workload's UID).

``classical/candidate_generator.go`` puts the evicted candidates of every group first; with one
queue that is criterion 0 again.

What our model cannot see, and so does not follow: (a) Kueue checks quota, not nodes; without
Topology-Aware Scheduling a preemptor admitted on quota may still find no node. Here "fits"
is node fit, as ``workloadFits`` answers it when the ClusterQueue's flavor has a topology with a
hostname level (``FindTopologyAssignmentsForWorkload``): each pod, largest first, on the open
node where it fits leaving the fewest GPUs free (``place``). A queue whose quota is the
cluster's capacity is never the tighter constraint; (b) ``WorkloadUsesResources`` keeps only
candidates using a resource the preemptor lacks; every simulated job holds GPUs, so none is
dropped; (c) borrowing, cohorts, fair sharing and hierarchical reclaim are not modelled (one
queue); (d) a workload with a pod that is not preemptible or is held (another plan, the
starvation bound, ``Pod.held``) is no candidate: Kueue knows neither, and the bound applies to
every policy alike.

``boost`` (``ours-under-kueue``): what a workload's pods add to its effective priority, as the
``kueue.x-k8s.io/priority-boost`` annotation would (the simulator passes the rule our controller
writes, ``policies.kueue.boost``: unsaved work in log buckets, capped below the next priority in
use). The order reads (priority, boost): the same as Kueue's sum while the boost never reaches
the next priority, which that rule guarantees; eligibility reads the priority alone, so the
boost only reorders candidates of equal priority, the least unsaved work first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ckpt_preempt.policies.baselines.kube_default import as_victim
from ckpt_preempt.policies.disruption.grace_period import KUBERNETES_DEFAULT_GRACE_SECONDS
from ckpt_preempt.policies.model.model import (
    NodeRejection,
    Placement,
    Plan,
    Pod,
    RejectReason,
    Resources,
    VictimGroup,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import bound, cost

POLICY = "kueue-classical"

# what a workload's pods add to its effective priority, within the band of its priority
Boost = Callable[[Sequence[Pod], Snapshot], float]


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One admitted workload the preemptor may preempt, with what the order reads."""

    key: str  # the workload (Pod.workload): the tie-break
    pods: tuple[Pod, ...]  # every running pod of it
    evicted: bool  # already being stopped
    other_queue: bool  # in another ClusterQueue than the preemptor (never, here)
    priority: int
    boost: float  # within the priority's band (0 for Kueue as shipped)
    admitted: float  # when its quota was reserved (its pods' start)


def candidate_key(c: Candidate) -> tuple:
    """CandidatesOrdering, smaller first: 0. already evicted; 1. other ClusterQueues; 3. lower
    effective priority (priority, then boost); 4. most recently admitted; 5. workload key."""
    return (not c.evicted, not c.other_queue, c.priority, c.boost, -c.admitted, c.key)


def candidates(snapshot: Snapshot, preemptor: Sequence[Pod], boost: Boost | None = None
               ) -> list[Candidate]:
    """The workloads of lower priority than the preemptor, whole, in Kueue's order."""
    priority = min(p.priority for p in preemptor)
    mine = {p.uid for p in preemptor}
    by_workload: dict[str, list[Pod]] = {}
    for p in snapshot.pods:
        if p.node is not None and p.uid not in mine:
            by_workload.setdefault(p.workload, []).append(p)
    out = []
    for key, pods in by_workload.items():
        if not all(p.priority < priority and p.preemptible and p.held is None for p in pods):
            continue
        out.append(Candidate(
            key=key, pods=tuple(pods), evicted=any(p.terminating for p in pods),
            other_queue=False, priority=max(p.priority for p in pods),
            boost=boost(pods, snapshot) if boost else 0.0,
            admitted=max(p.start_time if p.start_time is not None else snapshot.now
                         for p in pods)))
    out.sort(key=candidate_key)
    return out


def place(preemptor: Sequence[Pod], snapshot: Snapshot, free: dict[str, Resources]
          ) -> list[Placement] | None:
    """Each pod, largest first, on the open node where it fits leaving the fewest GPUs free
    (then by name); None when one fits nowhere. ``free`` is not changed."""
    left = dict(free)
    out = []
    for pod in sorted(preemptor, key=lambda p: (-p.gpus, -p.requests.gpu_milli, p.uid)):
        r = pod.requests
        best = min((n.name for n in snapshot.nodes
                    if n.closed is None and r.fits_in(left[n.name])),
                   key=lambda name: (left[name].gpus - r.gpus, name), default=None)
        if best is None:
            return None
        left[best] = left[best] - r
        out.append(Placement(pod_uid=pod.uid, node=best))
    return out


def _apply(free: dict[str, Resources], c: Candidate, sign: int) -> None:
    for p in c.pods:
        free[p.node] = free[p.node] + p.requests if sign > 0 else free[p.node] - p.requests


def select(ordered: Sequence[Candidate], fits: Callable[[dict[str, Resources]], bool],
           free: dict[str, Resources]) -> list[Candidate] | None:
    """Remove ``ordered`` one by one from a copy of ``free`` until ``fits``; then, from the
    next to last removed back to the first, add each back when the preemptor still fits
    without it (``fillBackWorkloads``). The targets, or None when removing all is not enough."""
    left = dict(free)
    targets: list[Candidate] = []
    for c in ordered:
        _apply(left, c, +1)
        targets.append(c)
        if fits(left):
            break
    else:
        return None
    for i in range(len(targets) - 2, -1, -1):
        _apply(left, targets[i], -1)
        if fits(left):
            del targets[i]  # reprieved: it stays
        else:
            _apply(left, targets[i], +1)
    return targets


def plan(snapshot: Snapshot, preemptor: Sequence[Pod], *, boost: Boost | None = None,
         policy: str = POLICY,
         grace_period_seconds: float = KUBERNETES_DEFAULT_GRACE_SECONDS) -> Plan:
    """What Kueue would preempt to admit ``preemptor`` (a pod or a whole gang) now."""
    now = snapshot.now
    uids = tuple(p.uid for p in preemptor)
    free = {n.name: snapshot.free(n.name) for n in snapshot.nodes}
    rejections = tuple(NodeRejection(node=n.name, reason=n.closed)
                       for n in snapshot.nodes if n.closed is not None)
    placed = place(preemptor, snapshot, free)
    if placed is not None:
        return Plan(policy=policy, preemptor=uids, feasible=True,
                    reason="fits without preemption", placements=tuple(placed),
                    rejections=rejections)
    ordered = candidates(snapshot, preemptor, boost)
    targets = select(ordered, lambda left: place(preemptor, snapshot, left) is not None, free)
    if targets is None:
        priority = min(p.priority for p in preemptor)
        return Plan(
            policy=policy, preemptor=uids, feasible=False,
            reason=f"does not fit even with all {len(ordered)} lower-priority workload(s) "
            "preempted" + bound.waiting_reason(snapshot, priority),
            rejections=rejections + tuple(
                NodeRejection(node=n.name, reason=RejectReason.NOT_ENOUGH_PREEMPTIBLE)
                for n in snapshot.nodes if n.closed is None))
    for c in targets:
        _apply(free, c, +1)
    placed = place(preemptor, snapshot, free)
    assert placed is not None  # select stopped where it fits and kept it fitting
    unknown = snapshot.unknown_checkpoint_age
    groups = tuple(
        VictimGroup(
            gang=c.pods[0].gang,
            victims=tuple(as_victim(p, now, unknown) for p in c.pods),
            lost_gpu_seconds=sum(p.gpu_share * cost.work_since_checkpoint(p, now, unknown)
                                 for p in c.pods),
            reason=f"workload {c.key}: " + ("already evicted" if c.evicted else
                                            f"priority {c.priority}, admitted at {c.admitted:g}"
                                            + (f", boost {c.boost:g}" if c.boost else "")))
        for c in targets)
    n = sum(len(c.pods) for c in targets)
    return Plan(policy=policy, preemptor=uids, feasible=True,
                reason=f"preempt {len(targets)} workload(s), {n} pod(s)",
                placements=tuple(placed), victim_groups=groups,
                drain_deadline=now + grace_period_seconds, rejections=rejections)
