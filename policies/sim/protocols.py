"""The three experiment protocols, each for every workload (the openb traces and training jobs).

``build`` returns the workload and the nodes actually simulated; the workload carries its
``protocol`` and ``warmup`` (seconds at the start whose losses and waits are not measured).

(a) stress: the compressed-arrival generator (``workload.generate``): the whole trace's arrivals
    squeezed into ``window_hours`` and topped up with low-priority draws to ``load``. A stress
    test, not a replay: the same seed gives the same jobs it always gave. No warm-up. The
    training scenario's drawn trace is long, so it is not topped up but cut: its jobs, in order,
    arrive uniformly in the window until the offered load reaches ``load``.

(b) replay: ``replay_window_hours`` (default 168 h) of trace time, uncompressed. The window
    starts at the creation time of a trace item drawn by the seed (so windows fall where the
    trace has arrivals), moved back if needed so it ends by the last creation. Items running at
    the start are pre-filled: they arrive at t = 0 with ``done_before`` = the seconds they had
    run and ``duration`` = the seconds they still had to run. Items created inside the window
    arrive at their real offset. The cluster is then shrunk until it is contended: nodes are
    taken in a seeded order until their GPUs reach the window's mean GPU demand (jobs' GPUs, a
    fractional pod's at its share, × time inside the window, as if none waited, ÷ window
    length) ÷ ``contention`` (default 1.2); before that, each pinned pod class (a ``gpu_spec``)
    gets nodes of its GPU models from the same order until they reach its own demand ÷
    ``contention`` (``contended_nodes``); if none of them can hold the largest pod, the first
    node in that order that can is added. ``replay_windows`` (default 1) replays that many
    seeded windows (not overlapping, where the trace allows) at once, superimposed from t = 0,
    on one cluster sized to their joint demand: a larger cluster with the trace's own mix, on
    which one eviction weighs less.
    The first ``warmup_share`` (default 25 %) of the window is not measured. Why a week: with
    72 h windows kube-default preempted 1 to 421 times over seeds 1-6 (openb, contention 1.2),
    too few on some seeds to compare policies; a week gave 81 to 796 (openb), 6 to 242
    (openb-multigpu20) and 52 to 66 (training) at under 2 s a run (measured, current engine).
    Raising contention to 1.4 instead did not help (fewer preemptions on 4 of 6 openb seeds).

(c) steady: Poisson arrivals of items drawn from the trace with replacement, durations from the
    trace, on the ``scale`` share of nodes. High- and low-priority items arrive as two streams
    whose rates make the offered utilisation (rate × mean of GPUs × duration ÷ cluster GPUs)
    ``steady_high_share`` × ``utilisation`` and the rest of ``utilisation`` (swept over
    ``UTILISATIONS``). The share is fixed (default 20 %, the training scenario's cited
    high-priority share) rather than the trace's own: openb's high-priority pods hold 83 % of
    its GPU time (measured on the default trace), which alone exceeds the cluster above
    utilisation 1.2 and leaves preemption nothing to decide. Each stream starts in the
    equilibrium of its arrival process (an M/G/inf system): Poisson(rate × mean duration) of its
    jobs already running, each drawn with probability proportional to its duration and with a
    uniform share of it already done. So the offered
    load is stationary from t = 0, heavy-tailed durations included; the first
    ``steady_warmup_hours`` (default 6 h, for queues and placement to settle) are not
    measured, then ``steady_hours`` (default 24 h) are.

Offered load in each workload is measured over the span after the warm-up.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace

from ckpt_preempt.policies.sim import scenarios
from ckpt_preempt.policies.sim.devices import SPEC_SEPARATOR
from ckpt_preempt.policies.sim.trace import TraceNode, TracePod
from ckpt_preempt.policies.sim.workload import (
    HIGH_QOS,
    Arrival,
    Job,
    Workload,
    WorkloadParams,
    generate,
    item_share,
    jobs_from,
    offered_load,
    scale_down,
)

WORKLOADS = ("openb", "openb-multigpu20", "training")
PROTOCOLS = ("stress", "replay", "steady")
UTILISATIONS = (0.8, 1.0, 1.2, 1.4)  # the steady protocol's sweep
HOUR = 3600.0

JobBuilder = Callable[[list[Arrival], random.Random], list[Job]]


def _pod_gpus(item) -> int:
    """GPUs one pod of the item needs on one node."""
    if isinstance(item, scenarios.TrainingJob):
        return item.gpus_per_pod
    return item.gpus


def _duration(item, params: WorkloadParams) -> float:
    return max(params.min_duration_s, item.deletion - item.creation)


def _usable(items: Sequence, nodes: Sequence[TraceNode]) -> list:
    """Items that hold GPUs and whose pods fit some node."""
    biggest = max(n.gpus for n in nodes)
    out = [p for p in items if p.gpus > 0 and 0 < _pod_gpus(p) <= biggest]
    if not out:
        raise ValueError("no trace item asks for GPUs that fit a node of this cluster")
    return out


def _stress(items, nodes, params: WorkloadParams, make: JobBuilder) -> tuple[Workload, list]:
    """A scenario's trace under stress: its jobs in order, until the window's load is reached.

    The drawn trace has Poisson arrivals, so its first k jobs squeezed into the window arrive
    like k uniform draws in it; each job gets a seeded uniform arrival, and jobs are taken
    until the offered load reaches ``load`` (or the trace runs out: the achieved load is
    reported). ``compress`` is the trace span used ÷ the window.
    """
    rng = random.Random(params.seed)
    capacity = sum(n.gpus for n in nodes)
    window = params.window_hours * HOUR
    target = params.load * capacity * window
    picked, demand = [], 0.0
    for p in _usable(items, nodes):
        if demand >= target:
            break
        at = rng.uniform(0.0, window)
        picked.append(Arrival(pod=p, at=at, duration=_duration(p, params)))
        demand += item_share(p) * min(_duration(p, params), window - at)
    span = max(a.pod.creation for a in picked) - min(a.pod.creation for a in picked)
    picked.sort(key=lambda a: (a.at, a.pod.name))
    jobs = make(picked, rng)
    return Workload(
        jobs=tuple(jobs), compress=max(1.0, span) / window,
        offered_load=offered_load(jobs, capacity, 0, window), extra_pods=0, window=window,
        capacity_gpus=capacity, params=params, protocol="stress",
    ), nodes


def window_start(items: Sequence, window: float, rng: random.Random) -> float:
    """A seeded item's creation time, moved back so the window ends by the last creation."""
    creations = sorted(p.creation for p in items)
    start = rng.choice(creations)
    return max(creations[0], min(start, creations[-1] - window))


