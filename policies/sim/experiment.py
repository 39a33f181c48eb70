"""Seeds × policies for one experimental cell, summarised with medians and bootstrap intervals.

A cell is one (workload, protocol, utilisation) point, with the simulator's costs as
``SimConfig`` says; an ablation is the same cell with some of those knobs changed. Every seed
builds one workload that every policy replays, so per-seed values are paired. The summary names
the **strongest baseline** (of ``planners.TIMING_BASELINES`` that ran: the kube-scheduler
baselines, cost-aware, greedy-checkpoint and wait-then-evict; the one with the lowest median
lost GPU-hours in the cell) and gives every policy's lost work ÷ that baseline's and ÷
kube-default's as the median of per-seed ratios with a 95 % bootstrap interval over seeds. The
strongest baseline is picked on the same seeds it is compared on, which favours the baseline,
never our policies.

Pure: the caller injects the trace (pods and nodes), a clock for plan latency and a progress
callback. To run seeds in parallel, call ``run_seed`` per seed in workers and ``summarise`` the
runs (bench/evidence.py does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace

from ckpt_preempt.policies.baselines import kube_default
from ckpt_preempt.policies.sim import protocols, stats
from ckpt_preempt.policies.sim.engine import PolicyResult, SimConfig, Simulation
from ckpt_preempt.policies.sim.planners import TIMING_BASELINES
from ckpt_preempt.policies.sim.trace import TraceNode, TracePod
from ckpt_preempt.policies.sim.workload import Workload, WorkloadParams

DEFAULT_SCALE = WorkloadParams().scale  # share of the openb cluster and trace simulated

# One cost removed at a time (and all of them), to show which one limits the ratio. The restore
# ablation zeroes SimConfig's default only: jobs with their own restore time (the training
# scenario's) keep it, so ablate openb cells.
COST_ABLATIONS: Mapping[str, Mapping[str, float]] = {
    "restore cost off": {"restore_seconds": 0.0, "restore_job_gpu_seconds": 0.0},
    "planner blind to restarts": {"planner_restart_seconds": 0.0},
    "report lag/jitter off": {"report_lag_seconds": 0.0, "report_jitter_seconds": 0.0},
    "drain failures off": {"drain_failure_share": 0.0, "drain_overrun_share": 0.0},
    "all costs off": {
        "restore_seconds": 0.0, "restore_job_gpu_seconds": 0.0, "report_lag_seconds": 0.0,
        "report_jitter_seconds": 0.0,
        "drain_failure_share": 0.0, "drain_overrun_share": 0.0,
    },
}
# What timing rests on, made harsher: the simulator's jobs all declare their end exactly by
# default (SimConfig.declared_end_share), which real jobs rarely do.
END_ABLATIONS: Mapping[str, Mapping[str, float]] = {
    "half declare ends, +/-25 %": {"declared_end_share": 0.5, "declared_end_error": 0.25},
    # the ends the checkpoint agent declares from a loop's progress: off by a share of the time
    # left, not of the run (SimConfig.declared_end_from_progress)
    "half declare ends from progress, +/-25 %": {
        "declared_end_share": 0.5, "declared_end_error": 0.25, "declared_end_from_progress": True},
    "no declared ends": {"declared_end_share": 0.0},
    "end-aware victims off": {"end_aware": False},
}
# Each of issue 22's ideas off, for every policy it touches: elastic shrink and joint gang plans
# (our planners), the starvation bound and the escalating penalty (every policy).
IDEA_ABLATIONS: Mapping[str, Mapping[str, float]] = {
    "shrink off": {"shrink": False},
    "joint gangs off": {"joint_gangs": False},
    "bound off": {"max_preemptions_per_window": 0, "escalating_penalty": False},
}
ABLATIONS: Mapping[str, Mapping[str, float]] = {
    **COST_ABLATIONS, **END_ABLATIONS, **IDEA_ABLATIONS}


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One experimental point; ``params`` overrides the generator's (its seed is replaced)."""

    workload: str = "openb"
    protocol: str = "stress"
    utilisation: float = 1.0  # the steady protocol's target; the others ignore it
    scale: float = DEFAULT_SCALE
    params: WorkloadParams | None = None
    config: SimConfig = SimConfig()
    ablation: str = ""  # "" for the cell as configured, else a key of ABLATIONS

    @property
    def label(self) -> str:
        name = f"{self.workload}/{self.protocol}"
        if self.protocol == "steady":
            name += f"@{self.utilisation:g}"
        return f"{name} ({self.ablation})" if self.ablation else name

    def describe(self) -> dict:
        return {"workload": self.workload, "protocol": self.protocol,
                "utilisation": self.utilisation, "scale": self.scale,
                "ablation": self.ablation, "sim": asdict(self.config)}


