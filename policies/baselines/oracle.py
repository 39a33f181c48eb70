"""Exact minimum lost work for small instances: the yardstick for the planner.

Eviction sets are enumerated in non-decreasing cost order (a best-first walk over sorted units
where each set's successors either add the next unit or swap the last one for it, so every set
appears exactly once). The first set after which every preemptor member fits, and which keeps
every gang whole under the PDBs (``cover.gang_pdb_ok``, the planner's rule), is optimal. Cost
is the planner's objective: lost work plus the fairness penalty. It shares only the cost model,
the PDB rule and unit construction with the planner, not its search.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from ckpt_preempt.policies.model.model import Pod, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import cover, units
from ckpt_preempt.policies.planner.preemption import PlannerConfig
from ckpt_preempt.policies.planner.search import nvlink_gpus


class OracleLimit(RuntimeError):
    """The instance is too large for exhaustive search within the step limit."""


@dataclass(frozen=True, kw_only=True)
class OracleResult:
    feasible: bool
    lost_gpu_seconds: float
    unit_ids: tuple[str, ...]
    sets_examined: int
    penalty_gpu_seconds: float = 0.0

    @property
    def cost(self) -> float:
        """What was minimised: lost work plus the fairness penalty."""
        return self.lost_gpu_seconds + self.penalty_gpu_seconds


def _members_fit(snapshot: Snapshot, members: Sequence[Pod], free: dict[str, Resources]) -> bool:
    needs = []
    for pod in members:
        options = []
        for node in snapshot.nodes:
            if node.closed is not None or not pod.requests.fits_in(node.allocatable):
                continue
            gpus, _ = nvlink_gpus(pod, node, node.allocatable.gpus)
            if gpus is not None:
                options.append((node.name, gpus))
        needs.append((pod, options))

    def place(i: int) -> bool:
        if i == len(needs):
            return True
        pod, options = needs[i]
        seen = set()
        for name, gpus in options:
            f = free[name]
            if (f, gpus) in seen:
                continue  # an identical node state was already tried
            seen.add((f, gpus))
            if pod.requests.cpu_milli <= f.cpu_milli and pod.requests.memory_mib <= f.memory_mib \
                    and gpus <= f.gpus and pod.requests.gpu_milli <= f.gpu_milli:
                free[name] = f - pod.requests
                ok = place(i + 1)
                free[name] = f
                if ok:
                    return True
        return False

    return place(0)


def solve(
    snapshot: Snapshot,
    preemptor: Sequence[Pod],
    config: PlannerConfig = PlannerConfig(),
    max_sets: int = 200_000,
) -> OracleResult:
    members = sorted(preemptor, key=lambda p: (-p.gpus, p.uid))
    priority = min(p.priority for p in members)
    builder = units.UnitBuilder(
        snapshot, priority, drain=config.drain,
        max_checkpoint_seconds=config.max_checkpoint_seconds,
        penalty_seconds=config.fairness_penalty_seconds,
        restart_seconds=config.restart_seconds,
        restart_workload_gpu_seconds=config.restart_workload_gpu_seconds,
    )
    order = sorted(builder.all_units(), key=lambda u: (u.cost, u.id))
    base = {n.name: snapshot.free(n.name) for n in snapshot.nodes}

    def feasible(chosen: tuple[int, ...]) -> bool:
        free = dict(base)
        for i in chosen:
            for node, res in order[i].release.items():
                free[node] = free[node] + res
        return _members_fit(snapshot, members, free)

    examined = 1
    if feasible(()):
        return OracleResult(feasible=True, lost_gpu_seconds=0.0, unit_ids=(), sets_examined=1)
    heap: list[tuple[float, tuple[int, ...]]] = []
    if order:
        heap.append((order[0].cost, (0,)))
    while heap:
        c, chosen = heapq.heappop(heap)
        examined += 1
        if examined > max_sets:
            raise OracleLimit(f"more than {max_sets} eviction sets")
        picked = [order[i] for i in chosen]
        if cover.gang_pdb_ok(picked, snapshot.pdbs) and feasible(chosen):
            return OracleResult(
                feasible=True, lost_gpu_seconds=sum(u.lost for u in picked),
                penalty_gpu_seconds=sum(u.penalty for u in picked),
                unit_ids=tuple(u.id for u in picked), sets_examined=examined,
            )
        last = chosen[-1]
        if last + 1 < len(order):
            nxt = order[last + 1].cost
            heapq.heappush(heap, (c + nxt, (*chosen, last + 1)))
            heapq.heappush(heap, (c - order[last].cost + nxt, (*chosen[:-1], last + 1)))
    return OracleResult(feasible=False, lost_gpu_seconds=0.0, unit_ids=(), sets_examined=examined)
