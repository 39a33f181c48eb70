"""FGD's benchmark, shared by ``bench/placement.py`` and ``ckpt-preempt simulate --protocol fgd``.

Pure: the callers read the CSV files, time the runs and show progress. ``prepare`` builds the
cluster and each seed's arrivals (policies/placement/protocol.py), ``run_policy`` runs one
policy on every seed and bins the allocation, ``compare`` runs several side by side next to the
paper's medians, and ``summary`` is the one JSON line both callers print.
"""

from __future__ import annotations

import bisect
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ckpt_preempt.policies.placement import baselines, fgd, ours, protocol
from ckpt_preempt.policies.placement.devices import MILLI_PER_GPU, GpuNode, PodShape
from ckpt_preempt.policies.placement.paper import PAPER_MEDIAN_130

POLICIES = ("Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD", "Ours")
NODE_LIST = "openb_node_list_gpu_node.csv"
HEADLINE_BIN = protocol.MAX_BIN_PCT
NO_BUDGET = protocol.ScoreBudget()
PROGRESS_STEP = 500  # pods per progress update the callers show
SUBSAMPLE_SEED = 0  # the same subsampled cluster for every seed and policy
BOOTSTRAP_DRAWS = 10_000
BOOTSTRAP_SEED = 0  # the same resamples for every comparison

# (label, seed, index of the pod just placed, pods in this run)
Progress = Callable[[str, int, int, int], None]


@dataclass(frozen=True)
class Setup:
    trace: str  # the pod list's file name
    nodes: tuple[GpuNode, ...]
    pods: tuple[PodShape, ...]
    seeds: tuple[int, ...]
    fraction: float
    arrivals: dict[int, list[PodShape]]
    random_node_order: bool = True  # ties as the simulator breaks them; False: by node name

    @property
    def capacity_milli(self) -> int:
        return sum(n.gpu_count for n in self.nodes) * 1000


def prepare(
    trace: str, node_text: str, pod_text: str, seeds: Sequence[int], fraction: float = 1.0,
    random_node_order: bool = True,
) -> Setup:
    """The cluster and every seed's arrivals; ``fraction`` < 1 subsamples nodes and pods."""
    if not 0 < fraction <= 1:
        raise ValueError(f"the subsample fraction must be in (0, 1], got {fraction}")
    if not seeds:
        raise ValueError("no seeds")
    nodes = protocol.load_nodes(node_text)
    pods = protocol.load_pods(pod_text)
    if not nodes or not pods:
        raise ValueError("the node list and the pod list must each have at least one row")
    if fraction < 1.0:
        nodes, pods = protocol.subsample(nodes, pods, fraction, seed=SUBSAMPLE_SEED)
    capacity = sum(n.gpu_count for n in nodes) * 1000
    return Setup(trace=trace, nodes=nodes, pods=pods, seeds=tuple(seeds), fraction=fraction,
                 arrivals={s: protocol.arrivals(pods, capacity, s) for s in seeds},
                 random_node_order=random_node_order)


def make_policy(name: str, trace: tuple[PodShape, ...]) -> protocol.Policy:
    if name == "FGD":
        return fgd.FGD(fgd.typical_pods(trace))
    if name == "Ours":
        return ours.Ours(trace)
    for cls in baselines.BASELINES:
        if cls.name == name:
            return cls()
    raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")


def check_policies(names: Sequence[str]) -> list[str]:
    """``names`` if each is a known placement policy; ValueError with one line otherwise."""
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise ValueError(f"unknown placement policy {', '.join(unknown) or '(none)'} "
                         f"(known: {', '.join(POLICIES)})")
    return list(names)


def median_curve(curves: list[dict[int, float]]) -> dict[int, float]:
    bins = sorted(set().union(*curves))
    return {b: round(statistics.median(c[b] for c in curves if b in c), 2) for b in bins}


