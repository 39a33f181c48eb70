"""kube-scheduler with workload-aware preemption (KEP-5710), reimplemented on our model.

The strongest upstream baseline for gangs: DefaultPreemption (``policies.baselines.kube_default``)
made gang-aware, as kubernetes/kubernetes@v1.37.2 does it with the ``GenericWorkload`` gate on
(beta, off by default; design in kubernetes/enhancements ``keps/sig-scheduling/
5710-workload-aware-preemption/README.md``). Paths below are in kubernetes@v1.37.2
``pkg/scheduler/``; checked against it by the differential run (bench/differential.py
``--workload``, e2e/harness/differential_workload.py).

Preemption units (``framework/preemption/types.go`` ``getCrossNodesVictims``): the pods of a
PodGroup with ``disruptionMode: All`` are one unit, every scheduled pod of the group wherever
it runs; any other pod is its own unit. A unit's priority is its PodGroup's (``util.go``
``GetPodPriority``); it is a potential victim when that is below the preemptor's
(``isPreemptionAllowed``). Every gang of ours (``Pod.gang``) is such a group.

A pending PodGroup (``framework/preemption/podgrouppreemption.go`` ``selectVictimsOnDomain``;
``schedule_one_podgroup.go`` ``podGroupCycle``): when the group cannot be scheduled as the
cluster is, the whole cluster is its one domain, so there is exactly one candidate and
nothing is scored or sampled (no ``pickOneNodeForPreemption``, no random offset):

1. remove every potential victim, on every node;
2. schedule the group on what is left with the ordinary algorithm
   (``podGroupSchedulingDefaultAlgorithm``): members one after the other in queue order,
   each on the node of top score among those it fits, earlier members assumed
   (``policies.baselines.kube_placement`` says which plugins score and how); if a member fits
   nowhere, nothing is preempted;
3. sort the potential victims most important first (``util.go`` ``MoreImportantVictim``:
   higher priority; then a PodGroup before a single pod; then the larger group; then the
   earlier start of its earliest pod);
4. split them with ``FilterVictimsWithPDBViolation``: a unit is violating when any of its
   pods' evictions breaks a budget (pods charged in that order, a pod's charging stops at
   the first budget it breaks, as in ``policies.baselines.kube_default.scheduler_breaks_budget``);
5. reprieve the violating units first, then the others, most important first: a unit's
   pods are all added back where they run, and it stays when every member still passes
   the Filter plugins on its assigned node (here: fits next to the members and the units
   already reprieved); otherwise it is a victim whole.

The victims are deleted and the members nominated to their nodes; when they are bound later,
kube-scheduler schedules them again, so the nodes they end on may differ from the nominated
ones. A single pending pod (no group) preempts per node as kube-default does, with the units
above: a unit with a pod on the node is a potential victim as a whole, its pods elsewhere
count for scoring, not for making room (``plugins/defaultpreemption/default_preemption.go``
``SelectVictimsOnNode``).

What our model cannot see, and so does not follow: (a) Filter is resource fit only, as
everywhere in the simulator (no taints, affinity, ports, volumes, DRA); Score is the two
resource plugins only (``policies.baselines.kube_placement``); (b) among nodes of equal top score
upstream takes the root of a heap built over its node list walked from ``nextStartNodeIndex``;
below 100 nodes every cycle walks every node, so that counter stays where it was, 0 from the
scheduler's start unless the cluster once had 100 nodes (the differential agrees with 0), above
it our model cannot know it and draws it from the seed, and upstream's parallel Filter may
reorder the walk; equally important victims keep the snapshot's order (upstream: its cache's
node and pod order, which ``sort.Slice`` keeps for up to 12 units); (c) members are ordered by
priority then name (upstream: the time each was queued); (d) all pending members are placed
(upstream's PlacementFeasible plugins may accept a placement once ``minCount`` of them are
scheduled, which is not modelled); (e) a pod in a ``disruptionMode: Single`` group counts as a
group when ordering victims upstream (``NewPodVictim``), as a single pod here (our pod does not
carry its group once it is no unit); (f) a unit with a terminating or held pod is no potential
victim here (upstream it is, but evicting it again frees nothing sooner); (g) a group's
priority is its pods' highest (upstream: the PodGroup's own, which the beta API makes its pods'
too); (h) composite PodGroups (alpha) are not modelled.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import partial

from ckpt_preempt.policies.baselines import kube_default
from ckpt_preempt.policies.baselines.kube_default import KubeDefaultConfig
from ckpt_preempt.policies.baselines.kube_placement import (
    MIN_FEASIBLE_NODES_TO_FIND,
    ClusterLoad,
    member_order,
)
from ckpt_preempt.policies.model.model import (
    NodeRejection,
    Plan,
    Pod,
    PodDisruptionBudget,
    RejectReason,
    Resources,
    VictimGroup,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import bound

POLICY = "kube-workload"


def unit_pods(snapshot: Snapshot, pod: Pod) -> tuple[Pod, ...]:
    """What is disrupted with ``pod``: every running pod of its gang, or the pod alone."""
    if pod.gang is None:
        return (pod,)
    return tuple(sorted((p for p in snapshot.gang_pods(pod.gang) if p.node is not None),
                        key=lambda p: p.uid))


def potential_victim(pods: Sequence[Pod], priority: int) -> bool:
    """May this unit be preempted by a preemptor of ``priority``?"""
    return all(p.priority < priority and not p.terminating and p.held is None for p in pods)


def importance_key(pods: Sequence[Pod], now: float) -> tuple[int, int, int, float]:
    """Most important first (upstream ``MoreImportantVictim``): higher priority, then groups
    before single pods, then the larger group, then the one that started earlier."""
    return (
        -max(p.priority for p in pods),
        0 if pods[0].gang is not None else 1,
        -len(pods),
        min(kube_default.started(p, now) for p in pods),
    )


def _by_pdb(units: list[tuple[Pod, ...]], pdbs: Sequence[PodDisruptionBudget]) -> list[int]:
    """For each unit in order: how many of its pods' evictions break a PDB (budgets charged
    in that order, as ``filterPodsWithPDBViolation`` does)."""
    broken = iter(kube_default.scheduler_breaks_budget((p for u in units for p in u), pdbs))
    return [sum(next(broken) for _ in u) for u in units]


def select_units_on_node(
    snapshot: Snapshot, pod: Pod, on_node: Sequence[Pod], free: Resources,
    pdbs: Sequence[PodDisruptionBudget], now: float,
) -> tuple[list[Pod], int] | None:
    """kube-default's ``select_victims_on_node`` over units: remove every potential victim unit
    with a pod here, then reprieve the PDB-violating ones first, most important first.

    Returns (every victim pod, also those of its groups on other nodes, most important first;
    PDB-violating victims) or None when removing them all does not make room here.
    """
    node = on_node[0].node if on_node else None
    seen: set[str] = set()
    units: list[tuple[Pod, ...]] = []
    for p in on_node:
        key = p.gang or p.uid
        if key in seen:
            continue
        seen.add(key)
        pods = unit_pods(snapshot, p)
        if potential_victim(pods, pod.priority):
            units.append(pods)
    if not units:
        return None
    here = []
    room = free
    for u in units:
        r = Resources()
        for p in u:
            if p.node == node:
                r = r + p.requests
        here.append(r)
        room = room + r
    if not pod.requests.fits_in(room):
        return None
    order = sorted(range(len(units)), key=lambda i: importance_key(units[i], now))
    units, here = [units[i] for i in order], [here[i] for i in order]
    broken = _by_pdb(units, pdbs)
    victims: list[Pod] = []
    n_violating = 0
    for violating in (True, False):
        for u, r, b in zip(units, here, broken, strict=True):
            if (b > 0) != violating:
                continue
            if pod.requests.fits_in(room - r):
                room = room - r  # reprieved: the whole unit stays
            else:
                victims.extend(u)
                n_violating += b
    victims.sort(key=lambda p: kube_default.importance_key(p, now))
    return victims, n_violating


def unit_groups(snapshot: Snapshot, victims: Sequence[Pod]) -> tuple[VictimGroup, ...]:
    """One group per unit, charged what its pods lose (a gang's victims are all its pods)."""
    now, unknown = snapshot.now, snapshot.unknown_checkpoint_age
    by_unit: dict[str, list[Pod]] = {}
    for v in victims:
        by_unit.setdefault(v.gang or v.uid, []).append(v)
    out = []
    for pods in by_unit.values():
        gang = pods[0].gang
        vs = tuple(kube_default.as_victim(p, now, unknown) for p in pods)
        out.append(VictimGroup(
            gang=gang, victims=vs, lost_gpu_seconds=sum(v.lost_gpu_seconds for v in vs),
            reason=f"whole pod group {gang} (disruptionMode All)" if gang
            else "lowest priority, started latest",
        ))
    return tuple(out)


def _plan_gang(snapshot: Snapshot, members: Sequence[Pod], config: KubeDefaultConfig) -> Plan:
    """A pending gang preempts as one unit, with the whole cluster as its domain."""
    now = snapshot.now
    uids = tuple(p.uid for p in members)
    rejections = [NodeRejection(node=n.name, reason=n.closed)
                  for n in snapshot.nodes if n.closed is not None]
    open_nodes = [n.name for n in snapshot.nodes if n.closed is None]
    all_nodes = [n.name for n in snapshot.nodes]
    offset = _walk_start(len(all_nodes), config.seed)
    load = ClusterLoad(snapshot)
    fits = load.schedule(members, all_nodes, offset) if all_nodes else None
    if fits is not None:
        return Plan(policy=POLICY, preemptor=uids, feasible=True,
                    reason="fits without preemption", placements=tuple(fits),
                    rejections=tuple(rejections))
    priority = min(p.priority for p in members)
    units: dict[str, tuple[Pod, ...] | None] = {}  # None: no potential victim
    for p in snapshot.pods:
        key = p.gang or p.uid
        if p.node is not None and key not in units:
            pods = unit_pods(snapshot, p)
            units[key] = pods if potential_victim(pods, priority) else None
    potential = [u for u in units.values() if u is not None]
    load = ClusterLoad(snapshot)
    for pods in potential:
        for p in pods:
            load.remove(p.requests, p.node)
    placements = load.schedule(members, all_nodes, offset)
    if placements is None:
        return Plan(
            policy=POLICY, preemptor=uids, feasible=False,
            reason="the gang does not fit even with every lower-priority pod group removed"
            + bound.waiting_reason(snapshot, priority),
            rejections=tuple(rejections) + tuple(
                NodeRejection(node=n, reason=RejectReason.NOT_ENOUGH_PREEMPTIBLE)
                for n in open_nodes),
        )
    ordered = sorted(potential, key=lambda u: importance_key(u, now))
    broken = _by_pdb(ordered, snapshot.pdbs)
    victims: list[Pod] = []
    violations = 0
    for violating in (True, False):
        for u, b in zip(ordered, broken, strict=True):
            if (b > 0) != violating:
                continue
            if _fits_back(u, load):
                for p in u:
                    load.add(p.requests, p.node)  # reprieved, back where it ran
            else:
                victims.extend(u)
                violations += b
    victims.sort(key=lambda p: kube_default.importance_key(p, now))
    return Plan(
        policy=POLICY, preemptor=uids, feasible=True,
        reason=f"evict {len(victims)} pod(s)" if victims else "fits without preemption",
        placements=tuple(placements), victim_groups=unit_groups(snapshot, victims),
        pdb_violations=violations,
        drain_deadline=now + config.grace_period_seconds if victims else None,
        rejections=tuple(rejections),
    )


def _walk_start(nodes: int, seed: int) -> int:
    """kube-scheduler's ``nextStartNodeIndex``: below 100 nodes every cycle walks every node,
    so it stays where it started (0); above, the model cannot know it, so it is drawn from
    the seed."""
    if nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return 0
    return random.Random(seed).randrange(nodes)


def _fits_back(pods: Sequence[Pod], load: ClusterLoad) -> bool:
    """Do all of ``pods`` fit back on their nodes together, next to the gang?"""
    need: dict[str, Resources] = {}
    for p in pods:
        need[p.node] = need.get(p.node, Resources()) + p.requests
    return all(load.fits(r, n) for n, r in need.items())


def plan(
    snapshot: Snapshot, preemptor: Sequence[Pod], config: KubeDefaultConfig = KubeDefaultConfig()
) -> Plan:
    """What kube-scheduler with workload-aware preemption would do for one pending pod or gang."""
    if any(p.gang is not None for p in preemptor):
        return _plan_gang(snapshot, member_order(preemptor), config)
    members = sorted(preemptor, key=lambda p: (-p.gpus, p.uid))
    return kube_default.plan_each_member(
        snapshot, members, config, policy=POLICY, select=partial(select_units_on_node, snapshot),
        groups=unit_groups,
    )
