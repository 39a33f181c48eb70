"""The seeded workload generator: trace pods become jobs with checkpoints and gangs.

This module holds the shared pieces (jobs, ``jobs_from``, ``offered_load``) and the *stress*
protocol's generator (``generate``); ``policies.sim.protocols`` names the three protocols
(stress, replay, steady) and builds each.

The trace records neither checkpoints nor much gang structure, so both are drawn here from a
``random.Random(seed)``; every parameter is a field of ``WorkloadParams`` and is printed with
each result.

Stress protocol (a stress test, not a replay). The load knob is arrival scaling, after the FGD
paper's protocol of submitting sampled pods until demand reaches 130 % of capacity. The trace's
arrivals are compressed into ``window_hours`` (durations are kept); then low-priority pods drawn
from the trace with replacement arrive uniformly in the window until the offered load reaches
``load``, where offered load is
``Σ gpus × min(duration, time left in window) ÷ (cluster GPUs × window)``. The achieved load,
the compression and the number of drawn pods are part of every result.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from ckpt_preempt.policies.model.model import MILLI_PER_GPU, CheckpointMode
from ckpt_preempt.policies.sim.trace import TraceNode, TracePod

HIGH_QOS = ("LS", "Guaranteed")
PRIORITY = {"LS": 1000, "Guaranteed": 1000, "Burstable": 10, "BE": 0}


@dataclass(frozen=True, kw_only=True)
class WorkloadParams:
    seed: int = 1
    scale: float = 0.25  # share of the openb GPU nodes and of the trace's pods simulated
    load: float = 1.3  # offered GPU load in the window (FGD drives demand to 130 %)
    window_hours: float = 6.0  # arrivals of the whole trace are compressed into this window
    checkpoint_intervals_min: tuple[int, ...] = (15, 30, 60, 180)
    share_on_request: float = 0.3  # of low-priority jobs: checkpoint on request (and periodic)
    share_periodic: float = 0.5  # periodic only; the rest never checkpoint
    share_silent: float = 0.0  # of the jobs that checkpoint: never report it (assumption: none)
    checkpoint_seconds: tuple[float, float] = (30.0, 180.0)  # uniform range
    gang_share: float = 0.3  # chance a low-priority job absorbs its successors into a gang
    gang_sizes: tuple[int, ...] = (2, 4, 8)
    min_duration_s: float = 60.0  # shorter pods are lengthened: they are not training jobs
    # replay protocol (policies.sim.protocols): a real-time window of the trace
    replay_window_hours: float = 168.0  # trace time replayed, uncompressed (7 days)
    contention: float = 1.2  # window's mean GPU demand ÷ capacity the cluster is shrunk to
    replay_windows: int = 1  # seeded windows of the trace replayed at once (a larger cluster)
    # steady protocol: Poisson arrivals from a stationary start
    steady_hours: float = 24.0  # measured span after the warm-up
    steady_warmup_hours: float = 6.0  # unmeasured span at the start (replay: warmup_share)
    steady_high_share: float = 0.2  # of the offered utilisation, from high-priority items
    warmup_share: float = 0.25  # of the replay window, at its start, not measured

    def describe(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class Member:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_milli: int = 0  # a share of one GPU (0 < m < 1000) when gpus == 1 and it is fractional
    gpu_spec: str = ""  # GPU models it may run on, "|"-separated as in openb; "" any

    @property
    def gpu_share(self) -> float:
        """GPUs it uses: its share of one shared GPU, else its whole GPUs."""
        return self.gpu_milli / MILLI_PER_GPU if self.gpu_milli else float(self.gpus)


@dataclass(frozen=True, kw_only=True)
class Job:
    id: int
    name: str
    arrival: float
    duration: float  # seconds of work needed
    priority: int
    qos: str
    members: tuple[Member, ...]
    checkpoint: CheckpointMode
    interval: float | None  # periodic checkpoint interval, seconds
    checkpoint_seconds: float | None
    reports: bool = True  # its pods carry last-checkpoint (False: it checkpoints silently)
    restore_seconds: float | None = None  # restart/restore time after eviction; None: SimConfig
    done_before: float = 0.0  # seconds it had run before the replay began (pre-filled jobs)
    # elastic: the fewest members it runs with (policies.sim.elastic); None: all are needed
    min_members: int | None = None

    @property
    def gpus(self) -> int:
        """Devices its pods touch (a fractional pod counts one)."""
        return sum(m.gpus for m in self.members)

    @property
    def gpu_share(self) -> float:
        """GPUs it uses, fractional shares at their fraction: what its losses are charged per."""
        return sum(m.gpu_share for m in self.members)

    @property
    def is_gang(self) -> bool:
        return len(self.members) > 1

    @property
    def high(self) -> bool:
        return self.qos in HIGH_QOS


@dataclass(frozen=True, kw_only=True)
class Workload:
    jobs: tuple[Job, ...]
    compress: float
    offered_load: float
    extra_pods: int  # pods drawn with replacement on top of the trace
    window: float  # arrival window after compression, seconds
    capacity_gpus: int
    params: WorkloadParams
    warmup: float = 0.0  # seconds from the start whose losses and waits are not measured
    protocol: str = "stress"  # stress (a), replay (b) or steady (c)


def _demand(gpus: float, arrival: float, duration: float, window: float) -> float:
    return gpus * max(0.0, min(duration, window - arrival))


def item_share(item) -> float:
    """GPUs a trace item uses: a fractional pod its share of one GPU (``TracePod.gpu_share``),
    anything else (a scenario's job) its whole GPUs."""
    return getattr(item, "gpu_share", item.gpus)


def stress_draws(pods: list, params: WorkloadParams, capacity: int, rng: random.Random):
    """The trace, compressed into the window, plus seeded extra draws up to the target load.

    ``pods`` are trace items (``TracePod`` or a scenario's jobs): anything with name, qos,
    gpus, creation and deletion. Returns ((item, arrival) sorted, extra draws, compression).

    Extra draws come from the low-priority (preemptible) pods only: the knob scales the
    background training load, and the high-priority arrivals stay the trace's own.
    """
    window = params.window_hours * 3600
    t0 = min(p.creation for p in pods)
    span = max(1.0, max(p.creation for p in pods) - t0)
    out = [(p, (p.creation - t0) / span * window) for p in pods]

    def duration(p: TracePod) -> float:
        return max(params.min_duration_s, p.deletion - p.creation)

    demand = sum(_demand(item_share(p), a, duration(p), window) for p, a in out)
    target = params.load * capacity * window
    background = [p for p in pods if p.qos not in HIGH_QOS]
    extra = 0
    while demand < target and extra < 50 * len(pods):
        p = rng.choice(background)
        a = rng.uniform(0, window)
        out.append((p, a))
        demand += _demand(item_share(p), a, duration(p), window)
        extra += 1
    out.sort(key=lambda x: (x[1], x[0].name))
    return out, extra, span / window


def scale_down(
    pods: list[TracePod], nodes: list[TraceNode], params: WorkloadParams
) -> tuple[list[TracePod], list[TraceNode]]:
    """Keep a seeded ``scale`` share of nodes and of pods, so load and mix are unchanged."""
    if not 0 < params.scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {params.scale}")
    if params.scale == 1:
        return pods, nodes
    rng = random.Random(f"scale-{params.seed}")
    keep = max(1, round(params.scale * len(nodes)))
    picked = sorted(rng.sample(range(len(nodes)), keep))
    return [p for p in pods if rng.random() < params.scale], [nodes[i] for i in picked]


@dataclass(frozen=True, kw_only=True)
class Arrival:
    """One pod entering the workload: when, for how long, and how much it had already run."""

    pod: TracePod  # or a scenario's job (policies.sim.scenarios.TrainingJob)
    at: float  # seconds from the start of the simulated run
    duration: float  # seconds of work it still needs
    done_before: float = 0.0  # seconds it had run before the run began (pre-filled pods)


def member(pod: TracePod, name: str) -> Member:
    """The pod as a job member; a fractional share carries its gpu_milli."""
    return Member(
        name=name, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, gpus=pod.gpus,
        gpu_milli=pod.gpu_milli if pod.fractional else 0, gpu_spec=pod.gpu_spec,
    )


def jobs_from(arrivals: list[Arrival], params: WorkloadParams, rng: random.Random) -> list[Job]:
    """Arrivals (in arrival order) become jobs: seeded gangs and checkpoint behaviour.

    A low-priority arrival becomes, with ``gang_share``, the lead of a gang that absorbs the
    next arrivals of the same GPU count (up to a size drawn from ``gang_sizes``); the gang runs
    for the lead's duration. High-priority jobs never checkpoint; low-priority ones checkpoint
    on request, periodically or never, by the shares in ``params``.
    """
    jobs: list[Job] = []
    i = 0
    while i < len(arrivals):
        lead = arrivals[i]
        group = [lead.pod]
        i += 1
        high = lead.pod.qos in HIGH_QOS
        if not high and lead.pod.gpus > 0 and rng.random() < params.gang_share:
            size = rng.choice(params.gang_sizes)
            while len(group) < size and i < len(arrivals):
                nxt = arrivals[i].pod
                if nxt.qos in HIGH_QOS or nxt.gpus != lead.pod.gpus:
                    break
                group.append(nxt)
                i += 1
        if high:
            mode, interval, ckpt = CheckpointMode.NONE, None, None
        else:
            r = rng.random()
            interval = 60.0 * rng.choice(params.checkpoint_intervals_min)
            ckpt = rng.uniform(*params.checkpoint_seconds)
            if r < params.share_on_request:
                mode = CheckpointMode.ON_REQUEST
            elif r < params.share_on_request + params.share_periodic:
                mode = CheckpointMode.PERIODIC
            else:
                mode, interval = CheckpointMode.NONE, None
        n = len(jobs)
        silent = interval is not None and is_silent(params.seed, n, params.share_silent)
        name = lead.pod.name
        jobs.append(Job(
            id=n,
            name=f"{name}-{n}" if len(group) == 1 else f"gang-{name}-{n}",
            arrival=lead.at,
            duration=lead.duration,
            priority=PRIORITY[lead.pod.qos],
            qos=lead.pod.qos,
            members=tuple(member(p, f"{p.name}-{n}-{k}") for k, p in enumerate(group)),
            checkpoint=mode,
            interval=interval,
            checkpoint_seconds=ckpt,
            reports=not silent,
            done_before=lead.done_before,
        ))
    return jobs


def is_silent(seed: int, job_id: int, share: float) -> bool:
    """Whether a checkpointing job never reports it: a draw of its own per seed and job (not
    from the generator's stream), so the share changes who is silent and nothing else."""
    return share > 0 and random.Random(f"silent-{seed}-{job_id}").random() < share


def offered_load(jobs: list[Job] | tuple[Job, ...], capacity: int, start: float,
                 end: float) -> float:
    """GPU-seconds the jobs ask for inside [start, end) ÷ the capacity's, as if none waited
    (a fractional pod asks for its share of a GPU)."""
    span = end - start
    if span <= 0 or capacity <= 0:
        return 0.0
    demand = 0.0
    for j in jobs:
        if j.arrival >= start:
            demand += j.gpu_share * max(0.0, min(j.duration, end - j.arrival))
        else:
            demand += j.gpu_share * max(0.0, min(end, j.arrival + j.duration) - start)
    return demand / (capacity * span)


def generate(pods: list[TracePod], nodes: list[TraceNode], params: WorkloadParams) -> Workload:
    """The stress workload on ``nodes``; scale both with ``scale_down`` first."""
    rng = random.Random(params.seed)
    capacity = sum(n.gpus for n in nodes)
    biggest = max(n.gpus for n in nodes)
    # CPU-only pods neither hold GPUs nor lose GPU work; pods bigger than any node never run.
    usable = [p for p in pods if 0 < p.gpus <= biggest]
    ordered, extra, compress = stress_draws(usable, params, capacity, rng)
    window = params.window_hours * 3600
    arrivals = [
        Arrival(pod=p, at=at, duration=max(params.min_duration_s, p.deletion - p.creation))
        for p, at in ordered
    ]
    jobs = jobs_from(arrivals, params, rng)
    return Workload(
        jobs=tuple(jobs), compress=compress,
        offered_load=offered_load(jobs, capacity, 0.0, window),
        window=window, capacity_gpus=capacity, extra_pods=extra, params=params,
    )
