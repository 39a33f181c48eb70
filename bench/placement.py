"""Placement benchmark: FGD's own protocol, every policy side by side (see its README).

Docs: policies/placement/README.md.

Runs each policy on each seed (FGD's protocol: ckpt_preempt.policies.placement.protocol), bins
the allocation ratio by arrived demand, and reports the median at 130 % next to the paper's.
Optionally: the ablation of our scorer's ideas, the scoring-budget fallback, and an offline
reference (first-fit-decreasing over the same arrivals). Progress goes to stderr, one JSON line
to stdout; ``--out`` receives placement.json and placement.png (needs the ``plot`` extra).

Usage: python bench/placement.py [--trace openb_pod_list_default.csv] [--seeds 42-51]
       [--policies Random,DotProd,GpuClustering,GpuPacking,BestFit,FGD,Ours] [--ablation]
       [--budget 0.1,0.5] [--offline] [--out bench/results] [--fraction 1.0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from importlib import resources
from pathlib import Path

from tqdm import tqdm

from ckpt_preempt.policies.placement import baselines, fgd, ours, protocol
from ckpt_preempt.policies.placement.devices import PodShape

# Medians at 130 % of the paper's 10 seeds: github.com/hkust-adsl/kubernetes-scheduler-simulator
# @8f3d641 experiments/analysis/expected_results/analysis_allo_discrete.csv
PAPER_MEDIAN_130 = {
    "openb_pod_list_default.csv": {
        "Random": 87.38, "DotProd": 90.80, "GpuClustering": 91.79, "GpuPacking": 92.06,
        "BestFit": 93.11, "FGD": 95.40},
    "openb_pod_list_multigpu20.csv": {
        "Random": 88.66, "DotProd": 92.02, "GpuClustering": 93.59, "GpuPacking": 93.75,
        "BestFit": 93.90, "FGD": 95.65},
}
DEFAULT_POLICIES = ("Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD", "Ours")
HEADLINE_BIN = protocol.MAX_BIN_PCT
NO_BUDGET = protocol.ScoreBudget()
PROGRESS_STEP = 500  # pods per progress-bar update

# Each idea measured alone on top of FGD's scorer, then combined (policies/placement/README.md).
ABLATION = {
    "FGD measure, integer score, name tie-break (= FGD)": ours.OursConfig(
        tie_break="name", cpu_balance_weight=0),
    "exact decrease, name tie-break": ours.OursConfig(
        integer_score=False, tie_break="name", cpu_balance_weight=0),
    "integer score, BestFit tie-break": ours.OursConfig(cpu_balance_weight=0),
    "integer score, least-GPU tie-break": ours.OursConfig(tie_break="gpu", cpu_balance_weight=0),
    "+ CPU balance (= Ours)": ours.OursConfig(),
    "+ CPU balance, exact decrease": ours.OursConfig(integer_score=False),
    "+ CPU balance, decrease in 80-milli steps": ours.OursConfig(
        integer_score=False, quantum_milli=80),
    "+ CPU balance, stranded CPU as fragment (0.05 mGPU/mCPU)": ours.OursConfig(
        cpu_frag_weight=0.05),
    "+ CPU balance, target learned online": ours.OursConfig(target="online"),
    "+ CPU balance, target weighted by GPU demand": ours.OursConfig(gpu_weighted=True),
    "+ CPU balance, all shapes as target (100 %)": ours.OursConfig(threshold_pct=100),
    "+ CPU balance, one-step lookahead": ours.OursConfig(lookahead=True),
}


def make_policy(name: str, trace: tuple[PodShape, ...]) -> protocol.Policy:
    if name == "FGD":
        return fgd.FGD(fgd.typical_pods(trace))
    if name == "Ours":
        return ours.Ours(trace)
    for cls in baselines.BASELINES:
        if cls.name == name:
            return cls()
    known = ", ".join(DEFAULT_POLICIES)
    raise ValueError(f"unknown policy {name!r} (known: {known})")


def parse_seeds(text: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if not lo.strip().isdigit() or (hi and not hi.strip().isdigit()):
            raise ValueError(f"bad seed list {text!r}: use e.g. 42-51 or 42,43")
        out.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    return tuple(out)


def read_trace(name: str) -> str:
    path = Path(name)
    if path.is_file():
        return path.read_text()
    data = resources.files("ckpt_preempt.policies").joinpath("data")
    if not data.joinpath(name).is_file():
        raise ValueError(f"no trace {name!r} (a path, or a file in policies/data/)")
    return data.joinpath(name).read_text()


def median_curve(curves: list[dict[int, float]]) -> dict[int, float]:
    bins = sorted(set().union(*curves))
    return {b: round(statistics.median(c[b] for c in curves if b in c), 2) for b in bins}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        nodes = protocol.load_nodes(read_trace("openb_node_list_gpu_node.csv"))
        pods = protocol.load_pods(read_trace(args.trace))
        if args.fraction < 1.0:
            nodes, pods = protocol.subsample(nodes, pods, args.fraction, seed=0)
        self.nodes, self.pods, self.seeds = nodes, pods, args.seeds
        self.capacity = sum(n.gpu_count for n in nodes) * 1000
        self.arrivals = {s: protocol.arrivals(pods, self.capacity, s) for s in self.seeds}
        self.bar = tqdm(total=0, unit="pod", file=sys.stderr, mininterval=1.0)

    def _tick(self, index: int) -> None:
        if index % PROGRESS_STEP == PROGRESS_STEP - 1:
            self.bar.update(PROGRESS_STEP)

    def run_all(self, label: str, make, budget=NO_BUDGET, order=None) -> dict:
        finals, curves, fallbacks, failed = [], [], 0, 0
        started = time.perf_counter()
        for seed in self.seeds:
            pods = self.arrivals[seed] if order is None else order(self.arrivals[seed])
            self.bar.total += len(pods)
            self.bar.set_description(f"{label[:40]} seed {seed}")
            result = protocol.run(self.nodes, pods, make(), seed, budget=budget,
                                  progress=self._tick)
            self.bar.update(len(pods) % PROGRESS_STEP)
            binned = protocol.binned_allocation(result)
            curves.append(binned)
            finals.append(binned.get(HEADLINE_BIN, result.final_allocation_pct))
            fallbacks += result.fallbacks
            failed += result.failed
        return {
            "median_130": round(statistics.median(finals), 2),
            "per_seed_130": finals, "failed_pods": failed, "fallbacks": fallbacks,
            "seconds": round(time.perf_counter() - started, 1),
            "curve": median_curve(curves),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="openb_pod_list_default.csv")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    ap.add_argument("--ablation", action="store_true", help="our scorer's ideas one by one")
    ap.add_argument("--budget", default="", help="node-evaluation budgets as node fractions")
    ap.add_argument("--offline", action="store_true", help="first-fit-decreasing reference")
    ap.add_argument("--fraction", type=float, default=1.0, help="subsample nodes and pods")
    ap.add_argument("--out", default="", help="folder for placement.json and placement.png")
    args = ap.parse_args(argv)
    try:
        args.seeds = parse_seeds(args.seeds)
        budgets = [float(x) for x in args.budget.split(",") if x]
        if not 0 < args.fraction <= 1 or any(not 0 < b <= 1 for b in budgets):
            raise ValueError("--fraction and --budget values must be in (0, 1]")
        names = [p for p in args.policies.split(",") if p]
        unknown = [n for n in names if n not in DEFAULT_POLICIES]
        if unknown or not names:
            raise ValueError(f"unknown policy {unknown} (known: {', '.join(DEFAULT_POLICIES)})")
        bench = Bench(args)
    except (ValueError, OSError) as e:
        print(f"placement: {e}", file=sys.stderr)
        return 2

    started = time.perf_counter()
    trace_key = Path(args.trace).name
    paper = PAPER_MEDIAN_130.get(trace_key, {}) if args.fraction == 1.0 else {}
    report: dict = {"trace": trace_key, "seeds": list(args.seeds), "nodes": len(bench.nodes),
                    "gpus": bench.capacity // 1000, "policies": {}}
    for name in names:
        row = bench.run_all(name, lambda n=name: make_policy(n, bench.pods))
        if name in paper:
            row["paper_median_130"] = paper[name]
            row["gap_pp"] = round(row["median_130"] - paper[name], 2)
        report["policies"][name] = row
    if args.ablation:
        report["ablation"] = {
            label: bench.run_all(label, lambda c=cfg, lb=label: ours.Ours(bench.pods, c, lb))
            for label, cfg in ABLATION.items()}
    if budgets:
        report["budget"] = {}
        for frac in budgets:
            budget = protocol.ScoreBudget(
                max_evaluations=max(1, int(frac * len(bench.nodes))),
                fallback=baselines.BestFit())
            row = bench.run_all(f"Ours, budget {frac:.0%}", lambda: ours.Ours(bench.pods), budget)
            row["max_evaluations_per_pod"] = budget.max_evaluations
            report["budget"][f"{frac:.0%} of nodes"] = row
    if args.offline:
        by_size = lambda pods: sorted(pods, key=lambda p: -p.total_gpu_milli)  # noqa: E731
        report["offline_ffd"] = {
            "BestFit": bench.run_all("offline FFD, BestFit", baselines.BestFit, order=by_size),
            "Ours": bench.run_all("offline FFD, Ours", lambda: ours.Ours(bench.pods),
                                  order=by_size)}
    bench.bar.close()
    report["wall_seconds"] = round(time.perf_counter() - started, 1)

    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        results = out / "placement.json"  # one entry per trace; a rerun replaces its own
        merged = json.loads(results.read_text()) if results.is_file() else {}
        merged[trace_key] = json.loads(json.dumps(report))
        results.write_text(json.dumps(merged, indent=1) + "\n")
        plot(merged, out / "placement.png")
    print(json.dumps({
        "trace": trace_key, "wall_seconds": report["wall_seconds"],
        "median_130": {k: v["median_130"] for k, v in report["policies"].items()},
        "gap_to_paper_pp": {k: v["gap_pp"] for k, v in report["policies"].items()
                            if "gap_pp" in v},
        **({"ablation_median_130": {k: v["median_130"] for k, v in report["ablation"].items()}}
           if "ablation" in report else {}),
        **({"budget": {k: {"median_130": v["median_130"], "fallbacks": v["fallbacks"]}
                       for k, v in report["budget"].items()}} if "budget" in report else {}),
        **({"offline_ffd_130": {k: v["median_130"] for k, v in report["offline_ffd"].items()}}
           if "offline_ffd" in report else {}),
    }))
    return 0


def plot(reports: dict, path: Path) -> None:
    """One row per trace: the whole curve, and a zoom on the saturated end."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("placement: matplotlib missing (install the 'plot' extra); no plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(len(reports), 2, figsize=(12, 4.5 * len(reports)), squeeze=False)
    for (trace, report), (full, zoom) in zip(sorted(reports.items()), axes, strict=True):
        for name, row in report["policies"].items():
            xs = sorted(int(b) for b in row["curve"])
            ys = [row["curve"][str(b)] for b in xs]
            for ax in (full, zoom):
                ax.plot(xs, ys, label=f"{name} ({row['median_130']:.2f})")
        for ax in (full, zoom):
            ax.set_xlabel("arrived GPU demand (% of capacity)")
            ax.set_ylabel("GPU allocation (%)")
            ax.grid(alpha=0.3)
        zoom.set_xlim(85, 131)
        zoom.set_ylim(84, 100)
        seeds = report["seeds"]
        full.set_title(f"{trace}: median of seeds {seeds[0]}-{seeds[-1]}")
        zoom.set_title("zoom; legend: median at 130 %")
        zoom.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
