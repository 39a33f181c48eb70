"""Benchmark (b): planner lost work ÷ the exact optimum on random small instances.

Usage: python -m bench.optimality [--n 1000] [--seed 7] [--gang-sizes 2]
Target: median ratio <= 1.05.

Instances: 2–8 full nodes of 4 or 8 GPUs (up to ~60 pods), filled with 1–8-GPU pods of
random priority, checkpoint age and mode (some in gangs of 2–3), and a pending pod or a
gang (2 members; see --gang-sizes) of higher priority. The oracle enumerates eviction sets
in cost order. Prints one JSON line: median, p95 and worst ratio over instances where both
find a plan and the optimum loses work, plus how often the planner misses a plan the oracle
finds.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from ckpt_preempt.policies.baselines import oracle
from ckpt_preempt.policies.model.model import CheckpointMode, Node, Pod, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import preemption

NOW = 1_000_000.0


def instance(rng: random.Random, gang_sizes: tuple[int, ...] = (2,)) -> tuple[Snapshot, list[Pod]]:
    nodes, pods = [], []
    for i in range(rng.randint(2, 8)):
        gpus = rng.choice((4, 8))
        name = f"n{i}"
        nodes.append(Node(name=name, allocatable=Resources(cpu_milli=64000, memory_mib=512000,
                                                           gpus=gpus)))
        free = gpus
        while free > 0:  # full nodes: every plan needs victims
            g = min(free, rng.choice((1, 1, 2, 4, 8)))
            free -= g
            pods.append((name, g))
    built = []
    gang_left = 0
    gang = None
    for k, (node, g) in enumerate(pods):
        if gang_left == 0 and rng.random() < 0.2:
            gang, gang_left = f"default/seed/g{k}", rng.randint(2, 3)
        age = rng.uniform(600, 36000)
        mode = rng.choice(list(CheckpointMode))
        built.append(Pod(
            uid=f"p{k}", name=f"p{k}", priority=rng.choice((0, 10, 100, 1000)),
            requests=Resources(cpu_milli=1000, memory_mib=1024, gpus=g), node=node,
            start_time=NOW - age, checkpoint=mode,
            last_checkpoint=None if mode is CheckpointMode.NONE else NOW - rng.uniform(0, age),
            checkpoint_seconds=rng.uniform(30, 300), gang=gang if gang_left else None,
        ))
        gang_left = max(0, gang_left - 1)
    size = rng.choice((1,) * 3 * len(gang_sizes) + gang_sizes)  # a quarter are gangs
    g = rng.choice((1, 2, 4, 8))
    pre = [
        Pod(uid=f"pre{m}", name=f"pre{m}", priority=500,
            requests=Resources(cpu_milli=1000, memory_mib=1024, gpus=g),
            gang="default/seed/pre" if size > 1 else None)
        for m in range(size)
    ]
    return Snapshot(now=NOW, nodes=tuple(nodes), pods=tuple(built + pre)), pre


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--gang-sizes", default="2",
                    help="comma-separated sizes of preemptor gangs (a quarter of instances)")
    args = ap.parse_args()
    gang_sizes = tuple(int(x) for x in args.gang_sizes.split(","))
    rng = random.Random(args.seed)
    cfg = preemption.PlannerConfig(drain=True)
    ratios, misses, both_none, zero_opt, too_big, solved = [], 0, 0, 0, 0, 0
    started = time.monotonic()
    while solved + too_big < args.n:
        snap, pre = instance(rng, gang_sizes)
        try:
            best = oracle.solve(snap, pre, cfg)
        except oracle.OracleLimit:
            too_big += 1
            continue
        solved += 1
        plan = preemption.plan(snap, pre, cfg)
        if not best.feasible:
            both_none += not plan.feasible
            continue
        if not plan.feasible:
            misses += 1
            continue
        if best.lost_gpu_seconds == 0:
            zero_opt += 1
            if plan.lost_gpu_seconds > 1e-9:
                ratios.append(float("inf"))
            continue
        ratios.append(plan.lost_gpu_seconds / best.lost_gpu_seconds)
    ratios.sort()
    print(json.dumps({
        "benchmark": "planner_vs_oracle",
        "instances": solved,
        "skipped_too_large_for_oracle": too_big,
        "compared": len(ratios),
        "median": statistics.median(ratios),
        "p95": ratios[int(0.95 * (len(ratios) - 1))],
        "worst": ratios[-1],
        "optimal_share": sum(r <= 1 + 1e-9 for r in ratios) / len(ratios),
        "planner_found_no_plan_but_oracle_did": misses,
        "both_infeasible": both_none,
        "optimum_zero_cost": zero_opt,
        "target_median": 1.05,
        "seed": args.seed,
        "gang_sizes": list(gang_sizes),
        "wall_seconds": round(time.monotonic() - started, 1),
    }))


if __name__ == "__main__":
    main()
