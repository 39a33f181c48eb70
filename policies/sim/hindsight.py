"""The floor: the least loss any policy could reach on a small instance, found in hindsight.

``floor`` runs the simulator (``policies.sim.engine``) as a search. At every preemption decision
the hindsight oracle may pick any of these options, and it is charged exactly as the engine
charges every policy (lost work + restarts + the preemptor's extra wait):

1. the plan each policy of the simulator's registry (``planners.KNOWN``) would make there, on the
   same snapshot with the same plan number; "no plan" when one of them would make none;
2. for a one-pod preemptor, every node with every inclusion-minimal set of up to four victim
   jobs whose eviction lets it fit (a gang victim whole); and for every victim set of 1 or 2
   jobs (registry plans without elastic shrinks included): every subset of its on-request
   victims drained, and every eviction time in hindsight: now (after the grace period), or just
   after a victim's next true checkpoint or at its true end, when that falls within the drain
   cap (``SimConfig.max_checkpoint_seconds``). It knows every future checkpoint, end and arrival
   because each option is scored by simulating the rest of the instance.

The search is exact over that option space: a depth-first branch and bound whose incumbent
starts at the best registry policy's loss and whose bound at a decision is the loss already
charged (charges only grow). A path that always picks policy P's plan replays P's own run
exactly, so the floor is never above any registry policy's loss (a property test checks it on
every policy). There is no state memoisation: two histories rarely reach the same engine state,
and options with the same effect are merged before branching instead.

Not in the option space, and why: victim sets that are not inclusion-minimal (unless a registry
policy picks one), placing a one-pod preemptor on a node other than its victims', and
declining to preempt when every registry policy would plan (the engine does not charge a
preemptor's wait in the queue, so "never preempt" would make every floor 0); elastic shrinks
only as the registry plans them. So this is the floor of a rich policy class, not of every
conceivable schedule.

The search re-simulates from the start for each option (the engine's loop is not resumable
mid-event); an instance that needs more than ``max_simulations`` runs raises ``HindsightLimit``.
Pure: no clock, no randomness beyond the engine's seeded draws.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from ckpt_preempt.policies.model.model import (
    ZERO,
    CheckpointMode,
    Placement,
    Plan,
    Pod,
    Resources,
    Timing,
    Victim,
    VictimGroup,
    VictimWait,
    When,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.sim import waits
from ckpt_preempt.policies.sim.engine import PolicyResult, SimConfig, Simulation
from ckpt_preempt.policies.sim.planners import KNOWN, planner_for
from ckpt_preempt.policies.sim.trace import TraceNode
from ckpt_preempt.policies.sim.workload import Workload

POLICY = "hindsight"
MAX_SIMULATIONS = 5_000  # runs one search may make before it gives up (HindsightLimit)
MAX_VICTIM_SET_JOBS = 4  # the largest victim set enumerated per node (registry plans: any)
MAX_TIMED_VICTIM_JOBS = 2  # drain subsets and eviction times for victim sets up to this size
# Evict this long after a victim's true checkpoint completes, so that the engine's floor division
# in JobState.last_checkpoint counts it whatever the float rounding (a millisecond, not a wait).
AFTER_CHECKPOINT_SECONDS = 1e-3
EPS = 1e-9  # GPU-seconds: losses closer than this are equal


class HindsightLimit(RuntimeError):
    """The instance needs more simulations than the search may make."""


@dataclass(frozen=True, kw_only=True)
class HindsightResult:
    floor_gpu_hours: float  # the least total loss reachable (exact when returned)
    policy_gpu_hours: dict[str, float]  # each registry policy's own loss on the instance
    decisions: int  # preemption decisions on the floor's path
    simulations: int  # engine runs the search made
    choices: tuple[str, ...]  # what the floor's path chose at each scripted decision
    script: tuple[int, ...]  # the option picked at each decision with more than one (replay)
    # "search" when the search found the floor's path, else the registry policy whose own run
    # it could not beat (its script is then not recorded)
    found_by: str = "search"


class _Branch(Exception):
    """Raised out of a scripted run at its first decision past the script."""

    def __init__(self, charged: float, key: tuple[int, ...]) -> None:
        super().__init__()
        self.charged = charged
        self.key = key  # the decision's place in the options cache


class _Invalid(Exception):
    """A scripted option turned out not to fit (the engine counted the plan invalid)."""


@dataclass(frozen=True, kw_only=True)
class _Option:
    label: str
    plan: Plan | None  # None: make no plan now (the preemptor retries later)


class _Scripted(Simulation):
    """The engine, with each preemption decision taken from a script of option indices."""

    def __init__(self, workload: Workload, nodes: list[TraceNode], config: SimConfig,
                 script: tuple[int, ...], options: dict[tuple[int, ...], list[_Option]]
                 ) -> None:
        super().__init__(workload, nodes, KNOWN[0], config)
        self.script = script
        # shared cache: the options at each decision, keyed by every pick before it (a decision
        # with one option counts as pick 0)
        self.options = options
        self.path: list[int] = []
        self.taken = 0  # script entries used
        self.labels: list[str] = []  # what each scripted decision chose
        self.planners = {name: planner_for(
            name, config.max_checkpoint_seconds, config.fairness_penalty_seconds,
            config.planner_restart[0], restart_workload_gpu_seconds=config.planner_restart[1],
            shrink=config.shrink) for name in KNOWN}

    def _preempt(self, js) -> bool:  # PlannerView's, with the choice scripted
        pre = [self._model(js, k, None, self.t) for k in range(len(js.job.members))]
        snap = self._snapshot(pre, js.job)
        self.counts["plans"] += 1
        key = tuple(self.path)
        if key not in self.options:
            self.options[key] = self._choices(js, snap, pre)
        options = self.options[key]
        if len(options) == 1:
            self.path.append(0)
        elif self.taken < len(self.script):
            self.path.append(self.script[self.taken])
            self.taken += 1
            self.labels.append(options[self.path[-1]].label)
        else:
            raise _Branch(self.ledger.total, key)
        pick = options[self.path[-1]]
        if pick.plan is None:
            self.counts["failed"] += 1
            return False
        invalid = self.counts["invalid"]
        self._execute(js, pick.plan, snap)
        if self.counts["invalid"] > invalid and pick.plan.policy == POLICY:
            raise _Invalid
        return True

    # -- the options at one decision -----------------------------------------------------
    def _choices(self, js, snap: Snapshot, pre: list[Pod]) -> list[_Option]:
        out: dict[tuple, _Option] = {}
        bases: list[Plan] = []
        for name in KNOWN:
            plan = self.planners[name](snap, pre, self.counts["plans"])
            if not plan.feasible or not plan.victim_groups:
                out.setdefault(("none",), _Option(label="no plan", plan=None))
                continue
            out.setdefault(_effect(plan), _Option(label=name, plan=plan))
            if not any(g.shrink for g in plan.victim_groups):
                bases.append(plan)
        if len(pre) == 1:
            bases.extend(self._minimal_plans(snap, pre[0]))
        for base in bases:
            for plan in self._variants(base):
                out.setdefault(_effect(plan), _Option(label=_describe(plan, self.t), plan=plan))
        return list(out.values())

    def _minimal_plans(self, snap: Snapshot, pod: Pod) -> list[Plan]:
        """Per node, every inclusion-minimal set of victim jobs that makes room for ``pod``."""
        plans = []
        for node in snap.nodes:
            if node.closed is not None:
                continue
            on = [p for p in snap.pods if p.node == node.name]
            used = sum((p.requests for p in on), ZERO)
            jobs: dict[int, Resources] = {}
            for p in on:
                if p.preemptible and p.held is None and p.priority < pod.priority:
                    job = _job_of(p.uid)
                    jobs[job] = jobs.get(job, ZERO) + p.requests
            found: list[frozenset[int]] = []
            for size in range(min(len(jobs), MAX_VICTIM_SET_JOBS) + 1):
                for combo in itertools.combinations(sorted(jobs), size):
                    chosen = frozenset(combo)
                    if any(f <= chosen for f in found):
                        continue
                    freed = sum((jobs[j] for j in combo), ZERO)
                    if pod.requests.fits_in(node.allocatable - (used - freed)):
                        found.append(chosen)
            for chosen in found:
                if chosen:
                    plans.append(self._plan(pod, node.name, chosen))
        return plans

    def _plan(self, pod: Pod, node: str, jobs: frozenset[int]) -> Plan:
        groups = []
        for j in sorted(jobs):
            vs = self.running[j]
            victims = tuple(Victim(
                uid=p.uid, name=p.name, namespace="sim", node=self.nodes[i].name, gpus=p.gpus,
                priority=p.priority, lost_gpu_seconds=0.0, drain=False,
                checkpoint_seconds=vs.job.checkpoint_seconds, workload=p.workload)
                for p, i in vs.pods)
            gang = vs.models[0].gang if vs.models else None
            groups.append(VictimGroup(gang=gang, victims=victims, lost_gpu_seconds=0.0,
                                      reason=POLICY))
        return Plan(policy=POLICY, preemptor=(pod.uid,), feasible=True, reason=POLICY,
                    placements=(Placement(pod_uid=pod.uid, node=node),),
                    victim_groups=tuple(groups))

    def _variants(self, base: Plan) -> list[Plan]:
        """``base``'s victims with each subset of the on-request ones drained, evicted now or
        just after each victim's next true checkpoint or at its true end within the cap."""
        jobs = sorted({_job_of(v.uid) for v in base.victims})
        if len(jobs) > MAX_TIMED_VICTIM_JOBS:
            return []
        t, cap = self.t, self.cfg.max_checkpoint_seconds
        states = [self.running[j] for j in jobs]
        drainable = [vs.job.id for vs in states
                     if vs.job.checkpoint is CheckpointMode.ON_REQUEST]
        times = {None}
        for vs in states:
            nxt = waits.next_checkpoint(vs, t)
            if nxt is not None and nxt[1] + AFTER_CHECKPOINT_SECONDS <= t + cap:
                times.add(nxt[1] + AFTER_CHECKPOINT_SECONDS)
            if waits.job_end(vs) <= t + cap:
                times.add(max(t, waits.job_end(vs)))
        out = []
        for n in range(len(drainable) + 1):
            for drained in itertools.combinations(drainable, n):
                for at in sorted(times, key=lambda x: -1.0 if x is None else x):
                    out.append(self._timed(base, frozenset(drained), at))
        return out

    def _timed(self, base: Plan, drained: frozenset[int], at: float | None) -> Plan:
        groups = tuple(replace(g, victims=tuple(
            replace(v, drain=_job_of(v.uid) in drained) for v in g.victims))
            for g in base.victim_groups)
        timing = None if at is None else Timing(
            when=When.AFTER_CHECKPOINT, deadline=at, reason=POLICY,
            waits=tuple(VictimWait(uid=v.uid, when=When.AFTER_CHECKPOINT, expected=at)
                        for g in groups for v in g.victims))
        return replace(base, policy=POLICY, victim_groups=groups, timing=timing)


