"""Replay a GPU trace under several preemption policies and compare the work they lose.

By default: the bundled Alibaba openb trace (cluster-trace-gpu-v2023) on a seeded quarter of its
1,213 GPU nodes, arrivals compressed into 6 hours and scaled to 130 % offered load (the stress
protocol), with checkpoints and gangs from a seeded generator. ``--seeds N`` replays N seeds
(from ``--seed``) and reports medians with 95 % bootstrap intervals; every ratio is against the
strongest baseline of the cell (the baseline losing least). Every parameter is printed with the
result. After the table, each policy's loss ÷ the hindsight floor over ``--floor-cuts`` seeded
small cuts of the same cell (policies/sim/floor_cuts.py), computed in the run, not stored.

``--protocol fgd`` runs FGD's placement benchmark instead (policies/placement/benchmark.py, the
same code as bench/placement.py): the openb node list, the pods shuffled per seed and topped up
to 130 % of the GPUs, every placement policy side by side; it prints the benchmark's one JSON
line (``--json``: the whole report, curves included). It reads ``--workload``/``--pods``/
``--nodes``, ``--policies`` (placement policies), ``--seed``/``--seeds`` and ``--scale`` (a
subsample of nodes and pods); the preemption flags do not apply to it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from pathlib import Path

from ckpt_preempt.cli import argtypes
from ckpt_preempt.cli.files import file_problem, readable_file
from ckpt_preempt.cli.output import emit
from ckpt_preempt.controller.app import sim_runner, trace_files
from ckpt_preempt.policies.placement import benchmark
from ckpt_preempt.policies.sim import engine, experiment, planners, report, workload, worlds
from ckpt_preempt.policies.sim.protocols import PROTOCOLS, WORKLOADS

NAME = "simulate"
HELP = "what-if replay of a GPU trace under each preemption policy"

# (flag, SimConfig field, value parser, help): the costs an eviction carries beyond unsaved
# work, and how what the planner is shown differs from the truth
COST_FLAGS = (
    ("--restore-seconds", "restore_seconds", argtypes.non_negative_float,
     "restart/restore time of an evicted job, on each of its GPUs"),
    ("--restore-job-gpu-seconds", "restore_job_gpu_seconds", argtypes.non_negative_float,
     "fixed restart cost per evicted job, whatever its size"),
    ("--report-lag-seconds", "report_lag_seconds", argtypes.non_negative_float,
     "a checkpoint is reported this late"),
    ("--report-jitter-seconds", "report_jitter_seconds", argtypes.non_negative_float,
     "error of a reported checkpoint time"),
    ("--drain-failure-share", "drain_failure_share", argtypes.fraction,
     "share of drains ending with no checkpoint"),
    ("--drain-overrun-share", "drain_overrun_share", argtypes.fraction,
     "share of drains taking longer than said"),
    ("--drain-overrun-factor", "drain_overrun_factor", argtypes.at_least_one,
     "how much longer an overrun drain takes"),
    ("--lie-share", "lie_share", argtypes.fraction,
     "share of reporting jobs whose annotation claims a more recent checkpoint"),
    ("--lie-minutes", "lie_minutes", argtypes.non_negative_float,
     "a lying claim is up to this many minutes more recent than the truth"),
    ("--declared-end-share", "declared_end_share", argtypes.fraction,
     "share of jobs declaring their end (expected-end), which timing may wait for"),
    ("--declared-end-error", "declared_end_error", argtypes.non_negative_float,
     "a declared end is off by up to this share of the run it predicts, early or late"),
)
FGD_PROTOCOL = "fgd"  # FGD's placement benchmark, not a preemption replay
CHOICES = (*PROTOCOLS, FGD_PROTOCOL)
FGD_FIRST_SEED = benchmark.protocol.PAPER_SEEDS[0]
# small cuts of the simulated cell measured against the hindsight floor by default: about 5 s
# on the default run's cell (openb/stress), where about half the cuts contend
FLOOR_CUTS = 40
LINE_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (6, 2, 1, 2, 1, 2)), "x"),
               ((0, (1, 1)), "v"), ((0, (3, 1, 1, 1)), "P"),
               ((0, (5, 3)), "*"))  # one per policy, told apart in grayscale too


def _csv(values: tuple[float, ...]) -> str:
    return ",".join(f"{x:g}" for x in values)


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = workload.WorkloadParams()
    c = engine.SimConfig()
    p.add_argument("--pods", type=readable_file,
                   help="pod trace in openb CSV format (default: bundled)")
    p.add_argument("--nodes", type=readable_file,
                   help="node list in openb CSV format (default: bundled)")
    p.add_argument("--workload", default=WORKLOADS[0],
                   help=f"one of {', '.join(WORKLOADS)} (default %(default)s)")
    p.add_argument("--protocol", default="stress",
                   help=f"one of {', '.join(CHOICES)} (default %(default)s; {FGD_PROTOCOL}: "
                        "FGD's placement benchmark)")
    p.add_argument("--utilisation", type=argtypes.positive_float, default=1.0,
                   help="target GPU utilisation of the steady protocol (default %(default)s)")
    p.add_argument("--policies", type=argtypes.names,
                   help=f"comma-separated, from {', '.join(planners.SELECTABLE)}; with --protocol "
                        f"{FGD_PROTOCOL}: from {', '.join(benchmark.POLICIES)} (default: all)")
    p.add_argument("--seed", type=int,
                   help=f"first seed (default {d.seed}; {FGD_FIRST_SEED} with --protocol "
                        f"{FGD_PROTOCOL}, the paper's first)")
    p.add_argument("--seeds", type=argtypes.positive_int, default=1,
                   help="number of seeds; > 1 reports medians with 95 %% bootstrap intervals "
                        "(default %(default)s)")
    p.add_argument("--scale", type=argtypes.fraction,
                   help=f"share of nodes and pods simulated, 0 < s <= 1 (default {d.scale}; 1 "
                        f"with --protocol {FGD_PROTOCOL})")
    p.add_argument("--load", type=argtypes.positive_float, default=d.load,
                   help="target offered GPU load in the window (default %(default)s)")
    p.add_argument("--window-hours", type=argtypes.positive_float, default=d.window_hours,
                   help="arrivals are compressed into this window (default %(default)s)")
    p.add_argument("--replay-windows", type=argtypes.positive_int, default=d.replay_windows,
                   help="replay: seeded weeks of the trace replayed at once on one cluster "
                        "sized to their joint demand (default %(default)s)")
    p.add_argument("--share-on-request", type=argtypes.fraction, default=d.share_on_request,
                   help="share of low-priority jobs checkpointing on request, and periodically "
                        "(default %(default)s)")
    p.add_argument("--share-periodic", type=argtypes.fraction, default=d.share_periodic,
                   help="share of low-priority jobs checkpointing only periodically "
                        "(default %(default)s)")
    p.add_argument("--share-silent", type=argtypes.fraction,
                   help="share of checkpointing jobs that never report it (default "
                        f"{worlds.params(worlds.REALISTIC).share_silent} in the realistic world, "
                        f"{worlds.params(worlds.OPTIMISTIC).share_silent} in the optimistic)")
    p.add_argument("--gang-share", type=argtypes.fraction, default=d.gang_share,
                   help="chance a low-priority job leads a gang of its successors "
                        "(default %(default)s)")
    p.add_argument("--gang-sizes", type=argtypes.positive_ints, default=d.gang_sizes,
                   metavar="N,N,...", help=f"gang sizes drawn from (default: {_csv(d.gang_sizes)})")
    p.add_argument("--checkpoint-intervals-min", type=argtypes.positive_ints,
                   default=d.checkpoint_intervals_min, metavar="MIN,MIN,...",
                   help="periodic checkpoint intervals in minutes, drawn from (default: "
                        f"{_csv(d.checkpoint_intervals_min)})")
    p.add_argument("--checkpoint-seconds", type=argtypes.non_negative_floats,
                   default=d.checkpoint_seconds, metavar="MIN,MAX",
                   help=f"range of an on-request checkpoint's duration (default: "
                        f"{_csv(d.checkpoint_seconds)})")
    p.add_argument("--max-checkpoint-seconds", type=argtypes.non_negative_float,
                   default=c.max_checkpoint_seconds,
                   help="the controller's drain cap (default %(default)s)")
    p.add_argument("--grace-seconds", type=argtypes.non_negative_float, default=c.grace_seconds,
                   help="termination grace period (default %(default)s)")
    p.add_argument("--world", choices=worlds.NAMES, default=worlds.DEFAULT,
                   help="what jobs really do and what the planner is told (policies/sim/"
                        "worlds.py): realistic (estimated ends, silent jobs, checkpoints that "
                        "take time, drift and fail, per-job restore times, saves on SIGTERM) or "
                        "optimistic (the engine's exact world, an ablation); the flags below "
                        "override it (default %(default)s)")
    for flag, name, kind, text in COST_FLAGS:
        p.add_argument(flag, type=kind, help=f"{text} (default {_world_default(name)})")
    p.add_argument("--declared-end-from-progress", action=argparse.BooleanOptionalAction,
                   help="declared ends are estimated from progress, as the checkpoint agent "
                        "declares them: --declared-end-error is then a share of the time left, "
                        "not of the run (default "
                        f"{_world_default('declared_end_from_progress')})")
    p.add_argument("--planner-restart-seconds", type=argtypes.non_negative_float,
                   help="what our search charges per evicted GPU for a restart, the "
                        "controller's restartCostSeconds (default: --restore-seconds)")
    p.add_argument("--floor-cuts", type=argtypes.non_negative_int, default=FLOOR_CUTS,
                   help="seeded small cuts of the simulated cell on which each policy's loss "
                        "is divided by the hindsight floor (policies/sim/floor_cuts.py); 0: "
                        "none (default %(default)s, seconds on openb, minutes on training)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--plot", type=Path, metavar="FILE.png",
                   help="lost work over time per policy (the first seed); needs matplotlib")
    p.add_argument("--jobs", type=argtypes.positive_int, default=os.cpu_count() or 1,
                   help="replays run side by side, one per process (default: one per CPU, "
                        "%(default)s here); results are the same whatever the number")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress on stderr (a bar on a terminal, else one start line and "
                        "one line per replay)")


def _world_default(name: str) -> str:
    """A SimConfig field's default in each world, for a flag's help."""
    real = getattr(worlds.config(worlds.REALISTIC), name)
    ideal = getattr(worlds.config(worlds.OPTIMISTIC), name)
    if real == ideal:
        return str(real)
    return f"{real} in the realistic world, {ideal} in the optimistic"


def _params(args: argparse.Namespace) -> workload.WorkloadParams:
    if len(args.checkpoint_seconds) != 2 or args.checkpoint_seconds[0] > args.checkpoint_seconds[1]:
        raise ValueError("--checkpoint-seconds needs MIN,MAX with MIN <= MAX")
    if not 0 <= args.share_on_request + args.share_periodic <= 1:
        raise ValueError("--share-on-request + --share-periodic must be between 0 and 1")
    if args.scale == 0:
        raise ValueError("--scale must be in (0, 1], got 0")
    silent = worlds.params(args.world).share_silent if args.share_silent is None \
        else args.share_silent
    return workload.WorkloadParams(
        seed=args.seed, scale=args.scale, load=args.load, window_hours=args.window_hours,
        replay_windows=args.replay_windows,
        share_on_request=args.share_on_request, share_periodic=args.share_periodic,
        share_silent=silent, gang_share=args.gang_share,
        gang_sizes=tuple(args.gang_sizes),
        checkpoint_intervals_min=tuple(args.checkpoint_intervals_min),
        checkpoint_seconds=(args.checkpoint_seconds[0], args.checkpoint_seconds[1]),
    )


def _config(args: argparse.Namespace) -> engine.SimConfig:
    # each value was checked by its argparse type (COST_FLAGS)
    given = {name: getattr(args, name) for _, name, _, _ in COST_FLAGS
             if getattr(args, name) is not None}
    if args.declared_end_from_progress is not None:
        given["declared_end_from_progress"] = args.declared_end_from_progress
    return replace(worlds.config(args.world), grace_seconds=args.grace_seconds,
                   max_checkpoint_seconds=args.max_checkpoint_seconds,
                   planner_restart_seconds=args.planner_restart_seconds, **given)


def _policies(args: argparse.Namespace) -> list[str]:
    names = list(args.policies or planners.REPORTED)  # argtypes.names: non-empty, each once
    for name in names:
        planners.planner_for(name, 1.0)  # unknown names raise ValueError
    return names


def plot_problem(path: Path, importer: Callable[[str], object] = importlib.import_module
                 ) -> str | None:
    """Why ``--plot path`` cannot be written (checked before any simulation), or None."""
    if path.suffix.lower() != ".png":
        return f"--plot writes a PNG: {path} should end in .png"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"--plot: directory {parent} does not exist"
    if path.is_dir():
        return f"--plot: {path} is a directory"
    if not os.access(parent, os.W_OK):
        return f"--plot: directory {parent} is not writable"
    try:  # os.access says yes to root everywhere, /proc included: create a file to be sure
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".ckpt-preempt-plot-", suffix=".png"):
            pass
    except OSError:  # /proc answers "no such file", a full disk "no space left"
        return f"--plot: directory {parent} is not writable"
    try:
        importer("matplotlib")
    except ImportError:
        return "--plot needs matplotlib: pip install 'ckpt-preempt[plot]'"
    return None


def validate(args: argparse.Namespace) -> tuple[list[str], experiment.Cell, list[int]]:
    """Every flag checked before anything runs; ValueError with one line otherwise."""
    d = workload.WorkloadParams()
    args.seed = d.seed if args.seed is None else args.seed
    args.scale = d.scale if args.scale is None else args.scale
    policies = _policies(args)
    if args.protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {args.protocol!r}; choose from {', '.join(CHOICES)}")
    if args.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {args.workload!r}; choose from {', '.join(WORKLOADS)}")
    if args.plot and (problem := plot_problem(args.plot)):
        raise ValueError(problem)
    cell = experiment.Cell(workload=args.workload, protocol=args.protocol,
                           utilisation=args.utilisation, scale=args.scale,
                           params=_params(args), config=_config(args))
    return policies, cell, list(range(args.seed, args.seed + args.seeds))


def fgd_setup(args: argparse.Namespace) -> tuple[benchmark.Setup, list[str]]:
    """The FGD benchmark's cluster, arrivals and policies; ValueError with one line."""
    if args.plot:
        raise ValueError(f"--plot is for the preemption protocols; for --protocol {FGD_PROTOCOL} "
                         "run python -m bench.placement --out DIR (placement.png)")
    names = benchmark.check_policies(args.policies or benchmark.POLICIES)
    if args.workload not in trace_files.BUNDLED_PODS and args.pods is None:
        raise ValueError(f"--protocol {FGD_PROTOCOL} replays an openb pod list: --workload "
                         f"{' or '.join(trace_files.BUNDLED_PODS)}, or --pods FILE")
    first = FGD_FIRST_SEED if args.seed is None else args.seed
    bundled = resources.files("ckpt_preempt.policies").joinpath("data")

    def text(path: Path | None, name: str) -> tuple[str, str]:
        if path is None:
            return name, bundled.joinpath(name).read_text()
        try:
            return path.name, path.read_text()
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not a text (CSV) file") from None
        except OSError as e:  # checked while parsing (readable_file), but it can still go
            raise ValueError(file_problem(path, e)) from None

    pod_name, pods = text(args.pods, trace_files.BUNDLED_PODS.get(args.workload, ""))
    _, nodes = text(args.nodes, benchmark.NODE_LIST)
    try:
        setup = benchmark.prepare(pod_name, nodes, pods, range(first, first + args.seeds),
                                  1.0 if args.scale is None else args.scale)
    except (KeyError, TypeError) as e:
        raise ValueError(f"not an openb node or pod list (column {e} missing or empty)") from None
    return setup, names


