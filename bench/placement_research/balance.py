"""Fragmentation against load balance: pack or spread, chosen by cluster size and utilisation.

Packing (BestFit: least CPU and GPU left on the chosen node) keeps whole nodes free for large
pods; spreading (``Spread``: most CPU and GPU left, kube-scheduler's LeastAllocated idea) keeps
every node's load low. Which one wins is measured by ``bench/placement.py --balance`` on a
protocol WITH departures (FGD's protocol has none, so it cannot show spreading's benefit):

- pods are drawn with replacement from an openb trace, each with its trace duration
  (``deletion_time - creation_time``), capped at ``DURATION_CAP_SECONDS`` (the default trace's
  longest pod runs for 145 days; mean 7.2 h, median 9 min); Poisson arrivals at the rate that
  offers ``utilisation`` x the cluster's milli-GPU on average (rate x mean GPU-milli x duration),
  ``TURNOVERS`` times as many as the pods resident on average, so the cluster reaches its
  steady state;
- a pod that fits nowhere fails at once (no queue); a placed pod leaves after its duration;
- the first third of the arrivals warms the cluster up and is not measured.

Two measures, both over the measured arrivals:

- ``failed_pct``: GPU demand that failed, as % of GPU demand that arrived (packing's concern);
- ``hot_load_pct``: GPU allocation of the busiest 10 % of nodes, in %, averaged over arrivals
  (load balance: what spreading lowers; 100 means the busiest nodes are full).

A cell's winner: packing when it fails materially less GPU demand (``MATERIAL_FAILED_PP``);
otherwise spreading when its busiest nodes are less loaded; otherwise a tie. ``choose`` is the
rule, its thresholds read off that table (policies/placement/README.md).
"""

from __future__ import annotations

import csv
import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ckpt_preempt.policies.placement import baselines
from ckpt_preempt.policies.placement.devices import MILLI_PER_GPU, GpuNode, PodShape, fits, place
from ckpt_preempt.policies.placement.protocol import Policy

PACK, SPREAD = "pack", "spread"
MATERIAL_FAILED_PP = 0.5  # less failed GPU demand than this is not worth hotter nodes
HOT_SHARE = 0.10  # the busiest tenth of the nodes
WARMUP_SHARE = 1 / 3
DURATION_CAP_SECONDS = 86_400.0
TURNOVERS = 30  # arrivals = this x the mean number of pods resident


@dataclass(frozen=True, kw_only=True)
class StrategyRule:
    """Pack when the cluster is at least ``busy_utilisation`` allocated, or has at least
    ``large_cluster_gpus`` GPUs (None: size is not used); spread otherwise."""

    busy_utilisation: float
    large_cluster_gpus: int | None = None


# Read off bench/results/placement_balance.json (openb default trace, 24 to 182 nodes): spreading
# failed no more GPU demand than packing only at 10 % offered utilisation, at every size; the
# size did not change that, so it is not used.
DEFAULT_RULE = StrategyRule(busy_utilisation=0.15)


def choose(total_gpus: int, utilisation: float, rule: StrategyRule) -> str:
    """``PACK`` or ``SPREAD`` for a cluster of ``total_gpus`` that is ``utilisation`` (0..1)
    allocated now."""
    large = rule.large_cluster_gpus is not None and total_gpus >= rule.large_cluster_gpus
    if large or utilisation >= rule.busy_utilisation:
        return PACK
    return SPREAD


class Spread(baselines.BestFit):
    """The most CPU and GPU left after placing (BestFit's measure, reversed); a shared pod takes
    the emptiest GPU that fits, lowest index on ties."""

    name = "Spread"

    def score(self, node: GpuNode, pod: PodShape) -> float:
        return baselines.MAX_NODE_SCORE - super().score(node, pod)

    def evaluate(self, node: GpuNode, pod: PodShape) -> tuple[float, tuple[int, ...]]:
        _, gpus = super().evaluate(node, pod)
        if pod.is_shared:
            roomiest = max(g for g in node.gpu_free if g >= pod.gpu_milli)
            gpus = (node.gpu_free.index(roomiest),)
        return self.score(node, pod), gpus


POLICIES: dict[str, Callable[[], Policy]] = {PACK: baselines.BestFit, SPREAD: Spread}


@dataclass(frozen=True)
class TimedPod:
    pod: PodShape
    seconds: float  # how long it runs once placed


