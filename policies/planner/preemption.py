"""The checkpoint-aware planner: victims by lost work, gangs whole, NVLink respected.

Pipeline for each preemptor member (a single pod, or each member of a pending gang, largest
first, on a working copy of free capacity so later members see earlier choices):

1. fits already? place it without victims (order below);
2. filter nodes (allocatable, cordon, NVLink) and bound each node's cost from below;
3. sample candidates with the shared driver (``policies.planner.candidates``), as kube-scheduler
   does: walk nodes from a per-pod offset until ``max(10 % of nodes, 100)`` could free enough;
4. evaluate those cheapest-bound first with the exact within-node search
   (``cover.min_cover``), stopping once the bound exceeds the best plan found;
5. pick the node minimising (lost work + fairness penalty, PDB violations, its GPUs' health
   (healthy, unknown, then degraded: ``policies.model.health``), victims, then for
   ``nvlink: preferred`` pods a node where one NVLink domain surely fits, name). A node whose
   GPUs are failing is closed (``Node.closed``).

A gang may be a victim only if every PDB covering it allows all the plan's victims it covers
to go (``cover.PdbBudget``), so the Eviction API never refuses part of a gang;
``gang_pdb_problem`` re-checks that against live PDBs right before the first eviction.

For a gang, the placement is also tried with the first member on its next-cheapest node
(``gang_first_member_alternatives``), with the first 2, 3, ... members packed onto one
node by a single joint cover, and with each of the cheapest victim gangs spread over several
nodes evicted first (``joint_seeds``); the cheapest total wins (``policies.planner.gang_joint``).
Tries share what unchanged nodes yield.

The node-level search (steps 2-5, and placing without preemption) is in ``policies.planner.search``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ckpt_preempt.policies.model.health import Health
from ckpt_preempt.policies.model.model import (
    Plan,
    Pod,
    PodHold,
    RejectReason,
    Victim,
    VictimGroup,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.placement import admission
from ckpt_preempt.policies.planner import (
    bound,
    candidates,
    cost,
    cover,
    gang_joint,
    parity,
    units,
)
from ckpt_preempt.policies.planner import shrink as shrink_rules
from ckpt_preempt.policies.planner import timing as timing_
from ckpt_preempt.policies.planner.plan_cache import PlanCache, Share
from ckpt_preempt.policies.planner.search import sampling

POLICY = "checkpoint-aware"
# The fairness guard's defaults, chosen from the simulator (README, "The simulator"): each
# preemption of a workload within the window charges each of its GPUs this many seconds more.
FAIRNESS_PENALTY_SECONDS = 900.0
FAIRNESS_WINDOW_SECONDS = 3600.0  # what Snapshot.recent_preemptions counts over


@dataclass(frozen=True, kw_only=True)
class PlannerConfig:
    drain: bool = True
    max_checkpoint_seconds: float = 600.0
    min_candidate_nodes_percentage: int = candidates.MIN_CANDIDATE_NODES_PERCENTAGE
    min_candidate_nodes_absolute: int = candidates.MIN_CANDIDATE_NODES_ABSOLUTE
    search_budget: int = 20_000  # branch-and-bound steps per node
    gang_first_member_alternatives: int = 1  # a gang's first member: also its 2nd node
    joint_seeds: int = gang_joint.JOINT_SEEDS  # spread victim gangs a gang plan evicts first
    # a gang preemptor: also the tries that see it whole (policies.planner.gang_joint); False:
    # member by member only (the ablation the evidence reports)
    joint_gangs: bool = True
    record_rejections: bool = True
    fairness_penalty_seconds: float = FAIRNESS_PENALTY_SECONDS  # per GPU per recent preemption
    restart_seconds: float = 0.0  # per evicted GPU: the estimated restart/restore time
    # per evicted workload (a gang or a pod), whatever its size: a restart's fixed GPU-seconds
    restart_workload_gpu_seconds: float = 0.0
    placement: str = admission.GANG_BLOCK  # how a pod that fits as things stand is placed
    # elastic shrink (policies.planner.shrink): an elastic gang may give up only members above its
    # minimum, each GPU that stays charged this many seconds; False: every gang goes whole
    shrink: bool = True
    rendezvous_seconds: float = shrink_rules.RENDEZVOUS_SECONDS
    # when to evict (policies.planner.timing): wait, up to max_checkpoint_seconds, for victims' next
    # periodic checkpoint or end when that loses less in total; off: evict at the drain deadline
    timing: bool = True
    timing_margin_seconds: float = timing_.MARGIN_SECONDS
    # with timing, victims are chosen knowing their declared ends (timing.end_rate): one seen
    # ending within max_checkpoint_seconds is charged the lesser of its loss and the preemptor's
    # wait for it; False: by their loss only (the ablation the evidence reports)
    end_aware: bool = True
    # report parity (policies.planner.parity): a periodic pod that reports its checkpoints is no
    # victim while a silent one that could go was preempted no more often; False: loss alone
    report_parity: bool = True

    def __post_init__(self) -> None:
        if self.placement not in admission.PLACEMENTS:
            raise ValueError(f"placement must be one of {admission.PLACEMENTS}, "
                             f"not {self.placement!r}")


def num_candidates(nodes: int, cfg: PlannerConfig) -> int:
    return candidates.num_candidates(nodes, sampling(cfg))


def _groups(chosen: Sequence[units.Unit], cfg: PlannerConfig) -> list[VictimGroup]:
    out = []
    for u in sorted(chosen, key=lambda u: (-u.cost, u.id)):
        victims = tuple(
            Victim(
                uid=p.uid, name=p.name, namespace=p.namespace, node=p.node, gpus=p.gpus,
                priority=p.priority, lost_gpu_seconds=lost, drain=drained,
                checkpoint_seconds=cost.drain_seconds(p, cfg.max_checkpoint_seconds)
                if drained else None, workload=p.workload,
            )
            for p, lost, drained in zip(u.pods, u.losses, u.drained, strict=True)
        )
        if u.shrink:
            victims = tuple(replace(v, checkpoint_seconds=min(
                cfg.rendezvous_seconds, cfg.max_checkpoint_seconds) if v.drain else None)
                for v in victims)
            why = (f"elastic gang gives up {len(victims)} member(s) above its minimum: "
                   "loses only its re-rendezvous")
        elif any(v.drain for v in victims):
            why = "on-request checkpoint: loses only its checkpoint time"
        elif u.gang:
            why = f"whole gang of {len(victims)}: least work since its last checkpoint"
        else:
            why = "least work lost since its last checkpoint"
        if u.penalty:
            why += f"; preempted recently: charged {u.penalty / 3600:.2f} GPU-h more (fairness)"
        if not u.shrink and u.cost < u.lost + u.penalty - 1e-6:
            why += ("; declares an end within the cap: chosen at the preemptor's wait for it, "
                    f"{(u.cost - u.penalty) / 3600:.2f} GPU-h")
        out.append(VictimGroup(gang=u.gang, victims=victims, lost_gpu_seconds=u.lost,
                               reason=why, penalty_gpu_seconds=u.penalty, shrink=u.shrink))
    return out


def plan(
    snapshot: Snapshot, preemptor: Sequence[Pod], config: PlannerConfig = PlannerConfig(),
    cache: PlanCache | None = None,
) -> Plan:
    """Plan for one pending pod or every pending member of one gang.

    ``cache``: the cycle's ``PlanCache``, when ``snapshot`` is its base or a view of it
    (``Snapshot.restricted``); the plan is the same with it or without it.

    With ``report_parity`` (``policies.planner.parity``), when a silent pod could go instead,
    the plan is made with the rule's floor applied by its victim units (every reporter
    preempted that often or more held); when that finds no plan, it is made again without
    the rule (only such reporters make room).

    A gang preemptor whose plan shrinks an elastic gang, or finds none, is also planned with
    shrink off, and the better plan kept: a plan shrinks an elastic gang once at most
    (``policies.planner.shrink``), so a later member may need the gang whole."""
    floor = parity.floor(snapshot, preemptor) if config.report_parity else None
    if floor is None:  # no silent pod could go instead: nothing for the rule to hold
        return _plan_elastic(snapshot, preemptor, config, cache)
    got = _plan_elastic(snapshot, preemptor, config, cache, parity_floor=floor)
    if got.feasible:
        why = (f"; reporting pods preempted {floor} time(s) or more held back "
               f"({PodHold.REPORT_PARITY}: as often as a silent pod that could go)")
    else:
        got = _plan_elastic(snapshot, preemptor, config, cache)
        why = (f"; {PodHold.REPORT_PARITY} relaxed: only reporting pods preempted as often as "
               "a silent one make room")
    return replace(got, reason=got.reason + why) if got.victims else got


def _plan_elastic(snapshot: Snapshot, preemptor: Sequence[Pod], config: PlannerConfig,
                  cache: PlanCache | None, parity_floor: int | None = None) -> Plan:
    got = _plan(snapshot, preemptor, config, cache, parity_floor)
    if not config.shrink or len(preemptor) < 2 or (
            got.feasible and not any(g.shrink for g in got.victim_groups)):
        return got
    whole = _plan(snapshot, preemptor, replace(config, shrink=False), cache, parity_floor)
    if whole.feasible and (not got.feasible or _plan_key(whole) < _plan_key(got)):
        return whole
    return got


def _plan_key(p: Plan) -> tuple[float, int, int]:
    return (p.lost_gpu_seconds + p.penalty_gpu_seconds, p.pdb_violations, len(p.victims))


def _plan(snapshot: Snapshot, preemptor: Sequence[Pod], config: PlannerConfig,
          cache: PlanCache | None, parity_floor: int | None = None) -> Plan:
    """One plan; ``parity_floor``: report parity's floor, applied by the victim units
    (``units.UnitBuilder``), None: the rule holds nobody."""
    members = sorted(preemptor, key=lambda p: (-p.gpus, -p.requests.cpu_milli, p.uid))
    uids = tuple(p.uid for p in members)
    if not members:
        return Plan(policy=POLICY, preemptor=(), feasible=False, reason="empty preemptor")
    if not snapshot.nodes:
        return Plan(
            policy=POLICY, preemptor=uids, feasible=False, reason="the cluster has no nodes"
        )
    priority = min(p.priority for p in members)
    ends = _end_wait(snapshot, members, priority, config)
    shared = None if cache is None else _share(cache, snapshot, priority, config, ends,
                                               parity_floor)
    builder = _builder(snapshot, priority, config, shared, ends, parity_floor)
    memo: dict = {}
    search, placements, stuck = gang_joint.place_members(snapshot, members, config, builder,
                                                         memo, shared=shared, collect=True)
    if stuck is not None:
        failing = sum(1 for n in snapshot.nodes if n.health is Health.FAILING)
        return Plan(
            policy=POLICY, preemptor=uids, feasible=False,
            reason=(search.no_clique
                    or f"{stuck.name} fits nowhere even after preempting every eligible victim")
            + (f"; {failing} node(s) closed because their GPUs are failing" if failing else "")
            + bound.waiting_reason(snapshot, priority),
            rejections=tuple(search.rejections), nodes_evaluated=search.evaluated,
        )
    evaluated = search.evaluated
    # a gang: also the tries that see it whole (policies.planner.gang_joint); the cheapest total
    # wins
    if config.joint_gangs:
        search, placements, tried = gang_joint.improve(snapshot, members, config, builder,
                                                       memo, shared, search, placements)
        evaluated += tried
    groups = _groups(list(search.chosen.values()), config)
    drains = [v.checkpoint_seconds for g in groups for v in g.victims if v.drain]
    victim_pods = [p for u in search.chosen.values() for p in u.pods]
    total = sum(g.lost_gpu_seconds for g in groups)
    reason = (
        f"evict {len(victim_pods)} pod(s) in {len(groups)} group(s), "
        f"losing {total / 3600:.2f} GPU-h"
        if groups
        else "fits without preemption"
    )
    if search.exhausted:
        reason += (
            f"; search budget exhausted on {len(set(search.exhausted))} node(s) "
            f"({RejectReason.SEARCH_BUDGET}), so the cover there may not be the least"
        )
    out = Plan(
        policy=POLICY,
        preemptor=uids,
        feasible=True,
        reason=reason,
        placements=tuple(placements),
        victim_groups=tuple(groups),
        pdb_violations=cover.pdb_violations(victim_pods, snapshot.pdbs),
        drain_deadline=snapshot.now + max(drains) if drains else (snapshot.now if groups else None),
        rejections=tuple(search.rejections),
        nodes_evaluated=evaluated,
    )
    if not config.timing:
        return out
    return timing_.decide(out, snapshot, members, max_wait=config.max_checkpoint_seconds,
                         margin=config.timing_margin_seconds,
                         restart_seconds=config.restart_seconds)


def gang_pdb_problem(snapshot: Snapshot, victim_uids: Iterable[str]) -> str | None:
    """Why evicting these victims could leave a gang half-evicted under the snapshot's PDBs,
    or None when every gang among them can go whole: no PDB covering a gang member allows
    fewer disruptions than the victims it covers. Victims already terminating or gone are
    not counted (a PDB's allowance already reflects them). Call it right before the first
    eviction, with live PDBs."""
    by_uid = snapshot.pod_by_uid
    victims = [by_uid[u] for u in dict.fromkeys(victim_uids)
               if u in by_uid and by_uid[u].node is not None and not by_uid[u].terminating]
    if not any(p.gang for p in victims):
        return None
    problems = []
    for b in snapshot.pdbs:
        covered = [p for p in victims if b.covers(p)]
        gangs = sorted({p.gang for p in covered if p.gang})
        if gangs and len(covered) > b.disruptions_allowed:
            problems.append(
                f"PodDisruptionBudget {b.namespace}/{b.name} allows {b.disruptions_allowed} "
                f"disruption(s) but covers {len(covered)} victim(s), of gang(s) "
                f"{', '.join(gangs)}"
            )
    return "; ".join(problems) or None


def _end_wait(snapshot: Snapshot, members: Sequence[Pod], priority: int,
              config: PlannerConfig) -> units.EndWait | None:
    """How the plan's victims are charged for their declared ends, or None: by loss only."""
    if not (config.timing and config.end_aware):
        return None
    margin, cap = config.timing_margin_seconds, config.max_checkpoint_seconds
    rate = timing_.end_rate(snapshot, members, priority, margin=margin, max_wait=cap)
    return None if rate is None else units.EndWait(margin=margin, max_wait=cap, rate=rate)


def _share(cache: PlanCache, snapshot: Snapshot, priority: int, config: PlannerConfig,
           ends: units.EndWait | None = None, parity_floor: int | None = None) -> Share | None:
    return cache.share(snapshot, priority, search_budget=config.search_budget, cost_settings=(
        config.drain, config.max_checkpoint_seconds, config.fairness_penalty_seconds,
        config.restart_seconds, config.shrink and config.rendezvous_seconds,
        config.restart_workload_gpu_seconds, ends, parity_floor))


def _builder(snapshot: Snapshot, priority: int, config: PlannerConfig, shared: Share | None,
             ends: units.EndWait | None = None,
             parity_floor: int | None = None) -> units.UnitBuilder:
    return units.UnitBuilder(
        snapshot, priority, drain=config.drain,
        max_checkpoint_seconds=config.max_checkpoint_seconds,
        penalty_seconds=config.fairness_penalty_seconds,
        restart_seconds=config.restart_seconds,
        restart_workload_gpu_seconds=config.restart_workload_gpu_seconds,
        rendezvous_seconds=config.rendezvous_seconds if config.shrink else None,
        end_wait=ends, parity_floor=parity_floor,
        shared=None if shared is None else shared.evictable(),
        unshared=frozenset() if shared is None else shared.unshared,
    )


def warm(cache: PlanCache, config: PlannerConfig, nodes: int) -> int:
    """Work ahead while no preemptor is due: find the evictable pods of up to ``nodes`` nodes
    the cache does not know yet, for a preemptor above every running pod (the top priority
    band, where preemptors usually are), so the first plans after a start or a quiet spell find them
    (``PlanCache.carried`` keeps them from then on); with report parity and a silent pod that
    could go, then under the floor most such preemptors plan with
    (``parity.least_preempted_silent``). Returns how many nodes it did; 0 when both are
    complete. What it stores is what a plan would have stored."""
    snapshot = cache.base
    if nodes <= 0:
        return 0
    running = [p.priority for p in snapshot.pods if p.node is not None]
    if not running:
        return 0
    priority = max(running) + 1  # the band of every preemptor above each running pod
    floors: list[int | None] = [None]
    if config.report_parity:
        floor = parity.least_preempted_silent(snapshot, priority)
        if floor is not None:
            floors.append(floor)
    done = 0
    for floor in floors:
        shared = _share(cache, snapshot, priority, config, parity_floor=floor)
        if shared is None:
            return done
        known = shared.evictable()
        builder = _builder(snapshot, priority, config, shared, parity_floor=floor)
        for node in snapshot.nodes:
            if node.name not in known:
                builder.evictable_on(node.name)
                done += 1
                if done >= nodes:
                    return done
    return done
