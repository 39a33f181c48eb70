"""What the scheduler extender knows of the cluster: the watch cache turned into placement
and planner values, rebuilt only when the cache changed.

``build_view`` takes the compact records the controller's watch cache holds
(``controller.kube.watch.ClusterCache``, trimmed by ``controller.kube.convert``) and returns a
frozen ``ClusterView``: per node what bound, unfinished pods hold, the planner's ``Node`` (with the
hwprobe NVLink topology) and the placement model's ``GpuNode`` (``policies.placement.devices``);
per pod uid its record; per gang the uids of its bound and of its pending members, gangs read
as the controller reads them (``gang_key``: a native PodGroup first, then the label and
annotation conventions). ``CachedView`` rebuilds it from a live ``ClusterCache`` on the first
request after a watch event.

Kubernetes does not say which device indices a pod's ``nvidia.com/gpu`` got (the device plugin
picks them), and nothing in this project publishes them yet, so a node's used GPUs are put on
its lowest indices in ``GpuNode`` (the placement scorer's measure depends only on how many are
free) and NVLink checks keep the planner's worst-case assumption
(``policies.model.topology.NodeTopology.nvlink_fits``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.podgroups import index as podgroup_index
from ckpt_preempt.controller.kube.records import NodeInfo, PdbInfo, PodInfo
from ckpt_preempt.policies.model import gangs, native_gangs
from ckpt_preempt.policies.model.model import (
    Node,
    NvlinkNeed,
    Pod,
    PodDisruptionBudget,
    RejectReason,
    Resources,
)
from ckpt_preempt.policies.model.topology import NodeTopology
from ckpt_preempt.policies.placement.devices import MILLI_PER_GPU, GpuNode, PodShape
from ckpt_preempt.policies.planner import search

# hwprobe's report names no GPU model for the placement model's ``gpu_spec`` match; pods from
# the API server carry no ``gpu_spec`` either, so every node's model is this one name.
ANY_MODEL = ""
SYNC_REBUILD_MAX_SECONDS = 0.005  # a request rebuilds a stale view itself only below this
REBUILD_POLL_SECONDS = 1.0  # the background rebuild's wait for a watch event
MIN_REBUILD_GAP_SECONDS = 0.05  # between background rebuilds in a busy cluster


def pod_shape(requests: Resources | None) -> PodShape:
    """A pod's requests as the placement model counts them: whole GPUs (``nvidia.com/gpu`` is
    an integer resource), CPU in milli, memory in MiB."""
    r = requests or Resources()
    return PodShape(cpu_milli=r.cpu_milli, memory_mib=r.memory_mib, gpu_count=r.gpus,
                    gpu_milli=MILLI_PER_GPU if r.gpus else 0)


@dataclass(frozen=True, kw_only=True)
class PendingPod:
    """The pod a verb is asked about."""

    info: PodInfo
    shape: PodShape
    model: Pod  # the planner's view (NVLink need, gang, priority)


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeView:
    info: NodeInfo
    node: Node  # the planner's node: allocatable and NVLink topology
    used: Resources  # requests of the bound, unfinished pods
    pods: tuple[str, ...]  # their uids
    gpu: GpuNode  # the placement model's node
    free_gpus: int
    # entry k: free GPUs this node needs before a k-GPU ``nvlink: required`` pod surely gets
    # one NVLink domain (the planner's rule, ``search.nvlink_gpus``), or a NEED_* value
    nvlink_need: tuple[int, ...]

    @property
    def free(self) -> Resources:
        return self.node.allocatable - self.used


NEED_TOPOLOGY_UNKNOWN = -1  # no usable hwprobe report
NEED_NO_DOMAIN_FITS = -2  # no domain is that large


@functools.lru_cache(maxsize=1024)
def nvlink_needs(topology: NodeTopology | None, allocatable_gpus: int) -> tuple[int, ...]:
    """``NodeView.nvlink_need`` for a node shape; nodes share a few shapes."""
    node = Node(name="", allocatable=Resources(gpus=allocatable_gpus), topology=topology)
    out = []
    for k in range(allocatable_gpus + 1):
        pod = Pod(uid="", name="", requests=Resources(gpus=k), nvlink=NvlinkNeed.REQUIRED)
        need, why = search.nvlink_gpus(pod, node, allocatable_gpus)
        out.append(need if why is None else NEED_TOPOLOGY_UNKNOWN
                   if why is RejectReason.NVLINK_UNKNOWN else NEED_NO_DOMAIN_FITS)
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class ClusterView:
    nodes: Mapping[str, NodeView]
    pods: Mapping[str, PodInfo]  # by uid, unfinished ones only
    gang_members: Mapping[str, frozenset[str]]  # gang key -> uids of its bound members
    gang_of: Mapping[str, str]  # pod uid -> gang key
    gang_pending: Mapping[str, frozenset[str]]  # gang key -> uids of its pending members
    pdbs: tuple[PodDisruptionBudget, ...]
    node_problems: Mapping[str, str]  # node -> why its topology annotation was ignored
    # what a verb derived from this view alone, kept for the next request on the same view
    # (``extender_cliques``); dropped with the view at the next rebuild
    memo: dict = field(default_factory=dict, compare=False, repr=False)


def _gpu_node(info: NodeInfo, node: Node, used: Resources) -> GpuNode:
    alloc = info.allocatable
    busy = min(used.gpus, alloc.gpus)
    domains: tuple[int, ...] = ()
    if node.topology is not None and node.topology.gpu_count == alloc.gpus:
        ids = {}
        for d, members in enumerate(node.topology.domains):
            for i in members:
                ids[i] = d
        domains = tuple(ids[i] for i in range(alloc.gpus))
    return GpuNode(
        name=info.name, model=ANY_MODEL, cpu_milli=alloc.cpu_milli,
        memory_mib=alloc.memory_mib,
        gpu_free=(0,) * busy + (MILLI_PER_GPU,) * (alloc.gpus - busy),
        cpu_free=alloc.cpu_milli - used.cpu_milli, memory_free=alloc.memory_mib - used.memory_mib,
        nvlink_domain=domains,
    )


def gang_key(p: PodInfo,
             podgroups: Mapping[str, native_gangs.NativeGroup] | None = None) -> str | None:
    """The gang ``p`` belongs to, as the controller's conversion reads it
    (``convert.to_pod``): the native PodGroup it names first (a bound member of a ``Single``
    group is in none; an unknown group counts as a gang), else the label and annotation
    conventions (``policies.model.gangs.detect``)."""
    native = convert.native_membership(p, podgroups)
    if native is not None:
        return native[0]
    member, _ = gangs.detect(p.namespace, p.labels, p.annotations)
    return None if member is None else member.key


def build_view(nodes: Iterable[NodeInfo], pods: Iterable[PodInfo],
               pdbs: Iterable[PdbInfo] = (),
               podgroups: Mapping[str, native_gangs.NativeGroup] | None = None) -> ClusterView:
    used: dict[str, Resources] = {}
    on: dict[str, list[str]] = {}
    by_uid: dict[str, PodInfo] = {}
    members: dict[str, set[str]] = {}
    gang_of: dict[str, str] = {}
    pending: dict[str, set[str]] = {}
    for p in pods:
        if p.done:
            continue
        by_uid[p.uid] = p
        gang = gang_key(p, podgroups)
        if p.node is None:
            if gang is not None and not p.deleting:
                pending.setdefault(gang, set()).add(p.uid)
            continue
        used[p.node] = used.get(p.node, Resources()) + (p.requests or Resources())
        on.setdefault(p.node, []).append(p.uid)
        if gang is not None:
            members.setdefault(gang, set()).add(p.uid)
            gang_of[p.uid] = gang
    views, problems = {}, {}
    for info in nodes:
        node, problem = convert.to_node(info)
        if problem:
            problems[info.name] = problem
        u = used.get(info.name, Resources())
        views[info.name] = NodeView(
            info=info, node=node, used=u, pods=tuple(on.get(info.name, ())),
            gpu=_gpu_node(info, node, u), free_gpus=info.allocatable.gpus - u.gpus,
            nvlink_need=nvlink_needs(node.topology, info.allocatable.gpus))
    return ClusterView(nodes=views, pods=by_uid,
                       gang_members={k: frozenset(v) for k, v in members.items()},
                       gang_pending={k: frozenset(v) for k, v in pending.items()},
                       gang_of=gang_of, pdbs=tuple(convert.to_pdb(b) for b in pdbs),
                       node_problems=problems)


class CachedView:
    """The latest ``ClusterView`` of a live ``ClusterCache``. A watch event marks it stale;
    a background thread rebuilds it (``start``). While a rebuild is cheap (the last one took
    under ``SYNC_REBUILD_MAX_SECONDS``), a request that finds it stale rebuilds it first, so a
    small cluster is answered from the newest state; in a large, busy cluster requests never
    wait for a rebuild and are answered from the last complete view (as old as one rebuild)."""

    def __init__(self, cache) -> None:
        self.cache = cache
        self._lock = threading.Lock()
        self._view: ClusterView | None = None
        self.rebuilds = 0
        self.last_build_seconds = 0.0

    def synced(self) -> bool:
        return self.cache.synced()

    def _rebuild(self) -> ClusterView:
        with self._lock:
            if self._view is None or self.cache.changed.is_set():
                self.cache.changed.clear()
                start = time.perf_counter()
                self._view = build_view(self.cache.nodes.items(), self.cache.pods.items(),
                                        self.cache.pdbs.items(),
                                        podgroup_index(self.cache.podgroups))
                self.last_build_seconds = time.perf_counter() - start
                self.rebuilds += 1
            return self._view

    def current(self) -> ClusterView:
        view = self._view
        if (view is None or (self.cache.changed.is_set()
                             and self.last_build_seconds < SYNC_REBUILD_MAX_SECONDS)):
            return self._rebuild()
        return view

    def start(self, stop: threading.Event) -> None:
        def loop() -> None:
            while not stop.is_set():
                if self.cache.changed.wait(REBUILD_POLL_SECONDS):
                    if self.cache.synced():
                        self._rebuild()
                    stop.wait(MIN_REBUILD_GAP_SECONDS)
        threading.Thread(target=loop, name="extender-view", daemon=True).start()
