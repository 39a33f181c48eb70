"""The simulator's named policies: each name builds a planner the engine calls per preemptor.

A planner takes the snapshot, the preemptor's pods and a running plan number (the kube
baselines use it as the seed of their random candidate offset) and returns a Plan.
``BASELINES`` are the policies ours is compared with: kube-scheduler's DefaultPreemption,
the same with workload-aware preemption (KEP-5710), our own search blind to checkpoints, and
``greedy-checkpoint``: our checkpoint-aware cost and drain with no search inside a node.

greedy-checkpoint is checkpoint-aware-drain with the within-node branch and bound cut to one
step (``search_budget=1``): ``policies.planner.cover.min_cover`` then falls back to its greedy
cover, the node's victims cheapest first (lost work + restart + fairness penalty) until the
preemptor fits. Candidate nodes, node choice, whole gangs and PDBs are the planner's. It answers
what the exact search adds over the obvious greedy with the same costs.

When to preempt (``policies.planner.timing``), apart from ``POLICIES`` so that runs of every policy
keep their set: ``TIMING_POLICY`` is the drain policy that also decides when to evict (its
ablation is ``DRAIN_POLICY``), and ``WAIT_THEN_EVICT`` the baseline for it: kube-default's
victims, evicted once those that declare an end within ``WAIT_THEN_EVICT_SECONDS`` have ended
(``TIMING_BASELINES`` adds it to ``BASELINES``).

Kueue's rows, apart from ``KNOWN`` so that every report and the hindsight floor keep their set
(``KUEUE_ROWS``; bench/kueue_rows.py runs them): ``KUEUE_POLICY`` is Kueue's classical
preemption (``policies.baselines.kueue_classical``); ``OURS_UNDER_KUEUE`` the same with the
effective priority boosted, within its priority's band, by the workload's unsaved work (the
rule our controller writes, ``policies.kueue.boost``), its victims saving on SIGTERM with the
sized grace. ``WORLD_ROWS`` names the rows that replay a policy in a world where victims save
on SIGTERM (``policies.sim.sigterm``; ``Simulation`` sets ``SimConfig.sigterm_save`` from
``row``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ckpt_preempt.policies.baselines import cost_aware, kube_default, kube_workload, kueue_classical
from ckpt_preempt.policies.kueue import boost as kueue_boost
from ckpt_preempt.policies.model.model import Plan, Pod
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import preemption, timing
from ckpt_preempt.policies.sim import sigterm

Planner = Callable[[Snapshot, list[Pod], int], Plan]


def _kube(snapshot: Snapshot, pods: list[Pod], n: int) -> Plan:
    return kube_default.plan(snapshot, pods, kube_default.KubeDefaultConfig(seed=n))


def _kube_workload(snapshot: Snapshot, pods: list[Pod], n: int) -> Plan:
    return kube_workload.plan(snapshot, pods, kube_default.KubeDefaultConfig(seed=n))


def _aware(cfg: preemption.PlannerConfig) -> Planner:
    return lambda snapshot, pods, n: preemption.plan(snapshot, pods, cfg)


def _wait_then_evict(snapshot: Snapshot, pods: list[Pod], n: int) -> Plan:
    return timing.wait_for_ends(_kube(snapshot, pods, n), snapshot, pods,
                                max_wait=WAIT_THEN_EVICT_SECONDS, policy=WAIT_THEN_EVICT)


def _greedy(cfg: preemption.PlannerConfig) -> Planner:
    cfg = replace(cfg, search_budget=GREEDY_SEARCH_BUDGET)

    def plan(snapshot: Snapshot, pods: list[Pod], n: int) -> Plan:
        return replace(preemption.plan(snapshot, pods, cfg), policy=GREEDY_POLICY)

    return plan


def _cost_aware(cfg: preemption.PlannerConfig) -> Planner:
    return lambda snapshot, pods, n: cost_aware.plan(snapshot, pods, cfg)


def _kueue(snapshot: Snapshot, pods: list[Pod], n: int) -> Plan:
    return kueue_classical.plan(snapshot, pods)


def _ours_under_kueue(snapshot: Snapshot, pods: list[Pod], n: int) -> Plan:
    """Kueue's order with the priority-boost our controller writes (``policies.kueue.boost``),
    the priorities in use being those of the snapshot's pods; the boost's dead band is not
    modelled (no annotation is kept between plans: each is the bucket of its unsaved work)."""
    in_use = {p.priority for p in snapshot.pods}

    def boost(workload: Sequence[Pod], snap: Snapshot) -> float:
        priority = max(p.priority for p in workload)
        return kueue_boost.decide(
            kueue_boost.Workload(namespace="sim", name=workload[0].workload, priority=priority),
            workload, now=snap.now, priorities_in_use=in_use,
            unknown_age=snap.unknown_checkpoint_age).boost

    return kueue_classical.plan(snapshot, pods, boost=boost, policy=OURS_UNDER_KUEUE)


DRAIN_POLICY = f"{preemption.POLICY}-drain"
GREEDY_POLICY = "greedy-checkpoint"
GREEDY_SEARCH_BUDGET = 1  # branch-and-bound steps per node: the cover is min_cover's greedy
BASELINES = (kube_default.POLICY, kube_workload.POLICY, cost_aware.POLICY, GREEDY_POLICY)
POLICIES = (*BASELINES, preemption.POLICY, DRAIN_POLICY)
TIMING_POLICY = f"{DRAIN_POLICY}-timing"
WAIT_THEN_EVICT = "wait-then-evict"
WAIT_THEN_EVICT_SECONDS = 900.0  # the baseline's longest wait for victims to end (15 min)
TIMING_BASELINES = (*BASELINES, WAIT_THEN_EVICT)
GANG_UNAWARE = (kube_default.POLICY, WAIT_THEN_EVICT)  # may break gangs: kube-default's choice
KNOWN = (*POLICIES, WAIT_THEN_EVICT, TIMING_POLICY)
# what the reports run by default (simulate, bench/evidence.py): the baselines, timing's own
# baseline, and ours without drain, with drain, and as the controller ships it (timing on)
REPORTED = KNOWN
SHIPPED = TIMING_POLICY  # planTiming is on by default in the controller's config
# Kueue's rows (bench/kueue_rows.py), selectable by name but in no default report
KUEUE_POLICY = kueue_classical.POLICY
OURS_UNDER_KUEUE = "ours-under-kueue"
# row -> (the policy it replays, SimConfig.sigterm_save): victims save on SIGTERM
WORLD_ROWS = {
    f"{kube_default.POLICY}+sigterm": (kube_default.POLICY, sigterm.DEFAULT_GRACE),
    f"{kube_default.POLICY}+sigterm-sized": (kube_default.POLICY, sigterm.SIZED_GRACE),
    f"{KUEUE_POLICY}+sigterm-sized": (KUEUE_POLICY, sigterm.SIZED_GRACE),
    OURS_UNDER_KUEUE: (OURS_UNDER_KUEUE, sigterm.SIZED_GRACE),
}
KUEUE_ROWS = (KUEUE_POLICY, *WORLD_ROWS)
# ours: the planner's rows, and the controller's boost under Kueue; every other row is a baseline
OURS = (preemption.POLICY, DRAIN_POLICY, TIMING_POLICY, OURS_UNDER_KUEUE)
SELECTABLE = (*KNOWN, *KUEUE_ROWS)
# policies whose ties are broken by a seed drawn from the plan counter (``n`` above), and the
# rows that replay kube-default
SEEDED_BY_PLAN_COUNT = (kube_default.POLICY, kube_workload.POLICY, WAIT_THEN_EVICT,
                        *(r for r, (p, _) in WORLD_ROWS.items() if p == kube_default.POLICY))


def row(name: str) -> tuple[str, str | None]:
    """(the policy row ``name`` replays, the SimConfig.sigterm_save it sets; None: the
    config's own)."""
    return WORLD_ROWS.get(name, (name, None))


def named(text: str) -> tuple[str, ...]:
    """Comma-separated policy names (blanks dropped), each of ``SELECTABLE``; ValueError saying
    which are not, in one line."""
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    if unknown := [p for p in names if p not in SELECTABLE]:
        raise ValueError(f"unknown policy {', '.join(unknown)}; known: {', '.join(SELECTABLE)}")
    if not names:
        raise ValueError(f"no policy named; known: {', '.join(SELECTABLE)}")
    return names


def planner_for(name: str, max_checkpoint_seconds: float,
                fairness_penalty_seconds: float = preemption.FAIRNESS_PENALTY_SECONDS,
                restart_seconds: float = 0.0, *, shrink: bool = True,
                restart_workload_gpu_seconds: float = 0.0, joint_gangs: bool = True,
                end_aware: bool = True, report_parity: bool = True) -> Planner:
    """The named policy. ``restart_seconds`` is what our search (cost-aware, greedy-checkpoint
    and both checkpoint-aware policies) charges per evicted GPU for the restart, as the
    controller's ``restartCostSeconds`` does, and ``restart_workload_gpu_seconds`` once per
    evicted workload whatever its size (``restartCostGpuSecondsPerWorkload``); the
    kube-scheduler baselines know nothing of either. ``shrink``: whether our search may shrink
    elastic gangs (``policies.planner.shrink``); ``joint_gangs``: whether it also plans a gang
    preemptor whole (``policies.planner.gang_joint``) or member by member only; ``end_aware``:
    whether the timing policy chooses victims knowing their declared ends
    (``policies.planner.timing.end_rate``); ``report_parity``: whether a search that reads
    checkpoints holds back reporters preempted as often as a silent alternative
    (``policies.planner.parity``). A row of ``WORLD_ROWS`` gets the planner of the policy it
    replays."""
    name = row(name)[0]
    if name == kube_default.POLICY:
        return _kube
    if name == kube_workload.POLICY:
        return _kube_workload
    if name == KUEUE_POLICY:
        return _kueue
    if name == OURS_UNDER_KUEUE:
        return _ours_under_kueue
    # our search's knobs, shared by every policy built on it; drain and timing set per policy
    cfg = preemption.PlannerConfig(
        drain=False, timing=False, max_checkpoint_seconds=max_checkpoint_seconds,
        record_rejections=False, fairness_penalty_seconds=fairness_penalty_seconds,
        restart_seconds=restart_seconds,
        restart_workload_gpu_seconds=restart_workload_gpu_seconds, shrink=shrink,
        joint_gangs=joint_gangs, end_aware=end_aware, report_parity=report_parity,
    )
    if name == cost_aware.POLICY:
        return _cost_aware(cfg)
    if name == GREEDY_POLICY:
        return _greedy(replace(cfg, drain=True))
    if name == preemption.POLICY:
        return _aware(cfg)
    if name == DRAIN_POLICY:
        return _aware(replace(cfg, drain=True))
    if name == TIMING_POLICY:
        return _aware(replace(cfg, drain=True, timing=True))
    if name == WAIT_THEN_EVICT:
        return _wait_then_evict
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(SELECTABLE)}")