def run_policy(
    setup: Setup, label: str, make: Callable[[], protocol.Policy],
    budget: protocol.ScoreBudget = NO_BUDGET, order=None, progress: Progress | None = None,
) -> dict:
    """One policy on every seed: the median at 130 %, per seed, failures, fallbacks, curve."""
    finals, curves, fallbacks, failed = [], [], 0, 0
    for seed in setup.seeds:
        pods = setup.arrivals[seed] if order is None else order(setup.arrivals[seed])
        count = len(pods)
        tick = None if progress is None else (
            lambda i, s=seed, n=count: progress(label, s, i, n))
        nodes = protocol.simulator_order(setup.nodes, seed) if setup.random_node_order \
            else setup.nodes
        result = protocol.run(nodes, pods, make(), seed, budget=budget, progress=tick)
        binned = protocol.binned_allocation(result)
        curves.append(binned)
        finals.append(binned.get(HEADLINE_BIN, result.final_allocation_pct))
        fallbacks += result.fallbacks
        failed += result.failed
    return {
        "median_130": round(statistics.median(finals), 2),
        "per_seed_130": finals, "failed_pods": failed, "fallbacks": fallbacks,
        "curve": median_curve(curves),
    }


def compare(
    setup: Setup, names: Sequence[str], progress: Progress | None = None,
    timed: Callable[[Callable[[], dict]], dict] = lambda f: f(),
) -> dict:
    """Every named policy side by side; the paper's median and the gap where the trace has one
    (whole cluster only). ``timed`` wraps each policy's run (a caller with a clock adds time)."""
    rows = {}
    for name in check_policies(names):
        rows[name] = timed(lambda n=name: run_policy(
            setup, n, lambda: make_policy(n, setup.pods), progress=progress))
    return with_paper(rows, setup.trace, setup.fraction)


def with_paper(rows: dict, trace: str, fraction: float = 1.0) -> dict:
    """``rows`` (policy -> row) with the paper's median and the gap added where the trace has
    one (whole cluster only); also for rows kept from an earlier run."""
    paper = PAPER_MEDIAN_130.get(trace, {}) if fraction == 1.0 else {}
    for name, row in rows.items():
        if name in paper:
            row["paper_median_130"] = paper[name]
            row["gap_pp"] = round(row["median_130"] - paper[name], 2)
    return rows


def summary(report: dict) -> dict:
    """The one-line result: medians at 130 %, gaps to the paper, and any extra sections."""
    line = {
        "trace": report["trace"], "seeds": report["seeds"], "nodes": report["nodes"],
        "gpus": report["gpus"],
        "median_130": {k: v["median_130"] for k, v in report["policies"].items()},
        "gap_to_paper_pp": {k: v["gap_pp"] for k, v in report["policies"].items()
                            if "gap_pp" in v},
    }
    if "ablation" in report:
        line["ablation_median_130"] = {k: v["median_130"] for k, v in report["ablation"].items()}
    if "budget" in report:
        line["budget"] = {k: {"median_130": v["median_130"], "fallbacks": v["fallbacks"]}
                          for k, v in report["budget"].items()}
    if "offline_ffd" in report:
        line["offline_ffd_130"] = {k: v["median_130"] for k, v in report["offline_ffd"].items()}
    if "wall_seconds" in report:
        line["wall_seconds"] = report["wall_seconds"]
    return line


def paired_difference(
    ours_per_seed: Sequence[float], base_per_seed: Sequence[float],
) -> dict[str, float | int]:
    """Median of the per-seed differences and its bootstrap 95 % interval (seeds resampled
    with replacement, pairs kept), plus how many seeds gained and how many tied."""
    if len(ours_per_seed) != len(base_per_seed) or not ours_per_seed:
        raise ValueError("paired differences need the same, non-empty list of seeds")
    diffs = [a - b for a, b in zip(ours_per_seed, base_per_seed, strict=True)]
    rng = random.Random(BOOTSTRAP_SEED)
    meds = sorted(statistics.median(rng.choices(diffs, k=len(diffs)))
                  for _ in range(BOOTSTRAP_DRAWS))
    return {"median_pp": round(statistics.median(diffs), 3),
            "ci95_pp": [round(meds[int(0.025 * BOOTSTRAP_DRAWS)], 3),
                        round(meds[int(0.975 * BOOTSTRAP_DRAWS) - 1], 3)],
            "seeds_ahead": sum(d > 0 for d in diffs), "seeds_tied": sum(d == 0 for d in diffs)}


