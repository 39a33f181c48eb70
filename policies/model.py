"""The cluster model every policy works on: plain, frozen, keyword-only dataclasses.

Times are plain floats (seconds on one shared axis, e.g. the Unix epoch); the caller passes
``Snapshot.now``, so nothing in ``policies`` reads a clock. Resources use kube units:
CPU in millicores, memory in MiB, GPUs as whole ``nvidia.com/gpu`` devices.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from policies.topology import NodeTopology


class CheckpointMode(enum.StrEnum):
    """How a workload saves its work (annotation ``ckpt-preempt.io/checkpoint``)."""

    NONE = "none"
    PERIODIC = "periodic"
    ON_REQUEST = "on-request"


class NvlinkNeed(enum.StrEnum):
    """Whether a pod's GPUs must share one NVLink domain (``ckpt-preempt.io/nvlink``)."""

    NONE = "none"
    PREFERRED = "preferred"
    REQUIRED = "required"


@dataclass(frozen=True, kw_only=True, slots=True)
class Resources:
    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            cpu_milli=self.cpu_milli + other.cpu_milli,
            memory_mib=self.memory_mib + other.memory_mib,
            gpus=self.gpus + other.gpus,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            cpu_milli=self.cpu_milli - other.cpu_milli,
            memory_mib=self.memory_mib - other.memory_mib,
            gpus=self.gpus - other.gpus,
        )

    def fits_in(self, free: Resources) -> bool:
        return (
            self.gpus <= free.gpus
            and self.cpu_milli <= free.cpu_milli
            and self.memory_mib <= free.memory_mib
        )


ZERO = Resources()


@dataclass(frozen=True, kw_only=True)
class Node:
    name: str
    allocatable: Resources
    topology: NodeTopology | None = None  # None: "topology unknown"
    unschedulable: bool = False


@dataclass(frozen=True, kw_only=True)
class Pod:
    """A pod as the planner sees it. ``node`` is None while pending.

    ``last_checkpoint`` is None when unknown or malformed: the cost model then counts from
    ``start_time``, which is never cheaper than a valid checkpoint time.
    """

    uid: str
    name: str
    namespace: str = "default"
    priority: int = 0
    requests: Resources = ZERO
    node: str | None = None
    start_time: float | None = None
    checkpoint: CheckpointMode = CheckpointMode.NONE
    last_checkpoint: float | None = None
    checkpoint_seconds: float | None = None
    min_runtime: float = 0.0
    preemptible: bool = True
    nvlink: NvlinkNeed = NvlinkNeed.NONE
    gang: str | None = None  # "<namespace>/<name>" from policies.gangs
    gang_total: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    terminating: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gpus(self) -> int:
        return self.requests.gpus


@dataclass(frozen=True, kw_only=True)
class PodDisruptionBudget:
    """A PDB reduced to what preemption needs: which pods it covers and how many may go."""

    name: str
    namespace: str
    match_labels: Mapping[str, str]
    disruptions_allowed: int

    def covers(self, pod: Pod) -> bool:
        if pod.namespace != self.namespace or not self.match_labels:
            return False
        return all(pod.labels.get(k) == v for k, v in self.match_labels.items())


def breaks_budget(pods: Iterable[Pod], pdbs: Sequence[PodDisruptionBudget]) -> list[bool]:
    """For each pod in order: does evicting it (after the ones before) break a PDB?

    Each covering budget is charged one disruption per pod, as kube-scheduler's
    ``filterPodsWithPDBViolation`` does: decrement, then a negative budget is broken.
    """
    allowed = [b.disruptions_allowed for b in pdbs]
    out = []
    for p in pods:
        broken = False
        for i, b in enumerate(pdbs):
            if b.covers(p):
                allowed[i] -= 1
                broken |= allowed[i] < 0
        out.append(broken)
    return out