def run_fgd(args: argparse.Namespace) -> int:
    try:
        setup, names = fgd_setup(args)
    except ValueError as e:  # the readers name a file they cannot use (OSError: cli.main)
        print(f"ckpt-preempt simulate: {e}", file=sys.stderr)
        return 2
    bars: dict = {}
    show = not args.no_progress and sys.stderr.isatty()

    def progress(label: str, seed: int, index: int, total: int) -> None:
        from tqdm import tqdm

        bar = bars.get((label, seed))
        if bar is None:
            bar = bars[(label, seed)] = tqdm(total=total, desc=f"seed {seed} {label:<14}",
                                             unit="pod", mininterval=1.0)
        if index % benchmark.PROGRESS_STEP == 0 or index == total - 1:
            bar.update(index + 1 - bar.n)
        if index == total - 1:
            bar.close()

    started = time.monotonic()
    doc = benchmark.report_head(setup)
    doc["policies"] = benchmark.compare(setup, names, progress if show else None)
    doc["wall_seconds"] = round(time.monotonic() - started, 1)
    emit(json.dumps(doc, indent=2) if args.json else json.dumps(benchmark.summary(doc)))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.protocol == FGD_PROTOCOL:
        return run_fgd(args)
    trace = sim_runner.Trace(workload=args.workload, pods=args.pods, nodes=args.nodes)
    try:
        policies, cell, seeds = validate(args)
        sim_runner.load_trace(trace)  # a bad trace is refused before the run, in one line
    except ValueError as e:  # the readers name a file they cannot use (OSError: cli.main)
        print(f"ckpt-preempt simulate: {e}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        result = sim_runner.run_cell(cell, seeds, policies, trace, processes=args.jobs,
                                     show=not args.no_progress)
    except ValueError as e:
        print(f"ckpt-preempt simulate: {e}", file=sys.stderr)
        return 2
    floor = sim_runner.floor_summary(cell, seeds, policies, args.floor_cuts, trace,
                                     processes=args.jobs)
    doc = result.as_dict()
    if floor:
        doc["floor"] = floor.as_dict()
    doc["generator"] = cell.params.describe() if cell.params else {}
    doc["wall_seconds"] = round(time.monotonic() - started, 1)
    plot_error = None
    if args.plot:
        try:  # checked before the run, but the disk can still fill or the folder vanish
            _plot(result, args.plot)
            doc["plot"] = str(args.plot)
        except OSError as e:
            plot_error = f"ckpt-preempt simulate: --plot: cannot write {file_problem(args.plot, e)}"
    if args.json:
        emit(json.dumps(doc, indent=2))
    else:
        ours = [p for p in policies if p in planners.OURS]
        emit("\n".join([
            report.format_cell(result),
            *(["", *floor.lines(ours), ""] if floor else []),
            "generator: " + ", ".join(f"{k}={v}" for k, v in doc["generator"].items()
                                      if k != "seed"),
            "simulator: " + ", ".join(f"{k}={v}" for k, v in doc["sim"].items()),
        ]))
    if plot_error:  # the results above are kept; only the picture is missing
        print(plot_error, file=sys.stderr)
        return 1
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
