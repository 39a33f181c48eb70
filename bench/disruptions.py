"""The disruption protocol (issue 23 item 4): GPU-hours lost to evictions ckpt-preempt does not
make itself, with no gate, with the eviction gate, and with the gate plus early warning.

Usage: python -m bench.disruptions [--seeds 10] [--quick] [--scale 0.05] [--jobs 2]
[--cells openb/stress,training/replay] [--rate-scale 1] [--out bench/results] (under nice -n 10)
Target: under 10 minutes on 2 processes at the defaults on the shared 2-core machine: met, 5.9
min (10.8 CPU-min) at load 9-12 (2026-12-05); at the evidence run's scale 0.1 the same run
projected 23 min, hence 0.05 (the replay protocol sizes its own cluster whatever the scale).

What: on each workload cell (openb/stress at scale 0.05, as bench/harsh_world.py, and
training/replay, built as the evidence run builds them, bench/evidence.py), every seed is
replayed under the checkpoint-aware-drain policy three times, once per world
(``policies.sim.disruptions.WORLDS``), while nodes are drained for maintenance, reclaimed as
spot nodes with a 30 s or a 120 s notice and scaled down by the autoscaler
(``policies/sim/disruption_sim.py``; the rates and lead times are the model's stated
assumptions, ``DisruptionParams``). Per cell, disruption kind and world:
lost GPU-hours (unsaved work, restart, drain delay, and their total), the median over seeds with
its 95 % bootstrap interval (``policies/sim/stats.py``); the per-seed ratios gate ÷ no-gate and
gate+warning ÷ no-gate (median and interval; seeds where no-gate lost nothing of that kind have
no ratio and are left out, ``n`` says how many remain); GPU-hours lost per disrupted node; and
the unsaved work of the evicted jobs the gate can ask (on-request, reporting), summed per
eviction after the warm-up with the work they did before it: most of a cell's loss can be jobs
that never checkpoint, which no gate can help.

Two readings of the same seeds. ``own run``: each world's own replay; the worlds diverge after
their first different stop (and the autoscaler's disruptions depend on the run), so these are
what each world would see, with that noise. ``paired``: inside the no-gate replay, every world
priced on the same pods in the same state at each disruption (``KindResult.paired_*``): the
cleaner comparison of what the gate changes at one disruption.

Prints one JSON line; writes bench/results/disruptions.{json,md}. ``--quick``: seeds 1-2 at
scale 0.03. ``--rate-scale`` multiplies the maintenance and spot rates (tests use it so that
a short run still has disruptions of every kind).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

from bench.evidence import _params, _progress, _trace
from bench.harsh_world import SCALE  # openb's share: the harsh world's, for the same reason
from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import disruptions as dis
from ckpt_preempt.policies.sim import experiment, planners, report, stats
from ckpt_preempt.policies.sim.disruption_sim import DisruptedSimulation

CELLS = ("openb/stress", "training/replay")
POLICY = planners.DRAIN_POLICY  # the preemption policy every world runs under
SEEDS = 10
QUICK_SEEDS, QUICK_SCALE = 2, 0.03
MAX_JOBS = 2  # the shared machine's two cores
BASELINE_WORLD = "no-gate"
PARTS = ("work", "restart", "delay", "total")
ALL = "all kinds"
RESULTS = Path(__file__).resolve().parent / "results"


def cell_of(name: str, scale: float) -> experiment.Cell:
    workload, protocol = name.split("/")
    return experiment.Cell(workload=workload, protocol=protocol, scale=scale,
                           params=_params(workload, protocol))


def params_for(rate_scale: float) -> dis.DisruptionParams:
    p = dis.DEFAULT_PARAMS
    return replace(p, maintenance_per_node_day=p.maintenance_per_node_day * rate_scale,
                   spot_per_node_day=p.spot_per_node_day * rate_scale)


def _kind_record(k, askable_work: float) -> dict:
    """One kind's charges in one run, GPU-hours (JSON-ready)."""
    return {
        "disruptions": k.disruptions, "evictions": k.evictions, "askable_work": askable_work,
        "work": k.lost_work_gpu_hours, "restart": k.restart_gpu_hours,
        "delay": k.delay_gpu_hours, "total": k.lost_gpu_hours,
        "drain_extra_seconds": list(k.drain_extra_seconds),
        "paired": {
            "work": dict(k.paired_lost_work), "delay": dict(k.paired_delay),
            "restart": k.paired_restart,
            "total": {w: k.paired_lost(w) for w in dis.WORLDS},
            "drain_extra_seconds": {w: list(v) for w, v in k.paired_drain_extra.items()},
        },
    }


