"""Small instances cut from a simulated cell, and each policy's loss ÷ the hindsight floor on them.

The hindsight oracle (``policies.sim.hindsight``) is exact but only affordable on small
instances, so a cell is measured against it on seeded cuts that keep the cell's job mix (sizes,
gangs, checkpoint modes and intervals, drain times, restores). One implementation serves
bench/floor.py (one cut per seed of each evidence cell) and ``ckpt-preempt simulate
--floor-cuts N`` (N cuts of the seed the run simulates).

A cut keeps ``nodes`` seeded nodes of the cell's cluster and draws, seeded and without
replacement, the cell's jobs that fit those nodes: low-priority jobs of at least an hour (shorter
ones would mostly be gone when the preemptors come) until their GPUs reach ``LOW_FILL`` × the
cut's GPUs (at most ``jobs`` jobs in all), arriving uniformly in the first half hour, then 1 to
``high`` high-priority jobs arriving uniformly in the hour after. Each job keeps the cell's
size, gang, duration, checkpoint mode, interval, drain time and restore; its arrival is the
cut's (so the cluster is full when the preemptors come: a cut is a contention test of the
cell's job mix, not a replay of its timeline), and work done before the cut (a replay's
pre-filled jobs) is dropped. There is no warm-up.

Only cuts where some policy is charged anything count towards a ratio (where nobody preempts
there is nothing to compare); a cut whose search passes the simulation budget is counted as too
large and left out (reported, not hidden). Pure: seeded by a key string, no clock.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ckpt_preempt.policies.sim import hindsight, stats
from ckpt_preempt.policies.sim.engine import SimConfig
from ckpt_preempt.policies.sim.trace import TraceNode
from ckpt_preempt.policies.sim.workload import Job, Workload, offered_load

CUT_NODES = 2  # nodes kept per cut
CUT_JOBS = 32  # most jobs per cut
CUT_HIGH = 4  # most high-priority jobs per cut
LOW_FILL = 2.0  # low-priority GPUs drawn per GPU of the cut (assumption: enough to contend)
FILL_SECONDS = 1800.0  # low-priority jobs arrive in the first half hour
HIGH_SPAN_SECONDS = 3600.0  # high-priority jobs arrive in the hour after
LOW_MIN_DURATION_SECONDS = 3600.0  # shorter low-priority jobs are gone before most preemptors
FLOOR_EPS_GPU_HOURS = 1e-9  # a loss this close to the floor reaches it


def cut_key(label: str, seed: int, index: int | None = None) -> str:
    """The seed string of a cut of cell ``label``'s seed ``seed`` (bench/floor.py: one cut per
    seed, no index; ``simulate --floor-cuts``: cuts 1..N of one seed)."""
    key = f"floor-cut-{label}-{seed}"
    return key if index is None else f"{key}-{index}"


def fits(job: Job, nodes: Sequence[TraceNode]) -> bool:
    """Whether every member could run on the cut's nodes at once, were they empty."""
    sizes = sorted((m.gpus for m in job.members), reverse=True)
    free = sorted((n.gpus for n in nodes), reverse=True)
    return len(sizes) <= len(free) and all(g <= f for g, f in zip(sizes, free, strict=False))


def cut(w: Workload, used: Sequence[TraceNode], key: str, *, nodes: int = CUT_NODES,
        jobs: int = CUT_JOBS, high: int = CUT_HIGH) -> tuple[Workload, list[TraceNode]]:
    """The small instance of the cell workload ``w`` on ``used`` seeded by ``key`` (see the
    module docstring)."""
    rng = random.Random(key)
    kept = rng.sample(list(used), min(nodes, len(used)))
    capacity = sum(n.gpus for n in kept)
    lows = [j for j in w.jobs if not j.high and fits(j, kept)
            and j.duration >= LOW_MIN_DURATION_SECONDS]
    highs = [j for j in w.jobs if j.high and fits(j, kept)]
    rng.shuffle(lows)
    rng.shuffle(highs)
    n_high = min(len(highs), rng.randint(1, high), jobs)  # never more than ``jobs`` in all
    chosen, filled = [], 0.0
    for j in lows:
        if filled >= LOW_FILL * capacity or len(chosen) >= jobs - n_high:
            break
        chosen.append(replace(j, arrival=rng.uniform(0.0, FILL_SECONDS), done_before=0.0))
        filled += j.gpu_share
    chosen += [replace(j, arrival=FILL_SECONDS + rng.uniform(0.0, HIGH_SPAN_SECONDS),
                       done_before=0.0) for j in highs[:n_high]]
    chosen.sort(key=lambda j: (j.arrival, j.id))
    chosen = [replace(j, id=k) for k, j in enumerate(chosen)]
    window = max((j.arrival for j in chosen), default=0.0) + 1.0
    return Workload(jobs=tuple(chosen), compress=w.compress,
                    offered_load=offered_load(chosen, capacity, 0.0, window), extra_pods=0,
                    window=window, capacity_gpus=capacity, params=w.params,
                    protocol=w.protocol), kept