def ablate(cell: Cell, name: str, overrides: Mapping[str, float] | None = None) -> Cell:
    """``cell`` with ablation ``name``'s changes to its simulator knobs."""
    changes = ABLATIONS[name] if overrides is None else overrides
    known = {f.name for f in fields(SimConfig)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ValueError(f"ablation {name!r}: SimConfig has no {', '.join(unknown)}")
    return replace(cell, config=replace(cell.config, **changes), ablation=name)


@dataclass(frozen=True, kw_only=True)
class Run:
    """One policy on one seed's workload."""

    seed: int
    result: PolicyResult
    workload: Mapping[str, float | int | str] = field(default_factory=dict)

    @property
    def policy(self) -> str:
        return self.result.policy


def workload_facts(w: Workload, nodes: int) -> dict:
    """What a reader needs to judge a workload: size, how synthetic, how compressed."""
    pods = sum(len(j.members) for j in w.jobs)
    return {
        "jobs": len(w.jobs), "pods": pods,
        "gang_jobs": sum(j.is_gang for j in w.jobs),
        "high_priority_jobs": sum(j.high for j in w.jobs),
        "synthetic_pod_share": round(w.extra_pods / pods, 4) if pods else 0.0,
        "time_compression": round(w.compress, 2),
        "offered_load": round(w.offered_load, 4),
        "window_hours": round(w.window / 3600, 3),
        "warmup_hours": round(w.warmup / 3600, 3),
        "protocol": w.protocol, "nodes": nodes, "gpus": w.capacity_gpus,
        "replay_windows": w.params.replay_windows if w.protocol == "replay" else 0,
    }


def build(cell: Cell, seed: int, pods: list[TracePod] | None, nodes: list[TraceNode]
          ) -> tuple[Workload, list[TraceNode]]:
    """The seed's workload for ``cell`` and the nodes it runs on."""
    return protocols.build(workload=cell.workload, protocol=cell.protocol, seed=seed, pods=pods,
                           nodes=nodes, scale=cell.scale, utilisation=cell.utilisation,
                           params=cell.params)


def run_seed(
    cell: Cell, seed: int, policies: Sequence[str], pods: list[TracePod] | None,
    nodes: list[TraceNode], clock: Callable[[], float] | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> list[Run]:
    """Every policy on the seed's workload, in ``policies`` order."""
    w, used = build(cell, seed, pods, nodes)
    facts = workload_facts(w, len(used))
    runs = []
    for name in policies:
        tick = (lambda f, name=name: progress(name, f)) if progress else None
        result = Simulation(w, used, name, cell.config, clock, tick).run()
        runs.append(Run(seed=seed, result=result, workload=facts))
    return runs


@dataclass(frozen=True, kw_only=True)
class PolicySummary:
    policy: str
    lost: stats.Estimate  # total GPU-hours (lost work + restart + delay), median over seeds
    lost_work: float  # medians over seeds of the split, GPU-hours
    restart: float
    delay: float
    prior_work: float  # median unsaved work done before the measured window (not charged)
    lost_with_prior: float  # median total counting that prior work as well
    preemptions: float  # medians over seeds
    evictions: float  # pods evicted
    gangs_broken: float
    eviction_loss_p50: float  # GPU-hours per evicted job, pooled over seeds
    eviction_loss_p99: float
    eviction_loss_max: float
    max_preemptions_per_workload: int  # the most any one job suffered, over all seeds
    drains_failed: int  # totals over seeds
    drains_overrun: int
    plans_invalid: int
    high_jobs_waiting: int
    vs_strongest: stats.Estimate | None  # lost ÷ the strongest baseline's, paired per seed
    vs_kube_default: stats.Estimate | None
    # per seed, the 99th percentile of preemptions over the jobs preempted; median over seeds
    p99_preemptions_per_workload: float = 0.0
    vs_best_per_seed: stats.Estimate | None = None  # lost ÷ the lowest baseline loss per seed
    # secondary figures: medians over seeds, and preemptions of one job pooled over seeds
    high_wait_p95_s: float = 0.0  # the high-priority (preempting) jobs' p95 wait
    preemptions_per_job_max: int = 0  # of jobs preempted at least once
    preemptions_per_job_p99: float = 0.0
    low_completion_p50_h: float = 0.0  # low-priority finish - arrival (jobs that finished)

    def as_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items()
               if k not in {"lost", "vs_strongest", "vs_kube_default", "vs_best_per_seed"}}
        out["lost_gpu_hours"] = self.lost.as_dict(3)
        for key in ("vs_strongest", "vs_kube_default", "vs_best_per_seed"):
            est = getattr(self, key)
            out[f"ratio_{key}"] = est.as_dict(4) if est else None
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}


