"""FGD's baselines, reimplemented from the paper's simulator,
github.com/hkust-adsl/kubernetes-scheduler-simulator @8f3d641 (pkg/simulator/plugin/):

- Random: random_score.go (one feasible node at random); GPU chosen at random among those that
  fit (open_gpu_share.go allocateGpuIdBasedOnRandomFit, ``-gpusel random``);
- DotProd: dot_product_score.go with ``-dimext merge -norm max`` (Tetris-style alignment of
  the node's free [CPU, GPU] with the pod's request, each normalised by 128 CPUs and 8 GPUs);
- GpuClustering: gpu_clustering_score.go (nodes already running the same pod kind first);
- GpuPacking: gpu_packing_score.go (shared GPUs first, then used nodes, then idle nodes);
- BestFit: best_fit_score.go (least CPU and GPU left over).

All but Random pick a shared pod's GPU as the tightest fit, lowest index on ties
(open_gpu_share.go allocateGpuIdBasedOnBestFit, the default ``-gpusel best``); whole-GPU pods take
the first fully free GPUs by index (resource.go AllocateExclusiveGpuId). Scores are the integers
the plugins return; ties go to the smallest node name (see protocol.py).
"""

from __future__ import annotations

from ckpt_preempt.policies.placement.devices import (
    MILLI_PER_GPU,
    GpuNode,
    PodShape,
    first_free_gpus,
    tightest_gpu,
)

MAX_SPEC_CPU_MILLI = 128_000  # open-gpu-share/utils/const.go MaxSpecCpu
MAX_SPEC_GPU_MILLI = 8_000  # open-gpu-share/utils/const.go MaxSpecGpu
MAX_NODE_SCORE = 100  # kube-scheduler framework.MaxNodeScore


def best_fit_gpus(node: GpuNode, pod: PodShape) -> tuple[int, ...]:
    if pod.total_gpu_milli == 0:
        return ()
    if pod.is_shared:
        return (tightest_gpu(node.gpu_free, pod.gpu_milli),)
    return first_free_gpus(node.gpu_free, pod.gpu_count)


class _Baseline:
    name = ""
    random_gpu = False
    random_node = False
    version = 0

    def observe(self, pod: PodShape) -> None:
        """Baselines do not learn from arrivals."""

    def score(self, node: GpuNode, pod: PodShape) -> float:
        raise NotImplementedError

    def evaluate(self, node: GpuNode, pod: PodShape) -> tuple[float, tuple[int, ...]]:
        return self.score(node, pod), best_fit_gpus(node, pod)


class Random(_Baseline):
    """One feasible node drawn at random (its PreScore), a random GPU that fits on it."""

    name = "Random"
    random_gpu = True
    random_node = True

    def score(self, node: GpuNode, pod: PodShape) -> float:
        return 0


class DotProd(_Baseline):
    name = "DotProd"

    def score(self, node: GpuNode, pod: PodShape) -> float:
        dot = (node.cpu_free / MAX_SPEC_CPU_MILLI) * (pod.cpu_milli / MAX_SPEC_CPU_MILLI)
        dot += (node.gpu_free_total / MAX_SPEC_GPU_MILLI) * (
            pod.total_gpu_milli / MAX_SPEC_GPU_MILLI)
        return int(MAX_NODE_SCORE * (1 - dot / 2))


class GpuClustering(_Baseline):
    name = "GpuClustering"

    def score(self, node: GpuNode, pod: PodShape) -> float:
        if pod.kind == "cpu":
            return 0
        quarter = MAX_NODE_SCORE // 4
        fill = quarter * (MAX_SPEC_GPU_MILLI - node.gpu_free_total) // MAX_SPEC_GPU_MILLI
        if pod.kind in node.kinds:
            return fill + (3 * quarter if len(node.kinds) == 1 else 2 * quarter)
        return fill + (quarter if not node.kinds else 0)


class GpuPacking(_Baseline):
    name = "GpuPacking"

    def score(self, node: GpuNode, pod: PodShape) -> float:
        if pod.total_gpu_milli == 0:
            return 0
        fully_free = node.fully_free_gpus
        if fully_free == node.gpu_count:  # an idle node
            return max(MAX_NODE_SCORE // 3 - fully_free, fully_free)
        need = pod.gpu_count
        whole_used = 0
        free_share_pct = 0
        for i in sorted(range(node.gpu_count), key=node.gpu_free.__getitem__):
            if need == 0:
                break
            g = node.gpu_free[i]
            if g >= pod.gpu_milli:
                need -= 1
                whole_used += g == MILLI_PER_GPU
                free_share_pct += g * 100 // MILLI_PER_GPU
        if whole_used:
            return max(MAX_NODE_SCORE // 2 - whole_used, MAX_NODE_SCORE // 3)
        return max(MAX_NODE_SCORE - free_share_pct // 10, MAX_NODE_SCORE // 2)


class BestFit(_Baseline):
    """Min-max normalisation (plugin_utils.go NormalizeScore) keeps the argmax: left out."""

    name = "BestFit"

    def score(self, node: GpuNode, pod: PodShape) -> float:
        left = 0.5 * (node.cpu_free - pod.cpu_milli) / MAX_SPEC_CPU_MILLI
        left += 0.5 * (node.gpu_free_total - pod.total_gpu_milli) / MAX_SPEC_GPU_MILLI
        return int((1.0 - left) * MAX_NODE_SCORE)


BASELINES = (Random, DotProd, GpuClustering, GpuPacking, BestFit)
