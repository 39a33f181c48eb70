"""The event loop: one policy, one workload, from the first arrival to the last preemptor.

Jobs arrive, wait, run and finish; high-priority jobs that do not fit ask the policy for a
plan. Victims stop after the kill grace period (``grace_seconds``) or, when drained, after the
drain deadline; the preemptor starts on the planned node at that moment (its capacity is
reserved, as kube-scheduler's nominated node would be). Lost work is charged from the trace's
ground truth at the moment each victim stops: drained victims lose their checkpoint time;
others lose everything since their last periodic checkpoint. A victim of a kube-default plan
that belongs to a gang breaks it: every member stops and loses its unsaved work.

Jobs that checkpoint report it (their pods carry ``last-checkpoint``) unless the generator made
them silent; jobs that never checkpoint report nothing, and the planner charges both as the
unknown-checkpoint policy says. Each job is one workload for the fairness guard: the planner
sees how often it was preempted within the window (and within the starvation bound's longer
window, ``policies.planner.bound``: a job preempted as often as the bound allows is held from every
policy), and the result reports how often each job was preempted over the whole run (the most,
and the 99th percentile over the jobs preempted at all). What the planner is shown, and the
call to it, are built in ``policies/sim/planner_view.py`` (the ``PlannerView`` mixin).

What is charged (``policies.sim.costs.Ledger``), per plan made after ``Workload.warmup``:
(1) each victim's unsaved work, counted only where it was done after the warm-up, inside the
measured window (work done earlier, by a job already running when the replay began or during
the warm-up, is reported apart as ``prior_work_gpu_hours`` and charged only with
``charge_prior_work``); (2) its restart: ``restore_job_gpu_seconds`` once per evicted job plus
its restore time (``restore_seconds``, or the job's own) on each of its GPUs, the job finishing
that much later; (3) the preemptor's extra wait for a drain (below). ``lost_gpu_hours`` is
their sum; each part is reported. A fractional pod (a share of one GPU) is charged at its share.

Costs beyond unsaved work (``policies.sim.costs`` gives each default and what it rests on):
the planner sees checkpoint times as the annotations would say them, published
``report_lag_seconds`` late with a seeded error of up to ``report_jitter_seconds`` (never in
the future), while the charge stays the ground truth; a
seeded share of drains fails or overruns, and the controller then evicts at the plan's
checkpoint deadline (the largest drained estimate, at most ``max_checkpoint_seconds``), the
victim losing everything since its last periodic checkpoint. The extra wait a drain imposes on
the preemptor, over a plain kill after ``grace_seconds``, is reported as ``delay_gpu_hours``.
A plan that waits for victims' checkpoints or ends (``Plan.timing``, ``policies.planner.timing``)
holds the preemptor's reservation until they are seen or its deadline (``policies/sim/waits.py``);
its victims that ended meanwhile are not evicted, the rest are charged at that moment, and the
whole wait over the grace period is delay.

Save on SIGTERM (``SimConfig.sigterm_save``, ``policies/sim/sigterm.py``; off by default, and
then nothing below changes): a victim stopped without a checkpoint request whose job saves on
SIGTERM within its grace period loses its checkpoint time instead of its unsaved work and stops
when the save ends (or, if the save fails, at its grace's end with its work since its last
checkpoint lost); the preemptor starts once the last such victim is gone, and its wait beyond the
grace period is delay. A row of ``planners.WORLD_ROWS`` sets it for the policy it replays.

Jobs that ran before the replay began (``Job.done_before``) start at ``-done_before``, so their
periodic checkpoints fall where they would have. Losses, evictions and waits of plans made (or
jobs arriving) before ``Workload.warmup`` are not counted; they still happen.

The run ends once the arrival window is over and no high-priority job is still pending;
utilisation is measured from the warm-up to the end of the arrival window, where the load
applies.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.model import CheckpointMode, Node, Plan, Pod, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import bound, preemption
from ckpt_preempt.policies.planner.shrink import RENDEZVOUS_SECONDS
from ckpt_preempt.policies.sim import sigterm, waits
from ckpt_preempt.policies.sim.checkpoint_schedule import Schedule, schedule_for
from ckpt_preempt.policies.sim.costs import (
    Ledger,
    drain_outcome,
    restart_gpu_seconds,
    restore_factor,
    split_at,
)
from ckpt_preempt.policies.sim.devices import (
    Capacity,
    fractional_demand_share,
    largest_whole_request,
    requests,
    shared_split,
    whole_gpus,
)
from ckpt_preempt.policies.sim.elastic import ElasticJobs
from ckpt_preempt.policies.sim.planner_view import PlannerView
from ckpt_preempt.policies.sim.planners import GANG_UNAWARE, planner_for, row
from ckpt_preempt.policies.sim.trace import TraceNode
from ckpt_preempt.policies.sim.workload import Job, Workload


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """The replay's knobs; the last three are the controller config's defaults."""

    grace_seconds: float = 30.0  # default terminationGracePeriodSeconds
    max_checkpoint_seconds: float = 600.0  # the controller's drain cap
    retry_seconds: float = 60.0  # an unplaceable preemptor re-plans at most this often
    unknown_checkpoint: str = str(ann.UNKNOWN_CHECKPOINT)  # start-time, cluster-median, assume:
    fairness_window_seconds: float = preemption.FAIRNESS_WINDOW_SECONDS
    fairness_penalty_seconds: float = preemption.FAIRNESS_PENALTY_SECONDS  # 0: guard off
    # costs beyond unsaved work; defaults and what they rest on: policies.sim.costs
    restore_seconds: float = 300.0  # per evicted job (Job.restore_seconds overrides), all GPUs
    restore_job_gpu_seconds: float = 300.0  # once per evicted job, whatever its size
    charge_prior_work: bool = False  # charge unsaved work done before the measured window
    report_lag_seconds: float = 30.0  # a checkpoint is published this long after it completes
    report_jitter_seconds: float = 30.0  # seeded error of a published time, uniform in +/-
    drain_failure_share: float = 0.02  # of drain requests: end with no checkpoint
    drain_overrun_share: float = 0.05  # of drain requests: checkpoint takes longer than estimated
    drain_overrun_factor: float = 2.0  # an overrun checkpoint takes this many times its estimate
    # what our search charges per evicted GPU for a restart (the controller's
    # restartCostSeconds): None = the operator set both restart knobs from the restore cost
    # (restore_seconds per GPU, restore_job_gpu_seconds per workload as
    # restartCostGpuSecondsPerWorkload); a number = that per GPU and nothing per workload (0:
    # blind to restarts)
    planner_restart_seconds: float | None = None
    shrink: bool = True  # our planner may shrink elastic jobs (policies.sim.elastic)
    # our planners plan a gang preemptor whole too (policies.planner.gang_joint); False: member
    # by member only
    joint_gangs: bool = True
    # timing chooses victims knowing their declared ends (PlannerConfig.end_aware); False: the
    # ablation
    end_aware: bool = True
    # reporters held back while a silent job was preempted no more often
    # (PlannerConfig.report_parity, policies.planner.parity); False: the ablation
    report_parity: bool = True
    rendezvous_seconds: float = RENDEZVOUS_SECONDS
    # when to preempt (policies.planner.timing): this seeded share of the jobs declares its end
    # (expected-end), each declaration off by a seeded error, uniform within +/- this share of
    # the run it predicts (early or late). Assumption, and an optimistic one: by default every
    # job declares its end exactly; real jobs know it only roughly, if at all (bench/evidence.py
    # ablates both, policies/sim/planner_view.py draws them)
    declared_end_share: float = 1.0
    declared_end_error: float = 0.0
    # ends estimated from progress, as the checkpoint agent declares them for a loop that reports
    # it (controller/agent/progress.py): the error is that share of the time left at each plan
    # (a misjudged rate), not of the whole run, and an end is declared again only once it moved
    # by the agent's threshold (annotations.END_REDECLARE_*). Assumption: one rate error per run
    declared_end_from_progress: bool = False
    # policies.planner.bound, for every policy: no job preempted more than this often per window (0:
    # no bound); ``escalating_penalty``: the planner also sees each job's preemptions in that
    # window, its fairness penalty doubling with each (False: the 1-hour count only)
    max_preemptions_per_window: int = bound.MAX_PREEMPTIONS_PER_WINDOW
    preemption_bound_window_seconds: float = bound.PREEMPTION_BOUND_WINDOW_SECONDS
    escalating_penalty: bool = True
    # a preemptor whose victims were all at the bound is planned again when the first leaves
    # it (``Simulation._wake``), as the controller's retry would find it, rather than at the
    # next arrival or end, days later in a quiet world (False: the old engine, which the
    # evidence report before 2026-12-06 used; it moved the replay cells: openb/replay seed 1,
    # ours with drain 129.3 -> 85.6 GPU-h, kube-default 145.3 -> 129.6)
    replan_at_bound_release: bool = True
    # lying reports (what the planner is shown: policies/sim/planner_view.py): this seeded share
    # of the jobs that publish checkpoints claims one up to lie_minutes more recent than the
    # real one; the charge stays the truth. Assumptions: nobody lies by default, and 60 min is a
    # guess under the openb generator's mean interval (71 min); bench/harsh_world.py sweeps it
    lie_share: float = 0.0
    lie_minutes: float = 60.0
    # save on SIGTERM (policies.sim.sigterm): "" off (every row that existed before it),
    # "default" (every pod's grace is grace_seconds) or "sized" (the grace webhook's: checkpoint
    # time, at most max_checkpoint_seconds, plus sigterm.MARGIN_SECONDS)
    sigterm_save: str = sigterm.OFF
    # periodic checkpoints as they really happen (policies/sim/checkpoint_schedule.py); the
    # planner is shown the declared interval. Off by default (exact, instant, never failing)
    checkpoint_drift: float = 0.0  # each job's real interval: declared x (1 +- up to this)
    periodic_save_seconds: bool = False  # a checkpoint is durable its checkpoint time later
    checkpoint_failure_share: float = 0.0  # of periodic checkpoints: fail, the previous kept
    # each job's restore time is restore_seconds x a seeded factor in [1/spread, spread]
    # (log-uniform); our planner still charges restore_seconds (1: every job the same)
    restore_spread: float = 1.0

    @property
    def planner_restart(self) -> tuple[float, float]:
        """(per GPU seconds, per workload GPU-seconds) our search charges for a restart."""
        if self.planner_restart_seconds is None:
            return self.restore_seconds, self.restore_job_gpu_seconds
        return self.planner_restart_seconds, 0.0

    def without_costs(self) -> SimConfig:
        """The same knobs with every cost beyond unsaved work off (no restore time, exact and
        instant reports, drains that always finish on time)."""
        return replace(self, restore_seconds=0.0, restore_job_gpu_seconds=0.0,
                       report_lag_seconds=0.0,
                       report_jitter_seconds=0.0, drain_failure_share=0.0,
                       drain_overrun_share=0.0, lie_share=0.0)


@dataclass(frozen=True, kw_only=True)
class PolicyResult:
    policy: str
    lost_gpu_hours: float
    preemptions: int
    victims: int
    gangs_broken: int
    preemptor_wait_p50_s: float
    preemptor_wait_p95_s: float
    high_jobs_waiting: int
    gpu_utilisation: float
    plans: int
    plans_failed: int
    plans_invalid: int
    plan_latency_p50_ms: float
    plan_latency_p99_ms: float
    max_preemptions_per_workload: int  # the most times any one job was preempted
    workloads_preempted: int  # jobs preempted at least once
    preemptions_per_workload: Mapping[int, int]  # times preempted -> jobs preempted that often
    victim_jobs_unreported: int  # preempted jobs (counted per preemption) reporting no checkpoint
    # lost_gpu_hours = lost_work_gpu_hours + restart_gpu_hours + delay_gpu_hours (the total a
    # policy is charged)
    lost_work_gpu_hours: float = 0.0  # unsaved work (and drain checkpoint time) charged
    restart_gpu_hours: float = 0.0  # GPUs idle while evicted jobs restart and restore
    delay_gpu_hours: float = 0.0  # preemptor GPUs x extra wait a drain imposes over a plain kill
    prior_work_gpu_hours: float = 0.0  # unsaved work lost that was done before the window
    lost_gpu_hours_with_prior: float = 0.0  # the total, counting prior work as well
    eviction_losses: tuple[float, ...] = field(default=(), repr=False)  # GPU-h per victim job
    drains_failed: int = 0  # drain requests that ended without a checkpoint
    drains_overrun: int = 0  # drains whose checkpoint took longer than estimated
    # finish - arrival of low-priority jobs that arrived after the warm-up and finished in the
    # run (jobs still running at its end are not counted)
    low_completion_p50_s: float = 0.0
    low_jobs_completed: int = 0
    lost_series: tuple[tuple[float, float], ...] = field(repr=False)  # (time s, cum. GPU-h)
    shrinks: int = 0  # elastic jobs that gave up members and ran on (policies.sim.elastic)
    grown_back: int = 0  # shrunken jobs that took their members back
    # the 99th percentile of preemptions per job, over the jobs preempted at least once
    p99_preemptions_per_workload: float = 0.0


class JobState:
    __slots__ = ("job", "keys", "models", "origin", "pods", "queued_at", "remaining", "report",
                 "restore", "retry_at", "schedule", "speed", "start", "started", "token")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.keys = tuple(f"{job.id}-{k}" for k in range(len(job.members)))  # its pods' names
        # seconds of work from ``origin`` to the finish (a pre-filled job's origin is in the past)
        self.remaining = job.duration + job.done_before
        self.queued_at = job.arrival
        self.start = 0.0  # when its pods started (negative for jobs that ran before the replay)
        self.origin = 0.0  # when it (re)started training: start plus the restore after eviction
        self.restore = 0.0  # seconds its next start spends restoring before it trains
        self.started = False
        self.token = 0
        self.retry_at = 0.0
        self.pods: list[tuple[Pod, int]] = []  # (model pod, node index) while running
        self.models: tuple[Pod, ...] = ()  # the same pods, last checkpoint kept current
        self.report: tuple[float, float] | None = None  # (true checkpoint, published time)
        self.speed = 1.0  # share of its members running (policies.sim.elastic)
        # its real periodic checkpoints (policies/sim/checkpoint_schedule.py): by default the
        # declared interval, exact; the engine puts in the world's
        self.schedule = None if job.interval is None else Schedule(interval=job.interval)

    def last_checkpoint(self, t: float) -> float:
        """The step time of the last periodic checkpoint durable by ``t`` (its training
        origin before the first one)."""
        s, o = self.schedule, self.origin
        if s is None or t <= o:
            return o
        if s.exact:
            return o + ((t - o) // s.interval) * s.interval
        return s.last(o, t)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


class Simulation(PlannerView, ElasticJobs):
    def __init__(
        self, workload: Workload, nodes: list[TraceNode], policy: str,
        config: SimConfig = SimConfig(), clock: Callable[[], float] | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        self.w = workload
        world = row(policy)[1]  # a row that saves on SIGTERM (planners.WORLD_ROWS)
        if world is not None and world != config.sigterm_save:
            config = replace(config, sigterm_save=world)
        if config.sigterm_save not in sigterm.WORLDS:
            raise ValueError(f"unknown sigterm_save {config.sigterm_save!r}; choose from "
                             f"{', '.join(map(repr, sigterm.WORLDS))}")
        self.cfg = config
        self.policy = policy
        self.plan_fn = planner_for(policy, config.max_checkpoint_seconds,
                                   config.fairness_penalty_seconds,
                                   config.planner_restart[0],
                                   restart_workload_gpu_seconds=config.planner_restart[1],
                                   shrink=config.shrink, joint_gangs=config.joint_gangs,
                                   end_aware=config.end_aware,
                                   report_parity=config.report_parity)
        self.unknown = ann.parse_unknown_checkpoint(config.unknown_checkpoint)
        self.clock = clock
        self.progress = progress
        self.nodes = tuple(
            Node(name=n.name, allocatable=Resources(
                cpu_milli=n.cpu_milli, memory_mib=n.memory_mib, gpus=n.gpus))
            for n in nodes
        )
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.cap = Capacity(self.nodes, [n.model for n in nodes], shared_split(
            [n.gpus for n in nodes], fractional_demand_share(workload.jobs),
            largest_whole_request(workload.jobs)))
        self.events: list = []
        self.seq = 0
        self.running: dict[int, JobState] = {}
        self._init_view()  # capacity held per node by each priority (PlannerView)
        self.high: list[JobState] = []
        self.low: dict[tuple[int, int], list] = {}
        self.t = 0.0
        self.busy = 0.0
        self.ledger = Ledger(workload.warmup, charge_prior=config.charge_prior_work)
        self.seed = workload.params.seed
        self.latencies: list[float] = []
        self.waits: list[float] = []
        self.completions: list[float] = []  # finish - arrival of measured low-priority jobs
        self.counts = dict(preemptions=0, victims=0, gangs_broken=0, plans=0, failed=0,
                           invalid=0, waiting=0, unreported=0, drains_failed=0,
                           drains_overrun=0, shrinks=0, grown_back=0, sigterm_saved=0,
                           sigterm_failed=0)
        self.preempted: dict[int, list[float]] = {}  # job id -> when it was preempted
        self.wakes: set[float] = set()  # times a scheduling pass is due without an event
        self.measured_preemptions: Counter[int] = Counter()  # the same, after the warm-up
        # a shrunken job's missing members, one tuple per (job, missing set) (ElasticJobs)
        self.missing_asks: dict[tuple[int, tuple[int, ...]], tuple] = {}

    # -- the event queue -------------------------------------------------------------------
    def _push(self, t: float, kind: str, payload) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def _wake(self, t: float) -> None:  # with SimConfig.replan_at_bound_release
        """A scheduling pass at ``t`` even if nothing arrives or ends then: a preemptor that
        found every victim at the starvation bound is planned again when the first of them
        leaves it (``PlannerView.bound_release``), as the controller would at its next retry,
        instead of at the next arrival or end, which may come days later. Once per time."""
        if t not in self.wakes:
            self.wakes.add(t)
            self._push(t, "wake", None)

    # -- pods ----------------------------------------------------------------------------
    def _start(self, js: JobState, placed: list[int], at: float) -> None:
        js.start = at - (js.job.done_before if not js.started else 0.0)
        js.origin = js.start + js.restore
        js.started = True
        js.speed = 1.0
        js.token += 1
        js.pods = [
            (self._model(js, k, self.nodes[i].name, at), i) for k, i in enumerate(placed)
        ]
        js.models = tuple(pod for pod, _ in js.pods)
        self.running[js.job.id] = js
        for pod, i in js.pods:
            self._hold(i, pod, +1)
        self._push(js.origin + js.remaining, "finish", (js, js.token))

    def _try_place(self, js: JobState) -> list[int] | None:
        return self.cap.place(js.job.members, js.keys)

    def _stop(self, js: JobState, at: float) -> None:
        """Account busy GPU time (after the warm-up, within the window); release capacity."""
        lo, hi = self.w.warmup, self.w.window
        held = max(0.0, min(at, hi) - max(js.start, lo))
        for pod, i in js.pods:
            self.cap.give(i, pod.requests, pod.uid)
            self._hold(i, pod, -1)
            self.busy += pod.gpu_share * held
        js.pods = []
        js.models = ()
        js.token += 1
        self.running.pop(js.job.id, None)

    def _enqueue(self, js: JobState, at: float) -> None:
        js.queued_at = at
        if js.job.high:
            self.high.append(js)
        else:
            key = (max(whole_gpus(m) for m in js.job.members), len(js.job.members))
            heapq.heappush(self.low.setdefault(key, []), (at, js.job.id, js))

    # -- preemption ----------------------------------------------------------------------
    def _execute(self, js: JobState, plan: Plan, snap: Snapshot) -> None:
        t, cfg = self.t, self.cfg
        measured = self.ledger.measured(t)
        drained = {v.uid for v in plan.victims if v.drain}
        # the controller's checkpoint deadline: the largest drained estimate, capped
        deadline = min(cfg.max_checkpoint_seconds, max(
            (v.checkpoint_seconds or 0.0 for v in plan.victims if v.drain), default=0.0))
        hit = sorted({int(v.uid.split("-")[0]) for v in plan.victims})
        leaving = {v.uid for g in plan.victim_groups if g.shrink for v in g.victims}
        timed = waits.timed_wait(plan, [self.running[j] for j in hit], t, cfg, self.seed)
        release = t + max(cfg.grace_seconds, deadline, timed)
        # save on SIGTERM (policies.sim.sigterm): the victims are stopped when the controller
        # evicts; the preemptor starts once the last saving one is gone
        evict_after = max(deadline, timed)
        start, sigterm_wait = release, 0.0
        ended = {job_id for job_id in hit if plan.timing is not None and plan.timing.waits
                 and waits.job_end(self.running[job_id]) <= release}
        self.counts["preemptions"] += measured
        for job_id in hit:
            vs = self.running[job_id]
            if job_id in ended:  # it ended while the plan waited: never evicted (timing)
                self._stop(vs, waits.job_end(vs))
                continue
            times = self.preempted.setdefault(job_id, [])
            nth = len(times)
            times.append(t)
            self.measured_preemptions[job_id] += measured
            self.counts["unreported"] += measured and not self._reports(vs.job)
            evicted = {p.uid for p, _ in vs.pods}
            named = {v.uid for v in plan.victims} & evicted
            if self._shrinks(vs, named, leaving, t, release, measured):
                continue
            if vs.job.is_gang and named != evicted:
                if plan.policy not in GANG_UNAWARE:
                    self.counts["invalid"] += 1  # a gang-aware plan must take the whole gang
                self.counts["gangs_broken"] += measured
            save = None
            if cfg.sigterm_save and not (drained & evicted
                                         and vs.job.checkpoint is CheckpointMode.ON_REQUEST):
                save = sigterm.attempt(
                    vs.job, world=cfg.sigterm_save, whole=named == evicted, seed=self.seed,
                    nth=nth, default_grace=cfg.grace_seconds, cap=cfg.max_checkpoint_seconds,
                    failure_share=cfg.drain_failure_share,
                    overrun_share=cfg.drain_overrun_share,
                    overrun_factor=cfg.drain_overrun_factor)
            if save is not None:
                sigterm_wait = max(sigterm_wait, evict_after + save.seconds)
                start = max(start, t + evict_after + save.seconds)
            self._charge(vs, t, release, bool(drained & evicted), nth, deadline, measured,
                         save, t + evict_after)
            self.counts["victims"] += measured * len(evicted)
        placed = [0] * len(js.job.members)
        by_uid = {p.pod_uid: p.node for p in plan.placements}
        allowed = self.cap.allowed_for(js.job.members)
        for k, m in enumerate(js.job.members):
            i = self.index[by_uid[js.keys[k]]]
            r = requests(m)
            if not self.cap.fits(i, r) or (allowed is not None and i not in allowed):
                self.counts["invalid"] += 1
            self.cap.take(i, r, js.keys[k])
            placed[k] = i
        self.high.remove(js)
        self._waited(js, start)
        # a plain kill would have freed the node after the grace period; from the durations,
        # not from release - t, which need not round back to them exactly
        waited = max(deadline, release - t if plan.timing is not None else 0.0)
        if sigterm_wait > waited:
            waited = sigterm_wait
        self.ledger.delayed(t, js.job.gpu_share * max(0.0, waited - cfg.grace_seconds))
        self._start(js, placed, start)

    def _waited(self, js: JobState, started: float) -> None:
        if js.job.arrival >= self.w.warmup:
            self.waits.append(started - js.job.arrival)

    def _charge(self, vs: JobState, t: float, release: float, drained: bool, nth: int,
                deadline: float, measured: bool, save: sigterm.Save | None = None,
                evicted_at: float = 0.0) -> None:
        """Stop victim job ``vs`` at ``release`` (its plan made at ``t``), charge what it
        loses and requeue it; ``nth``: how often it was preempted before. ``save``: how its
        save on SIGTERM went, the job evicted at ``evicted_at`` (``policies.sim.sigterm``);
        it then stops when that save ends instead."""
        job, cfg = vs.job, self.cfg
        # the GPUs it holds, at their share: fewer than the job's while it is shrunken
        share = sum(job.members[int(p.uid.split("-")[1])].gpu_share for p, _ in vs.pods)
        saved_by_drain = False
        if save is not None:  # saves on SIGTERM, or hangs in a failed save until SIGKILL
            release = evicted_at + save.seconds
            self.counts["sigterm_saved"] += measured and save.saved
            self.counts["sigterm_failed"] += measured and not save.saved
            if save.saved:
                saved_by_drain = True
                saved = max(0.0, evicted_at - vs.origin)
                lost, prior = share * save.seconds, 0.0
        elif drained and job.checkpoint is CheckpointMode.ON_REQUEST:
            out = drain_outcome(
                seed=self.seed, job_id=job.id, nth=nth, estimate=job.checkpoint_seconds or 0.0,
                deadline=deadline, failure_share=cfg.drain_failure_share,
                overrun_share=cfg.drain_overrun_share, overrun_factor=cfg.drain_overrun_factor)
            self.counts["drains_failed"] += measured and out.failed
            self.counts["drains_overrun"] += measured and out.overran
            if out.saved:
                saved_by_drain = True
                saved = max(0.0, t - vs.origin)
                lost, prior = share * out.seconds, 0.0
        if not saved_by_drain:
            last = vs.last_checkpoint(release)
            saved = max(0.0, last - vs.origin)
            inside, before = split_at(max(last, vs.origin), release, self.w.warmup)
            lost, prior = share * inside, share * before
        restore = job.restore_seconds if job.restore_seconds is not None else cfg.restore_seconds
        if cfg.restore_spread > 1.0:  # each job's own restore time, the planner unaware
            restore *= restore_factor(seed=self.seed, job_id=job.id, spread=cfg.restore_spread)
        self._stop(vs, release)
        vs.remaining = max(1.0, vs.remaining - saved * vs.speed)
        vs.restore = restore
        self.ledger.evicted(t, lost, restart_gpu_seconds(
            gpu_share=share, per_gpu_seconds=restore,
            per_job_gpu_seconds=cfg.restore_job_gpu_seconds), prior)
        self._push(release, "requeue", vs)

    # -- main loop -----------------------------------------------------------------------
    def _on_event(self, kind: str, payload) -> None:
        """An event of a kind the engine does not know: a subclass's (the disruption
        protocol's, policies/sim/disruptions.py); the engine itself pushes none."""
        raise ValueError(f"unknown event kind {kind!r}")

    def _schedule(self) -> None:
        self.failed_shapes.clear()  # a new moment: checkpoint ages and the bound's window move
        self.high.sort(key=lambda s: (-s.job.priority, s.queued_at, s.job.id))
        for js in list(self.high):
            placed = self._try_place(js)
            if placed is not None:
                self.high.remove(js)
                if self.t > js.job.arrival:
                    self._waited(js, self.t)
                self._start(js, placed, self.t)
            elif js.retry_at <= self.t and not self._preempt(js):
                js.retry_at = self.t + self.cfg.retry_seconds
        for key in sorted(self.low, key=lambda k: self.low[k][0][0] if self.low[k] else 1e30):
            q = self.low[key]
            while q:
                if key[0] > 0 and not self.cap.room_for(key[0]):
                    break
                placed = self._try_place(q[0][2])
                if placed is None:
                    break
                _, _, js = heapq.heappop(q)
                self._start(js, placed, self.t)
        self._grow_back()

    def run(self) -> PolicyResult:
        jobs = self.w.jobs
        cfg = self.cfg
        for j in jobs:
            js = JobState(j)
            if cfg.checkpoint_drift or cfg.periodic_save_seconds or cfg.checkpoint_failure_share:
                js.schedule = schedule_for(
                    j.interval, j.checkpoint_seconds, seed=self.seed, job_id=j.id,
                    drift=cfg.checkpoint_drift, save=cfg.periodic_save_seconds,
                    failure_share=cfg.checkpoint_failure_share)
            self._push(j.arrival, "arrive", js)
        arrived = 0
        while self.events:
            t, _, kind, payload = heapq.heappop(self.events)
            if t > self.w.window and not self.high:
                break
            self.t = t
            if kind == "arrive":
                self._enqueue(payload, t)
                arrived += 1
                if self.progress and arrived % 200 == 0:
                    self.progress(arrived / len(jobs))
            elif kind == "finish":
                js, token = payload
                if js.token != token:
                    continue
                self._stop(js, t)
                if not js.job.high and js.job.arrival >= self.w.warmup:
                    self.completions.append(t - js.job.arrival)
            elif kind == "requeue":
                self._enqueue(payload, t)
            elif kind == "wake":
                pass  # only the scheduling pass below (``_wake``)
            else:
                self._on_event(kind, payload)
            self._schedule()
        end = min(self.t, self.w.window)
        for js in list(self.running.values()):
            self._stop(js, end)
        self.counts["waiting"] = len(self.high)
        if self.progress:
            self.progress(1.0)
        times = Counter(n for n in self.measured_preemptions.values() if n)
        led = self.ledger
        span = self.w.window - self.w.warmup
        return PolicyResult(
            policy=self.policy,
            lost_gpu_hours=led.total / 3600,
            preemptions=self.counts["preemptions"],
            victims=self.counts["victims"],
            gangs_broken=self.counts["gangs_broken"],
            preemptor_wait_p50_s=_percentile(self.waits, 0.5),
            preemptor_wait_p95_s=_percentile(self.waits, 0.95),
            high_jobs_waiting=self.counts["waiting"],
            gpu_utilisation=self.busy / (self.w.capacity_gpus * span) if span > 0 else 0.0,
            plans=self.counts["plans"],
            plans_failed=self.counts["failed"],
            plans_invalid=self.counts["invalid"],
            plan_latency_p50_ms=_percentile(self.latencies, 0.5),
            plan_latency_p99_ms=_percentile(self.latencies, 0.99),
            max_preemptions_per_workload=max(times, default=0),
            workloads_preempted=sum(times.values()),
            preemptions_per_workload=dict(sorted(times.items())),
            victim_jobs_unreported=self.counts["unreported"],
            lost_work_gpu_hours=led.lost_work / 3600,
            restart_gpu_hours=led.restart / 3600,
            delay_gpu_hours=led.delay / 3600,
            prior_work_gpu_hours=led.prior / 3600,
            lost_gpu_hours_with_prior=led.total_with_prior / 3600,
            eviction_losses=tuple(led.evictions),
            drains_failed=self.counts["drains_failed"],
            drains_overrun=self.counts["drains_overrun"],
            low_completion_p50_s=_percentile(self.completions, 0.5),
            low_jobs_completed=len(self.completions),
            lost_series=tuple(led.series), shrinks=self.counts["shrinks"],
            grown_back=self.counts["grown_back"],
            p99_preemptions_per_workload=float(_percentile(
                [n for n in self.measured_preemptions.values() if n], 0.99)),
        )
