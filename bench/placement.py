"""Placement benchmark: FGD's own protocol, every policy side by side (see its README).

Usage: python -m bench.placement [--trace openb_pod_list_default.csv] [--seeds 42-51]
       [--policies Random,DotProd,GpuClustering,GpuPacking,BestFit,FGD,Ours] [--ablation]
       [--budget 0.1,0.5] [--offline] [--out bench/results] [--fraction 1.0]
       python -m bench.placement --balance [--seeds 42-44] [--out bench/results]
       python -m bench.placement --profile [--seeds 42-46] [--out bench/results]
       python -m bench.placement --candidates all|LABEL,... [--seeds 42-51] [--out bench/results]
                                 [--reuse-baselines]
Target: ours >= 96.0 % allocated at 130 % arrived demand (median over seeds).

Docs: policies/placement/README.md.

Runs each policy on each seed (FGD's protocol: ckpt_preempt.policies.placement.protocol), bins
the allocation ratio by arrived demand, and reports the median at 130 % next to the paper's.
Optionally: the ablation of our scorer's ideas, the scoring-budget fallback, and an offline
reference (first-fit-decreasing over the same arrivals). Progress goes to stderr, one JSON line
to stdout; ``--out`` receives placement.json and placement.png (needs the ``plot`` extra).

``--balance`` runs instead the pack-or-spread comparison with departures
(bench.placement_research.balance) over cluster sizes and utilisations, and writes
placement_balance.json. ``--profile`` writes where FGD, Ours and offline FFD lose
(placement_profile.json); ``--candidates`` runs one-change variants of Ours next to FGD and Ours,
paired by seed (placement_candidates.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from importlib import resources
from pathlib import Path

from tqdm import tqdm

from bench.placement_research import balance
from ckpt_preempt.policies.placement import baselines, benchmark, fgd, ours, protocol
from ckpt_preempt.policies.placement.benchmark import POLICIES as DEFAULT_POLICIES

PROGRESS_STEP = benchmark.PROGRESS_STEP
SECTIONS = ("ablation", "budget", "offline_ffd")  # optional parts of a trace's report

# Each idea measured alone on top of FGD's scorer, then combined (policies/placement/README.md).
# The rows measured before the rare-fit term (issue 26) keep it off, as they were run.
FGD_SCALE = fgd.SIGMOID_SCALE_MILLI


def before(**changes) -> ours.OursConfig:
    """A configuration of Ours as it was before the rare-fit term, with ``changes``."""
    return ours.OursConfig(rare_fit_weight=0, **changes)


ABLATION = {
    "FGD measure, integer score, name tie-break (= FGD)": before(
        tie_break="name", cpu_balance_weight=0, sigmoid_scale_milli=FGD_SCALE),
    "exact decrease, name tie-break": before(
        integer_score=False, tie_break="name", cpu_balance_weight=0),
    "integer score, BestFit tie-break": before(
        cpu_balance_weight=0, sigmoid_scale_milli=FGD_SCALE),
    "integer score, least-GPU tie-break": before(
        tie_break="gpu", cpu_balance_weight=0, sigmoid_scale_milli=FGD_SCALE),
    "+ CPU balance": before(sigmoid_scale_milli=FGD_SCALE),
    "+ CPU balance, sigmoid scale 500 (Ours before the rare-fit term)": before(),
    "+ CPU balance, sigmoid scale 500, rare-fit term (= Ours)": ours.OursConfig(),
    "+ CPU balance, exact decrease": before(integer_score=False),
    "+ CPU balance, decrease in 80-milli steps": before(
        integer_score=False, quantum_milli=80),
    "+ CPU balance, stranded CPU as fragment (0.05 mGPU/mCPU)": before(
        cpu_frag_weight=0.05, sigmoid_scale_milli=FGD_SCALE),
    "+ CPU balance, target learned online": before(
        target="online", sigmoid_scale_milli=FGD_SCALE),
    "+ CPU balance, target weighted by GPU demand": before(
        gpu_weighted=True, sigmoid_scale_milli=FGD_SCALE),
    "+ CPU balance, all shapes as target (100 %)": before(
        threshold_pct=100, sigmoid_scale_milli=FGD_SCALE),
    "+ CPU balance, one-step lookahead": before(
        lookahead=True, sigmoid_scale_milli=FGD_SCALE),
}


# Ideas of the second round (issue 10 follow-up), each one change to Ours, chosen on seeds
# 42-51 and confirmed on 52-61 (policies/placement/README.md, "Second round").
CANDIDATES = {
    "sigmoid scale 350": before(sigmoid_scale_milli=350),
    "sigmoid scale 250": before(sigmoid_scale_milli=250),
    "least-GPU tie-break": before(tie_break="gpu"),
    "memory balance (weight 1)": before(mem_balance_weight=1.0),
    "target learned online": before(target="online"),
    "stranded CPU as fragment (0.01 mGPU/mCPU)": before(cpu_frag_weight=0.01),
    # Fourth round (issue 26): the rare-fit term, beta chosen on seeds 42-44 only.
    **{f"rare-fit term (beta {beta:g})": ours.OursConfig(rare_fit_weight=beta)
       for beta in (1, 2, 4, 8)},
    "rare-fit term (beta 4) without CPU balance": ours.OursConfig(
        rare_fit_weight=4, cpu_balance_weight=0),
    "rare-fit term (beta 4) on FGD's measure": ours.OursConfig(
        rare_fit_weight=4, cpu_balance_weight=0, tie_break="name", sigmoid_scale_milli=FGD_SCALE),
}


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


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.setup = benchmark.prepare(
            Path(args.trace).name, read_trace(benchmark.NODE_LIST), read_trace(args.trace),
            args.seeds, args.fraction)
        self.nodes, self.pods = self.setup.nodes, self.setup.pods
        self.bar = tqdm(total=0, unit="pod", file=sys.stderr, mininterval=1.0)
        self._seen: tuple[str, int] | None = None

    def _tick(self, label: str, seed: int, index: int, total: int) -> None:
        if self._seen != (label, seed):
            self._seen = (label, seed)
            self.bar.total += total
            self.bar.set_description(f"{label[:40]} seed {seed}")
        if index % PROGRESS_STEP == PROGRESS_STEP - 1:
            self.bar.update(PROGRESS_STEP)
        elif index == total - 1:
            self.bar.update(total % PROGRESS_STEP)

    @staticmethod
    def timed(run) -> dict:
        started = time.perf_counter()
        row = run()
        row["seconds"] = round(time.perf_counter() - started, 1)
        return row

    def run_all(self, label: str, make, budget=benchmark.NO_BUDGET, order=None) -> dict:
        return self.timed(lambda: benchmark.run_policy(
            self.setup, label, make, budget=budget, order=order, progress=self._tick))


BALANCE_FRACTIONS = (0.02, 0.05, 0.15)  # of the openb nodes: 24, 61 and 182 nodes
BALANCE_UTILISATIONS = (0.1, 0.2, 0.4, 0.7, 1.0)


def run_balance(args: argparse.Namespace) -> dict:
    """Pack, spread and the chooser on each (cluster size, utilisation) cell; medians of seeds."""
    nodes = protocol.load_nodes(read_trace(benchmark.NODE_LIST))
    timed = balance.load_timed_pods(read_trace(args.trace))
    cells = []
    for fraction in BALANCE_FRACTIONS:
        sub, _ = protocol.subsample(nodes, [timed[0].pod], fraction, seed=benchmark.SUBSAMPLE_SEED)
        gpus = sum(n.gpu_count for n in sub)
        for util in BALANCE_UTILISATIONS:
            rows: dict[str, list[balance.BalanceResult]] = {}
            for seed in args.seeds:
                stream = balance.arrivals(timed, gpus * 1000, util, seed)
                print(f"balance: {len(sub)} nodes, utilisation {util}, seed {seed}, "
                      f"{len(stream)} pods", file=sys.stderr, flush=True)
                for name in (balance.PACK, balance.SPREAD, "chooser"):
                    pick = (lambda u, g=gpus: balance.choose(g, u, balance.DEFAULT_RULE)) \
                        if name == "chooser" else (lambda _u, n=name: n)
                    rows.setdefault(name, []).append(balance.run(sub, stream, pick, name))
            med = {name: {m: round(statistics.median(getattr(r, m) for r in rs), 2)
                          for m in ("failed_pct", "hot_load_pct", "mean_utilisation_pct")}
                   for name, rs in rows.items()}
            pack, spread = (balance.BalanceResult(strategy=k, arrived=0, **med[k])
                            for k in (balance.PACK, balance.SPREAD))
            cells.append({"nodes": len(sub), "gpus": gpus, "offered_utilisation": util, **med,
                          "winner": balance.winner(pack, spread),
                          "chooser_at_offered": balance.choose(gpus, util, balance.DEFAULT_RULE)})
    return {"trace": Path(args.trace).name, "seeds": list(args.seeds),
            "rule": dataclasses.asdict(balance.DEFAULT_RULE),
            "material_failed_pp": balance.MATERIAL_FAILED_PP,
            "cells": cells}


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
    ap.add_argument("--candidates", default="",
                    help="'all' or labels of CANDIDATES, run next to FGD and Ours; "
                         "writes placement_candidates.json")
    ap.add_argument("--reuse-baselines", action="store_true",
                    help="with --candidates: take FGD's and Ours' rows from an earlier run on "
                         "the same trace and seeds in --out's placement_candidates.json")
    ap.add_argument("--profile", action="store_true",
                    help="where FGD, Ours and offline FFD lose; writes placement_profile.json")
    ap.add_argument("--balance", action="store_true",
                    help="pack vs spread with departures, by cluster size and utilisation")
    args = ap.parse_args(argv)
    try:
        args.seeds = parse_seeds(args.seeds)
        budgets = [float(x) for x in args.budget.split(",") if x]
        if not 0 < args.fraction <= 1 or any(not 0 < b <= 1 for b in budgets):
            raise ValueError("--fraction and --budget values must be in (0, 1]")
        names = benchmark.check_policies([p for p in args.policies.split(",") if p])
        candidates = check_candidates(args.candidates)
        bench = Bench(args)
    except (ValueError, OSError) as e:
        print(f"placement: {e}", file=sys.stderr)
        return 2

    if args.balance:
        doc = run_balance(args)
        if args.out:
            Path(args.out, "placement_balance.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(json.dumps({"trace": doc["trace"], "seeds": doc["seeds"], "cells": [
            {k: c[k] for k in ("nodes", "offered_utilisation", "winner", "chooser_at_offered")}
            | {f"{s}_failed_pct": c[s]["failed_pct"] for s in ("pack", "spread", "chooser")}
            for c in doc["cells"]]}))
        return 0
    if args.profile:
        doc = run_profile(bench)
        if args.out:
            Path(args.out, "placement_profile.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(json.dumps({"trace": doc["trace"], "seeds": doc["seeds"], "median": doc["median"]}))
        return 0
    if candidates:
        earlier = earlier_candidates(Path(args.out, "placement_candidates.json"), bench.setup) \
            if args.out and args.reuse_baselines else None
        doc = run_candidates(bench, candidates, earlier)
        if args.out:
            write_candidates(Path(args.out, "placement_candidates.json"), doc)
        print(json.dumps(doc))
        return 0
    started = time.perf_counter()
    trace_key = bench.setup.trace
    report = benchmark.report_head(bench.setup)
    report["policies"] = benchmark.compare(bench.setup, names, bench._tick, bench.timed)
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
        earlier = merged.get(trace_key, {})
        kept = [k for k in SECTIONS if k in earlier and k not in report]
        report = json.loads(json.dumps(report))
        for key in kept:  # a section this run did not redo stays, marked as from an earlier run
            report[key] = earlier[key]
        if kept:
            report["sections_from_earlier_run"] = kept
        before = earlier.get("policies", {}) if earlier.get("seeds") == report["seeds"] else {}
        old_rows = [k for k in before if k not in report["policies"]]
        if old_rows:  # so does a policy this run left out (same seeds only)
            report["policies"] = {k: report["policies"].get(k) or before[k]
                                  for k in [*before, *report["policies"]]}
            report["policies_from_earlier_run"] = old_rows
        benchmark.with_paper(report["policies"], trace_key, bench.setup.fraction)
        merged[trace_key] = report
        results.write_text(json.dumps(merged, indent=1) + "\n")
        plot(merged, out / "placement.png")
    print(json.dumps(benchmark.summary(report)))
    return 0


def check_candidates(text: str) -> list[str]:
    if text == "all":
        return list(CANDIDATES)
    labels = [c for c in text.split(",") if c]
    unknown = [c for c in labels if c not in CANDIDATES]
    if unknown:
        raise ValueError(f"unknown candidate {unknown[0]!r} (known: {', '.join(CANDIDATES)})")
    return labels


def run_candidates(bench: Bench, labels: list[str], earlier: dict | None = None) -> dict:
    """FGD, Ours and each candidate on the same seeds: medians and paired differences.
    ``earlier``: rows of FGD and Ours from an earlier run on the same trace and seeds, reused
    instead of run again (marked; only valid while their code is unchanged)."""
    setup = bench.setup
    rows = {}
    for name in ("FGD", "Ours"):
        if earlier and name in earlier:
            rows[name] = {**earlier[name], "from_earlier_run": True}
        else:
            rows[name] = bench.run_all(
                name, lambda n=name: benchmark.make_policy(n, setup.pods))
    for label in labels:
        rows[label] = bench.run_all(
            label, lambda c=CANDIDATES[label], lb=label: ours.Ours(setup.pods, c, lb))
    bench.bar.close()
    fgd_seeds, ours_seeds = rows["FGD"]["per_seed_130"], rows["Ours"]["per_seed_130"]
    out = {}
    for label, row in rows.items():
        entry = {k: row[k] for k in ("median_130", "per_seed_130", "seconds",
                                      "from_earlier_run") if k in row}
        if label != "FGD":
            entry["vs_FGD"] = benchmark.paired_difference(row["per_seed_130"], fgd_seeds)
        if label not in ("FGD", "Ours"):
            entry["vs_Ours"] = benchmark.paired_difference(row["per_seed_130"], ours_seeds)
        out[label] = entry
    return {"trace": setup.trace, "seeds": list(setup.seeds), "rows": out}


def _by_size(pods: list) -> list:
    return sorted(pods, key=lambda p: -p.total_gpu_milli)


def _medians(profiles: list[dict]) -> dict:
    """The median over seeds of every number in the profiles (a missing key counts as 0)."""
    first = profiles[0]
    out = {}
    for key in set().union(*profiles):
        values = [p.get(key) for p in profiles]
        if isinstance(first.get(key), dict) or any(isinstance(v, dict) for v in values):
            out[key] = _medians([v or {} for v in values])
        elif all(isinstance(v, int | float) or v is None for v in values) \
                and not all(v is None for v in values):
            out[key] = round(statistics.median(v or 0 for v in values), 3)
    return dict(sorted(out.items()))


def run_profile(bench: Bench) -> dict:
    """benchmark.loss_profile of FGD, Ours and offline FFD (Ours) on every seed."""
    setup = bench.setup
    runs = {"FGD": (lambda: benchmark.make_policy("FGD", setup.pods), None),
            "Ours": (lambda: ours.Ours(setup.pods), None),
            "offline FFD, Ours": (lambda: ours.Ours(setup.pods), _by_size)}
    per_seed: dict[str, dict[int, dict]] = {}
    for label, (make, order) in runs.items():
        for seed in setup.seeds:
            pods = setup.arrivals[seed] if order is None else order(setup.arrivals[seed])
            count = len(pods)
            result = protocol.run(protocol.simulator_order(setup.nodes, seed), pods, make(), seed,
                                  progress=lambda i, s=seed, n=count, lb=label:
                                  bench._tick(lb, s, i, n))
            per_seed.setdefault(label, {})[seed] = benchmark.loss_profile(
                result, pods, setup.pods)
    bench.bar.close()
    return {"trace": setup.trace, "seeds": list(setup.seeds),
            "median": {k: _medians(list(v.values())) for k, v in per_seed.items()},
            "per_seed": per_seed}


def earlier_candidates(path: Path, setup: benchmark.Setup) -> dict:
    """The rows of an earlier candidates run on the same trace and seeds ({} if none)."""
    if not path.is_file():
        return {}
    seeds = setup.seeds
    doc = json.loads(path.read_text()).get(setup.trace, {})
    rows = doc.get(f"seeds {seeds[0]}-{seeds[-1]}", {})
    return {k: v for k, v in rows.items() if len(v.get("per_seed_130", ())) == len(seeds)}


def write_candidates(path: Path, doc: dict) -> None:
    """One entry per (trace, seeds), one row per label; a rerun replaces its own rows and keeps
    the other labels' rows."""
    merged = json.loads(path.read_text()) if path.is_file() else {}
    seeds = doc["seeds"]
    merged.setdefault(doc["trace"], {}).setdefault(
        f"seeds {seeds[0]}-{seeds[-1]}", {}).update(doc["rows"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=1) + "\n")


