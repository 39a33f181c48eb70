"""Benchmark (a): lost work of each policy ÷ the strongest baseline on `simulate`'s default cell.

Usage: python -m bench.lost_work [--seeds 1,2,3,4,5] [--scale 0.25]
Target: none: a measurement (good: ours below 1.0 of the strongest baseline, interval included).

Runs the default scenario (openb, stress protocol) for several seeds under every policy and
prints one JSON line: per policy the median lost GPU-hours and the median of per-seed ratios to
the strongest baseline (the baseline losing least in the cell) and to kube-default, each with
its 95 % bootstrap interval over seeds. The full picture (every protocol, ablations) is
bench/evidence.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib import resources

from ckpt_preempt.policies.sim import experiment, planners, trace


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--scale", type=float, default=experiment.DEFAULT_SCALE)
    args = ap.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        print(f"lost_work: --seeds expects integers like 1,2,3, got {args.seeds!r}",
              file=sys.stderr)
        return 2
    data = resources.files("ckpt_preempt.policies").joinpath("data")
    pods = trace.parse_pods(data.joinpath("openb_pod_list_default.csv").read_text().splitlines())
    nodes = trace.parse_nodes(
        data.joinpath("openb_node_list_gpu_node.csv").read_text().splitlines())
    started = time.monotonic()
    cell = experiment.Cell(scale=args.scale)
    result = experiment.run_cell(cell, seeds, planners.POLICIES, pods, nodes,
                                 clock=time.perf_counter)
    print(json.dumps({
        "benchmark": "lost_work_ratio",
        "cell": result.cell.label, "scale": args.scale, "seeds": seeds,
        "strongest_baseline": result.strongest_baseline,
        "policies": {p.policy: {
            "lost_gpu_hours": p.lost.as_dict(2),
            "ratio_vs_strongest": p.vs_strongest.as_dict(3) if p.vs_strongest else None,
            "ratio_vs_kube_default": p.vs_kube_default.as_dict(3) if p.vs_kube_default else None,
            "gangs_broken_median": p.gangs_broken,
            "max_preemptions_per_workload": p.max_preemptions_per_workload,
            "plans_invalid": p.plans_invalid,
        } for p in result.policies},
        "wall_seconds": round(time.monotonic() - started, 1),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
