"""Run several policies on one seeded workload and compare them side by side."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from policies.sim.engine import PolicyResult, SimConfig, Simulation
from policies.sim.trace import TraceNode, TracePod
from policies.sim.workload import Workload, WorkloadParams, generate, scale_down

BASELINE = "kube-default"


@dataclass(frozen=True, kw_only=True)
class Comparison:
    workload: Workload
    nodes: int
    config: SimConfig
    results: tuple[PolicyResult, ...]

    def lost_ratio(self, policy: str) -> float | None:
        """Lost GPU-hours of ``policy`` ÷ kube-default's, when both ran."""
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
