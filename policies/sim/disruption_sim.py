"""The disruption protocol in the event loop: ``DisruptedSimulation`` replays a workload under
one preemption policy while nodes are drained, reclaimed and scaled down
(``policies.sim.disruptions`` says what each world does and what is modelled).

At a disruption's signal the node is cordoned: it takes no new pod (its free capacity is held
back, the planner sees it unschedulable) until it is back. Every job with a pod on it is given
its stop (``disruptions.stop``); a job that ends, is preempted or stops for another reason first
is not evicted again. At its stop the whole job (a gang too) stops, loses ``Stop.lost_seconds``
of work on every GPU it holds (the part done before the warm-up kept apart, as the engine
does), pays the engine's restart (``restore_seconds`` on each GPU plus
``restore_job_gpu_seconds``) and is queued again. A drain (maintenance, autoscaler) ends when
its last pod stops; its extra wall time over an instant drain, on the node's GPUs that neither
train nor checkpoint meanwhile, is the delay. A spot node leaves at its notice's end whatever
the drain does, so it has no delay. The node comes back ``DisruptionParams.out_seconds`` after
it leaves (a replacement, or the scale-up).

The autoscaler checks every ``autoscaler_check_seconds`` up to the window's end and scales
down the least-used node requesting under ``autoscaler_threshold`` of its GPUs at this check and
the last one, when the GPUs its pods request are free elsewhere; so its disruptions depend on
the run and may differ between worlds, unlike maintenance and spot, which are drawn once per seed.

Charges go to one ``costs.Ledger`` per disruption kind (the engine's own ledger keeps the
preemption losses), each measured by the disruption's signal time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ckpt_preempt.policies.model.model import ZERO, CheckpointMode, Node, Resources
from ckpt_preempt.policies.sim import disruptions as dis
from ckpt_preempt.policies.sim.costs import Ledger, drain_outcome, restart_gpu_seconds, split_at
from ckpt_preempt.policies.sim.engine import JobState, PolicyResult, SimConfig, Simulation
from ckpt_preempt.policies.sim.trace import TraceNode
from ckpt_preempt.policies.sim.workload import Member, Workload


@dataclass(frozen=True, kw_only=True)
class Eviction:
    disruption: int  # Disruption.index
    kind: str
    job: int
    node: int  # the disrupted node
    at: float
    lost_gpu_seconds: float  # unsaved work charged, in and before the window
    requests: int  # checkpoint requests the job got


@dataclass(frozen=True, kw_only=True)
class KindResult:
    disruptions: int = 0  # measured disruptions of this kind
    evictions: int = 0  # measured jobs stopped by them
    lost_work_gpu_hours: float = 0.0
    restart_gpu_hours: float = 0.0
    delay_gpu_hours: float = 0.0
    drain_extra_seconds: tuple[float, ...] = ()  # per measured drain: end - first Eviction
    # paired: every world's charge for the same pods in the same state at each disruption of
    # this run (the run itself follows its own world): lost work and delay per world, GPU-h,
    # restarts (the same in every world) and each world's drain extra seconds per drain
    paired_lost_work: dict[str, float] = field(default_factory=dict)
    paired_delay: dict[str, float] = field(default_factory=dict)
    paired_restart: float = 0.0
    paired_drain_extra: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def paired_lost(self, world: str) -> float:
        """GPU-hours ``world`` would be charged for this run's disruptions of this kind."""
        return (self.paired_lost_work.get(world, 0.0) + self.paired_restart
                + self.paired_delay.get(world, 0.0))

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_work_gpu_hours + self.restart_gpu_hours + self.delay_gpu_hours


@dataclass(frozen=True, kw_only=True)
class DisruptionResult:
    world: str
    policy: PolicyResult  # the preemption policy's own result (its losses exclude these)
    kinds: dict[str, KindResult]
    evictions: tuple[Eviction, ...] = field(repr=False)
    # (disruption, node, when it left, when it came back) for every disruption that ran
    outages: tuple[tuple[int, int, float, float], ...] = field(repr=False)

    @property
    def lost_gpu_hours(self) -> float:
        return sum(k.lost_gpu_hours for k in self.kinds.values())


