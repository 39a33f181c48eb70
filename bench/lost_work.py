"""Benchmark (a): lost work of checkpoint-aware planning ÷ kube-default on the default replay.

Runs `ckpt-preempt simulate`'s default scenario for several seeds and prints one JSON line
with the per-seed ratios and their median. Targets: ≤ 0.5 without drain, ≤ 0.15 with drain.
Usage: python bench/lost_work.py [--seeds 1,2,3,4,5] [--scale 0.25]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from importlib import resources

from policies.sim import planners, report, trace, workload


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--scale", type=float, default=workload.WorkloadParams().scale)
    args = ap.parse_args()
    data = resources.files("policies").joinpath("data")
    pods = trace.parse_pods(data.joinpath("openb_pod_list_default.csv").read_text().splitlines())
    node_text = data.joinpath("openb_node_list_gpu_node.csv").read_text()
    nodes = trace.parse_nodes(node_text.splitlines())
    per_seed = []
    started = time.monotonic()
    for seed in (int(s) for s in args.seeds.split(",")):
        params = workload.WorkloadParams(seed=seed, scale=args.scale)
        cmp = report.compare(pods, nodes, params, planners.POLICIES, clock=time.perf_counter)
        by = {r.policy: r for r in cmp.results}
        per_seed.append({
            "seed": seed,
            "offered_load": round(cmp.workload.offered_load, 3),
            "lost_gpu_hours": {p: round(r.lost_gpu_hours, 2) for p, r in by.items()},
            "gangs_broken": {p: r.gangs_broken for p, r in by.items()},
            "ratio_no_drain": cmp.lost_ratio("checkpoint-aware"),
            "ratio_drain": cmp.lost_ratio("checkpoint-aware-drain"),
        })
    ratios = {
        k: [s[k] for s in per_seed if s[k] is not None] for k in ("ratio_no_drain", "ratio_drain")
    }
    print(json.dumps({
        "benchmark": "lost_work_ratio",
        "scenario": {"scale": args.scale, **{
            k: v for k, v in workload.WorkloadParams().describe().items() if k != "seed"
        }},
        "seeds": per_seed,
        "median_ratio_no_drain": statistics.median(ratios["ratio_no_drain"]),
        "median_ratio_drain": statistics.median(ratios["ratio_drain"]),
        "worst_ratio_no_drain": max(ratios["ratio_no_drain"]),
        "worst_ratio_drain": max(ratios["ratio_drain"]),
        "targets": {"no_drain": 0.5, "drain": 0.15},
        "wall_seconds": round(time.monotonic() - started, 1),
    }))


if __name__ == "__main__":
    main()
