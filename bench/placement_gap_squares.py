"""Our scorer with a Sum-of-Squares term for shared GPUs, on FGD's benchmark, paired by seed
with Ours (bench/placement_research/gap_squares.py; README, "Third round").

Usage: python -m bench.placement_gap_squares [--seeds 42-51] [--modes tie,first,blend]
       [--weight 1] [--out bench/results]
Target: ours >= 96.0 % allocated at 130 % arrived demand, as bench/placement.py's.

Each mode runs on every seed next to Ours with the term off (the same loop, which places
exactly as ``protocol.run``), so the differences are paired. Progress goes to stderr, one JSON
line to stdout; ``--out DIR`` also writes placement_gap_squares.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bench.placement import parse_seeds, read_trace
from bench.placement_research import gap_squares
from ckpt_preempt.policies.placement import benchmark, ours, protocol

TRACE = "openb_pod_list_default.csv"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=parse_seeds, default=protocol.PAPER_SEEDS)
    ap.add_argument("--modes", default="tie,first,blend")
    ap.add_argument("--weight", type=float, default=1.0, help="blend: score points per "
                    f"{gap_squares.BLEND_UNITS:.0f} of growth")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    modes = args.modes.split(",")
    bad = [m for m in modes if m not in gap_squares.MODES or m == "off"]
    if bad:
        ap.error(f"unknown mode {', '.join(bad)} (known: tie, first, blend)")
    setup = benchmark.prepare(TRACE, read_trace(benchmark.NODE_LIST), read_trace(TRACE),
                              args.seeds)
    t0 = time.monotonic()
    per_seed: dict[str, list[float]] = {m: [] for m in ["off", *modes]}
    for seed in args.seeds:
        nodes = protocol.simulator_order(setup.nodes, seed)
        for mode in per_seed:
            result = gap_squares.run(nodes, setup.arrivals[seed], ours.Ours(setup.pods), seed,
                                     mode=mode, weight=args.weight)
            per_seed[mode].append(protocol.binned_allocation(result)[benchmark.HEADLINE_BIN])
            print(f"seed {seed} {mode}: {per_seed[mode][-1]:.2f} "
                  f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    report = {
        "trace": TRACE, "seeds": list(args.seeds), "weight": args.weight,
        "ours_130": {"median": round(statistics.median(per_seed["off"]), 2),
                     "per_seed": per_seed["off"]},
        "modes": {m: {"median": round(statistics.median(per_seed[m]), 2),
                      "per_seed": per_seed[m],
                      "vs_ours": benchmark.paired_difference(per_seed[m], per_seed["off"])}
                  for m in modes},
        "wall_seconds": round(time.monotonic() - t0),
    }
    print(json.dumps(report))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "placement_gap_squares.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
