"""FGD's benchmark protocol (the paper's simulator, github.com/hkust-adsl/kubernetes-scheduler-
simulator @8f3d641), deterministic per seed:

1. nodes: ``openb_node_list_gpu_node.csv``; pods: the trace, by name (SetWorkloadPods);
2. the pods are shuffled with the seed (SortClusterPods with ``--shuffle-pod=true``), then
   copies of trace pods drawn uniformly with replacement are appended until the next draw would
   pass ``ratio`` x the cluster's milli-GPU (tuneUpPods in pkg/simulator/simulator.go). Quirk kept:
   the stop test adds the drawn pod's PER-GPU milli (``MilliGpu``) while the running total adds
   its total (``TotalMilliGpu``), so an 8-GPU draw may overshoot by up to 7 GPUs. A trace that
   already asks for more (the multi-GPU-heavy ones, e.g. multigpu40 and 50) is thinned
   instead: pods drawn uniformly among those left are removed until the demand is at most
   ``ratio`` x capacity (tuneDownPods, same file); the rest keep their shuffled order;
3. pods only arrive, in that order; a pod that fits nowhere fails and stays failed;
4. after every pod, the allocation ratio (allocated / total milli-GPU) is recorded against the
   arrived demand (milli-GPU of every pod so far, failed ones included);
5. the ratios are binned by arrived demand rounded to whole percent, 0..130
   (experiments/analysis/merge_alloc_discrete.py); the headline is the 130 % bin.

Go's math/rand stream cannot be replayed here; ``random.Random(seed)`` draws instead, so a seed
names a different (equally likely) order than the paper's seed of the same number.

A policy scores a feasible (node, pod); higher is better. Equal best scores go to the node
with the smallest name: the simulator's vendored kube-scheduler is patched to do so "for
reproducibility" (vendor/k8s.io/kubernetes/pkg/scheduler/core/generic_scheduler.go selectHost;
upstream picks at random). But the simulator renames every node before it creates it: the nodes,
sorted by name, get the prefix ``%04d-`` of a seeded random permutation (syncClusterResourceList
in pkg/simulator/simulator.go, ``rand.Perm`` after ``rand.Seed(tune seed)`` in core.go), so the
"smallest name" is a random node, fixed for the run. ``simulator_order`` reproduces that (with
Python's generator); ``run`` gives ties to the first node in the order it is given. Policies
whose scores tie a lot (GpuClustering and GpuPacking score every CPU-only pod 0 everywhere) are
the ones this matters for. Random draws among feasible nodes.
Scores are memoised per (node state, pod shape): a policy's ``evaluate`` must depend only on
those (and on its ``version``, bumped when it learns). The state leaves out free memory unless
the policy sets ``scores_memory``.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ckpt_preempt.policies.placement.devices import (
    MILLI_PER_GPU,
    GpuNode,
    PodShape,
    fits,
    new_node,
    place,
)

TUNE_RATIO = 1.3  # the paper's -tune 1.3: arrivals up to 130 % of the cluster's milli-GPU
PAPER_SEEDS = tuple(range(42, 52))
MAX_BIN_PCT = 130


class Policy(Protocol):
    name: str
    random_gpu: bool  # True: a shared pod's GPU is drawn at random among those that fit
    random_node: bool  # True: the node is drawn at random among the feasible ones
    version: int

    def observe(self, pod: PodShape) -> None: ...

    def evaluate(self, node: GpuNode, pod: PodShape) -> tuple[float, tuple[int, ...]]: ...


@dataclass(frozen=True, kw_only=True)
class ScoreBudget:
    """At most ``max_evaluations`` uncached node evaluations per pod; past it, the pod is placed
    by ``fallback`` instead (counted). Evaluations, not seconds: pure code has no clock, and a
    count is deterministic. A caller with a clock passes ``over_budget`` (it is asked before each
    uncached evaluation with the count so far) instead."""

    max_evaluations: int | None = None
    fallback: Policy | None = None
    over_budget: Callable[[int], bool] | None = None

    def exceeded(self, evaluations: int) -> bool:
        if self.over_budget is not None:
            return self.over_budget(evaluations)
        return self.max_evaluations is not None and evaluations >= self.max_evaluations


@dataclass(frozen=True, kw_only=True)
class RunResult:
    policy: str
    seed: int
    arrived: int
    placed: int
    failed: int
    fallbacks: int
    evaluations: int
    total_gpu_milli: int
    curve: tuple[tuple[int, int], ...]  # (arrived milli-GPU, allocated milli-GPU) after each pod
    failed_indices: tuple[int, ...]  # positions in the arrival order of the pods that failed
    nodes: tuple[GpuNode, ...] = field(repr=False)

    @property
    def final_allocation_pct(self) -> float:
        return 100.0 * self.curve[-1][1] / self.total_gpu_milli


NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")  # gpu_spec optional


def _rows(text: str, what: str, columns: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV list; ValueError with one line if a column is missing."""
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in columns if c not in (reader.fieldnames or ())]
    if missing:
        raise ValueError(f"not an openb {what} list: column {', '.join(missing)} missing")
    return [(number, row) for number, row in enumerate(reader, start=2)]


