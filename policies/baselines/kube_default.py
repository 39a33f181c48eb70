"""kube-scheduler's DefaultPreemption, reimplemented on our model: the baseline we beat.

Mirrors kubernetes/kubernetes ``pkg/scheduler/framework/preemption/preemption.go``
(``DryRunPreemption``, ``SelectCandidate``, ``pickOneNodeForPreemption``,
``filterPodsWithPDBViolation``) and
``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go``
(``SelectVictimsOnNode``, ``calculateNumCandidates``, ``GetOffsetAndNumCandidates``), as of the
v1.3x releases. It knows nothing of checkpoints, gangs, opt-outs or NVLink: that is the point.
The candidate walk is the shared driver (``policies.planner.candidates``); ``NodePlugin`` is this
policy's plugin to it.

Differences from upstream, all deliberate: candidate nodes are tried one at a time rather than
by 16 parallel workers (upstream's early stop is racy; ours is deterministic), the random
offset comes from the caller, "first node" ties resolve in evaluation order rather than Go
map order, and pods already terminating are not counted as potential victims (deleting them
again frees nothing sooner). Only resource fit is simulated; nodes the preemptor may not use
(``Node.closed``: cordoned, or excluded by its selector, affinity, taints or another plan) and
pods another plan holds (``Pod.held``) are left out, as the planner leaves them out. PDBs are
matched as the scheduler matches them (``scheduler_matches``), not as the Eviction API does.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ckpt_preempt.policies.model.model import (
    Node,
    NodeRejection,
    Placement,
    Plan,
    Pod,
    PodDisruptionBudget,
    RejectReason,
    Resources,
    Victim,
    VictimGroup,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import bound, candidates, cost

POLICY = "kube-default"
MAX_INT32_PLUS_ONE = 2**31  # upstream adds MaxInt32+1 so priority sums are non-negative


@dataclass(frozen=True, kw_only=True)
class KubeDefaultConfig:
    min_candidate_nodes_percentage: int = candidates.MIN_CANDIDATE_NODES_PERCENTAGE
    min_candidate_nodes_absolute: int = candidates.MIN_CANDIDATE_NODES_ABSOLUTE
    seed: int = 0  # drives the random offset into the node list (upstream: rand.Int31n)
    grace_period_seconds: float = 30.0  # pod default terminationGracePeriodSeconds


def started(p: Pod, now: float) -> float:
    return p.start_time if p.start_time is not None else now


def importance_key(p: Pod, now: float) -> tuple[int, float]:
    """MoreImportantPod: higher priority first, then the one that started earlier."""
    return (-p.priority, started(p, now))


def scheduler_matches(pdb: PodDisruptionBudget, pod: Pod) -> bool:
    """Does kube-scheduler's preemption count ``pod`` against ``pdb``?

    Narrower than the Eviction API's ``PodDisruptionBudget.covers``: in v1.37.2's
    ``FilterVictimsWithPDBViolation`` (``pkg/scheduler/framework/preemption/util.go``) a pod
    without labels matches no PDB, and a PDB whose selector is empty (``{}``) or null matches
    nothing. Found by the differential test against the real scheduler (bench/differential.py).
    """
    return bool(pod.labels) and bool(pdb.match_labels or pdb.match_expressions) and pdb.covers(pod)


def scheduler_breaks_budget(
    pods: Iterable[Pod], pdbs: Sequence[PodDisruptionBudget]
) -> list[bool]:
    """For each pod in order: does evicting it (after the ones before) break a PDB, as the
    scheduler counts it? Each matching budget is charged one disruption, in the PDBs' order,
    and the charging stops at the first budget that goes negative (upstream returns there, so
    later budgets covering the same pod keep their disruption). ``status.disruptedPods`` is
    not modelled: a pod the API server is already evicting is not a potential victim here.
    """
    allowed = [b.disruptions_allowed for b in pdbs]
    out = []
    for p in pods:
        broken = False
        for i, b in enumerate(pdbs):
            if scheduler_matches(b, p):
                allowed[i] -= 1
                if allowed[i] < 0:
                    broken = True
                    break
        out.append(broken)
    return out


def filter_pods_with_pdb_violation(
    pods: Sequence[Pod], pdbs: Sequence[PodDisruptionBudget]
) -> tuple[list[Pod], list[Pod]]:
    """Split (in order) into pods whose eviction would break a PDB and those that would not."""
    violating, ok = [], []
    for p, broken in zip(pods, scheduler_breaks_budget(pods, pdbs), strict=True):
        (violating if broken else ok).append(p)
    return violating, ok


def select_victims_on_node(
    pod: Pod, on_node: Sequence[Pod], free: Resources, pdbs: Sequence[PodDisruptionBudget],
    now: float,
) -> tuple[list[Pod], int] | None:
    """Remove every lower-priority pod; reprieve PDB-violating ones first, most important first.

    Returns (victims ordered most important first, PDB-violating victims), or None when even
    removing all lower-priority pods does not make room.
    """
    potential = [p for p in on_node
                 if p.priority < pod.priority and not p.terminating and p.held is None]
    if not potential:
        return None
    room = free
    for p in potential:
        room = room + p.requests
    if not pod.requests.fits_in(room):
        return None
    potential.sort(key=lambda p: importance_key(p, now))
    violating, ok = filter_pods_with_pdb_violation(potential, pdbs)
    victims: list[Pod] = []
    n_violating = 0
    for group, counts in ((violating, True), (ok, False)):
        for p in group:
            if pod.requests.fits_in(room - p.requests):
                room = room - p.requests  # reprieved: it stays
            else:
                victims.append(p)
                n_violating += counts
    victims.sort(key=lambda p: importance_key(p, now))
    return victims, n_violating


def num_candidates(nodes: int, cfg: KubeDefaultConfig) -> int:
    return candidates.num_candidates(nodes, sampling(cfg))


def sampling(cfg: KubeDefaultConfig) -> candidates.Sampling:
    return candidates.Sampling(
        min_candidate_nodes_percentage=cfg.min_candidate_nodes_percentage,
        min_candidate_nodes_absolute=cfg.min_candidate_nodes_absolute,
    )


def node_choice_key(victims: Sequence[Pod], n_violating: int, now: float, order: int) -> tuple:
    """pickOneNodeForPreemption's criteria, in order; smaller is better.

    1. fewest PDB violations; 2. lowest highest-victim priority; 3. smallest priority sum;
    4. fewest victims; 5. latest start among the highest-priority victims; 6. first node.
    """
    top = victims[0].priority
    earliest_top = min(started(p, now) for p in victims if p.priority == top)
    return (
        n_violating,
        top,
        sum(p.priority + MAX_INT32_PLUS_ONE for p in victims),
        len(victims),
        -earliest_top,
        order,
    )


# (victims ordered most important first, PDB-violating victims) on one node, or None
SelectVictims = Callable[
    [Pod, Sequence[Pod], Resources, Sequence[PodDisruptionBudget], float],
    tuple[list[Pod], int] | None,
]
# (node, victims, PDB-violating victims, walk step)
Candidate = tuple[str, list[Pod], int, int]


class NodePlugin:
    """DefaultPreemption as a plugin of the candidate driver, for one preemptor pod.

    ``select`` chooses the victims on a node (``select_victims_on_node`` here; kube-workload
    passes its unit-aware variant); ``gone`` are pods an earlier member's victims already
    took, ``free`` the capacity as earlier members left it."""

    def __init__(
        self, snapshot: Snapshot, pod: Pod, free: dict[str, Resources], gone: set[str],
        rng: random.Random, rejections: list[NodeRejection], select: SelectVictims,
    ) -> None:
        self.s, self.pod, self.free, self.gone = snapshot, pod, free, gone
        self.rng, self.rejections, self.select = rng, rejections, select

    def potential(self, node: Node) -> bool:
        if node.closed is not None:
            self.rejections.append(NodeRejection(node=node.name, reason=node.closed))
            return False
        if not self.pod.requests.fits_in(node.allocatable):
            self.rejections.append(NodeRejection(node=node.name, reason=RejectReason.TOO_SMALL))
            return False
        return True

    def offset(self, nodes: int) -> int:
        return self.rng.randrange(nodes)  # upstream: rand.Int31n(len(potentialNodes))

    def select_victims(self, node: Node, step: int, index: int) -> Candidate | None:
        on_node = [p for p in self.s.pods_on_node.get(node.name, ()) if p.uid not in self.gone]
        got = self.select(self.pod, on_node, self.free[node.name], self.s.pdbs, self.s.now)
        if got is None or not got[0]:
            self.rejections.append(
                NodeRejection(node=node.name, reason=RejectReason.NOT_ENOUGH_PREEMPTIBLE)
            )
            return None
        return node.name, got[0], got[1], step

    def violates_pdb(self, candidate: Candidate) -> bool:
        return candidate[2] > 0

    def pick(self, found: Sequence[Candidate]) -> Candidate | None:
        now = self.s.now
        return min(found, key=lambda c: node_choice_key(c[1], c[2], now, c[3]), default=None)


def _place_one(
    snapshot: Snapshot, pod: Pod, free: dict[str, Resources], gone: set[str],
    cfg: KubeDefaultConfig, rng: random.Random, rejections: list[NodeRejection],
    select: SelectVictims,
) -> tuple[str, list[Pod], int] | None:
    fits = [
        n for n in snapshot.nodes
        if n.closed is None and pod.requests.fits_in(free[n.name])
    ]
    if fits:  # no preemption needed: the scheduler would simply bind it
        best = min(fits, key=lambda n: (free[n.name].gpus - pod.gpus, n.name))
        return best.name, [], 0
    plugin = NodePlugin(snapshot, pod, free, gone, rng, rejections, select)
    chosen, _ = candidates.preempt(plugin, snapshot.nodes, sampling(cfg))
    if chosen is None:
        return None
    name, victims, n_violating, _ = chosen
    return name, victims, n_violating


def plan(
    snapshot: Snapshot, preemptor: Sequence[Pod], config: KubeDefaultConfig = KubeDefaultConfig()
) -> Plan:
    """What kube-scheduler would do: each member preempts on its own (it knows no gangs)."""
    return plan_each_member(snapshot, preemptor, config, policy=POLICY,
                            select=select_victims_on_node, groups=victim_groups)


def plan_each_member(
    snapshot: Snapshot, preemptor: Sequence[Pod], config: KubeDefaultConfig, *, policy: str,
    select: SelectVictims,
    groups: Callable[[Snapshot, Sequence[Pod]], tuple[VictimGroup, ...]],
) -> Plan:
    """Each member, largest first, preempts on its own node as DefaultPreemption does, with
    ``select`` choosing the victims on a node and ``groups`` charging them."""
    now = snapshot.now
    rng = random.Random(config.seed)
    members = sorted(preemptor, key=lambda p: (-p.gpus, p.uid))
    uids = tuple(p.uid for p in members)
    free = {n.name: snapshot.free(n.name) for n in snapshot.nodes}
    gone: set[str] = set()
    victims: list[Pod] = []
    placements: list[Placement] = []
    rejections: list[NodeRejection] = []
    violations = 0
    for pod in members:
        got = _place_one(snapshot, pod, free, gone, config, rng, rejections, select)
        if got is None:
            return Plan(
                policy=policy, preemptor=uids, feasible=False,
                reason=f"{pod.name}: preemption is not helpful on any node"
                + bound.waiting_reason(snapshot, pod.priority),
                rejections=tuple(rejections),
            )
        name, chosen, n_violating = got
        violations += n_violating
        for v in chosen:
            gone.add(v.uid)
            free[v.node] = free[v.node] + v.requests
            victims.append(v)
        free[name] = free[name] - pod.requests
        placements.append(Placement(pod_uid=pod.uid, node=name))
    return Plan(
        policy=policy,
        preemptor=uids,
        feasible=True,
        reason=f"evict {len(victims)} pod(s)" if victims else "fits without preemption",
        placements=tuple(placements),
        victim_groups=groups(snapshot, victims),
        pdb_violations=violations,
        drain_deadline=now + config.grace_period_seconds if victims else None,
        rejections=tuple(rejections),
    )


def victim_groups(snapshot: Snapshot, victims: Sequence[Pod]) -> tuple[VictimGroup, ...]:
    """Charge each victim its lost work; a victim in a gang breaks it, so charge the gang's.

    The rest of a broken gang stalls without the evicted member and loses the same unsaved work,
    which is why the whole gang's loss is counted once, on the group.
    """
    now, unknown = snapshot.now, snapshot.unknown_checkpoint_age
    by_gang: dict[str | None, list[Pod]] = {}
    for v in victims:
        by_gang.setdefault(v.gang, []).append(v)
    out = []
    for gang, pods in by_gang.items():
        for evicted in [[p] for p in pods] if gang is None else [pods]:
            if gang is None:
                lost = sum(p.gpu_share * cost.work_since_checkpoint(p, now, unknown)
                           for p in evicted)
                why = "lowest priority, started latest"
            else:
                running = [
                    snapshot.pod_by_uid[u] for u in snapshot.gangs[gang].members
                    if snapshot.pod_by_uid[u].node is not None
                ]
                lost = sum(p.gpu_share * cost.work_since_checkpoint(p, now, unknown)
                           for p in running)
                why = f"breaks gang {gang}: {len(running)} running member(s) lose their work"
            out.append(VictimGroup(
                gang=gang,
                victims=tuple(as_victim(p, now, unknown) for p in evicted),
                lost_gpu_seconds=lost,
                reason=why,
            ))
    return tuple(out)


def as_victim(p: Pod, now: float, unknown_age: float | None) -> Victim:
    return Victim(
        uid=p.uid, name=p.name, namespace=p.namespace, node=p.node or "", gpus=p.gpus,
        priority=p.priority,
        lost_gpu_seconds=p.gpu_share * cost.work_since_checkpoint(p, now, unknown_age),
        drain=False, workload=p.workload,
    )