def _job_of(uid: str) -> int:
    return int(uid.split("-")[0])


def _effect(plan: Plan) -> tuple:
    """What the engine does with a plan: who goes, drained or not, where the preemptor goes,
    and until when the plan waits."""
    return (
        tuple(sorted((p.pod_uid, p.node) for p in plan.placements)),
        tuple(sorted((v.uid, v.drain, v.checkpoint_seconds or 0.0) for v in plan.victims)),
        tuple(g.shrink for g in plan.victim_groups),
        None if plan.timing is None or not plan.timing.waits else (
            plan.timing.deadline, tuple(sorted(w.uid for w in plan.timing.waits))),
    )


def _describe(plan: Plan, now: float) -> str:
    jobs = sorted({_job_of(v.uid) for v in plan.victims})
    drained = sorted({_job_of(v.uid) for v in plan.victims if v.drain})
    when = "now" if plan.timing is None else f"+{plan.timing.deadline - now:.0f}s"
    return f"evict jobs {jobs} (drain {drained}) {when} -> {plan.target_nodes}"


def policy_losses(workload: Workload, nodes: list[TraceNode], config: SimConfig
                  ) -> dict[str, float]:
    """Each registry policy's total loss (GPU-hours) on the instance."""
    return {name: Simulation(workload, nodes, name, config).run().lost_gpu_hours
            for name in KNOWN}