@dataclass(frozen=True, kw_only=True)
class CellResult:
    cell: Cell
    seeds: tuple[int, ...]
    strongest_baseline: str | None
    policies: tuple[PolicySummary, ...]
    runs: tuple[Run, ...] = field(repr=False)

    def summary_of(self, policy: str) -> PolicySummary | None:
        return next((p for p in self.policies if p.policy == policy), None)

    def as_dict(self) -> dict:
        return {
            "cell": self.cell.label, **self.cell.describe(), "seeds": list(self.seeds),
            "strongest_baseline": self.strongest_baseline,
            "workload_per_seed": {r.seed: dict(r.workload) for r in self.runs},
            "policies": [p.as_dict() for p in self.policies],
        }


def _lost_by_seed(runs: Iterable[Run], policy: str) -> dict[int, float]:
    return {r.seed: r.result.lost_gpu_hours for r in runs if r.policy == policy}


def best_baseline_by_seed(runs: Sequence[Run], baselines: Sequence[str]
                          ) -> dict[int, tuple[str, float]]:
    """Per seed, the baseline that lost least on it and its loss (ties: the first listed)."""
    out: dict[int, tuple[str, float]] = {}
    for b in baselines:
        for seed, lost in _lost_by_seed(runs, b).items():
            if seed not in out or lost < out[seed][1]:
                out[seed] = (b, lost)
    return out


def _ratio_to_best(runs: Sequence[Run], policy: str, baselines: Sequence[str], resamples: int,
                   seed: int) -> stats.Estimate | None:
    best = best_baseline_by_seed(runs, baselines)
    mine = _lost_by_seed(runs, policy)
    paired = sorted(set(mine) & set(best))
    if not paired:
        return None
    return stats.bootstrap_ratio([mine[s] for s in paired], [best[s][1] for s in paired],
                                 seed=seed, resamples=resamples)


def _times_preempted(results: Sequence[PolicyResult]) -> list[float]:
    """How often each job preempted at least once was preempted, pooled over seeds."""
    return [float(times) for r in results
            for times, jobs in r.preemptions_per_workload.items() for _ in range(jobs)]


def strongest(runs: Sequence[Run], baselines: Sequence[str]) -> str | None:
    """The baseline with the lowest median lost GPU-hours (ties: the first in ``baselines``)."""
    medians = [(stats.median(list(lost.values())), i, b) for i, b in enumerate(baselines)
               if (lost := _lost_by_seed(runs, b))]
    return min(medians)[2] if medians else None


