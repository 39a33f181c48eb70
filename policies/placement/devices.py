"""Per-device GPU model for placement: each GPU's free milli-GPU, its index, its NVLink domain.

A node is a frozen value; placing a pod returns a new node. GPU sharing follows the convention
of Alibaba's openb traces and the FGD simulator
(github.com/hkust-adsl/kubernetes-scheduler-simulator @8f3d641, pkg/type/resource.go and
pkg/utils/utils.go GetPodResource): a pod asking for
``gpu_milli < 1000`` takes that share of ONE GPU; otherwise it takes ``gpu_count`` whole GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

MILLI_PER_GPU = 1000  # one whole GPU in milli-GPU


@dataclass(frozen=True, kw_only=True)
class PodShape:
    """What a pod asks for. ``gpu_spec``: allowed GPU models separated by ``|``; empty = any."""

    cpu_milli: int
    memory_mib: int = 0
    gpu_count: int = 0
    gpu_milli: int = 0  # per GPU; < MILLI_PER_GPU means a share of one GPU
    gpu_spec: str = ""

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def is_shared(self) -> bool:
        return self.gpu_count == 1 and 0 < self.gpu_milli < MILLI_PER_GPU

    @property
    def kind(self) -> str:
        """The class GpuClustering groups by: cpu, share, or k-gpu."""
        if self.gpu_count == 0 or self.gpu_milli == 0:
            return "cpu"
        return "share" if self.is_shared else f"{self.gpu_count}-gpu"


def model_allowed(model: str, gpu_spec: str) -> bool:
    """Whether a node of GPU ``model`` satisfies ``gpu_spec`` (empty spec: any model)."""
    wanted = [m for m in gpu_spec.split("|") if m]
    return not wanted or (bool(model) and model in wanted)


@dataclass(frozen=True, kw_only=True)
class GpuNode:
    """A node's capacity and what is free now. ``gpu_free[i]`` is GPU i's free milli-GPU.

    ``nvlink_domain[i]`` is the NVLink domain id of GPU i (from hwprobe's report, see
    ``ckpt_preempt.policies.model.topology``), or empty when unknown. ``kinds`` counts the pod kinds
    running here (GpuClustering's affinity).
    """

    name: str
    model: str
    cpu_milli: int
    memory_mib: int
    gpu_free: tuple[int, ...]
    cpu_free: int
    memory_free: int
    nvlink_domain: tuple[int, ...] = ()
    kinds: frozenset[str] = field(default_factory=frozenset)

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_free)

    @property
    def gpu_free_total(self) -> int:
        return sum(self.gpu_free)

    @property
    def gpu_used_total(self) -> int:
        return self.gpu_count * MILLI_PER_GPU - self.gpu_free_total

    @property
    def fully_free_gpus(self) -> int:
        return sum(1 for g in self.gpu_free if g == MILLI_PER_GPU)


def new_node(
    name: str, model: str, cpu_milli: int, memory_mib: int, gpus: int,
    nvlink_domain: tuple[int, ...] = (),
) -> GpuNode:
    if nvlink_domain and len(nvlink_domain) != gpus:
        raise ValueError(f"{name}: {len(nvlink_domain)} NVLink domain ids for {gpus} GPUs")
    return GpuNode(
        name=name, model=model, cpu_milli=cpu_milli, memory_mib=memory_mib,
        gpu_free=(MILLI_PER_GPU,) * gpus, cpu_free=cpu_milli, memory_free=memory_mib,
        nvlink_domain=nvlink_domain,
    )


def gpus_fit(gpu_free: tuple[int, ...], pod: PodShape) -> bool:
    """At least ``gpu_count`` GPUs each with ``gpu_milli`` free."""
    if pod.gpu_count == 0:
        return True
    return sum(1 for g in gpu_free if g >= pod.gpu_milli) >= pod.gpu_count


def fits(node: GpuNode, pod: PodShape) -> bool:
    """The simulator's filters: CPU and memory (kube-scheduler NodeResourcesFit), GPU model and
    per-GPU room (the Open-Gpu-Share filter, pkg/simulator/plugin/open_gpu_share.go)."""
    if node.cpu_free < pod.cpu_milli or node.memory_free < pod.memory_mib:
        return False
    if pod.gpu_count == 0 or pod.gpu_milli == 0:
        return True
    if not node.gpu_free or not model_allowed(node.model, pod.gpu_spec):
        return False
    return gpus_fit(node.gpu_free, pod)


def first_free_gpus(gpu_free: tuple[int, ...], count: int) -> tuple[int, ...]:
    """The first ``count`` fully free GPUs by index (AllocateExclusiveGpuId)."""
    chosen = tuple(i for i, g in enumerate(gpu_free) if g == MILLI_PER_GPU)[:count]
    if len(chosen) < count:
        raise ValueError(f"{count} whole GPUs asked, {len(chosen)} free")
    return chosen


def tightest_gpu(gpu_free: tuple[int, ...], milli: int) -> int:
    """The GPU with the least free milli-GPU that still fits ``milli``; lowest index on ties."""
    best = -1
    for i, g in enumerate(gpu_free):
        if g >= milli and (best < 0 or g < gpu_free[best]):
            best = i
    if best < 0:
        raise ValueError(f"no GPU has {milli} milli-GPU free")
    return best


def place(node: GpuNode, pod: PodShape, gpus: tuple[int, ...]) -> GpuNode:
    """``node`` after ``pod`` takes ``gpu_milli`` on each GPU index in ``gpus``."""
    if pod.gpu_count and pod.gpu_milli and len(gpus) != pod.gpu_count:
        raise ValueError(f"pod needs {pod.gpu_count} GPUs, {len(gpus)} given")
    free = list(node.gpu_free)
    for i in gpus:
        if free[i] < pod.gpu_milli:
            raise ValueError(
                f"{node.name}: GPU {i} has {free[i]} milli free, {pod.gpu_milli} asked")
        free[i] -= pod.gpu_milli
    if node.cpu_free < pod.cpu_milli or node.memory_free < pod.memory_mib:
        raise ValueError(f"{node.name}: not enough CPU or memory for the pod")
    kinds = node.kinds if pod.kind == "cpu" else node.kinds | {pod.kind}
    return replace(
        node, gpu_free=tuple(free), cpu_free=node.cpu_free - pod.cpu_milli,
        memory_free=node.memory_free - pod.memory_mib, kinds=kinds,
    )


def take_ascending(gpu_free: tuple[int, ...], pod: PodShape) -> tuple[int, ...] | None:
    """Free GPUs after taking ``pod`` from the least sufficient GPUs first (NodeResource.Sub);
    None when it does not fit."""
    if pod.gpu_count == 0 or pod.gpu_milli == 0:
        return gpu_free
    free = list(gpu_free)
    need = pod.gpu_count
    for i in sorted(range(len(free)), key=free.__getitem__):
        if free[i] >= pod.gpu_milli:
            free[i] -= pod.gpu_milli
            need -= 1
            if need == 0:
                return tuple(free)
    return None
