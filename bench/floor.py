"""Benchmark: each policy's loss ÷ the hindsight floor (policies/sim/hindsight.py), on small
instances cut from every cell of the evidence run.

Usage: python -m bench.floor [--seeds 40] [--styles CELL,...|all] [--procs 2]
Target: none of its own; it says how far each policy is from the best reachable, and whether
the issue's targets (ours <= 0.5 x the strongest baseline on openb, <= 0.3 on training) are
reachable at all on these cuts.

What: for each cell of bench/evidence.py (its workload, protocol, scale and replay windows; the
ablations excepted), one seeded cut per seed (``policies.sim.floor_cuts``: ``--nodes`` nodes,
at most ``--jobs`` jobs of which 1 to ``--high`` are high-priority, so the cluster is full when
the preemptors come: a contention test of the cell's job mix, not a replay of its timeline).
The hindsight search gives each cut's floor; every registry policy runs on the same cut. Every
cost is on (the simulator's defaults, ``SimConfig()``), preemptor delay included.

Prints one JSON object: per cell, per policy, the median of loss ÷ floor over the cuts whose
floor is above zero, with a bootstrap 95 % CI over cuts (``policies.sim.stats``), and the same
for loss ÷ the per-cut best of the baselines (``planners.TIMING_BASELINES``: the four baselines
and wait-then-evict), so both yardsticks are read on the same cuts; the share of cuts where the
policy reaches the floor; and per cell the floor ÷ the strongest baseline (the baseline with
the lowest median loss over the cell's cuts), i.e. the best any policy could do against it, and
the floor ÷ the per-cut best baseline. Cuts where nobody preempted, and cuts whose search passed
``--max-simulations``, are counted and left out.

``make bench`` writes bench/results/floor.json. ``--styles`` defaults to the cells with
contention (stress and replay of each workload); ``all`` adds the steady cells.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from bench.evidence import EVIDENCE_SCALE, cells
from ckpt_preempt.controller.app import trace_files
from ckpt_preempt.policies.sim import experiment, floor_cuts, hindsight, stats
from ckpt_preempt.policies.sim.engine import SimConfig
from ckpt_preempt.policies.sim.planners import KNOWN, TIMING_BASELINES

CELLS = {c.label: c for c in cells(EVIDENCE_SCALE, quick=False) if not c.ablation}
CONTENDED = tuple(label for label, c in CELLS.items() if c.protocol != "steady")


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


@functools.cache
def _trace(workload: str):
    return trace_files.load(workload)


def cut_floor(task: tuple[str, int, int, int, int, int, SimConfig]
              ) -> tuple[str, int, floor_cuts.CutFloor, float]:
    """One cut's floor (in a worker process), and the CPU seconds it took."""
    label, seed, nodes, jobs, high, max_simulations, cfg = task
    started = time.process_time()
    cell = CELLS[label]
    pods, trace_nodes = _trace(cell.workload)
    w, used = experiment.build(cell, seed, pods, trace_nodes)
    c = floor_cuts.floor_of(w, used, cfg, floor_cuts.cut_key(label, seed), nodes=nodes,
                            jobs=jobs, high=high, max_simulations=max_simulations)
    return label, seed, c, time.process_time() - started


def _est(e: stats.Estimate | None) -> dict | None:
    return e.as_dict() if e else None