@dataclass(frozen=True, kw_only=True)
class CutFloor:
    """One cut's floor: ``result`` None when its search passed the simulation budget."""

    key: str
    jobs: int
    result: hindsight.HindsightResult | None

    @property
    def contended(self) -> bool:
        """Whether anybody preempted or lost anything (else there is nothing to compare)."""
        r = self.result
        return r is not None and (max(r.policy_gpu_hours.values()) > 0 or r.decisions > 0)

    @property
    def positive(self) -> bool:
        """Contended with a floor above zero: the cuts a ratio to the floor is taken over."""
        return self.contended and self.result.floor_gpu_hours > FLOOR_EPS_GPU_HOURS


def floor_of(w: Workload, used: Sequence[TraceNode], config: SimConfig, key: str, *,
             nodes: int = CUT_NODES, jobs: int = CUT_JOBS, high: int = CUT_HIGH,
             max_simulations: int = hindsight.MAX_SIMULATIONS) -> CutFloor:
    """The floor and every registry policy's loss on the cut of ``w`` seeded by ``key``."""
    small, kept = cut(w, used, key, nodes=nodes, jobs=jobs, high=high)
    try:
        r = hindsight.floor(small, kept, config, max_simulations=max_simulations)
    except hindsight.HindsightLimit:
        r = None
    return CutFloor(key=key, jobs=len(small.jobs), result=r)


def vs_floor(cuts: Sequence[CutFloor], policy: str, *, seed: int = 1) -> stats.Estimate | None:
    """``policy``'s loss ÷ the floor: the median over the cuts whose floor is above zero, with
    its bootstrap 95 % interval over those cuts (None: no such cut)."""
    positive = [c.result for c in cuts if c.positive]
    if any(policy not in r.policy_gpu_hours for r in positive):
        return None  # not in the registry the cuts replay (planners.KNOWN): a Kueue row
    return stats.bootstrap_ratio([r.policy_gpu_hours[policy] for r in positive],
                                 [r.floor_gpu_hours for r in positive], seed=seed)



@dataclass(frozen=True, kw_only=True)
class FloorSummary:
    """Each policy's loss ÷ the floor over a cell's cuts, and what went into it."""

    label: str  # the cell
    seeds: tuple[int, ...]  # the cell's seeds the cuts were taken from
    nodes: int  # nodes per cut
    cuts: int  # cuts made
    contended: int  # cuts where anybody preempted or lost anything
    positive: int  # of those, cuts whose floor is above zero (the ratios' n)
    too_large: int  # cuts whose search passed the simulation budget (left out)
    ratios: tuple[tuple[str, stats.Estimate | None], ...]  # (policy, loss ÷ floor)

    def as_dict(self) -> dict:
        return {"cell": self.label, "seeds": list(self.seeds), "nodes_per_cut": self.nodes,
                "cuts": self.cuts, "contended_cuts": self.contended,
                "positive_floor_cuts": self.positive, "cuts_too_large": self.too_large,
                "vs_floor": {p: e.as_dict() if e else None for p, e in self.ratios}}

    def lines(self, ours: Sequence[str] = ()) -> list[str]:
        """What the ratios are, then one line per policy (``ours`` marked)."""
        seeds = ("seeds " if len(self.seeds) > 1 else "seed ") + ", ".join(map(str, self.seeds))
        head = (f"loss ÷ floor, median [95 % CI] over the {self.positive} of {self.cuts} seeded "
                f"{self.nodes}-node cuts of {self.label} ({seeds}) where the floor is above "
                f"0: the hindsight oracle's least loss (policies/sim/hindsight.py) on small "
                f"instances of this cell's job mix, not this run's totals")
        if self.too_large:
            head += f"; {self.too_large} cuts too large to search, left out"
        width = max((len(p) for p, _ in self.ratios), default=0) + 2
        rows = [f"  {p.ljust(width)}{_text(e)}{'  (ours)' if p in ours else ''}"
                for p, e in self.ratios]
        return [head, *rows]


def _text(e: stats.Estimate | None) -> str:
    if e is None:
        return "-"
    return f"{e.median:.2f} [{e.low:.2f}, {e.high:.2f}]"


def summarise(label: str, seeds: Sequence[int], cuts: Sequence[CutFloor],
              policies: Sequence[str], *, nodes: int = CUT_NODES) -> FloorSummary:
    """The cell's floor summary for ``policies`` from its ``cuts``."""
    contended = [c for c in cuts if c.contended]
    return FloorSummary(
        label=label, seeds=tuple(seeds), nodes=nodes, cuts=len(cuts), contended=len(contended),
        positive=sum(c.positive for c in contended),
        too_large=sum(c.result is None for c in cuts),
        ratios=tuple((p, vs_floor(cuts, p)) for p in policies))
