"""Compare policies: one seed side by side (``compare``), and a cell's table over seeds.

``cell_table`` lays a ``experiment.CellResult`` out as rows of metrics by columns of
policies (the total a policy is charged, then its parts: lost work, restarts and the
preemptor's delay, then secondary figures); ``format_cell`` renders it as text,
``markdown_cell`` as a markdown table, ``per_seed_rows`` each seed's totals. With more than one
seed, lost GPU-hours and ratios show the median and its 95 % bootstrap interval.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

from ckpt_preempt.policies.baselines import kube_default
from ckpt_preempt.policies.sim import stats
from ckpt_preempt.policies.sim.engine import PolicyResult, SimConfig, Simulation
from ckpt_preempt.policies.sim.experiment import CellResult, PolicySummary, best_baseline_by_seed
from ckpt_preempt.policies.sim.trace import TraceNode, TracePod
from ckpt_preempt.policies.sim.workload import Workload, WorkloadParams, generate, scale_down

BASELINE = kube_default.POLICY  # the ratio one seed's comparison reports


@dataclass(frozen=True, kw_only=True)
class Comparison:
    workload: Workload
    nodes: int
    config: SimConfig
    results: tuple[PolicyResult, ...]

    def lost_ratio(self, policy: str) -> float | None:
        """Total lost GPU-hours (work + restart + delay) of ``policy`` ÷ kube-default's, when
        both ran."""
        by = {r.policy: r for r in self.results}
        base, mine = by.get(BASELINE), by.get(policy)
        if base is None or mine is None or base.lost_gpu_hours == 0:
            return None
        return mine.lost_gpu_hours / base.lost_gpu_hours

    def summary(self) -> dict:
        w = self.workload
        return {
            "workload": {
                **w.params.describe(),
                "jobs": len(w.jobs),
                "gang_jobs": sum(j.is_gang for j in w.jobs),
                "high_priority_jobs": sum(j.high for j in w.jobs),
                "extra_pods_drawn": w.extra_pods,
                "time_compression": round(w.compress, 2),
                "offered_load": round(w.offered_load, 4),
                "nodes": self.nodes,
                "gpus": w.capacity_gpus,
            },
            "sim": asdict(self.config),
            "results": [
                {k: v for k, v in asdict(r).items() if k != "lost_series"} for r in self.results
            ],
            "lost_work_ratio_vs_kube_default": {
                r.policy: self.lost_ratio(r.policy) for r in self.results
                if r.policy != BASELINE and self.lost_ratio(r.policy) is not None
            },
        }


def compare(
    pods: list[TracePod],
    nodes: list[TraceNode],
    params: WorkloadParams,
    policies: Sequence[str],
    config: SimConfig = SimConfig(),
    clock: Callable[[], float] | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> Comparison:
    pods, nodes = scale_down(pods, nodes, params)
    workload = generate(pods, nodes, params)
    results = []
    for name in policies:
        tick = (lambda f, name=name: progress(name, f)) if progress else None
        results.append(Simulation(workload, nodes, name, config, clock, tick).run())
    return Comparison(workload=workload, nodes=len(nodes), config=config, results=tuple(results))


def estimate_text(e: stats.Estimate | None, fmt: str, seeds: int) -> str:
    """``median [low, high]`` with several seeds; ``(n=k)`` when only k of them had a value
    (a ratio needs the baseline to have lost something on that seed)."""
    if e is None:
        return "-"
    text = fmt.format(e.median)
    if seeds > 1 and e.n > 1:
        text += f" [{fmt.format(e.low)}, {fmt.format(e.high)}]"
    return text + (f" (n={e.n})" if e.n < seeds else "")


def _rows(base: str | None) -> tuple[tuple[str, Callable[[PolicySummary, int], str]], ...]:
    return (
        ("total GPU-h (work + restart + delay)",
         lambda p, seeds: estimate_text(p.lost, "{:.1f}", seeds)),
        (f"÷ strongest baseline ({base or 'none'})",
         lambda p, seeds: estimate_text(p.vs_strongest, "{:.2f}", seeds)),
        ("÷ per-seed best baseline",
         lambda p, seeds: estimate_text(p.vs_best_per_seed, "{:.2f}", seeds)),
        ("÷ kube-default", lambda p, seeds: estimate_text(p.vs_kube_default, "{:.2f}", seeds)),
        ("  lost work GPU-h", lambda p, seeds: f"{p.lost_work:.1f}"),
        ("  restart GPU-h", lambda p, seeds: f"{p.restart:.1f}"),
        ("  preemptor delay GPU-h", lambda p, seeds: f"{p.delay:.1f}"),
        ("prior work lost GPU-h (in no total by default)",
         lambda p, seeds: f"{p.prior_work:.1f}"),
        ("high-priority wait p95 min", lambda p, seeds: f"{p.high_wait_p95_s / 60:.1f}"),
        ("preemptions of one job max/p99", lambda p, seeds: (
            f"{p.preemptions_per_job_max}/{p.preemptions_per_job_p99:.1f}")),
        ("low-priority completion p50 h", lambda p, seeds: f"{p.low_completion_p50_h:.1f}"),
        ("preemptions", lambda p, seeds: f"{p.preemptions:g}"),
        ("pods evicted", lambda p, seeds: f"{p.evictions:g}"),
        ("loss per eviction p50/p99/max", lambda p, seeds: (
            f"{p.eviction_loss_p50:.2f}/{p.eviction_loss_p99:.1f}/{p.eviction_loss_max:.1f}")),
        ("gangs broken", lambda p, seeds: f"{p.gangs_broken:g}"),
        ("drains failed/overran", lambda p, seeds: f"{p.drains_failed}/{p.drains_overrun}"),
        ("invalid plans", lambda p, seeds: str(p.plans_invalid)),
    )


def cell_table(result: CellResult) -> tuple[list[str], list[list[str]]]:
    """Header (policies) and rows (a label, then one value per policy)."""
    seeds = len(result.seeds)
    header = ["", *(p.policy for p in result.policies)]
    rows = [[label, *(cell(p, seeds) for p in result.policies)]
            for label, cell in _rows(result.strongest_baseline)]
    return header, rows


def workload_line(result: CellResult) -> str:
    """The cell's workload in one line: medians over its seeds."""
    facts = {r.seed: r.workload for r in result.runs}.values()
    if not facts or not all(facts):
        return f"{result.cell.label}: {len(result.seeds)} seed(s)"

    def med(key: str) -> float:
        return stats.median([float(f[key]) for f in facts])

    first = next(iter(facts))
    return (
        f"{result.cell.label}: {len(result.seeds)} seed(s); median {med('jobs'):g} jobs "
        f"({med('high_priority_jobs'):g} high priority, {med('gang_jobs'):g} gangs) on "
        f"{first['nodes']} nodes / {first['gpus']} GPUs; offered load {med('offered_load'):.2f}"
        f" over {med('window_hours'):g} h (warm-up {med('warmup_hours'):g} h), "
        f"{med('synthetic_pod_share'):.0%} of pods resampled, trace time compressed "
        f"{med('time_compression'):g}x"
    )