def _class_demand(jobs: Sequence[Job], window: float) -> dict[str, tuple[float, int]]:
    """Per ``gpu_spec`` (pinned pod class; "" unpinned): mean GPUs demanded in the window
    (shares × time inside it ÷ window, as if none waited) and the largest pod's whole GPUs."""
    out: dict[str, tuple[float, int]] = {}
    for j in jobs:
        inside = max(0.0, min(j.duration, window - j.arrival))
        for m in j.members:
            demand, biggest = out.get(m.gpu_spec, (0.0, 0))
            out[m.gpu_spec] = (demand + m.gpu_share * inside / window, max(biggest, m.gpus))
    return out


def window_starts(items: Sequence, window: float, count: int, rng: random.Random,
                  tries: int = 100) -> list[float]:
    """``count`` seeded window starts (``window_start``), each redrawn up to ``tries`` times
    while its window overlaps one already drawn (so the same pods do not run twice at once)."""
    starts: list[float] = []
    for _ in range(count):
        t0 = window_start(items, window, rng)
        for _ in range(tries):
            if all(abs(t0 - t) >= window for t in starts):
                break
            t0 = window_start(items, window, rng)
        starts.append(t0)
    return starts


def contended_nodes(nodes: Sequence[TraceNode], jobs: Sequence[Job], window: float,
                    contention: float, rng: random.Random) -> list[TraceNode]:
    """The smallest seeded prefix of nodes whose GPUs reach mean demand ÷ contention, after
    each pinned pod class (a ``gpu_spec``) got, from the same seeded order, nodes of its GPU
    models whose GPUs reach that class's demand ÷ contention, one of them able to hold the
    class's largest pod. Classes are served from the fewest eligible nodes up; nodes already
    taken count for every class they suit. A class no node suits is left without (its pods
    wait, as on the real cluster)."""
    order = rng.sample(range(len(nodes)), len(nodes))
    chosen: list[int] = []
    taken: set[int] = set()

    def take(i: int) -> None:
        if i not in taken:
            taken.add(i)
            chosen.append(i)

    classes = _class_demand(jobs, window)
    eligible: dict[str, list[int]] = {}
    for spec in classes:
        wanted = {s.strip() for s in spec.split(SPEC_SEPARATOR) if s.strip()}
        if wanted:
            eligible[spec] = [i for i in order if nodes[i].model in wanted]
    for spec in sorted(eligible, key=lambda s: (len(eligible[s]), s)):
        demand, biggest = classes[spec]
        suits = eligible[spec]
        if not suits:
            continue
        have = sum(nodes[i].gpus for i in suits if i in taken)
        for i in suits:
            if have >= demand / contention and any(nodes[k].gpus >= biggest
                                                   for k in suits if k in taken):
                break
            if i not in taken:
                take(i)
                have += nodes[i].gpus
    target = offered_load(jobs, 1, 0.0, window) / contention
    capacity = sum(nodes[i].gpus for i in chosen)
    for i in order:
        if capacity >= target and chosen:
            break
        if i not in taken:
            take(i)
            capacity += nodes[i].gpus
    need = max((m.gpus for j in jobs for m in j.members), default=0)
    if not any(nodes[i].gpus >= need for i in chosen):
        take(next(i for i in order if nodes[i].gpus >= need))
    return [nodes[i] for i in sorted(chosen)]