class DisruptedSimulation(Simulation):
    def __init__(self, workload: Workload, nodes: list[TraceNode], policy: str,
                 config: SimConfig = SimConfig(), *, world: str,
                 params: dis.DisruptionParams = dis.DEFAULT_PARAMS,
                 fixed: tuple[dis.Disruption, ...] | None = None) -> None:
        super().__init__(workload, nodes, policy, config)
        if world not in dis.WORLDS:
            raise ValueError(f"unknown world {world!r}; one of {', '.join(dis.WORLDS)}")
        self.world, self.params = world, params
        start, end = workload.warmup, workload.window
        self.fixed = fixed if fixed is not None else dis.schedule(
            seed=self.seed, nodes=len(self.nodes), start=start, end=end, params=params)
        self.gate = dis.Gate(cap_seconds=config.max_checkpoint_seconds,
                             ack_lag_seconds=config.report_lag_seconds)
        self.blocked: dict[int, Resources] = {}  # cordoned node -> capacity held back
        self.ledgers = {k: Ledger(workload.warmup, charge_prior=config.charge_prior_work)
                        for k in dis.KINDS}
        self.counted = dict.fromkeys(dis.KINDS, 0)
        self.evicted = dict.fromkeys(dis.KINDS, 0)
        self.extra: dict[str, list[float]] = {k: [] for k in dis.KINDS}
        # per kind: world -> [lost work, delay] GPU-s, "restart" GPU-s, world -> drain extras
        self.paired = {k: dict(work=dict.fromkeys(dis.WORLDS, 0.0),
                               delay=dict.fromkeys(dis.WORLDS, 0.0), restart=0.0,
                               extra={w: [] for w in dis.WORLDS}) for k in dis.KINDS}
        self.log: list[Eviction] = []
        self.outages: list[tuple[int, int, float, float]] = []
        self.pending: dict[int, dict] = {}  # disruption index -> its drain's state
        self.unneeded: set[int] = set()
        self.next_index = len(self.fixed)

    # -- capacity held back on cordoned nodes ---------------------------------------------
    def _reblock(self) -> None:
        for i, held in self.blocked.items():
            free = self.cap.free[i]
            if free != ZERO:
                self.blocked[i] = held + free
                self.cap.set_free(i, ZERO)

    def _stop(self, js: JobState, at: float) -> None:
        super()._stop(js, at)
        self._reblock()

    def _try_place(self, js: JobState) -> list[int] | None:
        self._reblock()
        return super()._try_place(js)

    def _grow_back(self) -> None:
        self._reblock()
        super()._grow_back()

    def _planner_nodes(self, members: Iterable[Member]) -> tuple[Node, ...]:
        nodes = super()._planner_nodes(members)
        if not self.blocked:
            return nodes
        return tuple(replace(n, unschedulable=True) if i in self.blocked else n
                     for i, n in enumerate(nodes))

    # -- events ---------------------------------------------------------------------------
    def run(self) -> DisruptionResult:  # type: ignore[override]
        for d in self.fixed:
            self._push(d.signal, "disrupt", d)
        if self.params.autoscaler_check_seconds > 0:
            self._push(self.w.warmup + self.params.autoscaler_check_seconds, "autoscale", None)
        result = super().run()
        kinds = {k: KindResult(
            disruptions=self.counted[k], evictions=self.evicted[k],
            lost_work_gpu_hours=led.lost_work / 3600, restart_gpu_hours=led.restart / 3600,
            delay_gpu_hours=led.delay / 3600, drain_extra_seconds=tuple(self.extra[k]),
            paired_lost_work={w: v / 3600 for w, v in self.paired[k]["work"].items()},
            paired_delay={w: v / 3600 for w, v in self.paired[k]["delay"].items()},
            paired_restart=self.paired[k]["restart"] / 3600,
            paired_drain_extra={w: tuple(v) for w, v in self.paired[k]["extra"].items()})
            for k, led in self.ledgers.items()}
        return DisruptionResult(world=self.world, policy=result, kinds=kinds,
                                evictions=tuple(self.log), outages=tuple(self.outages))

    def _on_event(self, kind: str, payload) -> None:
        if kind == "disrupt":
            self._disrupt(payload)
        elif kind == "disrupt-stop":
            self._evict(*payload)
        elif kind == "disrupt-back":
            self._back(payload)
        elif kind == "autoscale":
            self._autoscale()
        else:
            super()._on_event(kind, payload)

    def _on_node(self, i: int) -> list[JobState]:
        return [js for js in self.running.values() if any(n == i for _, n in js.pods)]

    def _disrupt(self, d: dis.Disruption) -> None:
        if d.node in self.blocked:  # already out: this disruption finds nothing to do
            return
        self.blocked[d.node] = ZERO
        self._reblock()
        measured = self.ledgers[d.kind].measured(d.signal)
        self.counted[d.kind] += measured
        first = min(d.eviction, d.hard_end)
        state = dict(d=d, left=0, end=first, busy=0.0)
        self.pending[d.index] = state
        ends, busy = dict.fromkeys(dis.WORLDS, first), dict.fromkeys(dis.WORLDS, 0.0)
        paired = self.paired[d.kind]
        for js in self._on_node(d.node):
            job = js.job
            share = sum(job.members[int(p.uid.split("-")[1])].gpu_share for p, _ in js.pods)
            on_node = sum(job.members[int(p.uid.split("-")[1])].gpu_share
                          for p, n in js.pods if n == d.node)
            pod = dis.Pod(can_request=(job.checkpoint is CheckpointMode.ON_REQUEST
                                       and job.reports),
                          estimate=job.checkpoint_seconds or 0.0,
                          last_checkpoint=js.last_checkpoint)
            out = drain_outcome(
                seed=self.seed, job_id=job.id, nth=-1 - d.index, estimate=pod.estimate,
                deadline=min(pod.estimate, self.cfg.max_checkpoint_seconds),
                failure_share=self.cfg.drain_failure_share,
                overrun_share=self.cfg.drain_overrun_share,
                overrun_factor=self.cfg.drain_overrun_factor)
            s = dis.stop(self.world, d, pod, self.gate, out)
            state["left"] += 1
            self._push(s.at, "disrupt-stop", (d, js, js.token, s))
            if not measured:
                continue
            for w in dis.WORLDS:
                sw = s if w == self.world else dis.stop(w, d, pod, self.gate, out)
                saved = max(js.origin, min(sw.saved, sw.at))
                paired["work"][w] += share * split_at(saved, sw.at, self.w.warmup)[0]
                ends[w] = max(ends[w], sw.at)
                busy[w] += on_node * max(0.0, sw.at - first)
            paired["restart"] += restart_gpu_seconds(
                gpu_share=share, per_gpu_seconds=job.restore_seconds
                if job.restore_seconds is not None else self.cfg.restore_seconds,
                per_job_gpu_seconds=self.cfg.restore_job_gpu_seconds)
        if measured and not math.isfinite(d.hard_end):
            gpus = self.nodes[d.node].allocatable.gpus
            for w in dis.WORLDS:
                paired["extra"][w].append(ends[w] - first)
                paired["delay"][w] += max(0.0, gpus * (ends[w] - first) - busy[w])
        if not state["left"]:
            self._drained(d)

    def _evict(self, d: dis.Disruption, js: JobState, token: int, s: dis.Stop) -> None:
        state = self.pending[d.index]
        state["left"] -= 1
        if js.token == token:  # still running as it was at the signal
            job, cfg = js.job, self.cfg
            share = sum(job.members[int(p.uid.split("-")[1])].gpu_share for p, _ in js.pods)
            on_node = sum(job.members[int(p.uid.split("-")[1])].gpu_share
                          for p, n in js.pods if n == d.node)
            saved = max(js.origin, min(s.saved, s.at))
            inside, before = split_at(saved, s.at, self.w.warmup)
            restore = job.restore_seconds if job.restore_seconds is not None else \
                cfg.restore_seconds
            self._stop(js, s.at)
            js.remaining = max(1.0, js.remaining - max(0.0, saved - js.origin) * js.speed)
            js.restore = restore
            led = self.ledgers[d.kind]
            led.evicted(d.signal, share * inside, restart_gpu_seconds(
                gpu_share=share, per_gpu_seconds=restore,
                per_job_gpu_seconds=cfg.restore_job_gpu_seconds), share * before)
            self.evicted[d.kind] += led.measured(d.signal)
            state["end"] = max(state["end"], s.at)
            state["busy"] += on_node * max(0.0, s.at - min(d.eviction, d.hard_end))
            self.log.append(Eviction(disruption=d.index, kind=d.kind, job=job.id, node=d.node,
                                     at=s.at, lost_gpu_seconds=share * (inside + before),
                                     requests=s.requests))
            self._push(s.at, "requeue", js)
        if not state["left"]:
            self._drained(d)

    def _drained(self, d: dis.Disruption) -> None:
        state = self.pending.pop(d.index)
        first = min(d.eviction, d.hard_end)
        left = d.hard_end if math.isfinite(d.hard_end) else state["end"]
        led = self.ledgers[d.kind]
        if not math.isfinite(d.hard_end) and led.measured(d.signal):
            extra = state["end"] - first
            self.extra[d.kind].append(extra)
            gpus = self.nodes[d.node].allocatable.gpus
            led.delayed(d.signal, max(0.0, gpus * extra - state["busy"]))
        back = left + self.params.out_seconds(d.kind)
        self.outages.append((d.index, d.node, left, back))
        self._push(back, "disrupt-back", d.node)

    def _back(self, i: int) -> None:
        held = self.blocked.pop(i, None)
        if held is not None:
            self.cap.set_free(i, self.cap.free[i] + held)

    # -- the autoscaler ------------------------------------------------------------------
    def _autoscale(self) -> None:
        p = self.params
        if self.t + p.autoscaler_check_seconds <= self.w.window:  # none past the window: the
            # engine runs on past it while a high-priority job waits, and would never end
            self._push(self.t + p.autoscaler_check_seconds, "autoscale", None)
        used: dict[int, float] = {}
        for i, n in enumerate(self.nodes):
            if i in self.blocked or n.allocatable.gpus == 0:
                continue
            used[i] = n.allocatable.gpus - self.cap.free[i].gpus
        under = {i for i, u in used.items() if u < p.autoscaler_threshold
                 * self.nodes[i].allocatable.gpus}
        candidates = sorted((used[i], i) for i in under & self.unneeded)
        self.unneeded = under
        for u, i in candidates:
            room = sum(self.cap.free[j].gpus for j in used if j != i)
            if room >= u:
                d = dis.disruption(self.next_index, dis.AUTOSCALER, i, self.t, p)
                self.next_index += 1
                self.unneeded.discard(i)
                self._disrupt(d)
                return