def format_cell(result: CellResult) -> str:
    header, rows = cell_table(result)
    widths = [max(len(r[i]) for r in [header, *rows]) + 2 for i in range(len(header))]
    widths[0] -= 2
    lines = [workload_line(result), ""]
    for r in [header, *rows]:
        lines.append(r[0].ljust(widths[0]) + "".join(
            v.rjust(w) for v, w in zip(r[1:], widths[1:], strict=True)))
    if len(result.seeds) > 1:
        lines.append("")
        lines.append("[a, b]: 95 % bootstrap interval of the median over seeds; ratios are "
                     "medians of per-seed ratios")
    return "\n".join(lines)


def per_seed_rows(result: CellResult, baselines: Sequence[str]) -> tuple[list[str],
                                                                         list[list[str]]]:
    """Each seed's total GPU-hours per policy and the baseline that lost least on it."""
    best = best_baseline_by_seed(result.runs, baselines)
    policies = [p.policy for p in result.policies]
    lost = {(r.seed, r.policy): r.result.lost_gpu_hours for r in result.runs}
    header = ["seed", *policies, "per-seed best baseline"]
    rows = [[str(seed), *(f"{lost[seed, p]:.1f}" if (seed, p) in lost else "-"
                          for p in policies), best[seed][0] if seed in best else "-"]
            for seed in result.seeds]
    return header, rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(r) + " |" for r in rows)
    return "\n".join(lines)


def markdown_cell(result: CellResult) -> str:
    header, rows = cell_table(result)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(r) + " |" for r in rows)
    return "\n".join(lines)


def loss_time_range(series: Iterable[Sequence[tuple[float, float]]]
                    ) -> tuple[float, float] | None:
    """Seconds from the first loss of any policy to the last: the plot's x-axis without the
    idle start (before anything is preempted) and end. None when nothing was lost."""
    first, last = [], []
    for points in series:
        lost = [t for t, cumulative in points if cumulative > 0]
        if lost:
            first.append(lost[0])
            last.append(points[-1][0])
    if not first:
        return None
    start, end = min(first), max(last)
    if end <= start:  # one loss (or all at once): show half an hour either side
        return max(0.0, start - 1800.0), end + 1800.0
    return start, end