def _count(row: dict[str, str], column: str, what: str, line: int) -> int:
    """The non-negative integer in ``column``; ValueError naming the line otherwise."""
    text = (row.get(column) or "").strip()
    if not text.isdigit():
        raise ValueError(f"{what} list line {line}: {column} must be a whole number >= 0, "
                         f"got {text!r}")
    return int(text)


def load_nodes(text: str) -> tuple[GpuNode, ...]:
    """Nodes from an openb node list (sn, cpu_milli, memory_mib, gpu, model), sorted by name;
    ValueError naming the line for a bad row."""
    nodes = [new_node(row["sn"], row["model"] or "", *(_count(row, c, "node", line)
                                                       for c in NODE_COLUMNS[1:4]))
             for line, row in _rows(text, "node", NODE_COLUMNS)]
    return tuple(sorted(nodes, key=lambda n: n.name))


def load_pods(text: str) -> tuple[PodShape, ...]:
    """Pods from an openb pod list, sorted by name; ValueError naming the line for a bad row.
    gpu_milli is clamped to 0..1000 as the simulator's csv-to-yaml step does
    (data/pod_csv_to_yaml.py)."""
    out = []
    for line, row in sorted(_rows(text, "pod", POD_COLUMNS), key=lambda r: r[1]["name"] or ""):
        cpu, memory, count, milli = (_count(row, c, "pod", line) for c in POD_COLUMNS[1:])
        milli = min(milli, MILLI_PER_GPU) if count else 0
        out.append(PodShape(
            cpu_milli=cpu, memory_mib=memory, gpu_count=count if milli else 0, gpu_milli=milli,
            gpu_spec=(row.get("gpu_spec") or "") if milli else ""))
    return tuple(out)


def arrivals(
    pods: Sequence[PodShape], capacity_milli: int, seed: int, ratio: float = TUNE_RATIO,
) -> list[PodShape]:
    """The trace shuffled with ``seed``, then tuned to ``ratio`` x capacity: topped up with
    random copies when it asks for less, thinned by removing random pods when it asks for
    more (the module docstring, step 2)."""
    rng = random.Random(seed)
    order = list(pods)
    rng.shuffle(order)
    total = sum(p.total_gpu_milli for p in order)
    target = ratio * capacity_milli
    if total > target:
        return _tune_down(order, total, target, rng)
    if not any(p.total_gpu_milli for p in pods):  # copies would never reach the target
        return order
    while True:
        pod = pods[rng.randrange(len(pods))]
        if total + pod.gpu_milli > target:  # per-GPU milli, as tuneUpPods
            return order
        total += pod.total_gpu_milli
        order.append(pod)


def _tune_down(
    order: list[PodShape], total: int, target: float, rng: random.Random,
) -> list[PodShape]:
    """Remove a pod drawn uniformly from those left, until the demand is at most ``target``
    (tuneDownPods in pkg/simulator/simulator.go); the others keep their shuffled order."""
    while total > target:
        total -= order.pop(rng.randrange(len(order))).total_gpu_milli
    return order


NODE_ORDER_SALT = 104_729  # the node permutation's stream, apart from arrivals and tie draws


def simulator_order(nodes: Sequence[GpuNode], seed: int) -> tuple[GpuNode, ...]:
    """``nodes`` in the simulator's tie-break order for ``seed``: sorted by name, each prefixed
    with its place in a random permutation, sorted again (see the module docstring)."""
    by_name = sorted(nodes, key=lambda n: n.name)
    prefix = random.Random(seed * NODE_ORDER_SALT + 3).sample(range(len(by_name)), len(by_name))
    return tuple(node for _, node in sorted(zip(prefix, by_name, strict=True),
                                            key=lambda pair: pair[0]))


_MISS = object()


def _state_key(node: GpuNode, with_memory: bool = False) -> tuple:
    key = (node.model, node.cpu_free, node.gpu_free, node.kinds)
    return (*key, node.memory_free) if with_memory else key