PROFILE_BAND_PCT = 10  # failures are counted per this many % of arrived demand
TOP_REMAINDERS = 6


def loss_profile(
    result: protocol.RunResult, pods: Sequence[PodShape], trace: Sequence[PodShape],
) -> dict:
    """Where a run loses allocation, in % of the cluster's milli-GPU: the GPU demand of failed
    pods by pod kind and by band of arrived demand; the free milli-GPU at the end split into
    whole free GPUs and remainders of shared GPUs; each remainder dead for its size (no shared
    pod of the trace is that small), dead for lack of CPU or memory (none that is small enough
    fits the node's CPU and memory), a rare fit (fewer than ``ours.RARE_FIT_SHARE`` of the trace's
    shared pods are that small) or usable; and the remainders holding the most milli-GPU."""
    cap = result.total_gpu_milli
    pct = lambda milli: round(100.0 * milli / cap, 3)  # noqa: E731
    arrived_after = [a for a, _ in result.curve[1:]]
    by_kind: dict[str, int] = {}
    by_band: dict[str, dict[str, int]] = {}
    for i in result.failed_indices:
        pod = pods[i]
        if not pod.total_gpu_milli:
            continue
        lo = int(100 * arrived_after[i] / cap) // PROFILE_BAND_PCT * PROFILE_BAND_PCT
        band = by_band.setdefault(f"{lo}-{lo + PROFILE_BAND_PCT}", {})
        band[pod.kind] = band.get(pod.kind, 0) + pod.total_gpu_milli
        by_kind[pod.kind] = by_kind.get(pod.kind, 0) + pod.total_gpu_milli
    shared = sorted(p.gpu_milli for p in trace if p.is_shared)
    shapes = {(p.gpu_milli, p.cpu_milli, p.memory_mib) for p in trace if p.is_shared}
    free = {"whole_gpus": 0, "usable": 0, "rare_fit": 0, "dead_size": 0,
            "dead_cpu_or_memory": 0}
    counts: dict[int, int] = {}
    for node in result.nodes:
        for g in node.gpu_free:
            if g == MILLI_PER_GPU:
                free["whole_gpus"] += g
                continue
            if not g:
                continue
            counts[g] = counts.get(g, 0) + 1
            fit_share = bisect.bisect_right(shared, g) / len(shared) if shared else 0.0
            if fit_share == 0:
                free["dead_size"] += g
            elif not any(m <= g and c <= node.cpu_free and mem <= node.memory_free
                         for m, c, mem in shapes):
                free["dead_cpu_or_memory"] += g
            else:
                free["rare_fit" if fit_share < ours.RARE_FIT_SHARE else "usable"] += g
    first = (100.0 * arrived_after[result.failed_indices[0]] / cap
             if result.failed_indices else None)
    return {
        "allocation_130": protocol.binned_allocation(result).get(HEADLINE_BIN),
        "first_failure_at_pct": None if first is None else round(first, 2),
        "failed_gpu_pct_by_kind": {k: pct(v) for k, v in sorted(by_kind.items())},
        "failed_gpu_pct_by_band": {b: {k: pct(v) for k, v in sorted(d.items())}
                                   for b, d in sorted(by_band.items())},
        "free_pct": {k: pct(v) for k, v in free.items()},
        "top_remainders": [{"milli": g, "gpus": n, "pct": pct(g * n)} for g, n in
                           sorted(counts.items(), key=lambda kv: -kv[0] * kv[1])[:TOP_REMAINDERS]],
    }


def report_head(setup: Setup) -> dict:
    return {"trace": setup.trace, "seeds": list(setup.seeds), "nodes": len(setup.nodes),
            "gpus": setup.capacity_milli // 1000, "fraction": setup.fraction, "policies": {}}
