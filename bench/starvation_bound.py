"""Benchmark (issue 22): the starvation bound and the escalating fairness penalty, every policy.

Usage: python -m bench.starvation_bound [--seeds 1-10] [--scale 0.05] [--jobs 2] [--out FILE]
       [--cells openb/replay,...] [--variants "bound on",...]
Target: none: a measurement (good: with the bound, no job preempted more than 4 times in 24 h,
at a paired cost in lost GPU-hours whose interval reaches 0).

For each cell (openb/stress, openb/replay, training/replay at a small scale) and seed, replays
one workload under every policy (``planners.POLICIES``) in three variants of the simulator:

- ``bound on``: the defaults (``policies.planner.bound``: at most 4 preemptions of one job per 24 h,
  every policy; the planner's fairness penalty doubles with the job's preemptions in that
  window);
- ``bound off``: the same without the bound (``max_preemptions_per_window`` 0), penalty kept;
- ``neither``: no bound and the 1-hour fairness count only, as before issue 22.

Reports per cell, policy and variant the most preemptions any one job suffered (the most over
seeds and the median of the per-seed maxima), the 99th percentile of preemptions per preempted
job (median over seeds), the lost GPU-hours (median with a 95 % bootstrap interval over seeds),
preemptions, preemptor wait p95 and preemptors still waiting at the end; and, paired per seed,
what the bound costs: ``bound on`` minus ``bound off`` lost GPU-hours (median of the per-seed
differences with a 95 % bootstrap interval). Writes bench/results/starvation_bound.json and
prints a markdown table.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

from ckpt_preempt.controller.app import trace_files
from ckpt_preempt.policies.sim import engine, experiment, planners, stats

CELLS = (("openb", "stress"), ("openb", "replay"), ("training", "replay"))
VARIANTS = {
    "bound on": {},
    "bound off": {"max_preemptions_per_window": 0},
    "neither": {"max_preemptions_per_window": 0, "escalating_penalty": False},
}
RESULTS = Path(__file__).resolve().parent / "results" / "starvation_bound.json"


def bound_defaults() -> dict[str, float]:
    """The simulator's default bound and fairness-penalty settings, as a result records them."""
    return {k: getattr(engine.SimConfig(), k) for k in (
        "max_preemptions_per_window", "preemption_bound_window_seconds",
        "fairness_penalty_seconds", "fairness_window_seconds")}


@functools.cache
def _trace(workload: str):
    return trace_files.load(workload)


def run_task(task: tuple[str, str, float, int, str]) -> tuple[tuple, list[dict], float]:
    """One seed of one cell in one variant, every policy (in a worker process)."""
    wl, protocol, scale, seed, variant = task
    started = time.perf_counter()
    pods, nodes = _trace(wl)
    cfg = replace(engine.SimConfig(), **VARIANTS[variant])
    cell = experiment.Cell(workload=wl, protocol=protocol, scale=scale, config=cfg)
    out = []
    for run in experiment.run_seed(cell, seed, planners.POLICIES, pods, nodes):
        r = run.result
        out.append({
            "policy": r.policy, "lost_gpu_hours": r.lost_gpu_hours,
            "preemptions": r.preemptions,
            "max_preemptions_per_workload": r.max_preemptions_per_workload,
            "p99_preemptions_per_workload": r.p99_preemptions_per_workload,
            "preemptor_wait_p95_s": r.preemptor_wait_p95_s,
            "high_jobs_waiting": r.high_jobs_waiting, "plans_invalid": r.plans_invalid,
        })
    return task, out, time.perf_counter() - started


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def summarise(rows: dict[tuple, list[dict]], seeds: list[int], scale: float,
              cells=CELLS, variants=tuple(VARIANTS)) -> list[dict]:
    out = []
    for wl, protocol in cells:
        for policy in planners.POLICIES:
            entry: dict = {"cell": f"{wl}/{protocol}", "policy": policy}
            by_variant = {}
            for variant in variants:
                per_seed = {s: next(r for r in rows[(wl, protocol, scale, s, variant)]
                                    if r["policy"] == policy) for s in seeds}
                by_variant[variant] = per_seed
                maxima = [per_seed[s]["max_preemptions_per_workload"] for s in seeds]
                entry[variant] = {
                    "max_preemptions_per_workload": max(maxima),
                    "max_preemptions_per_workload_median": stats.median(maxima),
                    "p99_preemptions_per_workload_median": stats.median(
                        [per_seed[s]["p99_preemptions_per_workload"] for s in seeds]),
                    "lost_gpu_hours": stats.bootstrap_median(
                        [per_seed[s]["lost_gpu_hours"] for s in seeds]).as_dict(2),
                    "preemptions_median": stats.median(
                        [per_seed[s]["preemptions"] for s in seeds]),
                    "preemptor_wait_p95_s_median": round(stats.median(
                        [per_seed[s]["preemptor_wait_p95_s"] for s in seeds]), 1),
                    "high_jobs_waiting_total": sum(
                        per_seed[s]["high_jobs_waiting"] for s in seeds),
                    "plans_invalid_total": sum(per_seed[s]["plans_invalid"] for s in seeds),
                    "max_per_seed": maxima,
                    "lost_gpu_hours_per_seed": [round(per_seed[s]["lost_gpu_hours"], 3)
                                                for s in seeds],
                }
            if "bound on" in by_variant and "bound off" in by_variant:
                on, off = by_variant["bound on"], by_variant["bound off"]
                entry["bound_cost_gpu_hours"] = stats.bootstrap_median(
                    [on[s]["lost_gpu_hours"] - off[s]["lost_gpu_hours"] for s in seeds]
                ).as_dict(2)
            out.append(entry)
    return out


