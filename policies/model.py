"""The cluster model every policy works on: plain, frozen, keyword-only dataclasses.

Times are plain floats (seconds on one shared axis, e.g. the Unix epoch); the caller passes
``Snapshot.now``, so nothing in ``policies`` reads a clock. Resources use kube units:
CPU in millicores, memory in MiB, GPUs as whole devices (``nvidia.com/gpu`` and the other
names configured), and MIG slices as thousandths of their parent GPU (``gpu_milli``).
"""

from __future__ import annotations

import enum
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from ckpt_preempt.policies.gpu_use import GpuUse
from ckpt_preempt.policies.health import Health
from ckpt_preempt.policies.topology import NodeTopology


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


MILLI_PER_GPU = 1000  # gpu_milli of one whole GPU


@dataclass(frozen=True, kw_only=True, slots=True)
class Resources:
    """``gpus``: whole GPUs. ``gpu_milli``: MIG slices, as thousandths of their parent GPU; a
    separate dimension, since a MIG request fits only in MIG capacity, never in whole GPUs."""

    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0
    gpu_milli: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            cpu_milli=self.cpu_milli + other.cpu_milli,
            memory_mib=self.memory_mib + other.memory_mib,
            gpus=self.gpus + other.gpus,
            gpu_milli=self.gpu_milli + other.gpu_milli,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            cpu_milli=self.cpu_milli - other.cpu_milli,
            memory_mib=self.memory_mib - other.memory_mib,
            gpus=self.gpus - other.gpus,
            gpu_milli=self.gpu_milli - other.gpu_milli,
        )

    def fits_in(self, free: Resources) -> bool:
        return (
            self.gpus <= free.gpus
            and self.cpu_milli <= free.cpu_milli
            and self.memory_mib <= free.memory_mib
            and self.gpu_milli <= free.gpu_milli
        )

    @property
    def gpu_share(self) -> float:
        """Whole GPUs plus MIG slices as fractions of a GPU: what lost work is charged per."""
        return self.gpus + self.gpu_milli / MILLI_PER_GPU


ZERO = Resources()


class RejectReason(enum.StrEnum):
    """Why a node (or a whole request) got no plan. Values are stable strings for output."""

    FITS_WITHOUT_PREEMPTION = "fits-without-preemption"
    TOO_SMALL = "node-allocatable-too-small"
    UNSCHEDULABLE = "node-unschedulable"
    NODE_SELECTOR = "node-selector-mismatch"
    NODE_AFFINITY = "node-affinity-mismatch"
    NODE_TAINT = "node-taint-not-tolerated"
    NODE_RESERVED = "node-reserved-for-another-plan"  # carries another plan's reservation taint
    NODE_HELD = "node-held-by-another-plan"  # the target of another active plan
    MIG_PROFILE = "node-mig-profiles-differ"  # its MIG slices are not all the profile asked for
    NOT_ENOUGH_PREEMPTIBLE = "not-enough-preemptible-capacity"
    NVLINK_UNKNOWN = "nvlink-required-but-topology-unknown"
    NVLINK_INFEASIBLE = "nvlink-required-but-no-domain-fits"
    # an nvlink: required gang spanning nodes (policies.preemption, "NVLink cliques"): this node
    # is outside the clique being tried; or no clique can host the whole gang
    NVLINK_OTHER_CLIQUE = "nvlink-gang-in-another-clique"
    NVLINK_NO_CLIQUE = "nvlink-required-gang-but-no-clique-fits"
    COSTLIER = "another-node-loses-less-work"
    GPU_FAILING = "node-gpu-failing"  # policies.health: a GPU of it is failing
    NOT_SAMPLED = "not-evaluated-sampling-stopped"
    SEARCH_BUDGET = "search-budget-exhausted"


class PodHold(enum.StrEnum):
    """Why a running pod is no candidate for this preemptor although it could be otherwise."""

    HELD_BY_PLAN = "held-by-another-plan"  # a victim of another active plan
    EVICTION_BLOCKED = "eviction-blocked-recently"  # the Eviction API refused it lately


