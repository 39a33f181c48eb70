"""The cluster model every policy works on: plain, frozen, keyword-only dataclasses.

Times are plain floats (seconds on one shared axis, e.g. the Unix epoch); the caller passes
``Snapshot.now``, so nothing in ``policies`` reads a clock. Resources use kube units:
CPU in millicores, memory in MiB, GPUs as whole devices (``nvidia.com/gpu`` and the other
names configured), and MIG slices as thousandths of their parent GPU (``gpu_milli``).

``Snapshot``, the whole cluster with its indexes, is in ``policies.model.snapshot`` (which imports
this module).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ckpt_preempt.policies.model.gpu_use import GpuUse
from ckpt_preempt.policies.model.health import Health
from ckpt_preempt.policies.model.topology import NodeTopology


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
    # an nvlink: required gang spanning nodes (policies.planner.preemption, "NVLink cliques"): this
    # node is outside the clique being tried; or no clique can host the whole gang
    NVLINK_OTHER_CLIQUE = "nvlink-gang-in-another-clique"
    NVLINK_NO_CLIQUE = "nvlink-required-gang-but-no-clique-fits"
    COSTLIER = "another-node-loses-less-work"
    GPU_FAILING = "node-gpu-failing"  # policies.model.health: a GPU of it is failing
    NOT_SAMPLED = "not-evaluated-sampling-stopped"
    SEARCH_BUDGET = "search-budget-exhausted"
    # policies.planner.bound: the only victims that would make room were preempted too often lately
    VICTIMS_AT_BOUND = "victims-at-preemption-bound"


class PodHold(enum.StrEnum):
    """Why a running pod is no candidate for this preemptor although it could be otherwise."""

    HELD_BY_PLAN = "held-by-another-plan"  # a victim of another active plan
    EVICTION_BLOCKED = "eviction-blocked-recently"  # the Eviction API refused it lately
    # policies.planner.bound: preempted too often lately
    AT_PREEMPTION_BOUND = "at-preemption-bound"
    # policies.planner.parity: it reports its checkpoints and was preempted at least as often as
    # a silent pod that could go instead
    REPORT_PARITY = "report-parity"


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


# What a workload is (docs/design.md, "What a workload is"): the pods whose preemptions are
# counted together by the fairness penalty, the starvation bound and report parity. Its key
# always begins with the pod's own namespace, and a namespace name holds no "/", so no field a
# tenant writes (a gang label or annotation, a PodGroup reference, an ownerReference's uid) can
# make its pod share a workload with a pod of another namespace. Within a namespace the key is
# the tenant's to choose, as the namespace is (attribution, policies.planner.bound, limits what
# sharing a workload can gain).
WORKLOAD_OWNER = "owner"  # <namespace>/owner/<controlling owner's uid>
WORKLOAD_POD = "pod"  # <namespace>/pod/<pod uid>: neither gang nor controlling owner
WORKLOAD_GANG = "gang"  # <namespace>/gang/<key>: a gang key not already in the pod's namespace


def workload_key(namespace: str, *, gang: str | None, owner_uid: str | None, uid: str) -> str:
    """The workload key of a pod of ``namespace``: its gang's key (``policies.model.gangs``
    and ``native_gangs`` build them as ``<namespace>/<convention>/<name>``), else its controlling
    owner's, else its own. An owner reference is taken at its word inside the namespace: one
    whose kind is not served, or whose object does not exist, groups only the pods of this
    namespace that name the same uid, all of them the tenant's own."""
    prefix = namespace + "/"
    if gang:
        return gang if gang.startswith(prefix) else f"{prefix}{WORKLOAD_GANG}/{gang}"
    if owner_uid:
        return f"{prefix}{WORKLOAD_OWNER}/{owner_uid}"
    return f"{prefix}{WORKLOAD_POD}/{uid}"


def recorded_workload(namespace: str, uid: str, recorded: str) -> str:
    """The workload key a stored plan's victim counts against. Plans stored before keys were
    namespaced recorded a bare uid (the victim's own, or its controlling owner's): it is read as
    that key inside the victim's namespace, so old plans keep counting for the same workload
    and never for another namespace's. A key already in the victim's namespace is kept."""
    prefix = namespace + "/"
    if recorded.startswith(prefix):
        return recorded
    if not recorded or recorded == uid:
        return f"{prefix}{WORKLOAD_POD}/{uid}"
    return f"{prefix}{WORKLOAD_OWNER}/{recorded}"


