"""When to preempt: checkpoint-aware-drain with timing (policies.planner.timing) against the same
policy
without it (the "timing off" ablation), the strongest baseline and kube-default.

Usage: python -m bench.timing [--seeds 10] [--scale 0.1] [--jobs 2] [--out DIR]
Target: none: a measurement (good: timing on ÷ off and ÷ the strongest baseline below 1.0 in
every cell, interval included).

Cells: openb/stress and training/replay (small scale), and openb/stress with no declared ends
(``NO_ENDS``), seeds 1..N; every policy replays each
seed's workload, so values are paired per seed. The compared quantity is the **total** a policy
costs: lost GPU-hours (unsaved work + restarts) **plus the delay** its plans impose on
preemptors (preemptor GPUs × wait beyond the grace period), since waiting trades one for the
other. The strongest baseline is the one of ``planners.TIMING_BASELINES`` (kube-default,
kube-workload, cost-aware, wait-then-evict) with the lowest median total in the cell, chosen on
the seeds it is compared on (which favours the baseline). Ratios are medians of per-seed ratios
with 95 % bootstrap intervals over seeds (policies/sim/stats.py).

Writes bench/results/timing.json and timing.md, progress on stderr, one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from ckpt_preempt.controller.app import trace_files
from ckpt_preempt.policies.sim import experiment, planners, report, stats

CELLS = (("openb", "stress"), ("training", "replay"))
# the simulator's jobs declare their true end (SimConfig.declared_end_share), which real jobs rarely
# can: this cell shows what is left with periodic checkpoints (and no ends) to predict from
NO_ENDS = ("openb", "stress", "ends not declared", {"declared_end_share": 0.0})
OURS = planners.TIMING_POLICY
ABLATION = planners.DRAIN_POLICY  # the same policy, timing off
POLICIES = (*planners.TIMING_BASELINES, ABLATION, OURS)
SCALE = 0.1  # share of the openb cluster, as bench/evidence.py
RESULTS = Path(__file__).resolve().parent / "results"


@functools.cache
def _trace(workload: str):
    return trace_files.load(workload)


def run_task(task: tuple[experiment.Cell, int]) -> list[tuple[str, int, dict]]:
    cell, seed = task
    pods, nodes = _trace(cell.workload)
    out = []
    for r in experiment.run_seed(cell, seed, POLICIES, pods, nodes):
        res = r.result
        out.append((res.policy, seed, {
            "lost": res.lost_gpu_hours, "delay": res.delay_gpu_hours,
            "total": res.lost_gpu_hours + res.delay_gpu_hours,
            "work": res.lost_work_gpu_hours, "restart": res.restart_gpu_hours,
            "preemptions": res.preemptions, "victims": res.victims,
            "gangs_broken": res.gangs_broken, "invalid": res.plans_invalid,
            "wait_p50_s": res.preemptor_wait_p50_s}))
    return out


def _ratio(by: dict, num: str, den: str, key: str = "total") -> stats.Estimate | None:
    seeds = sorted(set(by[num]) & set(by[den]))
    return stats.bootstrap_ratio([by[num][s][key] for s in seeds],
                                 [by[den][s][key] for s in seeds])


def summarise(label: str, rows: list[tuple[str, int, dict]]) -> dict:
    by: dict[str, dict[int, dict]] = {}
    for policy, seed, values in rows:
        by.setdefault(policy, {})[seed] = values

    def med(policy: str, key: str) -> float:
        return stats.median([v[key] for v in by[policy].values()])

    strongest = min(planners.TIMING_BASELINES, key=lambda b: (med(b, "total"),
                                                               planners.TIMING_BASELINES.index(b)))
    return {
        "cell": label, "seeds": sorted(by[OURS]), "strongest_baseline_by_total": strongest,
        "policies": {p: {
            "total_gpu_hours": stats.bootstrap_median(
                [v["total"] for v in by[p].values()]).as_dict(3),
            **{f"{k}_median": round(med(p, k), 3) for k in (
                "lost", "work", "restart", "delay", "preemptions", "victims", "gangs_broken",
                "wait_p50_s")},
            "plans_invalid": sum(v["invalid"] for v in by[p].values()),
        } for p in POLICIES},
        "ratios_total": {
            f"{OURS} / {ABLATION} (timing off)": _as(_ratio(by, OURS, ABLATION)),
            f"{OURS} / {strongest} (strongest)": _as(_ratio(by, OURS, strongest)),
            f"{ABLATION} / {strongest} (strongest)": _as(_ratio(by, ABLATION, strongest)),
            f"{OURS} / kube-default": _as(_ratio(by, OURS, "kube-default")),
            f"{planners.WAIT_THEN_EVICT} / kube-default": _as(
                _ratio(by, planners.WAIT_THEN_EVICT, "kube-default")),
        },
        "ratios_lost_only": {
            f"{OURS} / {ABLATION} (timing off)": _as(_ratio(by, OURS, ABLATION, "lost")),
        },
    }


def _as(e: stats.Estimate | None) -> dict | None:
    return None if e is None else e.as_dict(3)


def markdown(cells: list[dict], meta: dict) -> str:
    out = ["# When to preempt: timing on and off", "",
           f"Generated by `python -m bench.timing {meta['argv']}` in {meta['wall_minutes']} min "
           f"on {meta['jobs']} processes; seeds {meta['seeds'][0]}..{meta['seeds'][-1]}, scale "
           f"{meta['scale']}. Total = lost GPU-h (work + restarts) + delay GPU-h (preemptor "
           "GPUs × wait beyond the grace period). Ratios: median of per-seed ratios [95 % "
           "bootstrap interval]; below 1 is better for the numerator.", ""]
    for c in cells:
        n = len(c["seeds"])
        out += [f"## {c['cell']}", "",
                f"Strongest baseline by median total: {c['strongest_baseline_by_total']}.", "",
                "| ratio of totals | median [95 % CI] |", "|---|---|"]
        for name, e in c["ratios_total"].items():
            est = None if e is None else stats.Estimate(median=e["median"], low=e["ci95"][0],
                                                        high=e["ci95"][1], n=e["n"])
            out.append(f"| {name} | {report.estimate_text(est, '{:.3f}', n)} |")
        out += ["", "| policy | total GPU-h | lost | work | restart | delay | victims | "
                "wait p50 s |", "|---|---|---|---|---|---|---|---|"]
        for p, s in c["policies"].items():
            t = s["total_gpu_hours"]
            out.append(f"| {p} | {t['median']:.2f} [{t['ci95'][0]:.2f}, {t['ci95'][1]:.2f}] | "
                       f"{s['lost_median']:.2f} | {s['work_median']:.2f} | "
                       f"{s['restart_median']:.2f} | {s['delay_median']:.2f} | "
                       f"{s['victims_median']:.0f} | {s['wait_p50_s_median']:.0f} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--scale", type=float, default=SCALE)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.seeds < 1 or not 0 < args.scale <= 1 or args.jobs < 1:
        print("timing: --seeds and --jobs must be positive, --scale in (0, 1]", file=sys.stderr)
        return 2
    seeds = list(range(1, args.seeds + 1))
    cells = [experiment.Cell(workload=w, protocol=p, scale=args.scale) for w, p in CELLS]
    w, p, name, overrides = NO_ENDS
    cells.append(experiment.ablate(experiment.Cell(workload=w, protocol=p, scale=args.scale),
                                   name, overrides))
    tasks = [(c, s) for c in cells for s in seeds]
    rows: dict[str, list] = {c.label: [] for c in cells}
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_task, t): t[0].label for t in tasks}
        for done, fut in enumerate(as_completed(futures), 1):
            rows[futures[fut]].extend(fut.result())
            print(f"\r{done}/{len(tasks)} cell-seeds, {(time.monotonic() - started) / 60:.1f} min",
                  end="\n" if done == len(tasks) else "", file=sys.stderr, flush=True)
    summaries = [summarise(label, r) for label, r in rows.items()]
    wall = round((time.monotonic() - started) / 60, 1)
    meta = {"argv": " ".join(sys.argv[1:] if argv is None else argv), "seeds": seeds,
            "scale": args.scale, "jobs": args.jobs, "wall_minutes": wall,
            "policies": list(POLICIES)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "timing.json").write_text(json.dumps({**meta, "cells": summaries}, indent=1))
    (args.out / "timing.md").write_text(markdown(summaries, meta))
    print(json.dumps({"benchmark": "timing", "wall_minutes": wall, "cells": {
        c["cell"]: c["ratios_total"] for c in summaries}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