def load_timed_pods(text: str) -> tuple[TimedPod, ...]:
    """The pods of an openb pod list that have a positive duration, with that duration."""
    out = []
    for row in csv.DictReader(text.splitlines()):
        start, end = row.get("creation_time") or "", row.get("deletion_time") or ""
        if not start.isdigit() or not end.isdigit() or int(end) <= int(start):
            continue
        count = int(row["num_gpu"])
        milli = min(max(int(row["gpu_milli"]), 0), MILLI_PER_GPU) if count else 0
        pod = PodShape(cpu_milli=int(row["cpu_milli"]), memory_mib=int(row["memory_mib"]),
                       gpu_count=count if milli else 0, gpu_milli=milli,
                       gpu_spec=(row.get("gpu_spec") or "") if milli else "")
        out.append(TimedPod(pod, min(float(int(end) - int(start)), DURATION_CAP_SECONDS)))
    return tuple(out)


def remove(node: GpuNode, pod: PodShape, gpus: tuple[int, ...]) -> GpuNode:
    """``node`` with ``pod`` (placed on ``gpus``) gone. Pod kinds are left as they were: no policy
    here reads them."""
    free = list(node.gpu_free)
    for g in gpus:
        free[g] += pod.gpu_milli
    return replace(node, gpu_free=tuple(free), cpu_free=node.cpu_free + pod.cpu_milli,
                   memory_free=node.memory_free + pod.memory_mib)


@dataclass(frozen=True, kw_only=True)
class BalanceResult:
    strategy: str
    arrived: int
    failed_pct: float
    hot_load_pct: float
    mean_utilisation_pct: float


def arrivals(
    pods: Sequence[TimedPod], capacity_milli: int, utilisation: float, seed: int,
    turnovers: int = TURNOVERS,
) -> list[tuple[float, TimedPod]]:
    """Poisson arrivals, drawn with replacement, offering ``utilisation`` x capacity."""
    rng = random.Random(seed)
    mean_work = sum(p.pod.total_gpu_milli * p.seconds for p in pods) / len(pods)
    rate = utilisation * capacity_milli / mean_work
    resident = rate * sum(p.seconds for p in pods) / len(pods)
    count = max(1, round(turnovers * resident))
    t, out = 0.0, []
    for _ in range(count):
        t += rng.expovariate(rate)
        out.append((t, pods[rng.randrange(len(pods))]))
    return out


def run(
    nodes: Sequence[GpuNode], stream: Sequence[tuple[float, TimedPod]],
    strategy: Callable[[float], str], label: str,
) -> BalanceResult:
    """Place ``stream`` with departures; ``strategy(utilisation)`` names the policy per pod."""
    state = sorted(nodes, key=lambda n: n.name)
    capacity = sum(n.gpu_count for n in state) * MILLI_PER_GPU
    policies = {name: make() for name, make in POLICIES.items()}
    leaving: list[tuple[float, int, int, PodShape, tuple[int, ...]]] = []
    allocated = arrived_milli = failed_milli = measured = 0
    hot_sum = util_sum = 0.0
    hot_n = max(1, math.ceil(HOT_SHARE * len(state)))
    warmup = int(WARMUP_SHARE * len(stream))
    for k, (t, item) in enumerate(stream):
        while leaving and leaving[0][0] <= t:
            _, _, i, pod, gpus = heapq.heappop(leaving)
            state[i] = remove(state[i], pod, gpus)
            allocated -= pod.total_gpu_milli
        pod = item.pod
        policy = policies[strategy(allocated / capacity)]
        best = None
        for i, node in enumerate(state):
            if fits(node, pod):
                score, gpus = policy.evaluate(node, pod)
                if best is None or score > best[0]:
                    best = (score, i, gpus)
        if best is not None:
            _, i, gpus = best
            state[i] = place(state[i], pod, gpus)
            allocated += pod.total_gpu_milli
            heapq.heappush(leaving, (t + item.seconds, k, i, pod, gpus))
        if k < warmup:
            continue
        measured += 1
        arrived_milli += pod.total_gpu_milli
        failed_milli += pod.total_gpu_milli if best is None else 0
        loads = sorted((n.gpu_used_total / (n.gpu_count * MILLI_PER_GPU) for n in state
                        if n.gpu_count), reverse=True)
        hot_sum += sum(loads[:hot_n]) / hot_n
        util_sum += allocated / capacity
    return BalanceResult(
        strategy=label, arrived=measured,
        failed_pct=round(100.0 * failed_milli / max(arrived_milli, 1), 2),
        hot_load_pct=round(100.0 * hot_sum / max(measured, 1), 2),
        mean_utilisation_pct=round(100.0 * util_sum / max(measured, 1), 2))


def winner(pack: BalanceResult, spread: BalanceResult) -> str:
    """The cell's winner by the rule in the module docstring: PACK, SPREAD or "tie"."""
    if spread.failed_pct - pack.failed_pct > MATERIAL_FAILED_PP:
        return PACK
    if spread.hot_load_pct < pack.hot_load_pct:
        return SPREAD
    return "tie"
