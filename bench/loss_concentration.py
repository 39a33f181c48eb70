"""Benchmark (issue 22): how much of each policy's loss its few largest evictions carry.

Usage: python -m bench.loss_concentration [--seeds 1-10] [--jobs 2] [--out FILE]
       [--cells openb/replay,...] [--policies kube-default,...]
Target: none: a measurement. It asks why the replay cells' ratios sit near 1: when one eviction,
the same under every policy here, is most of a seed's loss, better choices among the rest cannot
move that seed's ratio much.

For each cell (by default the three replay cells of ``bench/evidence.py``, at its scale) and
seed, replays the evidence workload under the strongest baselines and ours as shipped, and
reports per cell and policy the median over seeds (95 % bootstrap interval) of the share of the
seed's total lost GPU-hours carried by its largest eviction and by its three largest (an
eviction's loss: ``PolicyResult.eviction_losses``, per victim job, work + restart; the total also
holds the preemptor's delay); and per seed, each policy's largest eviction, and whether it is
the same loss under every policy (to 0.05 GPU-h; read as the same job evicted at the same point,
since the losses carry no job names). Writes bench/results/loss_concentration.json and prints
a markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench import evidence
from ckpt_preempt.policies.sim import planners, stats

CELLS = ("openb/replay", "openb-multigpu20/replay", "training/replay")
POLICIES = ("kube-default", planners.GREEDY_POLICY, planners.WAIT_THEN_EVICT,
            planners.SHIPPED)
SAME_LOSS_GPU_HOURS = 0.05  # two largest evictions this close are read as the same one
TOP = 3  # the "few largest" evictions the second share counts
RESULTS = Path(__file__).resolve().parent / "results" / "loss_concentration.json"


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def shares(total: float, losses: list[float]) -> tuple[float, float]:
    """(share of ``total`` in the largest loss, in the ``TOP`` largest); 0 for a zero total."""
    if total <= 0:
        return 0.0, 0.0
    ranked = sorted(losses, reverse=True)
    return sum(ranked[:1]) / total, sum(ranked[:TOP]) / total


def summarise(rows: dict[tuple[str, int], dict[str, dict]], cells: list[str],
              seeds: list[int], policies: tuple[str, ...]) -> list[dict]:
    """Per cell: each policy's median shares and, per seed, the largest evictions."""
    out = []
    for cell in cells:
        entry: dict = {"cell": cell, "policies": {}, "seeds": []}
        for policy in policies:
            runs = [rows[(cell, s)][policy] for s in seeds]
            one, few = zip(*(shares(r["lost"], r["losses"]) for r in runs), strict=True)
            entry["policies"][policy] = {
                "lost_gpu_hours": stats.bootstrap_median([r["lost"] for r in runs]).as_dict(2),
                "largest_share": stats.bootstrap_median(one).as_dict(3),
                f"top{TOP}_share": stats.bootstrap_median(few).as_dict(3),
            }
        for s in seeds:
            largest = {p: max(rows[(cell, s)][p]["losses"], default=0.0) for p in policies}
            same = max(largest.values()) - min(largest.values()) <= SAME_LOSS_GPU_HOURS
            entry["seeds"].append({
                "seed": s, "largest_gpu_hours": {p: round(v, 2) for p, v in largest.items()},
                "same_under_every_policy": same,
                "total_gpu_hours": {p: round(rows[(cell, s)][p]["lost"], 2) for p in policies},
            })
        out.append(entry)
    return out


def _task(task: tuple) -> tuple[tuple, dict[str, dict]]:
    cell, seed, policies = task
    runs, _ = evidence.run_task((cell, seed, policies))
    return (cell.label, seed), {r.policy: {"lost": r.result.lost_gpu_hours,
                                           "losses": list(r.result.eviction_losses)}
                                for r in runs}


def markdown(summary: list[dict], policies: tuple[str, ...]) -> str:
    lines = [f"| cell | policy | lost GPU-h | largest eviction's share | top {TOP} share |",
             "|---|---|---|---|---|"]

    def ci(e: dict) -> str:
        return f"{e['median']:.2f} [{e['ci95'][0]:.2f}, {e['ci95'][1]:.2f}]"

    for entry in summary:
        for p in policies:
            e = entry["policies"][p]
            lines.append(f"| {entry['cell']} | {p} | {ci(e['lost_gpu_hours'])} | "
                         f"{ci(e['largest_share'])} | {ci(e[f'top{TOP}_share'])} |")
    lines.append("")
    for entry in summary:
        same = sum(s["same_under_every_policy"] for s in entry["seeds"])
        lines.append(f"- {entry['cell']}: the largest eviction is the same loss under every "
                     f"policy on {same} of {len(entry['seeds'])} seeds")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-10", help="seeds, '1-10' or '1,3,5' (default 1-10)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--cells", default=",".join(CELLS), help="evidence cell labels")
    ap.add_argument("--policies", default=",".join(POLICIES), help="policies to replay")
    ap.add_argument("--out", type=Path, default=RESULTS, help="JSON results file")
    args = ap.parse_args(argv)
    try:
        seeds = _seeds(args.seeds)
        policies = planners.named(args.policies)
        known = {c.label: c for c in evidence.cells(evidence.EVIDENCE_SCALE, quick=False)}
        cells = [c.strip() for c in args.cells.split(",") if c.strip()]
        if missing := [c for c in cells if c not in known]:
            raise ValueError(f"unknown cell {', '.join(missing)}; known: {', '.join(known)}")
        if not seeds or not cells or args.jobs < 1:
            raise ValueError("need at least one seed, one cell and one job")
    except ValueError as e:
        print(f"loss_concentration: {e}", file=sys.stderr)
        return 2
    tasks = [(known[c], s, policies) for c in cells for s in seeds]
    started, rows = time.monotonic(), {}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for k, (key, runs) in enumerate(pool.map(_task, tasks), 1):
            rows[key] = runs
            print(f"\r{k}/{len(tasks)} cell-seeds, {(time.monotonic() - started) / 60:.1f} min",
                  end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    summary = summarise(rows, cells, seeds, policies)
    result = {"seeds": seeds, "scale": evidence.EVIDENCE_SCALE, "policies": list(policies),
              "minutes": round((time.monotonic() - started) / 60, 1), "cells": summary}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(summary, policies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