@dataclass(frozen=True, kw_only=True)
class UnknownCheckpoint:
    """How old the last checkpoint of a pod that reports none is assumed to be.

    ``start-time``: as old as the pod (it loses everything since it started);
    ``cluster-median``: the median checkpoint age of the pods that do report one (after the
    suggestion in kueue#477), or its start when nobody reports; ``assume``: at most
    ``seconds`` old. Never older than the pod's start.
    """

    kind: str = "start-time"  # start-time | cluster-median | assume
    seconds: float | None = None  # for assume

    KINDS = ("start-time", "cluster-median", "assume")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"unknown-checkpoint policy must be one of {', '.join(self.KINDS)}")
        if (self.kind == "assume") != (self.seconds is not None):
            raise ValueError("only the assume policy takes a number of seconds")
        if self.seconds is not None and not 0 < self.seconds < float("inf"):
            raise ValueError("an assumed checkpoint age must be a positive number of seconds")

    def __str__(self) -> str:
        return f"assume:{self.seconds:g}s" if self.kind == "assume" else self.kind


@dataclass(frozen=True, kw_only=True)
class Node:
    """A node. ``excluded`` says why the preemptor being planned may not use it although it is
    schedulable (its selector, affinity or taints, or another plan holds it); see
    ``Snapshot.restricted``. ``health`` is its GPUs' (``policies.health``): failing closes it
    to preemptors; unknown, the default, changes nothing. ``clique`` is its multi-node NVLink
    domain (hwprobe's fabric clique, ``NodeTopology.clique``): nodes sharing one reach each
    other's GPUs over NVLink; None: it is in none."""

    name: str
    allocatable: Resources
    topology: NodeTopology | None = None  # None: "topology unknown"
    # Which GPUs its pods hold, from hwprobe's gpu-use report (policies.gpu_use); None: not
    # known, so NVLink needs are judged on the worst placement of the busy GPUs.
    gpu_use: GpuUse | None = None
    unschedulable: bool = False
    excluded: RejectReason | None = None
    health: Health = Health.UNKNOWN
    clique: str | None = None

    @property
    def closed(self) -> RejectReason | None:
        """Why no preemptor may be placed here, or None when one may."""
        if self.unschedulable:
            return RejectReason.UNSCHEDULABLE
        if self.health is Health.FAILING:
            return RejectReason.GPU_FAILING
        return self.excluded