def run_task(task: tuple[str, float, int, str, float]) -> dict:
    """One cell, seed and world (in a worker process): its per-kind charges and seconds."""
    name, scale, seed, world, rate_scale = task
    started = time.perf_counter()
    cell = cell_of(name, scale)
    pods, nodes = _trace(cell.workload)
    w, used = experiment.build(cell, seed, pods, nodes)
    r = DisruptedSimulation(w, used, POLICY, cell.config, world=world,
                            params=params_for(rate_scale)).run()
    askable = {j.id for j in w.jobs if j.checkpoint is CheckpointMode.ON_REQUEST and j.reports}
    work = dict.fromkeys(dis.KINDS, 0.0)
    for e in r.evictions:
        if e.job in askable and e.at >= w.warmup:
            work[e.kind] += e.lost_gpu_seconds / 3600
    return {"cell": name, "seed": seed, "world": world, "nodes": len(used),
            "gpus": w.capacity_gpus, "window_hours": round(w.window / 3600, 3),
            "kinds": {k: _kind_record(v, work[k]) for k, v in r.kinds.items()},
            "seconds": round(time.perf_counter() - started, 2)}


def _est(values: list[float]) -> stats.Estimate | None:
    return stats.bootstrap_median(values) if values else None


def _as(e: stats.Estimate | None) -> dict | None:
    return e.as_dict(3) if e else None


def _kind_value(run: dict, kind: str, key: str) -> float:
    if kind == ALL:
        return sum(v[key] for v in run["kinds"].values())
    return run["kinds"][kind][key]


def _paired_value(run: dict, kind: str, part: str, world: str) -> float:
    kinds = run["kinds"].values() if kind == ALL else [run["kinds"][kind]]
    return sum(k["paired"][part] if part == "restart" else k["paired"][part][world]
               for k in kinds)


def summarise(runs: list[dict], cells: list[str], seeds: list[int]) -> list[dict]:
    """One row per cell and kind (and all kinds together): every world's estimates."""
    by = {(r["cell"], r["seed"], r["world"]): r for r in runs}
    rows = []
    for cell in cells:
        for kind in (*dis.KINDS, ALL):
            row: dict = {"cell": cell, "kind": kind, "own_run": {}, "paired": {}}
            base = [by[(cell, s, BASELINE_WORLD)] for s in seeds]
            row["disruptions"] = _as(_est([float(_kind_value(r, kind, "disruptions"))
                                           for r in base]))
            for world in dis.WORLDS:
                mine = [by[(cell, s, world)] for s in seeds]
                own = {part: _as(_est([_kind_value(r, kind, part) for r in mine]))
                       for part in PARTS}
                per_node = [_kind_value(r, kind, "total") / _kind_value(r, kind, "disruptions")
                            for r in mine if _kind_value(r, kind, "disruptions")]
                own["per_disrupted_node"] = _as(_est(per_node))
                own["askable_work"] = _as(_est([_kind_value(r, kind, "askable_work")
                                                for r in mine]))
                own["evictions"] = _as(_est([float(_kind_value(r, kind, "evictions"))
                                             for r in mine]))
                paired = {part: _as(_est([_paired_value(r, kind, part, world) for r in base]))
                          for part in PARTS}
                if world != BASELINE_WORLD:
                    own["ratio"] = _as(stats.bootstrap_ratio(
                        [_kind_value(r, kind, "total") for r in mine],
                        [_kind_value(r, kind, "total") for r in base]))
                    paired["ratio"] = _as(stats.bootstrap_ratio(
                        [_paired_value(r, kind, "total", world) for r in base],
                        [_paired_value(r, kind, "total", BASELINE_WORLD) for r in base]))
                row["own_run"][world], row["paired"][world] = own, paired
            rows.append(row)
    return rows


def _text(d: dict | None, fmt: str, seeds: int) -> str:
    if d is None:
        return "-"
    e = stats.Estimate(median=d["median"], low=d["ci95"][0], high=d["ci95"][1], n=d["n"])
    return report.estimate_text(e, fmt, seeds)