def _ratio(runs: Sequence[Run], policy: str, base: str | None, resamples: int, seed: int
           ) -> stats.Estimate | None:
    if base is None:
        return None
    mine, theirs = _lost_by_seed(runs, policy), _lost_by_seed(runs, base)
    paired = sorted(set(mine) & set(theirs))
    return stats.bootstrap_ratio([mine[s] for s in paired], [theirs[s] for s in paired],
                                 seed=seed, resamples=resamples)


def _summarise_policy(runs: Sequence[Run], policy: str, base: str | None, resamples: int,
                      seed: int, baselines: Sequence[str] = TIMING_BASELINES) -> PolicySummary:
    mine = [r.result for r in runs if r.policy == policy]
    losses = [x for r in mine for x in r.eviction_losses]
    times = _times_preempted(mine)

    def med(key: str) -> float:
        return stats.median([float(getattr(r, key)) for r in mine])

    return PolicySummary(
        policy=policy,
        lost=stats.bootstrap_median([r.lost_gpu_hours for r in mine], seed=seed,
                                    resamples=resamples),
        lost_work=med("lost_work_gpu_hours"), restart=med("restart_gpu_hours"),
        delay=med("delay_gpu_hours"), prior_work=med("prior_work_gpu_hours"),
        lost_with_prior=med("lost_gpu_hours_with_prior"),
        preemptions=med("preemptions"), evictions=med("victims"),
        gangs_broken=med("gangs_broken"),
        eviction_loss_p50=stats.percentile(losses, 50) if losses else 0.0,
        eviction_loss_p99=stats.percentile(losses, 99) if losses else 0.0,
        eviction_loss_max=max(losses, default=0.0),
        max_preemptions_per_workload=max(r.max_preemptions_per_workload for r in mine),
        drains_failed=sum(r.drains_failed for r in mine),
        drains_overrun=sum(r.drains_overrun for r in mine),
        plans_invalid=sum(r.plans_invalid for r in mine),
        high_jobs_waiting=sum(r.high_jobs_waiting for r in mine),
        vs_strongest=_ratio(runs, policy, base, resamples, seed),
        vs_kube_default=_ratio(runs, policy, kube_default.POLICY, resamples, seed),
        p99_preemptions_per_workload=med("p99_preemptions_per_workload"),
        vs_best_per_seed=_ratio_to_best(runs, policy, baselines, resamples, seed),
        high_wait_p95_s=med("preemptor_wait_p95_s"),
        preemptions_per_job_max=int(max(times, default=0)),
        preemptions_per_job_p99=stats.percentile(times, 99) if times else 0.0,
        low_completion_p50_h=med("low_completion_p50_s") / 3600,
    )


def summarise(cell: Cell, runs: Sequence[Run], *, baselines: Sequence[str] | None = None,
              resamples: int = stats.RESAMPLES, seed: int = 0) -> CellResult:
    """The cell's table: policies in the order they first appear in ``runs``."""
    if not runs:
        raise ValueError("no runs to summarise")
    order = list(dict.fromkeys(r.policy for r in runs))
    listed = TIMING_BASELINES if baselines is None else baselines
    base = strongest(runs, listed)
    return CellResult(
        cell=cell, seeds=tuple(sorted({r.seed for r in runs})), strongest_baseline=base,
        policies=tuple(_summarise_policy(runs, p, base, resamples, seed, listed)
                       for p in order),
        runs=tuple(runs),
    )


def run_cell(
    cell: Cell, seeds: Sequence[int], policies: Sequence[str], pods: list[TracePod] | None,
    nodes: list[TraceNode], *, clock: Callable[[], float] | None = None,
    progress: Callable[[int, str, float], None] | None = None,
    resamples: int = stats.RESAMPLES,
) -> CellResult:
    """Every seed in turn (``progress(seed, policy, fraction)``), then the summary."""
    runs: list[Run] = []
    for s in seeds:
        tick = (lambda p, f, s=s: progress(s, p, f)) if progress else None
        runs.extend(run_seed(cell, s, policies, pods, nodes, clock, tick))
    return summarise(cell, runs, resamples=resamples)
