"""Benchmark: each policy's loss ÷ the hindsight floor (policies/sim/hindsight.py), on small
instances.

Instances are cut, seeded, from two of the evidence run's cells, so they keep those cells'
job mix (sizes, gangs, checkpoint modes and intervals, drain times, restores):

- openb/stress: the openb trace under the stress protocol (``protocols.build``, scale 0.1);
- training/replay: the synthetic training scenario under the replay protocol.

A cut keeps ``--nodes`` seeded nodes of the cell's cluster and draws, seeded and without
replacement, the cell's jobs that fit those nodes: low-priority jobs of at least an hour (shorter
ones would mostly be gone when the preemptors come) until their GPUs reach
``LOW_FILL`` × the cut's GPUs (at most ``--jobs`` jobs in all), arriving uniformly in the first
half hour, then 1 to ``--high`` high-priority jobs arriving uniformly in the hour after. Each
job keeps the cell's size, gang, duration, checkpoint mode, interval, drain time and restore;
its arrival is the cut's (so the cluster is full when the preemptors come: a cut is a
contention test of the cell's job mix, not a replay of its timeline), and work done before the
cut (a replay's pre-filled jobs) is dropped. There is no warm-up. Only cuts where some policy
is charged anything count (the others, where nobody preempts, have nothing to compare); a
cut whose search exceeds the simulation budget is counted as too large and left out
(reported, not hidden).

Prints one JSON object: per style, per policy, the median of loss ÷ floor over the instances
whose floor is above zero, with a bootstrap 95 % CI over instances (``policies.sim.stats``),
and the same for loss ÷ the per-instance best of the baselines (``planners.TIMING_BASELINES``:
the four baselines and wait-then-evict), so both yardsticks are read on the same instances;
the share of instances where the policy reaches the floor, and how many instances had a zero
floor (and on how many of those each policy lost anything). Every cost is on (the simulator's
defaults, ``SimConfig()``), preemptor delay included.

Usage: python bench/floor.py [--seeds 20] [--nodes 2] [--jobs 32] [--high 4]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace

from evidence import EVIDENCE_SCALE  # bench/evidence.py, next to this script

from ckpt_preempt.controller import trace_files
from ckpt_preempt.policies.sim import hindsight, protocols, stats
from ckpt_preempt.policies.sim.engine import SimConfig
from ckpt_preempt.policies.sim.planners import KNOWN, TIMING_BASELINES
from ckpt_preempt.policies.sim.trace import TraceNode
from ckpt_preempt.policies.sim.workload import Job, Workload, offered_load

STYLES = {"openb/stress": ("openb", "stress"), "training/replay": ("training", "replay")}
LOW_FILL = 2.0  # low-priority GPUs drawn per GPU of the cut (assumption: enough to contend)
FILL_SECONDS = 1800.0  # low-priority jobs arrive in the first half hour
HIGH_SPAN_SECONDS = 3600.0  # high-priority jobs arrive in the hour after
LOW_MIN_DURATION_SECONDS = 3600.0  # shorter low-priority jobs are gone before most preemptors
FLOOR_EPS_GPU_HOURS = 1e-9  # a loss this close to the floor reaches it


def _fits(job: Job, nodes: list[TraceNode]) -> bool:
    """Whether every member could run on the cut's nodes at once, were they empty."""
    sizes = sorted((m.gpus for m in job.members), reverse=True)
    free = sorted((n.gpus for n in nodes), reverse=True)
    return len(sizes) <= len(free) and all(g <= f for g, f in zip(sizes, free, strict=False))


def cut(style: str, seed: int, *, nodes: int, jobs: int, high: int
        ) -> tuple[Workload, list[TraceNode]]:
    """The seeded small instance of ``style`` (see the module docstring)."""
    workload, protocol = STYLES[style]
    pods, trace_nodes = trace_files.load(workload)
    w, used = protocols.build(workload=workload, protocol=protocol, seed=seed, pods=pods,
                              nodes=trace_nodes, scale=EVIDENCE_SCALE)
    rng = random.Random(f"floor-cut-{style}-{seed}")
    kept = rng.sample(used, min(nodes, len(used)))
    capacity = sum(n.gpus for n in kept)
    lows = [j for j in w.jobs if not j.high and _fits(j, kept)
            and j.duration >= LOW_MIN_DURATION_SECONDS]
    highs = [j for j in w.jobs if j.high and _fits(j, kept)]
    rng.shuffle(lows)
    rng.shuffle(highs)
    n_high = min(len(highs), rng.randint(1, high))
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