@dataclass(frozen=True, kw_only=True)
class Node:
    """A node. ``excluded`` says why the preemptor being planned may not use it although it is
    schedulable (its selector, affinity or taints, or another plan holds it); see
    ``Snapshot.restricted``. ``health`` is its GPUs' (``policies.model.health``): failing closes it
    to preemptors; unknown, the default, changes nothing. ``clique`` is its multi-node NVLink
    domain (hwprobe's fabric clique, ``NodeTopology.clique``): nodes sharing one reach each
    other's GPUs over NVLink; None: it is in none."""

    name: str
    allocatable: Resources
    topology: NodeTopology | None = None  # None: "topology unknown"
    # Which GPUs its pods hold, from hwprobe's gpu-use report (policies.model.gpu_use); None: not
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
    gang: str | None = None  # "<namespace>/<name>" from policies.model.gangs
    gang_total: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    terminating: bool = False
    checkpoint_malformed: bool = False
    owner_uid: str | None = None  # the controlling owner (ownerReferences, controller: true)
    held: PodHold | None = None
    # The fewest members the pod's gang runs with (native PodGroup minCount, or
    # ``ckpt-preempt.io/min-members``): the members above it may leave and the job goes on
    # (elastic shrink, ``policies.planner.shrink``). None: not elastic, every member is needed.
    gang_minimum: int | None = None
    # when to preempt (policies.planner.timing): the declared checkpoint period of a periodic pod
    # (annotation checkpoint-interval), and when it is expected to end (annotation expected-end
    # or spec.activeDeadlineSeconds, the earlier); None: not declared
    checkpoint_interval: float | None = None
    expected_end: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @cached_property
    def workload(self) -> str:
        """What preemptions are counted against for fairness: the gang, else the controlling
        owner (a Job's pods share it across restarts), else the pod itself; always inside the
        pod's namespace (``workload_key``)."""
        return workload_key(self.namespace, gang=self.gang, owner_uid=self.owner_uid,
                            uid=self.uid)

    @property
    def gpus(self) -> int:
        return self.requests.gpus

    @property
    def gpu_share(self) -> float:
        """Whole GPUs plus MIG fractions: the GPUs its lost work is charged for."""
        return self.requests.gpu_share

    @property
    def reports_periodic(self) -> bool | None:
        """For a pod declaring ``checkpoint: periodic`` without a malformed report: whether it
        shows a last checkpoint (True) or is silent (False), as report parity reads it
        (``policies.planner.parity``); None for any other pod."""
        if self.checkpoint is not CheckpointMode.PERIODIC or self.checkpoint_malformed:
            return None
        return self.last_checkpoint is not None


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
    # an elastic gang giving up only these members (``policies.planner.shrink``); the rest run on
    shrink: bool = False


@dataclass(frozen=True, kw_only=True)
class Placement:
    pod_uid: str
    node: str


@dataclass(frozen=True, kw_only=True)
class NodeRejection:
    node: str
    reason: RejectReason
    detail: str = ""


# When to preempt (policies.planner.timing decides): the plan's choice and the victims it waits for.


class When(enum.StrEnum):
    """When a plan evicts."""

    NOW = "now"
    AFTER_CHECKPOINT = "after-checkpoint"  # right after a periodic victim's next checkpoint
    AFTER_END = "after-end"  # once a victim has ended by itself


@dataclass(frozen=True, kw_only=True)
class VictimWait:
    """A victim the plan waits for: its next checkpoint or its end, expected at ``expected``."""

    uid: str
    when: When
    expected: float


@dataclass(frozen=True, kw_only=True)
class Timing:
    """When a plan evicts and why. ``deadline``: evict whatever still runs then. The GPU-second
    figures are expected totals (lost work + restarts + the preemptor's wait): of evicting at the
    plan's drain deadline without waiting (``now_gpu_seconds``) and of the choice."""

    when: When
    deadline: float
    waits: tuple[VictimWait, ...] = ()
    expected_gpu_seconds: float = 0.0
    now_gpu_seconds: float = 0.0
    delay_gpu_seconds: float = 0.0  # the preemptor's GPUs × its wait, in the choice
    reason: str = ""

    def wait_for(self, uid: str) -> VictimWait | None:
        return next((w for w in self.waits if w.uid == uid), None)


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
    timing: Timing | None = None  # None: evict at the drain deadline (timing not considered)

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