@dataclass(frozen=True, kw_only=True)
class Gang:
    key: str
    members: tuple[str, ...]  # pod uids, sorted
    expected: int | None = None  # declared gang size, when the convention carries one


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The whole cluster at one instant. Index properties are computed once, lazily."""

    now: float
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    pdbs: tuple[PodDisruptionBudget, ...] = ()

    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def pod_by_uid(self) -> dict[str, Pod]:
        return {p.uid: p for p in self.pods}

    @cached_property
    def _index(self) -> tuple[dict[str, tuple[Pod, ...]], dict[str, Resources], dict]:
        """One pass over the pods: pods per node, resources held per node, gang members."""
        on_node: dict[str, list[Pod]] = {}
        held: dict[str, list[int]] = {}
        gang_pods: dict[str, list[Pod]] = {}
        for p in self.pods:
            if p.node is not None:
                on_node.setdefault(p.node, []).append(p)
                r = p.requests
                h = held.get(p.node)
                if h is None:
                    held[p.node] = [r.cpu_milli, r.memory_mib, r.gpus]
                else:
                    h[0] += r.cpu_milli
                    h[1] += r.memory_mib
                    h[2] += r.gpus
            if p.gang is not None:
                gang_pods.setdefault(p.gang, []).append(p)
        return (
            {k: tuple(v) for k, v in on_node.items()},
            {k: Resources(cpu_milli=c, memory_mib=m, gpus=g) for k, (c, m, g) in held.items()},
            gang_pods,
        )

    @property
    def pods_on_node(self) -> dict[str, tuple[Pod, ...]]:
        return self._index[0]

    def restricted(
        self, *, unschedulable: Iterable[str] = (), terminating: Iterable[str] = ()
    ) -> Snapshot:
        """This snapshot with the named nodes marked unschedulable and the pods with the given
        uids marked terminating (as one preemptor sees the cluster while other plans hold
        nodes and victims). The index is carried over and patched where those pods sit, not
        rebuilt, so a controller cycle indexes the cluster once for its whole queue. Names
        and uids the snapshot lacks are ignored."""
        closed = {n for n in unschedulable if n in self.node_by_name}
        by_uid = self.pod_by_uid
        swapped = {
            u: replace(by_uid[u], terminating=True)
            for u in terminating if u in by_uid and not by_uid[u].terminating
        }
        nodes = self.nodes
        if closed:
            nodes = tuple(
                replace(n, unschedulable=True) if n.name in closed and not n.unschedulable else n
                for n in nodes
            )
        on_node, held, gang_pods = self._index
        pods = self.pods
        if swapped:
            pods = tuple(swapped.get(p.uid, p) for p in pods)
            on_node = dict(on_node)
            for node in {p.node for p in swapped.values() if p.node is not None}:
                on_node[node] = tuple(swapped.get(p.uid, p) for p in on_node[node])
            gang_pods = dict(gang_pods)
            for gang in {p.gang for p in swapped.values() if p.gang is not None}:
                gang_pods[gang] = [swapped.get(p.uid, p) for p in gang_pods[gang]]
        out = Snapshot(now=self.now, nodes=nodes, pods=pods, pdbs=self.pdbs)
        # Neither a closed node nor a terminating pod changes what is held or free (such pods
        # still hold their resources) or who belongs to which gang: share those as they are.
        out.__dict__.update(
            _index=(on_node, held, gang_pods),
            free_by_node=self.free_by_node,
            largest_allocatable=self.largest_allocatable,
            free_gpus_index=self.free_gpus_index,
            gangs=self.gangs,
            pod_by_uid={**by_uid, **swapped} if swapped else by_uid,
        )
        if not closed:
            out.__dict__["node_by_name"] = self.node_by_name
        return out

    def requested(self, node: str) -> Resources:
        """Resources held on ``node`` by bound pods (terminating ones still hold theirs)."""
        return self._index[1].get(node, ZERO)

    @cached_property
    def free_by_node(self) -> dict[str, Resources]:
        """Allocatable minus what bound pods hold, for every node."""
        held = self._index[1]
        return {n.name: n.allocatable - held.get(n.name, ZERO) for n in self.nodes}

    @cached_property
    def free_gpus_index(self) -> list[tuple[int, str]]:
        """(free GPUs, node) for every node with a GPU free, ascending: where a GPU pod might
        fit without preemption, found by bisection instead of a scan of every node."""
        return sorted((f.gpus, name) for name, f in self.free_by_node.items() if f.gpus > 0)

    @cached_property
    def largest_allocatable(self) -> Resources:
        """The most any one node has of each resource: a request beyond it fits nowhere."""
        alloc = [n.allocatable for n in self.nodes] or [ZERO]
        return Resources(
            cpu_milli=max(a.cpu_milli for a in alloc),
            memory_mib=max(a.memory_mib for a in alloc),
            gpus=max(a.gpus for a in alloc),
        )

    def free(self, node: str) -> Resources:
        return self.free_by_node[node]

    def gang_pods(self, key: str) -> list[Pod]:
        """Every pod of gang ``key`` in the snapshot, bound or pending."""
        return self._index[2].get(key, [])

    @cached_property
    def gangs(self) -> dict[str, Gang]:
        out = {}
        for key, ps in self._index[2].items():
            declared = [p.gang_total for p in ps if p.gang_total]
            out[key] = Gang(
                key=key,
                members=tuple(sorted(p.uid for p in ps)),
                expected=max(declared) if declared else None,
            )
        return out


class RejectReason(enum.StrEnum):
    """Why a node (or a whole request) got no plan. Values are stable strings for output."""

    FITS_WITHOUT_PREEMPTION = "fits-without-preemption"
    TOO_SMALL = "node-allocatable-too-small"
    UNSCHEDULABLE = "node-unschedulable"
    NOT_ENOUGH_PREEMPTIBLE = "not-enough-preemptible-capacity"
    NVLINK_UNKNOWN = "nvlink-required-but-topology-unknown"
    NVLINK_INFEASIBLE = "nvlink-required-but-no-domain-fits"
    COSTLIER = "another-node-loses-less-work"
    NOT_SAMPLED = "not-evaluated-sampling-stopped"
    SEARCH_BUDGET = "search-budget-exhausted"


@dataclass(frozen=True, kw_only=True)
class Victim:
    uid: str
    name: str
    namespace: str
    node: str
    gpus: int
    priority: int
    lost_gpu_seconds: float
    drain: bool  # True: ask it to checkpoint first (on-request), cost is checkpoint time only
    checkpoint_seconds: float | None = None


@dataclass(frozen=True, kw_only=True)
class VictimGroup:
    """One unit of eviction: a single pod, or every running member of a gang."""

    gang: str | None
    victims: tuple[Victim, ...]
    lost_gpu_seconds: float
    reason: str


@dataclass(frozen=True, kw_only=True)
class Placement:
    pod_uid: str
    node: str


@dataclass(frozen=True, kw_only=True)
class NodeRejection:
    node: str
    reason: RejectReason
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What a policy decided for one preemptor (a pod or a whole gang).

    ``feasible`` False means "no plan": ``reason`` says why and ``rejections`` say why each
    evaluated node lost. A feasible plan with no victims means the preemptor fits already.
    """

    policy: str
    preemptor: tuple[str, ...]  # pod uids
    feasible: bool
    reason: str
    placements: tuple[Placement, ...] = ()
    victim_groups: tuple[VictimGroup, ...] = ()
    pdb_violations: int = 0
    drain_deadline: float | None = None
    rejections: tuple[NodeRejection, ...] = ()
    nodes_evaluated: int = 0

    @property
    def victims(self) -> tuple[Victim, ...]:
        return tuple(v for g in self.victim_groups for v in g.victims)

    @property
    def lost_gpu_seconds(self) -> float:
        return sum(g.lost_gpu_seconds for g in self.victim_groups)

    @property
    def target_nodes(self) -> tuple[str, ...]:
        return tuple(sorted({p.node for p in self.placements}))