def floor(workload: Workload, nodes: list[TraceNode], config: SimConfig = SimConfig(), *,
          max_simulations: int = MAX_SIMULATIONS, start_from_policies: bool = True
          ) -> HindsightResult:
    """The least total loss (GPU-hours) reachable on the instance; see the module docstring.

    ``start_from_policies``: start the branch and bound from the best registry policy's loss
    (faster); False starts it from infinity, so that the search alone must find each policy's
    path (what the property tests check)."""
    losses = policy_losses(workload, nodes, config)
    start = min(losses.values()) * 3600 if start_from_policies else float("inf")
    best: list = [start, (), ()]  # GPU-seconds, script, labels
    options: dict[tuple[int, ...], list[_Option]] = {}
    runs = [0]

    def run(script: tuple[int, ...]) -> tuple[float, tuple[int, ...] | None]:
        """The loss charged when the run stopped, and the decision it stopped at (None: it
        ran to the end)."""
        runs[0] += 1
        if runs[0] > max_simulations:
            raise HindsightLimit(f"more than {max_simulations} simulations")
        sim = _Scripted(workload, nodes, config, script, options)
        try:
            total = sim.run().lost_gpu_hours * 3600
        except _Branch as b:
            return b.charged, b.key
        except _Invalid:
            return float("inf"), None
        if total < best[0] - EPS:
            best[:] = [total, script, tuple(sim.labels)]
        return total, None

    def explore(script: tuple[int, ...], key: tuple[int, ...]) -> None:
        children = []
        for i in range(len(options[key])):
            charged, stop = run((*script, i))
            if stop is not None:
                children.append((charged, i, stop))
        for charged, i, stop in sorted(children):
            if charged < best[0] - EPS:  # charges only grow: this subtree cannot beat best
                explore((*script, i), stop)

    charged, stop = run(())
    if stop is not None and charged < best[0] - EPS:
        explore((), stop)
    found_by = "search" if best[0] < start else min(losses, key=lambda k: losses[k])
    return HindsightResult(floor_gpu_hours=best[0] / 3600, policy_gpu_hours=losses,
                           decisions=len(best[1]), simulations=runs[0], choices=best[2],
                           script=best[1], found_by=found_by)


def replay(workload: Workload, nodes: list[TraceNode], config: SimConfig,
           script: tuple[int, ...]) -> PolicyResult:
    """The engine's result for the path ``script`` picks (``HindsightResult.script``)."""
    try:
        return _Scripted(workload, nodes, config, script, {}).run()
    except _Branch as b:
        raise ValueError(f"the script ends before the run does ({len(script)} picks)") from b