def run(
    nodes: Sequence[GpuNode], pods: Iterable[PodShape], policy: Policy, seed: int,
    budget: ScoreBudget = ScoreBudget(), progress: Callable[[int], None] | None = None,
) -> RunResult:
    """Place ``pods`` one by one on ``nodes`` with ``policy``; see the module docstring."""
    rng = random.Random(seed * 7919 + 1)  # tie-breaks: independent of the arrival stream
    state = list(nodes)
    total = sum(n.gpu_count for n in state) * MILLI_PER_GPU
    with_memory = getattr(policy, "scores_memory", False)  # memory is then part of the state
    keys = [_state_key(n, with_memory) for n in state]
    memo: dict[tuple, dict[tuple, tuple[float, tuple[int, ...]]]] = {}
    memo_version = policy.version
    arrived = allocated = placed = failed = fallbacks = evaluations = 0
    curve = [(0, 0)]
    failed_at: list[int] = []
    for i, pod in enumerate(pods):
        policy.observe(pod)
        if policy.version != memo_version:
            memo.clear()
            memo_version = policy.version
        arrived += pod.total_gpu_milli
        chosen = _choose(state, keys, pod, policy, memo, rng, budget)
        if chosen is None:
            failed += 1
            failed_at.append(i)
        else:
            index, gpus, cost, fell_back = chosen
            evaluations += cost
            fallbacks += fell_back
            if policy.random_gpu and pod.is_shared and not fell_back:
                gpus = (rng.choice([g for g, f in enumerate(state[index].gpu_free)
                                    if f >= pod.gpu_milli]),)
            state[index] = place(state[index], pod, gpus)
            keys[index] = _state_key(state[index], with_memory)
            allocated += pod.total_gpu_milli
            placed += 1
        curve.append((arrived, allocated))
        if progress is not None:
            progress(i)
    return RunResult(
        policy=policy.name, seed=seed, arrived=placed + failed, placed=placed, failed=failed,
        fallbacks=fallbacks, evaluations=evaluations, total_gpu_milli=total,
        curve=tuple(curve), failed_indices=tuple(failed_at), nodes=tuple(state))


def _choose(
    state: list[GpuNode], keys: list[tuple], pod: PodShape, policy: Policy,
    memo: dict[tuple, dict], rng: random.Random, budget: ScoreBudget,
) -> tuple[int, tuple[int, ...], int, bool] | None:
    """(node index, GPUs, uncached evaluations, fell back?) of the best feasible node, or None.
    ``memo`` maps pod shape -> node state key -> (score, GPUs), or None when it does not fit."""
    shape = (pod.cpu_milli, pod.gpu_count, pod.gpu_milli, pod.gpu_spec)
    cache = memo.setdefault(shape, {})
    best: tuple[float, int, tuple[int, ...]] | None = None
    pick_random = policy.random_node
    feasible: list[tuple[float, int, tuple[int, ...]]] = []
    cost = 0
    for i, node in enumerate(state):
        if node.memory_free < pod.memory_mib or node.cpu_free < pod.cpu_milli:
            continue
        key = keys[i]
        hit = cache.get(key, _MISS)
        if hit is _MISS:
            if not fits(node, pod):  # memory was checked above; the rest is in the key
                cache[key] = None
                continue
            if budget.exceeded(cost):
                fb = budget.fallback
                if fb is None:
                    raise ValueError("a score budget needs a fallback policy")
                chosen = _choose(state, keys, pod, fb, {}, rng, ScoreBudget())
                return None if chosen is None else (chosen[0], chosen[1], cost, True)
            hit = policy.evaluate(node, pod)
            cache[key] = hit
            cost += 1
        elif hit is None:
            continue
        if pick_random:
            feasible.append((hit[0], i, hit[1]))
        elif best is None or hit[0] > best[0]:  # ties: the first, i.e. smallest, name
            best = (hit[0], i, hit[1])
    if pick_random and feasible:
        best = rng.choice(feasible)
    if best is None:
        return None
    return best[1], best[2], cost, False


def binned_allocation(result: RunResult) -> dict[int, float]:
    """Allocation % per arrived-demand bin 0..130: the mean of the (2-decimal) ratios whose
    arrived demand rounds to the bin; a bin with none takes the mean over bins +-1
    (merge_alloc_discrete.py)."""
    total = result.total_gpu_milli
    points = [(round(100.0 * a / total), round(100.0 * u / total, 2)) for a, u in result.curve]
    out: dict[int, float] = {}
    for b in range(MAX_BIN_PCT + 1):
        vals = [u for a, u in points if a == b] or [u for a, u in points if b - 1 <= a <= b + 1]
        if vals:
            out[b] = round(sum(vals) / len(vals), 2)
    return out


def subsample(
    nodes: Sequence[GpuNode], pods: Sequence[PodShape], fraction: float, seed: int,
) -> tuple[tuple[GpuNode, ...], tuple[PodShape, ...]]:
    """A smaller cluster and trace with the same mix (for quick tests)."""
    rng = random.Random(seed)
    k_nodes = max(1, round(len(nodes) * fraction))
    k_pods = max(1, round(len(pods) * fraction))
    picked_nodes = sorted(rng.sample(range(len(nodes)), k_nodes))
    picked_pods = sorted(rng.sample(range(len(pods)), k_pods))
    return (tuple(nodes[i] for i in picked_nodes),
            tuple(pods[i] for i in picked_pods))
