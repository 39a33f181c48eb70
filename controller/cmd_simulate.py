"""Replay a GPU trace under several preemption policies and compare the work they lose.

By default: the bundled Alibaba openb trace (cluster-trace-gpu-v2023) on a seeded quarter of its
1,213 GPU nodes, arrivals compressed into 6 hours and scaled to 130 % offered load, with
checkpoints and gangs from a seeded generator. Every parameter is printed with the result.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib import resources
from pathlib import Path

from policies.sim import engine, planners, report, trace, workload

NAME = "simulate"
HELP = "what-if replay of a GPU trace under each preemption policy"
BUNDLED_PODS = "openb_pod_list_default.csv"
BUNDLED_NODES = "openb_node_list_gpu_node.csv"


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
    p.add_argument("--policies", default=",".join(planners.POLICIES),
                   help=f"comma-separated, from {', '.join(planners.POLICIES)}")
    p.add_argument("--seed", type=int, default=d.seed)
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
    p.add_argument("--grace-seconds", type=float, default=c.grace_seconds)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="lost work over time, per policy")
    p.add_argument("--no-progress", action="store_true")


def _read(path: Path | None, bundled: str) -> list[str]:
    if path is None:
        return resources.files("policies").joinpath("data", bundled).read_text().splitlines()
    return path.read_text().splitlines()


def _params(args: argparse.Namespace) -> workload.WorkloadParams:
    if len(args.checkpoint_seconds) != 2 or args.checkpoint_seconds[0] > args.checkpoint_seconds[1]:
        raise ValueError("--checkpoint-seconds needs MIN,MAX with MIN <= MAX")
    if not 0 <= args.share_on_request + args.share_periodic <= 1:
        raise ValueError("--share-on-request + --share-periodic must be between 0 and 1")
    if args.load <= 0 or args.window_hours <= 0:
        raise ValueError("--load and --window-hours must be positive")
    return workload.WorkloadParams(
        seed=args.seed, scale=args.scale, load=args.load, window_hours=args.window_hours,
        share_on_request=args.share_on_request, share_periodic=args.share_periodic,
        gang_share=args.gang_share, gang_sizes=tuple(int(x) for x in args.gang_sizes),
        checkpoint_intervals_min=tuple(int(x) for x in args.checkpoint_intervals_min),
        checkpoint_seconds=(args.checkpoint_seconds[0], args.checkpoint_seconds[1]),
    )


def run(args: argparse.Namespace) -> int:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    try:
        for name in policies:
            planners.planner_for(name, 1.0)
        params = _params(args)
        pods = trace.parse_pods(_read(args.pods, BUNDLED_PODS))
        nodes = trace.parse_nodes(_read(args.nodes, BUNDLED_NODES))
        config = engine.SimConfig(
            grace_seconds=args.grace_seconds, max_checkpoint_seconds=args.max_checkpoint_seconds
        )
    except (OSError, ValueError) as e:
        print(f"ckpt-preempt simulate: {e}", file=sys.stderr)
        return 2
    bars: dict = {}
    show = not args.no_progress and sys.stderr.isatty()

    def progress(policy: str, fraction: float) -> None:
        from tqdm import tqdm

        bar = bars.get(policy)
        if bar is None:
            bar = bars[policy] = tqdm(total=100, desc=f"{policy:<24}", unit="%", leave=True)
        bar.update(round(fraction * 100) - bar.n)
        if fraction >= 1:
            bar.close()

    started = time.monotonic()
    try:
        result = report.compare(
            pods, nodes, params, policies, config, clock=time.perf_counter,
            progress=progress if show else None,
        )
    except ValueError as e:
        print(f"ckpt-preempt simulate: {e}", file=sys.stderr)
        return 2
    summary = result.summary()
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    if args.plot:
        _plot(result, args.plot)
        summary["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(render(summary))
    return 0


ROWS = (
    ("lost_gpu_hours", "GPU-hours lost to preemption", "{:.1f}"),
    ("preemptions", "preemptions", "{}"),
    ("victims", "pods evicted", "{}"),
    ("gangs_broken", "gangs broken", "{}"),
    ("preemptor_wait_p50_s", "preemptor wait p50 (s)", "{:.0f}"),
    ("preemptor_wait_p95_s", "preemptor wait p95 (s)", "{:.0f}"),
    ("gpu_utilisation", "GPU utilisation in window", "{:.1%}"),
    ("plan_latency_p50_ms", "plan latency p50 (ms)", "{:.1f}"),
    ("plan_latency_p99_ms", "plan latency p99 (ms)", "{:.1f}"),
    ("plans_invalid", "invalid plans", "{}"),
)


def render(summary: dict) -> str:
    w = summary["workload"]
    lines = [
        f"workload: {w['jobs']} jobs ({w['high_priority_jobs']} high priority, "
        f"{w['gang_jobs']} gangs) on {w['nodes']} nodes / {w['gpus']} GPUs; "
        f"offered load {w['offered_load']:.2f} over {w['window_hours']:g} h "
        f"(trace compressed {w['time_compression']:g}x, {w['extra_pods_drawn']} pods drawn)",
        "generator: " + ", ".join(
            f"{k}={v}" for k, v in w.items()
            if k not in {"jobs", "gang_jobs", "high_priority_jobs", "extra_pods_drawn",
                         "time_compression", "offered_load", "nodes", "gpus"}
        ),
        "",
    ]
    results = summary["results"]
    width = max(len(r["policy"]) for r in results) + 2
    lines.append(f"{'':<30}" + "".join(f"{r['policy']:>{width}}" for r in results))
    for key, label, fmt in ROWS:
        lines.append(f"{label:<30}" + "".join(f"{fmt.format(r[key]):>{width}}" for r in results))
    ratios = summary["lost_work_ratio_vs_kube_default"]
    if ratios:
        lines.append("")
        lines.extend(f"lost work {p} ÷ kube-default: {v:.3f}" for p, v in ratios.items())
    return "\n".join(lines)


def _plot(result: report.Comparison, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in result.results:
        xs = [0.0] + [t / 3600 for t, _ in r.lost_series]
        ys = [0.0] + [v for _, v in r.lost_series]
        ax.step(xs, ys, where="post", label=r.policy)
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("cumulative GPU-hours lost to preemption")
    w = result.workload
    ax.set_title(f"openb replay, load {w.offered_load:.2f}, seed {w.params.seed}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