def summarise(cuts: list[tuple[int, floor_cuts.CutFloor]], cpu_seconds: float) -> dict:
    """One cell's JSON section from its (seed, cut) pairs."""
    rows = [(seed, c) for seed, c in cuts if c.contended]
    results = [c.result for _, c in rows]
    too_large = [seed for seed, c in cuts if c.result is None]
    positive = [c.result for _, c in rows if c.positive]
    out: dict = {"instances": len(rows),
                 "seeds_without_preemption": len(cuts) - len(rows) - len(too_large),
                 "seeds_too_large": len(too_large), "too_large": too_large,
                 "cpu_seconds": round(cpu_seconds, 1),
                 "instance_seeds": [seed for seed, _ in rows],
                 "jobs_per_instance": [c.jobs for _, c in rows],
                 "floor_gpu_hours": [round(r.floor_gpu_hours, 4) for r in results],
                 "floor_search_decisions": [r.decisions for r in results],
                 "simulations": [r.simulations for r in results],
                 "floor_found_by": [r.found_by for r in results],
                 "floor_choices": _choice_kinds(results),
                 "zero_floor_instances": len(results) - len(positive),
                 "policies": {}}
    best = [min(r.policy_gpu_hours[b] for b in TIMING_BASELINES) for r in results]
    for name in KNOWN:
        every = [r.policy_gpu_hours[name] for r in results]
        out["policies"][name] = {
            "vs_floor": _est(floor_cuts.vs_floor([c for _, c in rows], name)),
            "vs_best_baseline": _est(stats.bootstrap_ratio(every, best, seed=1)),
            "reaches_floor": sum(r.policy_gpu_hours[name] <= r.floor_gpu_hours
                                 + floor_cuts.FLOOR_EPS_GPU_HOURS for r in results),
            "loses_on_zero_floor": sum(r.policy_gpu_hours[name] > floor_cuts.FLOOR_EPS_GPU_HOURS
                                       for r in results
                                       if r.floor_gpu_hours <= floor_cuts.FLOOR_EPS_GPU_HOURS),
            "lost_gpu_hours": [round(x, 4) for x in every],
        }
    if results:
        strongest = min(TIMING_BASELINES, key=lambda b: (
            stats.median([r.policy_gpu_hours[b] for r in results]), TIMING_BASELINES.index(b)))
        floors = [r.floor_gpu_hours for r in results]
        out["strongest_baseline"] = strongest
        out["floor_vs_strongest"] = _est(stats.bootstrap_ratio(
            floors, [r.policy_gpu_hours[strongest] for r in results], seed=1))
        out["floor_vs_best_baseline"] = _est(stats.bootstrap_ratio(floors, best, seed=1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20, help="cuts per cell (seeds 1..N)")
    ap.add_argument("--nodes", type=int, default=floor_cuts.CUT_NODES)
    ap.add_argument("--jobs", type=int, default=floor_cuts.CUT_JOBS)
    ap.add_argument("--high", type=int, default=floor_cuts.CUT_HIGH,
                    help="most high-priority jobs per instance")
    ap.add_argument("--styles", default=",".join(CONTENDED),
                    help="cells, comma-separated, or 'all' (default: the stress and replay cells)")
    ap.add_argument("--procs", type=int, default=1, help="worker processes")
    ap.add_argument("--max-simulations", type=int, default=hindsight.MAX_SIMULATIONS)
    ap.add_argument("--exact-reports", action="store_true",
                    help="no report lag or jitter and no failed or overrun drains: what is "
                         "left between a policy and the floor is foresight")
    args = ap.parse_args(argv)
    styles = list(CELLS) if args.styles == "all" else args.styles.split(",")
    unknown = [s for s in styles if s not in CELLS]
    if unknown or min(args.seeds, args.nodes, args.jobs, args.high, args.max_simulations,
                      args.procs) < 1:
        print(f"floor.py: bad arguments (styles: {', '.join(CELLS)} or all; counts >= 1)",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    seeds = list(range(1, args.seeds + 1))
    cfg = SimConfig()
    if args.exact_reports:
        cfg = replace(cfg, report_lag_seconds=0.0, report_jitter_seconds=0.0,
                      drain_failure_share=0.0, drain_overrun_share=0.0)
    tasks = [(s, seed, args.nodes, args.jobs, args.high, args.max_simulations, cfg)
             for s in styles for seed in seeds]
    done: dict[str, list] = {s: [] for s in styles}
    cpu = dict.fromkeys(styles, 0.0)
    with ProcessPoolExecutor(max_workers=args.procs) as pool:
        for label, seed, c, seconds in pool.map(cut_floor, tasks):
            done[label].append((seed, c))
            cpu[label] += seconds
            print(f"\r{label} seed {seed} ({time.monotonic() - started:.0f} s)", end="",
                  file=sys.stderr, flush=True)
    print(file=sys.stderr)
    result = {"benchmark": "hindsight_floor", "seeds": seeds, "nodes": args.nodes,
              "max_jobs": args.jobs, "max_high_jobs": args.high,
              "max_simulations": args.max_simulations, "scale": EVIDENCE_SCALE,
              "config": "exact reports, drains never fail" if args.exact_reports
              else "SimConfig() defaults",
              "styles": {s: summarise(done[s], cpu[s]) for s in styles}}
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
