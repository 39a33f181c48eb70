"""Replay a GPU trace under several preemption policies and compare the work they lose.

By default: the bundled Alibaba openb trace (cluster-trace-gpu-v2023) on a seeded quarter of its
1,213 GPU nodes, arrivals compressed into 6 hours and scaled to 130 % offered load (the stress
protocol), with checkpoints and gangs from a seeded generator. ``--seeds N`` replays N seeds
(from ``--seed``) and reports medians with 95 % bootstrap intervals; every ratio is against the
strongest baseline of the cell (the baseline losing least). Every parameter is printed with the
result.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ckpt_preempt.controller import trace_files
from ckpt_preempt.policies.sim import engine, experiment, planners, report, workload
from ckpt_preempt.policies.sim.protocols import PROTOCOLS, WORKLOADS

NAME = "simulate"
HELP = "what-if replay of a GPU trace under each preemption policy"

# (flag, SimConfig field, help): the costs an eviction carries beyond unsaved work
COST_FLAGS = (
    ("--restore-seconds", "restore_seconds", "restart/restore time of an evicted job"),
    ("--report-lag-seconds", "report_lag_seconds", "a checkpoint is reported this late"),
    ("--report-jitter-seconds", "report_jitter_seconds", "error of a reported checkpoint time"),
    ("--drain-failure-share", "drain_failure_share", "share of drains ending with no checkpoint"),
    ("--drain-overrun-share", "drain_overrun_share", "share of drains taking longer than said"),
    ("--drain-overrun-factor", "drain_overrun_factor", "how much longer an overrun drain takes"),
)
LINE_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (6, 2, 1, 2, 1, 2)), "x"),
               ((0, (1, 1)), "v"))  # one per policy, told apart in grayscale too


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,2,3, got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = workload.WorkloadParams()
    c = engine.SimConfig()
    p.add_argument("--pods", type=Path, help="pod trace in openb CSV format (default: bundled)")
    p.add_argument("--nodes", type=Path, help="node list in openb CSV format (default: bundled)")
    p.add_argument("--workload", default=WORKLOADS[0],
                   help=f"one of {', '.join(WORKLOADS)} (default %(default)s)")
    p.add_argument("--protocol", default="stress",
                   help=f"one of {', '.join(PROTOCOLS)} (default %(default)s)")
    p.add_argument("--utilisation", type=float, default=1.0,
                   help="target GPU utilisation of the steady protocol (default %(default)s)")
    p.add_argument("--policies", default=",".join(planners.POLICIES),
                   help=f"comma-separated, from {', '.join(planners.POLICIES)}")
    p.add_argument("--seed", type=int, default=d.seed, help="first seed (default %(default)s)")
    p.add_argument("--seeds", type=int, default=1,
                   help="number of seeds; > 1 reports medians with 95 %% bootstrap intervals "
                        "(default %(default)s)")
    p.add_argument("--scale", type=float, default=d.scale,
                   help="share of nodes and pods simulated, 0 < s <= 1 (default %(default)s)")
    p.add_argument("--load", type=float, default=d.load,
                   help="target offered GPU load in the window (default %(default)s)")
    p.add_argument("--window-hours", type=float, default=d.window_hours,
                   help="arrivals are compressed into this window (default %(default)s)")
    p.add_argument("--share-on-request", type=float, default=d.share_on_request)
    p.add_argument("--share-periodic", type=float, default=d.share_periodic)
    p.add_argument("--gang-share", type=float, default=d.gang_share)
    p.add_argument("--gang-sizes", type=_floats, default=d.gang_sizes)
    p.add_argument("--checkpoint-intervals-min", type=_floats, default=d.checkpoint_intervals_min)
    p.add_argument("--checkpoint-seconds", type=_floats, default=d.checkpoint_seconds,
                   help="MIN,MAX of an on-request checkpoint's duration")
    p.add_argument("--max-checkpoint-seconds", type=float, default=c.max_checkpoint_seconds,
                   help="the controller's drain cap (default %(default)s)")
    p.add_argument("--grace-seconds", type=float, default=c.grace_seconds,
                   help="termination grace period (default %(default)s)")
    for flag, name, text in COST_FLAGS:
        p.add_argument(flag, type=float, default=getattr(c, name),
                       help=f"{text} (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--plot", type=Path, metavar="FILE.png",
                   help="lost work over time per policy (the first seed)")
    p.add_argument("--no-progress", action="store_true")


def _params(args: argparse.Namespace) -> workload.WorkloadParams:
    if len(args.checkpoint_seconds) != 2 or args.checkpoint_seconds[0] > args.checkpoint_seconds[1]:
        raise ValueError("--checkpoint-seconds needs MIN,MAX with MIN <= MAX")
    if not 0 <= args.share_on_request + args.share_periodic <= 1:
        raise ValueError("--share-on-request + --share-periodic must be between 0 and 1")
    if args.load <= 0 or args.window_hours <= 0:
        raise ValueError("--load and --window-hours must be positive")
    if not 0 < args.scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {args.scale}")
    return workload.WorkloadParams(
        seed=args.seed, scale=args.scale, load=args.load, window_hours=args.window_hours,
        share_on_request=args.share_on_request, share_periodic=args.share_periodic,
        gang_share=args.gang_share, gang_sizes=tuple(int(x) for x in args.gang_sizes),
        checkpoint_intervals_min=tuple(int(x) for x in args.checkpoint_intervals_min),
        checkpoint_seconds=(args.checkpoint_seconds[0], args.checkpoint_seconds[1]),
    )


def _config(args: argparse.Namespace) -> engine.SimConfig:
    costs = {name: getattr(args, name) for _, name, _ in COST_FLAGS}
    for flag, name, _ in COST_FLAGS:
        if not (math.isfinite(costs[name]) and costs[name] >= 0):
            raise ValueError(f"{flag} must be a finite number >= 0, got {costs[name]}")
        if name.endswith("_share") and costs[name] > 1:
            raise ValueError(f"{flag} must be a share between 0 and 1, got {costs[name]}")
    if costs["drain_overrun_factor"] < 1:
        raise ValueError("--drain-overrun-factor must be >= 1 (an overrun takes longer), got "
                         f"{costs['drain_overrun_factor']}")
    return engine.SimConfig(grace_seconds=args.grace_seconds,
                            max_checkpoint_seconds=args.max_checkpoint_seconds, **costs)


def _policies(args: argparse.Namespace) -> list[str]:
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not names:
        raise ValueError("--policies is empty; choose from " + ", ".join(planners.POLICIES))
    for name in names:
        planners.planner_for(name, 1.0)  # unknown names raise ValueError
    if len(set(names)) < len(names):
        raise ValueError(f"--policies names a policy twice: {args.policies}")
    return names


def plot_problem(path: Path, importer: Callable[[str], object] = importlib.import_module
                 ) -> str | None:
    """Why ``--plot path`` cannot be written (checked before any simulation), or None."""
    if path.suffix.lower() != ".png":
        return f"--plot writes a PNG: {path} should end in .png"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"--plot: directory {parent} does not exist"
    if not os.access(parent, os.W_OK):
        return f"--plot: directory {parent} is not writable"
    try:
        importer("matplotlib")
    except ImportError:
        return "--plot needs matplotlib: pip install 'ckpt-preempt[plot]'"
    return None


def validate(args: argparse.Namespace) -> tuple[list[str], experiment.Cell, list[int]]:
    """Every flag checked before anything runs; ValueError with one line otherwise."""
    policies = _policies(args)
    if args.seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {args.seeds}")
    if args.protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {args.protocol!r}; choose from {', '.join(PROTOCOLS)}")
    if args.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {args.workload!r}; choose from {', '.join(WORKLOADS)}")
    if not (math.isfinite(args.utilisation) and args.utilisation > 0):
        raise ValueError(f"--utilisation must be positive, got {args.utilisation}")
    if args.plot and (problem := plot_problem(args.plot)):
        raise ValueError(problem)
    cell = experiment.Cell(workload=args.workload, protocol=args.protocol,
                           utilisation=args.utilisation, scale=args.scale,
                           params=_params(args), config=_config(args))
    return policies, cell, list(range(args.seed, args.seed + args.seeds))


def run(args: argparse.Namespace) -> int:
    try:
        policies, cell, seeds = validate(args)
        pods, nodes = trace_files.load(args.workload, args.pods, args.nodes)
    except (OSError, ValueError) as e:
        print(f"ckpt-preempt simulate: {e}", file=sys.stderr)
        return 2
    bars: dict = {}
    show = not args.no_progress and sys.stderr.isatty()

    def progress(seed: int, policy: str, fraction: float) -> None:
        from tqdm import tqdm

        key = (seed, policy)
        bar = bars.get(key)
        if bar is None:
            bar = bars[key] = tqdm(total=100, desc=f"seed {seed} {policy:<24}", unit="%")
        bar.update(round(fraction * 100) - bar.n)
        if fraction >= 1:
            bar.close()

    started = time.monotonic()
    try:
        result = experiment.run_cell(cell, seeds, policies, pods, nodes, clock=time.perf_counter,
                                     progress=progress if show else None)
    except ValueError as e:
        print(f"ckpt-preempt simulate: {e}", file=sys.stderr)
        return 2
    doc = result.as_dict()
    doc["generator"] = cell.params.describe() if cell.params else {}
    doc["wall_seconds"] = round(time.monotonic() - started, 1)
    if args.plot:
        _plot(result, args.plot)
        doc["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(report.format_cell(result))
        print("generator: " + ", ".join(f"{k}={v}" for k, v in doc["generator"].items()
                                        if k != "seed"))
        print("simulator: " + ", ".join(f"{k}={v}" for k, v in doc["sim"].items()))
    return 0


def _plot(result: experiment.CellResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = result.seeds[0]
    runs = [r for r in result.runs if r.seed == first]
    series = {r.policy: r.result.lost_series for r in runs}
    span = report.loss_time_range(series.values())
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k, (policy, points) in enumerate(series.items()):
        style, marker = LINE_STYLES[k % len(LINE_STYLES)]
        xs = [0.0] + [t / 3600 for t, _ in points]
        ys = [0.0] + [v for _, v in points]
        if span:
            xs.append(span[1] / 3600)
            ys.append(ys[-1])
        ax.step(xs, ys, where="post", label=policy, linestyle=style, marker=marker,
                markevery=max(1, len(xs) // 12), markersize=5, linewidth=1.4)
    if span:  # a 2 % margin before the first loss, so its step shows
        ax.set_xlim((span[0] - 0.02 * (span[1] - span[0])) / 3600, span[1] / 3600)
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("cumulative GPU-hours lost to preemption")
    ax.set_title(f"{result.cell.label}, seed {first}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