def _choice_kinds(results: list[hindsight.HindsightResult]) -> dict[str, int]:
    """What the floors' paths chose at their decisions: a registry policy's plan, no plan, or
    a plan of the hindsight search's own that evicts now or waits (``+Ns``)."""
    kinds = {"registry_plan": 0, "no_plan": 0, "own_evict_now": 0, "own_wait": 0}
    for r in results:
        for label in r.choices:
            if label in KNOWN:
                kinds["registry_plan"] += 1
            elif label == "no plan":
                kinds["no_plan"] += 1
            else:
                kinds["own_wait" if " +" in label else "own_evict_now"] += 1
    return kinds


def measure(style: str, seeds: list[int], *, nodes: int, jobs: int, high: int,
            max_simulations: int, cfg: SimConfig) -> dict:
    """Floors and policy losses on ``style``'s cuts; the style's JSON section."""
    rows, idle, too_large = [], 0, []
    for seed in seeds:
        w, kept = cut(style, seed, nodes=nodes, jobs=jobs, high=high)
        try:
            r = hindsight.floor(w, kept, cfg, max_simulations=max_simulations)
        except hindsight.HindsightLimit:
            too_large.append(seed)
            continue
        if max(r.policy_gpu_hours.values()) <= 0 and r.decisions == 0:
            idle += 1  # nobody preempted: nothing to compare
            continue
        rows.append((seed, len(w.jobs), r))
    out: dict = {"instances": len(rows), "seeds_without_preemption": idle,
                 "seeds_too_large": len(too_large), "too_large": too_large,
                 "instance_seeds": [seed for seed, _, _ in rows],
                 "jobs_per_instance": [n for _, n, _ in rows],
                 "floor_gpu_hours": [round(r.floor_gpu_hours, 4) for _, _, r in rows],
                 "floor_search_decisions": [r.decisions for _, _, r in rows],
                 "simulations": [r.simulations for _, _, r in rows],
                 "floor_found_by": [r.found_by for _, _, r in rows],
                 "floor_choices": _choice_kinds([r for _, _, r in rows]),
                 "policies": {}}
    positive = [r for _, _, r in rows if r.floor_gpu_hours > FLOOR_EPS_GPU_HOURS]
    zero = [r for _, _, r in rows if r.floor_gpu_hours <= FLOOR_EPS_GPU_HOURS]
    out["zero_floor_instances"] = len(zero)
    for name in KNOWN:
        losses = [r.policy_gpu_hours[name] for r in positive]
        floors = [r.floor_gpu_hours for r in positive]
        est = stats.bootstrap_ratio(losses, floors, seed=1)
        every = [r.policy_gpu_hours[name] for _, _, r in rows]
        best = [min(r.policy_gpu_hours[b] for b in TIMING_BASELINES) for _, _, r in rows]
        vs_best = stats.bootstrap_ratio(every, best, seed=1)
        out["policies"][name] = {
            "vs_floor": est.as_dict() if est else None,
            "vs_best_baseline": vs_best.as_dict() if vs_best else None,
            "reaches_floor": sum(r.policy_gpu_hours[name] <= r.floor_gpu_hours
                                 + FLOOR_EPS_GPU_HOURS for _, _, r in rows),
            "loses_on_zero_floor": sum(r.policy_gpu_hours[name] > FLOOR_EPS_GPU_HOURS
                                       for r in zero),
            "lost_gpu_hours": [round(r.policy_gpu_hours[name], 4) for _, _, r in rows],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20, help="instances per style (seeds 1..N)")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=32)
    ap.add_argument("--high", type=int, default=4, help="most high-priority jobs per instance")
    ap.add_argument("--styles", default=",".join(STYLES))
    ap.add_argument("--max-simulations", type=int, default=hindsight.MAX_SIMULATIONS)
    ap.add_argument("--exact-reports", action="store_true",
                    help="no report lag or jitter and no failed or overrun drains: what is "
                         "left between a policy and the floor is foresight")
    args = ap.parse_args(argv)
    styles = args.styles.split(",")
    unknown = [s for s in styles if s not in STYLES]
    if unknown or min(args.seeds, args.nodes, args.jobs, args.high, args.max_simulations) < 1:
        print(f"floor.py: bad arguments (styles: {', '.join(STYLES)}; counts >= 1)",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    seeds = list(range(1, args.seeds + 1))
    cfg = SimConfig()
    if args.exact_reports:
        cfg = replace(cfg, report_lag_seconds=0.0, report_jitter_seconds=0.0,
                      drain_failure_share=0.0, drain_overrun_share=0.0)
    result = {"benchmark": "hindsight_floor", "seeds": seeds, "nodes": args.nodes,
              "max_jobs": args.jobs, "max_high_jobs": args.high,
              "max_simulations": args.max_simulations,
              "config": "exact reports, drains never fail" if args.exact_reports
              else "SimConfig() defaults",
              "styles": {s: measure(s, seeds, nodes=args.nodes, jobs=args.jobs,
                                    high=args.high, max_simulations=args.max_simulations, cfg=cfg)
                         for s in styles}}
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