def _replay(items, nodes, params: WorkloadParams, make: JobBuilder) -> tuple[Workload, list]:
    if params.replay_window_hours <= 0 or params.contention <= 0:
        raise ValueError("replay_window_hours and contention must be positive")
    if not 0 <= params.warmup_share < 1:
        raise ValueError(f"warmup_share must be in [0, 1), got {params.warmup_share}")
    if params.replay_windows < 1:
        raise ValueError(f"replay_windows must be >= 1, got {params.replay_windows}")
    rng = random.Random(f"replay-{params.seed}")
    usable = _usable(items, nodes)
    window = params.replay_window_hours * HOUR
    arrivals = []
    for t0 in window_starts(usable, window, params.replay_windows, rng):
        for p in usable:
            if p.creation < t0 < p.deletion:
                arrivals.append(Arrival(pod=p, at=0.0, duration=max(1.0, p.deletion - t0),
                                        done_before=t0 - p.creation))
            elif t0 <= p.creation < t0 + window:
                arrivals.append(Arrival(pod=p, at=p.creation - t0,
                                        duration=_duration(p, params)))
    if not arrivals:
        raise ValueError("the replay window holds no trace items")
    arrivals.sort(key=lambda a: (a.at, a.pod.name))
    jobs = make(arrivals, rng)
    kept = contended_nodes(nodes, jobs, window, params.contention, rng)
    capacity = sum(n.gpus for n in kept)
    warmup = params.warmup_share * window
    return Workload(
        jobs=tuple(jobs), compress=1.0, offered_load=offered_load(jobs, capacity, warmup, window),
        extra_pods=0, window=window, capacity_gpus=capacity, params=params, warmup=warmup,
        protocol="replay",
    ), kept


def _poisson(mean: float, rng: random.Random) -> int:
    n, t = 0, rng.expovariate(1.0)
    while t < mean:
        n += 1
        t += rng.expovariate(1.0)
    return n