def markdown(rows: list[dict], meta: dict) -> str:
    n = len(meta["seeds"])
    t2 = lambda d: _text(d, "{:.2f}", n)  # noqa: E731
    lines = [
        "# The disruption protocol: lost GPU-hours with no gate, the gate, and early warning", "",
        f"Generated by `python -m bench.disruptions {meta['argv']}` in {meta['wall_minutes']} "
        f"min on {meta['jobs']} processes (a shared 2-core machine): seeds "
        f"{meta['seeds'][0]}..{meta['seeds'][-1]}, openb at scale {meta['scale']}, policy "
        f"{POLICY}, disruption rates × {meta['rate_scale']:g} of `DisruptionParams`' defaults. "
        "GPU-hours: median over seeds [95 % bootstrap interval]; ratios: median of per-seed "
        "ratios to no-gate (seeds where no-gate lost nothing of that kind left out: n). "
        "**Own run**: each world's own replay. **Paired**: inside the no-gate replay, each "
        "world priced on the same pods in the same state. The last column: the unsaved work of "
        "the evicted jobs the gate can ask (on-request, reporting; own run, medians, work done "
        "before the warm-up included).", "",
        "| cell | kind | disrupted nodes | no-gate GPU-h | gate GPU-h | gate+warning GPU-h | "
        "gate ÷ no-gate | warning ÷ no-gate | paired gate ÷ no-gate | paired warning ÷ "
        "no-gate | GPU-h per disrupted node (no-gate / gate / warning) | on-request jobs' "
        "unsaved work, GPU-h (no-gate / gate / warning) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        own, paired = r["own_run"], r["paired"]
        per = " / ".join(t2(own[w]["per_disrupted_node"]) for w in dis.WORLDS)
        askable = " / ".join(f"{own[w]['askable_work']['median']:.2f}" for w in dis.WORLDS)
        lines.append("| " + " | ".join([
            r["cell"], r["kind"], _text(r["disruptions"], "{:.0f}", n),
            *(t2(own[w]["total"]) for w in dis.WORLDS),
            t2(own["gate"]["ratio"]), t2(own["gate+warning"]["ratio"]),
            t2(paired["gate"]["ratio"]), t2(paired["gate+warning"]["ratio"]), per, askable])
            + " |")
    lines += ["", "Split of each world's own-run total (medians, GPU-h: work / restart / "
              "delay):", "", "| cell | kind | no-gate | gate | gate+warning |",
              "|---|---|---|---|---|"]
    for r in rows:
        own = r["own_run"]
        lines.append("| " + " | ".join([r["cell"], r["kind"], *(
            " / ".join(f"{own[w][p]['median']:.2f}" for p in PARTS[:3]) for w in dis.WORLDS)])
            + " |")
    return "\n".join(lines) + "\n"


def _fail(message: str) -> int:
    print(f"disruptions: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=None, help=f"seeds 1..N (default {SEEDS})")
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_SEEDS} seeds at scale {QUICK_SCALE} (a short run)")
    ap.add_argument("--scale", type=float, default=None,
                    help=f"share of the openb cluster (default {SCALE})")
    ap.add_argument("--cells", default=",".join(CELLS), help="workload/protocol, comma-separated")
    ap.add_argument("--rate-scale", type=float, default=1.0,
                    help="multiplies the maintenance and spot rates (default 1)")
    ap.add_argument("--jobs", type=int, default=MAX_JOBS, help=f"processes (at most {MAX_JOBS})")
    ap.add_argument("--out", type=Path, default=RESULTS, help="report folder")
    args = ap.parse_args(argv)
    seeds_n = args.seeds if args.seeds is not None else (QUICK_SEEDS if args.quick else SEEDS)
    scale = args.scale if args.scale is not None else (QUICK_SCALE if args.quick else
                                                       SCALE)
    cells = [c.strip() for c in args.cells.split(",") if c.strip()]
    known = {f"{w}/{p}" for w in experiment.protocols.WORKLOADS
             for p in experiment.protocols.PROTOCOLS}
    if seeds_n < 1 or not 1 <= args.jobs <= MAX_JOBS or not 0 < scale <= 1 \
            or args.rate_scale < 0:
        return _fail(f"--seeds >= 1, 1 <= --jobs <= {MAX_JOBS}, 0 < --scale <= 1 and "
                     "--rate-scale >= 0 are needed")
    if not cells or any(c not in known for c in cells):
        return _fail(f"--cells must name workload/protocol pairs of: {', '.join(sorted(known))}")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return _fail(f"cannot create {args.out}: {e}")
    seeds = list(range(1, seeds_n + 1))
    tasks = [(c, scale, s, w, args.rate_scale) for c in cells for s in seeds for w in dis.WORLDS]
    started = time.monotonic()
    runs = []
    _progress(0, len(tasks), started)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_task, t) for t in tasks]
        for done, fut in enumerate(as_completed(futures), 1):
            runs.append(fut.result())
            _progress(done, len(tasks), started)
    runs.sort(key=lambda r: (cells.index(r["cell"]), r["seed"], dis.WORLDS.index(r["world"])))
    rows = summarise(runs, cells, seeds)
    meta = {"argv": " ".join(sys.argv[1:] if argv is None else argv), "jobs": args.jobs,
            "seeds": seeds, "scale": scale, "rate_scale": args.rate_scale, "policy": POLICY,
            "cells": cells, "cpu_minutes": round(sum(r["seconds"] for r in runs) / 60, 2),
            "wall_minutes": round((time.monotonic() - started) / 60, 1),
            "max_checkpoint_seconds": experiment.SimConfig().max_checkpoint_seconds}
    (args.out / "disruptions.json").write_text(json.dumps(
        {"benchmark": "disruptions", **meta, "rows": rows, "runs": runs}, indent=1) + "\n")
    (args.out / "disruptions.md").write_text(markdown(rows, meta))
    print(json.dumps({"benchmark": "disruptions", **meta, "rows": rows, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
