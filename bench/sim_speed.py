"""Benchmark: the simulator against an older commit of itself, side by side in one run, and
whether the results are the same.

Usage: python -m bench.sim_speed [--baseline REV] [--new REV] [--cells default,...]
       [--jobs N] [--new-flags FLAGS] [--out FILE]
Target: ``make run`` (the default cell) at most 60 s on 2 cores, 5x faster than the engine
before the speed-up, with every policy's results identical: the ``simulate --json`` document
equal apart from wall time and the measured plan latencies (issue 42).

What: the baseline's source (and ``--new``'s, else this working tree) is exported with
``git archive REV`` into a temporary folder and imported from there (``PYTHONPATH`` over the
installed package), so both engines run from this one venv on the same machine, alternating old
and new per cell. Each side runs the cell with
``ckpt-preempt simulate --json --no-progress`` as that commit ships it (its own flags, its own
default of processes; ``--jobs`` is passed to the new side only, default 1 for a like-for-like
engine comparison). The JSON is compared with wall time and plan latency removed, and of
the simulator's settings (``sim``) only those both sides have (a later commit may add knobs,
off by default). Prints one JSON line; ``--out`` also writes it (indented).

Cells: ``default`` (the default run, scale 0.25 of openb/stress with its 40 floor cuts), or
``WORKLOAD/PROTOCOL[@SCALE]`` (seed 1, floor cuts off).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# the commit before the speed-up of policies/sim/devices.py (2026-12-07)
BASELINE = "0537af8"
PACKAGES = ("policies", "controller", "hwprobe", "cli")  # ckpt_preempt.<name> -> folder
DEFAULT_CELLS = ("default", "training/stress@0.25", "openb/replay")
TIMED_KEYS = ("wall_seconds",)  # what differs between two runs of the same engine


def _export(rev: str, into: Path) -> Path:
    """The package tree of ``rev``, importable as ``ckpt_preempt`` from the returned folder."""
    src = into / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    root = into / "import" / "ckpt_preempt"
    root.mkdir(parents=True)
    for name in PACKAGES:
        (root / name).symlink_to(src / name, target_is_directory=True)
    return root.parent


def _args(cell: str) -> list[str]:
    if cell == "default":
        return []
    name, _, scale = cell.partition("@")
    workload, _, protocol = name.partition("/")
    out = ["--workload", workload, "--protocol", protocol, "--floor-cuts", "0"]
    return out + (["--scale", scale] if scale else [])


def _run(args: list[str], pythonpath: Path | None) -> tuple[dict, float]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ckpt_preempt.controller.app.cli", "simulate", "--json",
         "--no-progress", *args], env=env, capture_output=True, text=True,
        cwd=tempfile.gettempdir())
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"sim_speed: simulate {' '.join(args)} failed: "
                         f"{done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout), seconds


def comparable(doc: object) -> object:
    """``doc`` without what two runs of one engine may differ in: wall time, plan latency."""
    if isinstance(doc, dict):
        return {k: comparable(v) for k, v in doc.items()
                if k not in TIMED_KEYS and "latency" not in k}
    if isinstance(doc, list):
        return [comparable(v) for v in doc]
    return doc


def same_results(old: dict, new: dict) -> bool:
    """Equal apart from timing, reading only the simulator settings both report."""
    a, b = comparable(old), comparable(new)
    sim_a, sim_b = a.pop("sim", {}), b.pop("sim", {})
    shared = sim_a.keys() & sim_b.keys()
    return a == b and all(sim_a[k] == sim_b[k] for k in shared)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default=BASELINE, help="the older commit (default %(default)s)")
    p.add_argument("--new", help="the newer commit (default: this working tree)")
    p.add_argument("--cells", default=",".join(DEFAULT_CELLS))
    p.add_argument("--jobs", type=int, default=1, help="processes for the new side")
    p.add_argument("--new-flags", default="--world optimistic",
                   help="simulate flags for the new side only, so it replays the baseline's "
                        "world (default %(default)r: the baseline's default world)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="sim-speed-") as tmp:
        old_root = _export(args.baseline, Path(tmp) / "old")
        new_root = _export(args.new, Path(tmp) / "new") if args.new else None
        for cell in args.cells.split(","):
            base = _args(cell)
            print(f"sim_speed: {cell}: old engine ...", file=sys.stderr, flush=True)
            old, old_s = _run(base, old_root)
            print(f"sim_speed: {cell}: old {old_s:.1f} s; new engine ...", file=sys.stderr,
                  flush=True)
            new, new_s = _run([*base, "--jobs", str(args.jobs), *args.new_flags.split()],
                              new_root)
            same = same_results(old, new)
            rows.append({"cell": cell, "old_seconds": round(old_s, 1),
                         "new_seconds": round(new_s, 1), "speedup": round(old_s / new_s, 2),
                         "identical": same})
            print(f"sim_speed: {cell}: new {new_s:.1f} s, {old_s / new_s:.2f}x, "
                  f"{'identical' if same else 'DIFFERENT'}", file=sys.stderr, flush=True)
    doc = {"benchmark": "sim_speed", "baseline": args.baseline, "new": args.new or "worktree",
           "jobs_new": args.jobs, "new_flags": args.new_flags,
           "cpus": os.cpu_count(), "cells": rows,
           "all_identical": all(r["identical"] for r in rows)}
    print(json.dumps(doc))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if doc["all_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