def _pool_arrivals(pool: list, rate: float, end: float, params: WorkloadParams,
                   rng: random.Random) -> list[Arrival]:
    """Equilibrium start plus Poisson arrivals at ``rate`` of items drawn from ``pool``."""
    if rate == 0:
        return []
    durations = [_duration(p, params) for p in pool]
    running = _poisson(rate * sum(durations) / len(durations), rng)
    out = []
    for k in rng.choices(range(len(pool)), weights=durations, k=running):
        done = rng.uniform(0.0, durations[k])
        out.append(Arrival(pod=pool[k], at=0.0, duration=max(1.0, durations[k] - done),
                           done_before=done))
    t = rng.expovariate(rate)
    while t < end:
        k = rng.randrange(len(pool))
        out.append(Arrival(pod=pool[k], at=t, duration=durations[k]))
        t += rng.expovariate(rate)
    return out


def _steady(items, nodes, params: WorkloadParams, utilisation: float,
            make: JobBuilder) -> tuple[Workload, list]:
    if utilisation <= 0:
        raise ValueError(f"utilisation must be positive, got {utilisation}")
    if params.steady_hours <= 0 or params.steady_warmup_hours < 0:
        raise ValueError("steady_hours must be positive and steady_warmup_hours not negative")
    if not 0 <= params.steady_high_share <= 1:
        raise ValueError(f"steady_high_share must be in [0, 1], got {params.steady_high_share}")
    _, kept = scale_down([], list(nodes), params)
    capacity = sum(n.gpus for n in kept)
    usable = _usable(items, kept)
    warmup = params.steady_warmup_hours * HOUR
    end = warmup + params.steady_hours * HOUR
    rng = random.Random(f"steady-{params.seed}")
    arrivals = []
    for high, share in ((True, params.steady_high_share), (False, 1 - params.steady_high_share)):
        pool = [p for p in usable if (p.qos in HIGH_QOS) == high]
        if share > 0 and not pool:
            kind = "high" if high else "low"
            raise ValueError(f"steady: the trace has no {kind}-priority items to draw")
        if share > 0:
            mean_gpu_seconds = sum(
                item_share(p) * _duration(p, params) for p in pool) / len(pool)
            rate = share * utilisation * capacity / mean_gpu_seconds
            arrivals += _pool_arrivals(pool, rate, end, params, rng)
    arrivals.sort(key=lambda a: (a.at, a.pod.name))
    jobs = make(arrivals, rng)
    return Workload(
        jobs=tuple(jobs), compress=1.0, offered_load=offered_load(jobs, capacity, warmup, end),
        extra_pods=0, window=end, capacity_gpus=capacity, params=params, warmup=warmup,
        protocol="steady",
    ), kept


def build(*, workload: str, protocol: str, seed: int, pods: list[TracePod] | None,
          nodes: list[TraceNode], scale: float = 0.25, utilisation: float = 1.0,
          params: WorkloadParams | None = None) -> tuple[Workload, list[TraceNode]]:
    """The seeded workload of ``workload`` under ``protocol``, and the nodes it runs on."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose from {', '.join(PROTOCOLS)}")
    if not nodes:
        raise ValueError("no nodes to simulate")
    params = replace(params or WorkloadParams(), seed=seed, scale=scale)
    if not 0 < params.scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {params.scale}")
    items: list
    make: JobBuilder
    if workload == "training":
        if pods is not None:
            raise ValueError("the training workload is synthetic; it takes no pod trace")
        items = scenarios.training_trace(seed)
        make = lambda arrivals, rng: scenarios.jobs_from(arrivals, params)  # noqa: E731
    else:
        if pods is None:
            raise ValueError(f"workload {workload!r} needs a pod trace")
        items = pods
        make = lambda arrivals, rng: jobs_from(arrivals, params, rng)  # noqa: E731
    if protocol == "stress":
        if workload != "training":
            scaled_pods, scaled_nodes = scale_down(pods or [], nodes, params)
            return replace(generate(scaled_pods, scaled_nodes, params), protocol="stress"), \
                scaled_nodes
        _, scaled_nodes = scale_down([], nodes, params)
        return _stress(items, scaled_nodes, params, make)
    if protocol == "replay":
        return _replay(items, nodes, params, make)
    return _steady(items, nodes, params, utilisation, make)
