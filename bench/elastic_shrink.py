"""Elastic shrink on or off (the ablation), on the training scenario, paired by seed.

Usage: python -m bench.elastic_shrink [--seeds 10] [--scale 0.1]
[--out bench/results/elastic_shrink.json]
Target: none: a measurement (good: shrink on ÷ off below 1.0 for ours, interval included).

Each seed builds one workload (``policies.sim.protocols``; the training scenario draws its
elastic jobs, ``policies.sim.scenarios``), and every policy replays it with shrink on and off
(``SimConfig.shrink``): ours (``checkpoint-aware-drain``) and cost-aware (our search, blind to
checkpoints) shrink when it is on; the kube baselines never do. Reported per protocol: the
median of the per-seed ratios of lost GPU-hours, shrink on ÷ off for ours and for cost-aware,
and ours ÷ the strongest baseline within each setting, with 95 % bootstrap intervals over seeds
(``policies.sim.stats``); and the medians of what a shrink trades against (preemptor waits, GPU
utilisation, victims, shrinks, grow-backs).

It prints one JSON line (the ratios); ``--out`` gets the whole document (medians, per-seed
values, each seed's workload).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from ckpt_preempt.controller.app import trace_files
from ckpt_preempt.policies.sim import experiment, planners, stats

OURS = planners.DRAIN_POLICY
POLICIES = (*planners.BASELINES, OURS)
SETTINGS = ("on", "off")
MEASURES = ("lost_gpu_hours", "lost_work_gpu_hours", "restart_gpu_hours",
            "preemptor_wait_p50_s", "preemptor_wait_p95_s", "gpu_utilisation", "victims",
            "preemptions", "gangs_broken", "plans_invalid", "high_jobs_waiting", "shrinks",
            "grown_back")


def run_seed(task: tuple[str, float, int]) -> tuple[str, int, dict, float]:
    """Every policy on one seed, shrink on and off: measures by setting and policy, and the
    seconds it took."""
    protocol, scale, seed = task
    started = time.perf_counter()
    pods, nodes = trace_files.load("training")
    cell = experiment.Cell(workload="training", protocol=protocol, scale=scale)
    out: dict = {}
    for setting in SETTINGS:
        c = replace(cell, config=replace(cell.config, shrink=setting == "on"))
        runs = experiment.run_seed(c, seed, POLICIES, pods, nodes)
        out[setting] = {r.policy: {m: getattr(r.result, m) for m in MEASURES} for r in runs}
        out["workload"] = dict(runs[0].workload)
    return protocol, seed, out, time.perf_counter() - started


def _estimate(e: stats.Estimate | None) -> dict | None:
    if e is None:
        return None
    return {"median": round(e.median, 4), "low": round(e.low, 4), "high": round(e.high, 4),
            "n": e.n}


def summarise(by_seed: dict[int, dict]) -> dict:
    seeds = sorted(by_seed)

    def lost(setting: str, policy: str) -> list[float]:
        return [by_seed[s][setting][policy]["lost_gpu_hours"] for s in seeds]

    strongest = {st: min(planners.BASELINES, key=lambda b, st=st: (
        stats.median(lost(st, b)), planners.BASELINES.index(b))) for st in SETTINGS}
    return {
        "seeds": seeds,
        "strongest_baseline": strongest,
        "lost_ratio_shrink_on_vs_off": {p: _estimate(stats.bootstrap_ratio(
            lost("on", p), lost("off", p))) for p in POLICIES},
        "lost_ratio_vs_strongest": {st: _estimate(stats.bootstrap_ratio(
            lost(st, OURS), lost(st, strongest[st]))) for st in SETTINGS},
        "seeds_where_shrink_lost_more": {p: sum(a > b for a, b in zip(
            lost("on", p), lost("off", p), strict=True)) for p in POLICIES},
        "medians": {st: {p: {m: stats.median([float(by_seed[s][st][p][m]) for s in seeds])
                             for m in MEASURES} for p in POLICIES} for st in SETTINGS},
        "workload": {s: by_seed[s]["workload"] for s in seeds},
        "per_seed_lost_gpu_hours": {st: {p: dict(zip(seeds, lost(st, p), strict=True))
                                         for p in POLICIES} for st in SETTINGS},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--scale", type=float, default=0.1)
    p.add_argument("--protocols", default="stress,replay")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.seeds < 1 or not 0 < args.scale <= 1 or args.jobs < 1:
        print("error: --seeds and --jobs must be positive, --scale in (0, 1]", file=sys.stderr)
        return 2
    protocols = [x for x in args.protocols.split(",") if x]
    tasks = [(pr, args.scale, s) for pr in protocols for s in range(1, args.seeds + 1)]
    started = time.perf_counter()
    results: dict[str, dict[int, dict]] = {pr: {} for pr in protocols}
    cpu = 0.0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for protocol, seed, out, seconds in pool.map(run_seed, tasks):
            results[protocol][seed] = out
            cpu += seconds
    doc = {
        "command": "python -m bench.elastic_shrink " + " ".join(argv or sys.argv[1:]),
        "scale": args.scale, "policy": OURS,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(cpu, 1),
        "protocols": {pr: summarise(by_seed) for pr, by_seed in results.items()},
    }
    text = json.dumps(doc, indent=1, sort_keys=True)
    if args.out:
        args.out.write_text(text + "\n")
    keys = ("strongest_baseline", "lost_ratio_shrink_on_vs_off", "lost_ratio_vs_strongest",
            "seeds_where_shrink_lost_more")
    print(json.dumps({"wall_seconds": doc["wall_seconds"], "protocols": {
        pr: {k: s[k] for k in keys} for pr, s in doc["protocols"].items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
