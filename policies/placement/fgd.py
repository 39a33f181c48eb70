"""FGD, Fragmentation Gradient Descent (Weng et al., USENIX ATC '23), reimplemented from the
paper's simulator, github.com/hkust-adsl/kubernetes-scheduler-simulator @8f3d641:

- target workload: ``GetTypicalPods`` in pkg/utils/frag.go (podPopularityThreshold 95,
  podIncreaseStep 1, isInvolvedCpuPods true, gpuResWeight 0: scripts/generate_config_and_run.py);
- a node's fragmentation for the target workload: ``NodeGpuShareFragAmountScore`` and
  ``GetNodePodFrag`` in pkg/utils/frag.go;
- the score: ``calculateGpuShareFragExtendScore`` in pkg/simulator/plugin/fgd_score.go, an
  integer ``int(sigmoid(decrease / 1000) * 100)``; equal scores go to the smallest node name.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ckpt_preempt.policies.placement.devices import (
    GpuNode,
    PodShape,
    first_free_gpus,
    model_allowed,
    take_ascending,
)

POPULARITY_THRESHOLD_PCT = 95  # typical pods cover this share of the trace's pods
MAX_NODE_SCORE = 100  # kube-scheduler framework.MaxNodeScore
SIGMOID_SCALE_MILLI = 1000.0  # fgd_score.go divides the decrease by this before the sigmoid


@dataclass(frozen=True, kw_only=True)
class TargetPod:
    """One pod shape of the target workload and its probability."""

    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    gpu_spec: str
    weight: float


def _shape_key(pod: PodShape) -> tuple[int, int, int, str]:
    return (pod.cpu_milli, pod.gpu_milli, pod.gpu_count, pod.gpu_spec)


def typical_pods(
    pods: Iterable[PodShape], threshold_pct: float = POPULARITY_THRESHOLD_PCT,
) -> tuple[TargetPod, ...]:
    """The most frequent shapes covering ``threshold_pct`` % of ``pods``, renormalised.

    Order as GetTypicalPods: descending count; equal counts by the larger shape first
    (sort.Reverse of TargetPodList.Less, pkg/type/resource.go). Memory is not part of a shape.
    """
    return _typical(Counter(_shape_key(p) for p in pods), threshold_pct)


def typical_from_counts(
    counts: Mapping[PodShape, int], threshold_pct: float = POPULARITY_THRESHOLD_PCT,
) -> tuple[TargetPod, ...]:
    """``typical_pods`` of pods already counted by shape (one entry per distinct shape)."""
    merged: Counter[tuple[int, int, int, str]] = Counter()
    for shape, n in counts.items():
        merged[_shape_key(shape)] += n
    return _typical(merged, threshold_pct)


def _typical(
    counts: Counter[tuple[int, int, int, str]], threshold_pct: float,
) -> tuple[TargetPod, ...]:
    if not counts:
        return ()
    total = sum(counts.values())
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    chosen: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, n in ordered:
        if covered >= threshold_pct * total / 100:
            break
        chosen.append((key, n))
        covered += n
    return tuple(
        TargetPod(cpu_milli=k[0], gpu_milli=k[1], gpu_count=k[2], gpu_spec=k[3], weight=n / covered)
        for k, n in chosen
    )


def split_free(gpu_free: tuple[int, ...], milli: int) -> tuple[int, int]:
    """(GPUs with at least ``milli`` free, free milli-GPU on the others: FGD's fragment)."""
    usable = small = 0
    for g in gpu_free:
        if g >= milli:
            usable += 1
        else:
            small += g
    return usable, small


def node_fragmentation(
    model: str, cpu_free: int, gpu_free: tuple[int, ...], target: tuple[TargetPod, ...],
) -> float:
    """F_n(M): expected milli-GPU on this node that a pod drawn from ``target`` cannot use.

    For each target pod m: if the node can host m (enough GPUs with m's per-GPU share, enough
    CPU, allowed model) the fragment is the free milli-GPU on GPUs too small for m; otherwise
    (and always for CPU-only m, as frag.go counts them) every free milli-GPU is fragment.
    """
    total = sum(gpu_free)
    if total == 0:
        return 0.0
    frag = 0.0
    for m in target:
        if m.gpu_milli == 0 or cpu_free < m.cpu_milli or not model_allowed(model, m.gpu_spec):
            frag += m.weight * total
            continue
        usable, small = split_free(gpu_free, m.gpu_milli)
        frag += m.weight * (small if usable >= m.gpu_count else total)
    return frag


class FragMemo:
    """F_n(M) memoised by (model, CPU free, free milli-GPU multiset): node states repeat a lot."""

    def __init__(self, target: tuple[TargetPod, ...]) -> None:
        self.target = target
        self._memo: dict[tuple[str, int, tuple[int, ...]], float] = {}

    def __call__(self, model: str, cpu_free: int, gpu_free: tuple[int, ...]) -> float:
        key = (model, cpu_free, tuple(sorted(gpu_free)))
        value = self._memo.get(key)
        if value is None:
            value = node_fragmentation(model, cpu_free, gpu_free, self.target)
            self._memo[key] = value
        return value


def frag_decrease_options(
    node: GpuNode, pod: PodShape, frag: FragMemo,
) -> list[tuple[float, tuple[int, ...]]]:
    """(F before - F after, GPUs taken) for each way FGD considers placing ``pod`` on ``node``:
    each fitting GPU in index order for a shared pod, else the first whole free GPUs."""
    before = frag(node.model, node.cpu_free, node.gpu_free)
    cpu_after = node.cpu_free - pod.cpu_milli
    if pod.is_shared:
        out = []
        for i, g in enumerate(node.gpu_free):
            if g >= pod.gpu_milli:
                after_gpus = (*node.gpu_free[:i], g - pod.gpu_milli, *node.gpu_free[i + 1:])
                out.append((before - frag(node.model, cpu_after, after_gpus), (i,)))
        return out
    after_gpus = take_ascending(node.gpu_free, pod)
    if after_gpus is None:
        return []
    gpus = first_free_gpus(node.gpu_free, pod.gpu_count) if pod.total_gpu_milli else ()
    return [(before - frag(node.model, cpu_after, after_gpus), gpus)]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def fgd_integer_score(decrease: float) -> int:
    return int(sigmoid(decrease / SIGMOID_SCALE_MILLI) * MAX_NODE_SCORE)


class FGD:
    """The paper's scorer: integer score, first GPU with the best score (fgd_score.go)."""

    name = "FGD"
    random_gpu = False
    random_node = False
    version = 0

    def __init__(self, target: tuple[TargetPod, ...]) -> None:
        self.frag = FragMemo(target)

    def observe(self, pod: PodShape) -> None:
        """The paper's target workload is fixed: the original trace."""

    def evaluate(self, node: GpuNode, pod: PodShape) -> tuple[float, tuple[int, ...]]:
        best: tuple[float, tuple[int, ...]] | None = None
        for decrease, gpus in frag_decrease_options(node, pod, self.frag):
            score = fgd_integer_score(decrease)
            if best is None or score > best[0]:
                best = (score, gpus)
        if best is None:
            raise ValueError(f"{node.name}: pod does not fit")
        return best