def versus(summary: list[dict], variant: str, mine: str, base: str) -> dict:
    """Per cell, ``mine``'s lost GPU-hours against ``base``'s in ``variant``, paired per seed:
    the seeds where it lost more, and the median per-seed ratio with a 95 % interval."""
    out = {}
    for cell in dict.fromkeys(e["cell"] for e in summary):
        a, b = (next(e for e in summary if e["cell"] == cell and e["policy"] == p)[variant]
                ["lost_gpu_hours_per_seed"] for p in (mine, base))
        ratio = stats.bootstrap_ratio(a, b)
        out[cell] = {"seeds_losing_more": sum(x > y for x, y in zip(a, b, strict=True)),
                     "seeds": len(a), "ratio": ratio.as_dict(3) if ratio else None}
    return out


def markdown(summary: list[dict]) -> str:
    lines = ["| cell | policy | max (median) / p99 on | off | neither | lost GPU-h on | off | "
             "bound cost GPU-h (on − off) |", "|" + "---|" * 8]

    def mp(v: dict) -> str:
        most, typical = v["max_preemptions_per_workload"], v["max_preemptions_per_workload_median"]
        return f"{most} ({typical:g}) / {v['p99_preemptions_per_workload_median']:g}"

    def est(e: dict) -> str:
        return f"{e['median']:.1f} [{e['ci95'][0]:.1f}, {e['ci95'][1]:.1f}]"

    for e in summary:
        lines.append(f"| {e['cell']} | {e['policy']} | {mp(e['bound on'])} | {mp(e['bound off'])} "
                     f"| {mp(e['neither'])} | {est(e['bound on']['lost_gpu_hours'])} | "
                     f"{est(e['bound off']['lost_gpu_hours'])} | "
                     f"{est(e['bound_cost_gpu_hours'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--scale", type=float, default=0.05)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--cells", default=",".join(f"{w}/{p}" for w, p in CELLS))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args(argv)
    cells = [tuple(c.split("/", 1)) for c in args.cells.split(",")]
    variants = args.variants.split(",")
    if not set(cells) <= set(CELLS) or not set(variants) <= set(VARIANTS):
        print(f"starvation_bound: --cells from {args.cells!r} and --variants from "
              f"{', '.join(VARIANTS)} only", file=sys.stderr)
        return 2
    try:
        seeds = _seeds(args.seeds)
    except ValueError:
        print(f"starvation_bound: --seeds {args.seeds!r} is not 1-10 or 1,2,3", file=sys.stderr)
        return 2
    if not seeds or args.jobs < 1 or not 0 < args.scale <= 1:
        print("starvation_bound: --seeds and --jobs must be >= 1 and 0 < --scale <= 1",
              file=sys.stderr)
        return 2
    tasks = [(wl, p, args.scale, s, v) for wl, p in cells for s in seeds for v in variants]
    started = time.monotonic()
    rows: dict[tuple, list[dict]] = {}
    busy = 0.0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for k, fut in enumerate(as_completed(pool.submit(run_task, t) for t in tasks), 1):
            task, out, secs = fut.result()
            rows[task] = out
            busy += secs
            print(f"[{k}/{len(tasks)}] {task} {secs:.0f} s", file=sys.stderr)
    summary = summarise(rows, seeds, args.scale, cells, variants)
    doc = {
        "benchmark": "starvation_bound",
        "scenario": {"cells": [f"{w}/{p}" for w, p in cells], "scale": args.scale,
                     "seeds": seeds, "variants": {v: VARIANTS[v] for v in variants},
                     "policies": list(planners.POLICIES),
                     "defaults": bound_defaults()},
        "wall_seconds": round(time.monotonic() - started, 1),
        "cpu_seconds_in_workers": round(busy, 1),
        "results": summary,
        "drain_vs_cost_aware": {v: versus(summary, v, "checkpoint-aware-drain", "cost-aware")
                                for v in variants},
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    if set(variants) == set(VARIANTS):
        print(markdown(summary))
    print(json.dumps(doc["drain_vs_cost_aware"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