PLOT_COLUMNS = 3  # traces per row of the plot


def plot(reports: dict, path: Path) -> None:
    """One small panel per trace: allocation against arrived demand from 85 % (the saturated
    end, where the policies differ), every policy, its median at 130 % in the legend."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("placement: matplotlib missing (install the 'plot' extra); no plot", file=sys.stderr)
        return
    rows = -(-len(reports) // PLOT_COLUMNS)
    fig, axes = plt.subplots(rows, PLOT_COLUMNS, figsize=(4.2 * PLOT_COLUMNS, 3.4 * rows),
                             squeeze=False)
    panels = [ax for row in axes for ax in row]
    for (trace, report), ax in zip(sorted(reports.items()), panels, strict=False):
        for name, row in report["policies"].items():
            xs = sorted(int(b) for b in row["curve"])
            ax.plot(xs, [row["curve"][str(b)] for b in xs], linewidth=1,
                    label=f"{name} {row['median_130']:.2f}")
        seeds = report["seeds"]
        short = trace.removeprefix("openb_pod_list_").removesuffix(".csv")
        ax.set_title(f"{short} (seeds {seeds[0]}-{seeds[-1]})", fontsize=9)
        ax.set_xlim(85, 131)
        lowest = min(row["median_130"] for row in report["policies"].values())
        ax.set_ylim(min(84, int(lowest) - 2), 100)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.legend(loc="lower right", fontsize=6)
    for ax in panels[len(reports):]:
        ax.set_visible(False)
    fig.supxlabel("arrived GPU demand (% of capacity)")
    fig.supylabel("GPU allocation (%); legend: median at 130 %")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