@dataclass(frozen=True, kw_only=True)
class Pod:
    """A pod as the planner sees it. ``node`` is None while pending.

    ``last_checkpoint`` is None when unknown or malformed. Unknown (nothing reported): the
    snapshot's ``UnknownCheckpoint`` policy says how old it is assumed to be. Malformed
    (``checkpoint_malformed``): counted from ``start_time`` whatever that policy, which is never
    cheaper than a valid checkpoint time or than reporting nothing.
    ``held`` says why a pod that could otherwise be a victim is none for this preemptor.
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
    checkpoint_malformed: bool = False
    owner_uid: str | None = None  # the controlling owner (ownerReferences, controller: true)
    held: PodHold | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def workload(self) -> str:
        """What preemptions are counted against for fairness: the gang, else the controlling
        owner (a Job's pods share it across restarts), else the pod itself."""
        return self.gang or self.owner_uid or self.uid

    @property
    def gpus(self) -> int:
        return self.requests.gpus

    @property
    def gpu_share(self) -> float:
        """Whole GPUs plus MIG fractions: the GPUs its lost work is charged for."""
        return self.requests.gpu_share


@dataclass(frozen=True, kw_only=True)
class PodDisruptionBudget:
    """A PDB reduced to what preemption needs: which pods it covers and how many may go.

    The selector is policy/v1's: ``match_labels`` and ``match_expressions`` must all hold;
    ``match_all`` is the empty selector ``{}``, which covers every pod in the namespace; with
    neither labels nor expressions nor ``match_all`` (a null selector) it covers nothing.
    """

    name: str
    namespace: str
    match_labels: Mapping[str, str]
    disruptions_allowed: int
    match_expressions: tuple[LabelRequirement, ...] = ()
    match_all: bool = False

    def covers(self, pod: Pod) -> bool:
        if pod.namespace != self.namespace:
            return False
        if self.match_all:
            return True
        if not self.match_labels and not self.match_expressions:
            return False
        return all(pod.labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(pod.labels) for r in self.match_expressions)


@dataclass(frozen=True, kw_only=True)
class LabelRequirement:
    """One ``matchExpressions`` entry of a label selector."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        return False  # the API server admits no other operator


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


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The whole cluster at one instant. Index properties are computed once, lazily.

    ``recent_preemptions`` counts, per ``Pod.workload``, how often that workload was preempted
    within the fairness window (the planner charges a penalty for each); ``unknown_checkpoint``
    is the policy for pods that report no checkpoint.
    """

    now: float
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    pdbs: tuple[PodDisruptionBudget, ...] = ()
    recent_preemptions: Mapping[str, int] = field(default_factory=dict)
    unknown_checkpoint: UnknownCheckpoint = UnknownCheckpoint()

    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def pod_by_uid(self) -> dict[str, Pod]:
        if self._held_over is not None:  # restricted: the parent's, with the held pods swapped
            by_uid, swapped = self._held_over
            return {**by_uid, **swapped}
        return {p.uid: p for p in self.pods}

    @cached_property
    def _held_over(self) -> tuple[dict[str, Pod], dict[str, Pod]] | None:
        """For a snapshot ``restricted`` made with pods held: (the parent's ``pod_by_uid``,
        the held pods by uid), to build its own only when asked; None otherwise."""
        return None

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
                    held[p.node] = [r.cpu_milli, r.memory_mib, r.gpus, r.gpu_milli]
                else:
                    h[0] += r.cpu_milli
                    h[1] += r.memory_mib
                    h[2] += r.gpus
                    h[3] += r.gpu_milli
            if p.gang is not None:
                gang_pods.setdefault(p.gang, []).append(p)
        return (
            {k: tuple(v) for k, v in on_node.items()},
            {k: Resources(cpu_milli=c, memory_mib=m, gpus=g, gpu_milli=f)
             for k, (c, m, g, f) in held.items()},
            gang_pods,
        )

    @property
    def pods_on_node(self) -> dict[str, tuple[Pod, ...]]:
        return self._index[0]

    @cached_property
    def pdbs_by_namespace(self) -> dict[str, list[tuple[int, PodDisruptionBudget]]]:
        """(index in ``pdbs``, PDB) per namespace: a PDB covers pods of its own only."""
        out: dict[str, list[tuple[int, PodDisruptionBudget]]] = {}
        for i, b in enumerate(self.pdbs):
            out.setdefault(b.namespace, []).append((i, b))
        return out

    @cached_property
    def unknown_checkpoint_age(self) -> float | None:
        """How old an unreported checkpoint is assumed to be, in seconds; None: as old as the
        pod. For ``cluster-median``, the median over bound pods that report a checkpoint."""
        policy = self.unknown_checkpoint
        if policy.kind != "cluster-median":
            return policy.seconds
        now = self.now
        ages = [
            now - (p.last_checkpoint if p.start_time is None
                   else max(p.last_checkpoint, p.start_time))
            for p in self.pods if p.node is not None and p.last_checkpoint is not None
        ]
        return max(0.0, statistics.median(ages)) if ages else None

    def restricted(
        self, *, closed: Mapping[str, RejectReason] | None = None,
        held: Mapping[str, PodHold] | None = None,
    ) -> Snapshot:
        """This snapshot as one preemptor sees it while other plans hold nodes and victims:
        the nodes in ``closed`` are excluded for the reason given, the pods in ``held`` are
        no candidates for the reason given. The index is carried over and patched where those
        pods sit, not rebuilt, so a controller cycle indexes the cluster once for its whole
        queue. Names and uids the snapshot lacks, nodes already closed and pods already
        terminating or held are left as they are."""
        by_name = self.node_by_name
        shut = {n: why for n, why in (closed or {}).items()
                if n in by_name and by_name[n].closed is None}
        by_uid = self.pod_by_uid
        swapped = {
            u: replace(by_uid[u], held=why) for u, why in (held or {}).items()
            if u in by_uid and not by_uid[u].terminating and by_uid[u].held is None
        }
        nodes = self.nodes
        node_at = self._node_positions
        if shut and node_at is None:  # repeated names: replace each of them
            nodes = tuple(replace(n, excluded=shut[n.name]) if n.name in shut else n
                          for n in nodes)
        elif shut:  # patch a copy where the closed nodes sit
            patched_nodes = list(nodes)
            for name, why in shut.items():
                patched_nodes[node_at[name]] = replace(by_name[name], excluded=why)
            nodes = tuple(patched_nodes)
        on_node, held_resources, gang_pods = self._index
        pods = self.pods
        if swapped:
            at = self._pod_positions
            if at is None:  # repeated uids: swap each of them
                pods = tuple(swapped.get(p.uid, p) for p in pods)
            else:  # patch a copy where the held pods sit instead of walking every pod
                patched = list(pods)
                for u, p in swapped.items():
                    patched[at[u]] = p
                pods = tuple(patched)
            on_node = dict(on_node)
            for node in {p.node for p in swapped.values() if p.node is not None}:
                on_node[node] = tuple(swapped.get(p.uid, p) for p in on_node[node])
            gang_pods = dict(gang_pods)
            for gang in {p.gang for p in swapped.values() if p.gang is not None}:
                gang_pods[gang] = [swapped.get(p.uid, p) for p in gang_pods[gang]]
        out = Snapshot(now=self.now, nodes=nodes, pods=pods, pdbs=self.pdbs,
                       recent_preemptions=self.recent_preemptions,
                       unknown_checkpoint=self.unknown_checkpoint)
        # Neither a closed node nor a held pod changes what is held or free (such pods still
        # hold their resources), who belongs to which gang or what checkpoints pods report:
        # share those as they are.
        out.__dict__.update(
            _index=(on_node, held_resources, gang_pods),
            free_by_node=self.free_by_node,
            largest_allocatable=self.largest_allocatable,
            free_gpus_index=self.free_gpus_index,
            gangs=self.gangs,
            unknown_checkpoint_age=self.unknown_checkpoint_age,
            pdbs_by_namespace=self.pdbs_by_namespace,
            _pod_positions=self._pod_positions,
            _node_positions=node_at,
            restriction=(self, frozenset(shut), frozenset(swapped)),
        )
        if swapped:
            out.__dict__["_held_over"] = (by_uid, swapped)  # pod_by_uid, built if asked for
        else:
            out.__dict__["pod_by_uid"] = by_uid
        if not shut:
            out.__dict__["node_by_name"] = by_name
        elif node_at is not None:
            out.__dict__["node_by_name"] = {**by_name, **{n: nodes[node_at[n]] for n in shut}}
        return out

    @cached_property
    def restriction(self) -> tuple[Snapshot, frozenset[str], frozenset[str]] | None:
        """For a snapshot ``restricted`` made: (the snapshot it restricts, the nodes it closed,
        the pods it held); None for one built whole."""
        return None

    @cached_property
    def _node_positions(self) -> dict[str, int] | None:
        """Each node's index in ``nodes`` by name, or None when a name repeats."""
        at = {n.name: i for i, n in enumerate(self.nodes)}
        return at if len(at) == len(self.nodes) else None

    @cached_property
    def _pod_positions(self) -> dict[str, int] | None:
        """Each pod's index in ``pods`` by uid, or None when a uid repeats."""
        at = {p.uid: i for i, p in enumerate(self.pods)}
        return at if len(at) == len(self.pods) else None

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
    def request_counts(self) -> dict[Resources, int]:
        """How many pods (bound or pending) ask for each distinct request: the workload a
        placement scorer targets (``policies.placement.admission``). A ``restricted`` view
        shares its base's, computed once and only when asked for."""
        if self.restriction is not None:
            return self.restriction[0].request_counts
        return dict(Counter(p.requests for p in self.pods))

    @cached_property
    def largest_allocatable(self) -> Resources:
        """The most any one node has of each resource: a request beyond it fits nowhere."""
        alloc = [n.allocatable for n in self.nodes] or [ZERO]
        return Resources(
            cpu_milli=max(a.cpu_milli for a in alloc),
            memory_mib=max(a.memory_mib for a in alloc),
            gpus=max(a.gpus for a in alloc),
            gpu_milli=max(a.gpu_milli for a in alloc),
        )

    def free(self, node: str) -> Resources:
        return self.free_by_node[node]

    @property
    def pods_by_gang(self) -> dict[str, list[Pod]]:
        """Every gang's pods, bound or pending; ``restricted`` replaces the lists it changes."""
        return self._index[2]

    def gang_pods(self, key: str) -> list[Pod]:
        """Every pod of gang ``key`` in the snapshot, bound or pending."""
        return self._index[2].get(key, [])

    @cached_property
    def gangs(self) -> dict[str, Gang]:
        return {key: Gang(key=key, members=tuple(sorted(p.uid for p in ps)))
                for key, ps in self._index[2].items()}


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
    workload: str = ""  # Pod.workload: what this preemption counts against for fairness


@dataclass(frozen=True, kw_only=True)
class VictimGroup:
    """One unit of eviction: a single pod, or every running member of a gang.

    ``penalty_gpu_seconds`` is what the fairness guard charged on top of the lost work because
    the workload was preempted recently (``Snapshot.recent_preemptions``)."""

    gang: str | None
    victims: tuple[Victim, ...]
    lost_gpu_seconds: float
    reason: str
    penalty_gpu_seconds: float = 0.0


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
    def penalty_gpu_seconds(self) -> float:
        """The fairness penalty of the victims; the planner minimises lost work plus this."""
        return sum(g.penalty_gpu_seconds for g in self.victim_groups)

    @property
    def target_nodes(self) -> tuple[str, ...]:
        return tuple(sorted({p.node for p in self.placements}))
