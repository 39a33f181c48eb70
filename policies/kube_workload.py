"""kube-scheduler with workload-aware preemption (KEP-5710), reimplemented on our model.

The strongest upstream baseline for gangs: DefaultPreemption (``policies.kube_default``) made
gang-aware as kubernetes/enhancements ``keps/sig-scheduling/5710-workload-aware-preemption/
README.md`` specifies it (status implementable, beta in v1.37 under the ``GenericWorkload``
gate). Sections followed:

- "Preemption unit": a PodGroup with ``disruptionMode: All`` is disrupted as a whole (its
  running pods are all victims or none is); a pod outside any group is its own unit. Every gang
  here (``Pod.gang``) is such a PodGroup.
- "Pod Group priorities": one priority per group, the same for all its pods (beta refuses to
  schedule a group whose pods disagree). A unit is a potential victim only when all its running
  pods are of lower priority than the preemptor; a pending gang preempts with its members'
  lowest priority.
- "Preemption algorithm": a single pod preempts per node (the domains are the nodes; the
  candidate walk, the reprieve and ``pickOneNodeForPreemption`` are kube-default's), where a
  group with a pod on the node is a potential victim as a whole: its pods elsewhere count for
  scoring, not for making room on this node. A pending gang preempts as a whole, with the whole
  cluster as its one domain: (1) remove every potential victim, (2) schedule the gang, (3) sort
  the potential victims most important first (priority, then at one priority groups before
  single pods), (4) reprieve first those whose eviction breaks a PodDisruptionBudget, then the
  rest, each only if it fits back exactly where it runs next to the gang and the victims already
  reprieved; a group is reprieved whole or not at all ("In place victim reprieval"). There is
  one decision, so nothing is scored. If the gang fits without preemption nothing is preempted.

Deliberate differences: (a) "fits back" is resource fit only, as everywhere in the simulator;
(b) the gang's placement with every potential victim removed is the best fit kube-default uses
when no preemption is needed (fewest GPUs left over), ties broken by the seeded random source
(upstream's ``selectHost`` picks among equal scores at random); kube-scheduler's scoring plugins
are not modelled; (c) within one priority and kind, the unit that started earlier is the more
important (upstream's ``MoreImportantPod``, with a group's earliest start; the KEP leaves it
open); (d) a group with a terminating, held or higher-priority pod is no potential victim, and
a group's PDB violations count its pods whose eviction breaks a budget; (e) a pending pod
outside any gang preempts exactly as kube-default does, with the same seed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import partial

from ckpt_preempt.policies import bound, kube_default
from ckpt_preempt.policies.kube_default import KubeDefaultConfig
from ckpt_preempt.policies.model import (
    NodeRejection,
    Placement,
    Plan,
    Pod,
    PodDisruptionBudget,
    RejectReason,
    Resources,
    Snapshot,
    VictimGroup,
)

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


def importance_key(pods: Sequence[Pod], now: float) -> tuple[int, int, float]:
    """Most important first: higher priority, then groups before single pods, then the one
    that started earlier."""
    return (
        -max(p.priority for p in pods),
        0 if pods[0].gang is not None else 1,
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


def _schedule(
    members: Sequence[Pod], free: dict[str, Resources], nodes: Sequence[str],
    rng: random.Random | None,
) -> list[Placement] | None:
    """Place each member best-fit on ``free`` (changed in place); ties by ``rng``, else name.
    None when one fits nowhere."""
    out = []
    for pod in members:
        fits = [n for n in nodes if pod.requests.fits_in(free[n])]
        if not fits:
            return None
        best = min(fits, key=lambda n: (free[n].gpus - pod.gpus,
                                        rng.random() if rng else 0.0, n))
        free[best] = free[best] - pod.requests
        out.append(Placement(pod_uid=pod.uid, node=best))
    return out


def _plan_gang(snapshot: Snapshot, members: Sequence[Pod], config: KubeDefaultConfig) -> Plan:
    """A pending gang preempts as one unit, with the whole cluster as its domain."""
    now = snapshot.now
    uids = tuple(p.uid for p in members)
    rejections = [NodeRejection(node=n.name, reason=n.closed)
                  for n in snapshot.nodes if n.closed is not None]
    open_nodes = [n.name for n in snapshot.nodes if n.closed is None]
    free = {n.name: snapshot.free(n.name) for n in snapshot.nodes}
    fits = _schedule(members, dict(free), open_nodes, None)
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
    for pods in potential:
        for p in pods:
            free[p.node] = free[p.node] + p.requests
    placements = _schedule(members, free, open_nodes, random.Random(config.seed))
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
            if _fits_back(u, free):
                for p in u:
                    free[p.node] = free[p.node] - p.requests  # reprieved, back where it ran
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


def _fits_back(pods: Sequence[Pod], free: dict[str, Resources]) -> bool:
    """Do all of ``pods`` fit back on their nodes together?"""
    need: dict[str, Resources] = {}
    for p in pods:
        need[p.node] = need.get(p.node, Resources()) + p.requests
    return all(r.fits_in(free[n]) for n, r in need.items())


def plan(
    snapshot: Snapshot, preemptor: Sequence[Pod], config: KubeDefaultConfig = KubeDefaultConfig()
) -> Plan:
    """What kube-scheduler with workload-aware preemption would do for one pending pod or gang."""
    members = sorted(preemptor, key=lambda p: (-p.gpus, p.uid))
    if any(p.gang is not None for p in members):
        return _plan_gang(snapshot, members, config)
    return kube_default.plan_each_member(
        snapshot, members, config, policy=POLICY, select=partial(select_units_on_node, snapshot),
        groups=unit_groups,
    )
