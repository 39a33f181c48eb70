"""Benchmark (d): the unknown-checkpoint policy and the fairness guard, measured on the replay.

Usage: python -m bench.fairness [--seeds 1,2,3,4,5] [--scale 0.25] [--share-silent 0.0]
[--unknown start-time,cluster-median,assume:30m] [--penalties 0,900,1800,3600]
[--window 3600] [--jobs 2]
Target: none: a measurement; it chose the shipped defaults (good: a variant that lowers the most
preemptions of one job without raising lost GPU-hours beyond the interval of the first).

For each seed, runs `ckpt-preempt simulate`'s default scenario under kube-default (the
baseline) and under checkpoint-aware-drain once per variant: every unknown-checkpoint policy
crossed with every fairness penalty (seconds per GPU per recent preemption; 0 turns the guard
off). Reports per variant the lost GPU-hours, the ratio to kube-default, the most preemptions
any one job suffered, how many jobs were preempted more than once, and which share of the
preempted jobs report no checkpoint (next to their share of all low-priority jobs), each with
the mean over seeds, a 95 % t-interval, and the paired difference to the first variant.
``--share-silent`` makes that share of the jobs that checkpoint keep quiet about it.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from importlib import resources

from ckpt_preempt.policies.sim import engine, trace, workload

T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228}  # Student's t, two-sided 95 %, by degrees of freedom


def _inputs(scale: float, seed: int, silent: float):
    data = resources.files("ckpt_preempt.policies").joinpath("data")
    pods = trace.parse_pods(data.joinpath("openb_pod_list_default.csv").read_text().splitlines())
    nodes = trace.parse_nodes(
        data.joinpath("openb_node_list_gpu_node.csv").read_text().splitlines())
    params = workload.WorkloadParams(seed=seed, scale=scale, share_silent=silent)
    pods, nodes = workload.scale_down(pods, nodes, params)
    return workload.generate(pods, nodes, params), nodes


def run_one(job: tuple) -> dict:
    seed, scale, silent, policy, unknown, penalty, window = job
    w, nodes = _inputs(scale, seed, silent)
    cfg = engine.SimConfig(unknown_checkpoint=unknown, fairness_penalty_seconds=penalty,
                           fairness_window_seconds=window)
    r = engine.Simulation(w, nodes, policy, cfg).run()
    low = [j for j in w.jobs if not j.high]
    unreported = sum(j.interval is None or not j.reports for j in low)
    hits = sum(n * k for n, k in r.preemptions_per_workload.items())
    return {
        "seed": seed, "policy": policy, "unknown": unknown, "penalty": penalty,
        "lost_gpu_hours": r.lost_gpu_hours, "preemptions": r.preemptions,
        "max_preemptions_per_workload": r.max_preemptions_per_workload,
        "jobs_preempted_more_than_once": sum(
            k for n, k in r.preemptions_per_workload.items() if n > 1),
        "preemptions_per_workload": {str(n): k for n, k in r.preemptions_per_workload.items()},
        "unreported_share_of_victims": r.victim_jobs_unreported / hits if hits else 0.0,
        "unreported_share_of_jobs": unreported / len(low) if low else 0.0,
        "gangs_broken": r.gangs_broken, "plans_invalid": r.plans_invalid,
        "wait_p95_s": r.preemptor_wait_p95_s,
    }


def _interval(xs: list[float]) -> dict:
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return {"mean": round(mean, 4)}
    half = T_975.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs))
    return {"mean": round(mean, 4), "ci95": [round(mean - half, 4), round(mean + half, 4)]}


METRICS = ("lost_gpu_hours", "ratio_vs_kube_default", "max_preemptions_per_workload",
           "jobs_preempted_more_than_once", "unreported_share_of_victims")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--scale", type=float, default=workload.WorkloadParams().scale)
    ap.add_argument("--share-silent", type=float, default=0.0)
    ap.add_argument("--unknown", default="start-time,cluster-median,assume:30m")
    ap.add_argument("--penalties", default="0,900,1800,3600")
    ap.add_argument("--window", type=float, default=engine.SimConfig().fairness_window_seconds)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = [(u, float(p)) for u in args.unknown.split(",")
                for p in args.penalties.split(",")]
    started = time.monotonic()
    jobs = [(s, args.scale, args.share_silent, "kube-default", "start-time", 0.0, args.window)
            for s in seeds]
    jobs += [(s, args.scale, args.share_silent, "checkpoint-aware-drain", u, p, args.window)
             for s in seeds for u, p in variants]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        runs = list(pool.map(run_one, jobs))
    base = {r["seed"]: r for r in runs if r["policy"] == "kube-default"}
    for r in runs:
        lost = base[r["seed"]]["lost_gpu_hours"]  # a seed where kube-default lost nothing: no ratio
        r["ratio_vs_kube_default"] = r["lost_gpu_hours"] / lost if lost else None
    aware = [r for r in runs if r["policy"] != "kube-default"]

    def of(u: str, p: float) -> dict[int, dict]:
        return {r["seed"]: r for r in aware if (r["unknown"], r["penalty"]) == (u, p)}

    ref = of(*variants[0])
    summary = []
    for u, p in variants:
        mine = of(u, p)
        row: dict = {"unknown_checkpoint": u, "fairness_penalty_seconds": p}
        for m in METRICS:
            have = [s for s in seeds if mine[s][m] is not None and ref[s][m] is not None]
            row[m] = _interval([mine[s][m] for s in have]) if have else None
            if (u, p) != variants[0] and have:
                row[m]["paired_difference"] = _interval([mine[s][m] - ref[s][m] for s in have])
        row["max_preemptions_per_workload"]["per_seed"] = [
            mine[s]["max_preemptions_per_workload"] for s in seeds]
        summary.append(row)
    print(json.dumps({
        "benchmark": "fairness_and_unknown_checkpoint",
        "scenario": {"scale": args.scale, "share_silent": args.share_silent,
                     "fairness_window_seconds": args.window, "seeds": seeds},
        "kube_default": {
            "lost_gpu_hours": _interval([base[s]["lost_gpu_hours"] for s in seeds]),
            "max_preemptions_per_workload": _interval(
                [base[s]["max_preemptions_per_workload"] for s in seeds]),
            "unreported_share_of_victims": _interval(
                [base[s]["unreported_share_of_victims"] for s in seeds]),
            "unreported_share_of_jobs": _interval(
                [base[s]["unreported_share_of_jobs"] for s in seeds]),
        },
        "variants": summary,
        "runs": runs,
        "wall_seconds": round(time.monotonic() - started, 1),
    }))


if __name__ == "__main__":
    main()
