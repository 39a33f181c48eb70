"""What the policy under test is shown, and how it is asked (a mixin of ``Simulation``).

``PlannerView`` builds the ``policies.model.model`` view a preemptor is planned on and asks the
policy: each job's pods as model ``Pod``s (``_model``); the lower-priority running pods with
the checkpoint times their annotations would show (``_published``: the last checkpoint completed
``report_lag_seconds`` ago, with a seeded error of up to ``report_jitter_seconds``, and for a
lying job a claim up to ``lie_minutes`` more recent (``lie_seconds``), never in the future;
nothing for jobs that do not report); the capacity held at the preemptor's priority or
above as one non-preemptible pod per node (``_held_pod``, exact for fit and victims); how often
each job was preempted within the fairness window and within the starvation bound's window (a
job at the bound enters held, ``policies.planner.bound``); then ``_preempt`` asks the policy,
timing it.

It is apart from ``policies/sim/engine.py`` because this view differs from the ground truth on
purpose (late and jittered checkpoint times, folded capacity), while the engine's event loop
runs and charges on the ground truth (``Simulation._execute`` / ``_charge``); keeping the view
here keeps that difference in one place. ``Simulation`` owns the fields and ``_execute``
annotated below; this mixin owns ``held`` / ``held_pods`` (``_init_view``).

Lying (``SimConfig.lie_share``, ``lie_minutes``; assumptions, off by default): a seeded share of
the jobs that publish checkpoints claim, for each checkpoint, one drawn uniformly up to
``lie_minutes`` later than the one they would honestly show (a script that stamps the time of a
step rather than of a durable save; an operator gaming the planner). Who lies is one draw per
seed and job, so the liars at a share are among the liars at any larger share, and the same
jobs lie under every policy. The planner sees the claim; the engine charges the truth.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from ckpt_preempt.policies.model.annotations import END_REDECLARE_MIN_SECONDS, END_REDECLARE_SHARE
from ckpt_preempt.policies.model.model import ZERO, Node, Plan, Pod, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import bound
from ckpt_preempt.policies.sim.costs import report_error
from ckpt_preempt.policies.sim.devices import Capacity, requests
from ckpt_preempt.policies.sim.planners import SEEDED_BY_PLAN_COUNT
from ckpt_preempt.policies.sim.workload import Job, Member

if TYPE_CHECKING:
    from ckpt_preempt.policies.model.model import UnknownCheckpoint
    from ckpt_preempt.policies.sim.engine import JobState, SimConfig


def _in_share(stream: str, *, seed: int, job_id: int, share: float) -> bool:
    """Whether job ``job_id`` is in the seeded ``share`` of jobs drawn on ``stream`` (one draw
    per job and stream, so each knob keeps its own jobs whatever the others are set to)."""
    return share > 0 and random.Random(f"{stream}-{seed}-{job_id}").random() < share


def lies(*, seed: int, job_id: int, share: float) -> bool:
    """Whether job ``job_id`` publishes lying checkpoint times."""
    return _in_share("liar", seed=seed, job_id=job_id, share=share)


def declares_end(*, seed: int, job_id: int, share: float) -> bool:
    """Whether job ``job_id`` declares its end."""
    return _in_share("declares-end", seed=seed, job_id=job_id, share=share)


def end_error(*, seed: int, job_id: int, origin: float, most: float) -> float:
    """How far off job ``job_id``'s declared end is, as a share of the run it predicts: a
    seeded draw, uniform in [-``most``, ``most``], per job and run (0 when ``most`` is 0)."""
    if most <= 0:
        return 0.0
    return random.Random(f"end-error-{seed}-{job_id}-{origin!r}").uniform(-most, most)


def lie_seconds(*, seed: int, job_id: int, checkpoint: float, share: float,
                most: float) -> float:
    """How much later than ``checkpoint`` job ``job_id``'s annotation claims it was: 0 for an
    honest job, else a seeded draw, uniform in [0, ``most``], per job and checkpoint."""
    if most <= 0 or not lies(seed=seed, job_id=job_id, share=share):
        return 0.0
    return random.Random(f"lie-{seed}-{job_id}-{checkpoint!r}").uniform(0.0, most)


class PlannerView:
    """The planner's view of a ``Simulation`` and the call to its policy (a mixin)."""

    cfg: SimConfig
    t: float  # the simulated time now
    seed: int
    nodes: tuple[Node, ...]
    cap: Capacity
    running: dict[int, JobState]
    preempted: dict[int, list[float]]  # job id -> when it was preempted
    unknown: UnknownCheckpoint
    plan_fn: Callable[[Snapshot, list[Pod], int], Plan]
    clock: Callable[[], float] | None
    counts: dict[str, int]
    latencies: list[float]
    _execute: Callable[[JobState, Plan, Snapshot], None]  # carry a plan out (Simulation's)

    def _init_view(self) -> None:
        # capacity held per node by each priority; pods a preemptor may not evict enter the
        # planner's snapshot as one non-preemptible pod per node (exact for fit and victims)
        self.held: list[dict[int, Resources]] = [{} for _ in self.nodes]
        self.held_pods: dict[int, dict[int, Pod | None]] = {}
        # preemptor shapes whose plan failed since capacity last changed (``_preempt``)
        self.failed_shapes: set[tuple] = set()
        # counts capacity changes: the cluster every preemptor of one moment is planned on is
        # built once per (moment, epoch, priority, nodes) (``_base``)
        self.epoch = 0
        self.end_errors: dict[tuple[int, float], float] = {}  # (job, run origin) -> its error
        self.bases: dict[tuple, tuple[tuple[Node, ...], Snapshot, float | None]] = {}
        # when the first job held at the starvation bound in the last snapshot leaves it (None:
        # none held); a plan that fails then asks the engine to wake at that time
        # (``_wake``), as the controller would find it free at its next retry
        self.bound_release: float | None = None

    # -- capacity held by priority ---------------------------------------------------------
    def _hold(self, i: int, pod: Pod, sign: int) -> None:
        h = self.held[i]
        have = h.get(pod.priority, ZERO)
        h[pod.priority] = have + pod.requests if sign > 0 else have - pod.requests
        self.held_pods.pop(i, None)
        self.failed_shapes.clear()
        self.epoch += 1

    def _held_pod(self, i: int, priority: int) -> Pod | None:
        """All capacity on node ``i`` held at ``priority`` or above, as one pod."""
        cache = self.held_pods.setdefault(i, {})
        if priority not in cache:
            total, top = ZERO, priority
            for prio, r in self.held[i].items():
                if prio >= priority:
                    total = total + r
                    top = max(top, prio)
            cache[priority] = None if total == ZERO else Pod(
                uid=f"held-{i}", name=f"held-by-priority-{top}", priority=top, requests=total,
                node=self.nodes[i].name, start_time=0.0, preemptible=False,
            )
        return cache[priority]

    # -- pods ----------------------------------------------------------------------------
    def _model(self, js: JobState, k: int, node: str | None, t: float) -> Pod:
        j, m = js.job, js.job.members[k]
        return Pod(
            uid=f"{j.id}-{k}", name=m.name, priority=j.priority,
            requests=requests(m),
            node=node, start_time=js.start if node else None, checkpoint=j.checkpoint,
            checkpoint_seconds=j.checkpoint_seconds, gang=f"default/sim/{j.id}"
            if j.is_gang else None, owner_uid=f"job-{j.id}",
            gang_minimum=j.min_members if j.is_gang else None,
            # what its annotations would declare for timing (policies.planner.timing): the period of
            # a job that reports its checkpoints, and its end (SimConfig.declared_end_share)
            checkpoint_interval=j.interval if self._reports(j) else None,
            expected_end=self._declared_end(js) if node else None,
        )

    def _declared_end(self, js: JobState) -> float | None:
        """The end job ``js``'s running pods declare: None when it declares none, else its
        true end moved by its seeded error, drawn once per run (``origin``)."""
        cfg = self.cfg
        if not declares_end(seed=self.seed, job_id=js.job.id, share=cfg.declared_end_share):
            return None
        error = end_error(seed=self.seed, job_id=js.job.id, origin=js.origin,
                          most=cfg.declared_end_error)
        return js.origin + js.remaining * (1.0 + error)

    def _progress_end(self, js: JobState, t: float, declared: float) -> float:
        """A progress-estimated end at ``t`` (``SimConfig.declared_end_from_progress``): the
        time left, misjudged by the run's seeded error, from now; ``declared`` (the end the
        pods show) until the estimate moves by the agent's threshold."""
        key = (js.job.id, js.origin)
        error = self.end_errors.get(key)
        if error is None:  # drawn once per run, asked at every plan
            error = self.end_errors[key] = end_error(
                seed=self.seed, job_id=js.job.id, origin=js.origin,
                most=self.cfg.declared_end_error)
        estimate = t + max(0.0, js.origin + js.remaining - t) * (1.0 + error)
        shift = max(END_REDECLARE_MIN_SECONDS, END_REDECLARE_SHARE * max(0.0, estimate - t))
        return estimate if abs(estimate - declared) > shift else declared

    # -- what the planner sees, and asking it --------------------------------------------
    def _reports(self, job: Job) -> bool:
        return job.interval is not None and job.reports

    def _published(self, js: JobState, t: float) -> float:
        """The checkpoint time the job's annotation shows at ``t``: the last one completed by
        ``t - report_lag_seconds`` (its pod start while it restores), with the seeded error of
        that report and, for a liar, its lie; never later than ``t``."""
        cfg = self.cfg
        true = js.last_checkpoint(t - cfg.report_lag_seconds)
        if true > t:  # still restoring: nothing newer than the pod's start to show
            true = js.start
        if js.report is None or js.report[0] != true:
            error = report_error(seed=self.seed, job_id=js.job.id, checkpoint=true,
                                 jitter=cfg.report_jitter_seconds)
            error += lie_seconds(seed=self.seed, job_id=js.job.id, checkpoint=true,
                                 share=cfg.lie_share, most=cfg.lie_minutes * 60)
            js.report = (true, min(t, true + error))
        return min(t, js.report[1])

    def _snapshot(self, pre: list[Pod], job: Job) -> Snapshot:
        priority = min(p.priority for p in pre)
        queued = sum(m.gpu_share for other in self.high
                     if other.job is not job and other.job.priority >= priority
                     for m in other.job.members)
        return self._base(priority, self._planner_nodes(job.members)).with_pending(pre, queued)

    def _base(self, priority: int, nodes: tuple[Node, ...]) -> Snapshot:
        """The cluster as a preemptor of ``priority`` sees it now, on ``nodes``, without its
        own pods: built once per moment and capacity state (and sets ``bound_release``)."""
        key = (self.t, self.epoch, priority, id(nodes))
        known = self.bases.get(key)
        if known is not None and known[0] is nodes:  # held, so the id is still theirs
            self.bound_release = known[2]
            return known[1]
        base = self._build_base(priority, nodes)
        if any(k[:2] != key[:2] for k in self.bases):  # a new moment or state: forget the old
            self.bases = {}
        self.bases[key] = (nodes, base, self.bound_release)
        return base

    def _build_base(self, priority: int, nodes: tuple[Node, ...]) -> Snapshot:
        pods = []
        recent: dict[str, int] = {}
        history: dict[str, int] = {}
        t, cfg = self.t, self.cfg
        since = t - cfg.fairness_window_seconds
        limit = bound.Bound(max_preemptions=cfg.max_preemptions_per_window,
                            window_seconds=cfg.preemption_bound_window_seconds)
        since_long = t - limit.window_seconds
        keep = limit.on or cfg.escalating_penalty
        self.bound_release = None
        for js in self.running.values():
            if js.job.priority >= priority:
                continue
            last = self._published(js, t) if js.start < t and self._reports(js.job) else None
            if js.models and js.models[0].last_checkpoint != last:
                js.models = tuple(replace(pod, last_checkpoint=last) for pod in js.models)
            declared = js.models[0].expected_end if js.models else None
            if cfg.declared_end_from_progress and declared is not None:
                end = self._progress_end(js, t, declared)
                if end != declared:
                    js.models = tuple(replace(pod, expected_end=end) for pod in js.models)
            times = self.preempted.get(js.job.id)
            models = js.models
            if times and models:
                workload = models[0].workload
                if times[-1] > since:
                    recent[workload] = len(times) - bisect.bisect_right(times, since)
                if keep and times[-1] > since_long:
                    n = len(times) - bisect.bisect_right(times, since_long)
                    if cfg.escalating_penalty:
                        history[workload] = n
                    if limit.on and n >= limit.max_preemptions:
                        models = bound.hold(models, frozenset((workload,)))
                        # free once all but max - 1 of its in-window preemptions are older
                        # than the window: a second after, clear of the boundary's rounding
                        free_at = (times[len(times) - limit.max_preemptions]
                                   + limit.window_seconds + 1.0)
                        if self.bound_release is None or free_at < self.bound_release:
                            self.bound_release = free_at
            pods.extend(models)
        for i in range(len(self.nodes)):
            held = self._held_pod(i, priority)
            if held is not None:
                pods.append(held)
        return Snapshot(now=t, nodes=nodes, pods=tuple(pods), recent_preemptions=recent,
                        unknown_checkpoint=self.unknown, preemption_history=history)

    def _planner_nodes(self, members: Iterable[Member]) -> tuple[Node, ...]:
        """The nodes as the planner sees them for a preemptor with these members (a subclass
        closes cordoned ones: policies/sim/disruptions.py)."""
        return self.cap.exclusions(members)

    def _preempt(self, js: JobState) -> bool:
        shape = _shape(js.job)
        if shape in self.failed_shapes:  # the same ask on the same cluster: the same failure
            self.counts["plans"] += 1
            self.counts["failed"] += 1
            return False
        pre = [self._model(js, k, None, self.t) for k in range(len(js.job.members))]
        snap = self._snapshot(pre, js.job)
        self.counts["plans"] += 1
        t0 = self.clock() if self.clock else 0.0
        plan = self.plan_fn(snap, pre, self.counts["plans"])
        if self.clock:
            self.latencies.append((self.clock() - t0) * 1000)
        if not plan.feasible or not plan.victim_groups:
            self.counts["failed"] += 1
            if self.cfg.replan_at_bound_release and self.bound_release is not None \
                    and self.bound_release > self.t:
                self._wake(self.bound_release)
            if self._repeats(plan, js.job):
                self.failed_shapes.add(shape)
            return False
        self._execute(js, plan, snap)
        return True

    def _repeats(self, plan: Plan, job: Job) -> bool:
        """Whether a failed plan for ``job`` fails again for any preemptor of its shape until
        capacity changes or time moves on (the engine clears ``failed_shapes`` then). Not
        when plan latency is measured (each ask is timed), and for a policy seeded by the plan
        counter only when no node could take it at all and it is one pod: a seeded tie-break
        may place a gang's members so that the next seed fits them, or find a node without
        victims."""
        if self.clock:
            return False
        if self.policy not in SEEDED_BY_PLAN_COUNT:
            return True
        return not plan.feasible and len(job.members) == 1


def _shape(job: Job) -> tuple:
    """All of a preemptor that a planner's answer may depend on, besides its identity."""
    return (job.priority, job.is_gang, job.min_members, job.checkpoint, job.checkpoint_seconds,
            tuple((m.cpu_milli, m.memory_mib, m.gpus, m.gpu_milli, m.gpu_spec)
                  for m in job.members))
