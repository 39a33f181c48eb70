"""API objects (raw JSON dicts from list/watch) → compact records → the policies ``Snapshot``.

The watch cache keeps only ``PodInfo`` / ``NodeInfo`` / ``PdbInfo`` (a few hundred bytes each),
never whole API objects, so memory stays bounded by what planning needs. ``snapshot()`` is the
only place these become ``policies.model`` values; bad input becomes ``problems`` (the loop
emits them as Warning Events) and a safe choice, never an exception.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from kubernetes.utils import parse_quantity

from ckpt_preempt.controller import gpu_resources
from ckpt_preempt.controller.config import DEFAULT_SCHEDULER, Config
from ckpt_preempt.policies import annotations as ann
from ckpt_preempt.policies import gpu_use, native_gangs, preemption
from ckpt_preempt.policies.health import Health
from ckpt_preempt.policies.model import (
    LabelRequirement,
    Node,
    Pod,
    PodDisruptionBudget,
    PodHold,
    RejectReason,
    Resources,
    Snapshot,
)
from ckpt_preempt.policies.topology import ANNOTATION as TOPOLOGY_ANNOTATION
from ckpt_preempt.policies.topology import TopologyError, parse_node_topology

ADMISSION_GATE = ann.PREFIX + "admission"


@dataclass(frozen=True, kw_only=True, slots=True)
class PodInfo:
    uid: str
    name: str
    namespace: str
    resource_version: str
    created: float
    labels: Mapping[str, str]
    annotations: Mapping[str, str]  # ours, the gang conventions' and the checkpoint aliases
    deleting: bool
    node: str | None
    phase: str
    priority: int
    priority_class: str
    preemption_policy: str
    owner_uid: str | None  # the controlling owner's uid (ownerReferences, controller: true)
    requests: Resources | None  # None: no container states any request
    gates: tuple[str, ...]
    unschedulable: bool  # PodScheduled=False, reason Unschedulable
    nominated: str | None
    start_time: float | None
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping, ...]
    required_terms: tuple[Mapping, ...]  # required node affinity nodeSelectorTerms (ORed)
    scheduler_name: str = DEFAULT_SCHEDULER  # spec.schedulerName (the API server's default)
    claims: tuple[str, ...] = ()  # its ResourceClaims' names (its namespace), for DRA GPUs
    mig: frozenset[str] = frozenset()  # the MIG resources it requests (gpu_resources)
    # The native group it names (policies.native_gangs.group_ref): spec.schedulingGroup or the
    # 1.35 spec.workloadRef; None when it names none.
    pod_group: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def done(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    allocatable: Resources
    topology: str | None
    unschedulable: bool
    taints: tuple[Mapping, ...]
    mig: frozenset[str] = frozenset()  # the MIG resources it advertises (gpu_resources)
    gpu_use: str | None = None  # hwprobe's gpu-use annotation (policies.gpu_use), raw


@dataclass(frozen=True, kw_only=True, slots=True)
class PdbInfo:
    name: str
    namespace: str
    match_labels: Mapping[str, str]
    match_expressions: tuple[LabelRequirement, ...]
    selector: str  # "null" (covers nothing), "empty" (policy/v1: the whole namespace), "set"
    disruptions_allowed: int

    @property
    def has_expressions(self) -> bool:
        return bool(self.match_expressions)


def _time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _qty(value: object) -> float:
    return float(parse_quantity(str(value)))


def pod_requests(spec: Mapping,
                 gpus: gpu_resources.GpuResources = gpu_resources.DEFAULT) -> Resources | None:
    """Effective requests: containers summed, then the max with each init container. GPUs
    are the resources ``gpus`` names (whole GPUs and MIG slices, ``controller.gpu_resources``);
    DRA GPUs are added later, from the pod's claims (``controller.resource_claims``)."""
    def one(c: Mapping) -> Resources | None:
        req = (c.get("resources") or {}).get("requests")
        if not req:
            return None
        whole, milli = gpus.count(req)
        return Resources(
            cpu_milli=math.ceil(_qty(req.get("cpu", 0)) * 1000),
            memory_mib=math.ceil(_qty(req.get("memory", 0)) / 2**20),
            gpus=whole, gpu_milli=milli,
        )
    total, seen = Resources(), False
    for c in spec.get("containers") or []:
        r = one(c)
        if r is not None:
            total, seen = total + r, True
    for c in spec.get("initContainers") or []:
        r = one(c)
        if r is not None:
            seen = True
            total = Resources(cpu_milli=max(total.cpu_milli, r.cpu_milli),
                              memory_mib=max(total.memory_mib, r.memory_mib),
                              gpus=max(total.gpus, r.gpus),
                              gpu_milli=max(total.gpu_milli, r.gpu_milli))
    return total if seen else None


def _claim_names(spec: Mapping, status: Mapping) -> tuple[str, ...]:
    """The names of the ResourceClaims a pod uses: ``spec.resourceClaims`` entries naming a
    claim directly, and those from a template, named in ``status.resourceClaimStatuses``
    (k8s.io/api/core/v1 PodResourceClaim / PodResourceClaimStatus)."""
    made = {s.get("name"): s.get("resourceClaimName")
            for s in status.get("resourceClaimStatuses") or () if isinstance(s, Mapping)}
    out = []
    for c in spec.get("resourceClaims") or ():
        if not isinstance(c, Mapping):
            continue
        name = c.get("resourceClaimName") or made.get(c.get("name"))
        if isinstance(name, str) and name:
            out.append(name)
    return tuple(sorted(set(out)))


def pod_info(d: Mapping, gpus: gpu_resources.GpuResources = gpu_resources.DEFAULT) -> PodInfo:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"),
                None)
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    try:
        requests = pod_requests(spec, gpus)
    except (ValueError, ArithmeticError):
        requests = None
    owner = next((o.get("uid") for o in meta.get("ownerReferences") or []
                  if o.get("controller") is True and o.get("uid")), None)
    return PodInfo(
        uid=meta["uid"], name=meta["name"], namespace=meta["namespace"],
        resource_version=meta.get("resourceVersion", ""),
        created=_time(meta.get("creationTimestamp")) or 0.0,
        labels=dict(meta.get("labels") or {}),
        annotations={k: v for k, v in (meta.get("annotations") or {}).items()
                     if k.startswith(ann.PREFIXES)},
        deleting=meta.get("deletionTimestamp") is not None,
        node=spec.get("nodeName") or None, phase=status.get("phase", ""),
        priority=int(spec.get("priority") or 0),
        priority_class=spec.get("priorityClassName") or "",
        preemption_policy=spec.get("preemptionPolicy") or "PreemptLowerPriority",
        owner_uid=owner,
        requests=requests,
        gates=tuple(g["name"] for g in spec.get("schedulingGates") or []),
        unschedulable=bool(cond and cond.get("status") == "False"
                           and cond.get("reason") == "Unschedulable"),
        nominated=status.get("nominatedNodeName") or None,
        start_time=_time(status.get("startTime")),
        node_selector=dict(spec.get("nodeSelector") or {}),
        tolerations=tuple(spec.get("tolerations") or ()),
        required_terms=tuple((affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
                              or {}).get("nodeSelectorTerms") or ()),
        scheduler_name=spec.get("schedulerName") or DEFAULT_SCHEDULER,
        claims=_claim_names(spec, status) if gpus.dra else (),
        mig=gpu_resources.requested_mig(spec),
        pod_group=native_gangs.group_ref(spec.get("schedulingGroup"), spec.get("workloadRef")),
    )


def node_info(d: Mapping, gpus: gpu_resources.GpuResources = gpu_resources.DEFAULT) -> NodeInfo:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    alloc = status.get("allocatable") or {}
    try:
        whole, milli = gpus.count(alloc)
        res = Resources(cpu_milli=math.floor(_qty(alloc.get("cpu", 0)) * 1000),
                        memory_mib=math.floor(_qty(alloc.get("memory", 0)) / 2**20),
                        gpus=whole, gpu_milli=milli)
    except (ValueError, ArithmeticError):
        res = Resources()
    return NodeInfo(
        name=meta["name"], labels=dict(meta.get("labels") or {}), allocatable=res,
        topology=(meta.get("annotations") or {}).get(TOPOLOGY_ANNOTATION),
        unschedulable=bool(spec.get("unschedulable")), taints=tuple(spec.get("taints") or ()),
        mig=gpu_resources.mig_names(alloc),
        gpu_use=(meta.get("annotations") or {}).get(gpu_use.ANNOTATION),
    )


def pdb_info(d: Mapping) -> PdbInfo:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    sel = spec.get("selector")
    labels = dict((sel or {}).get("matchLabels") or {})
    exprs = tuple(
        LabelRequirement(key=e.get("key", ""), operator=e.get("operator", ""),
                         values=tuple(e.get("values") or ()))
        for e in (sel or {}).get("matchExpressions") or ())
    kind = "null" if sel is None else "set" if labels or exprs else "empty"
    return PdbInfo(name=meta["name"], namespace=meta["namespace"], match_labels=labels,
                   match_expressions=exprs, selector=kind,
                   disruptions_allowed=int(status.get("disruptionsAllowed") or 0))


# ------------------------------------------------------------------------------- to the model


@dataclass(frozen=True, kw_only=True)
class Scope:
    """Which pods this controller may plan for and evict (empty = all). A pod of a scheduler
    not in ``scheduler_names`` is left alone entirely: never a preemptor, never a victim, never
    asked to checkpoint; it still holds the capacity it uses."""

    namespaces: frozenset[str] = frozenset()
    priority_classes: frozenset[str] = frozenset()
    scheduler_names: frozenset[str] = frozenset()

    def covers(self, p: PodInfo) -> bool:
        return ((not self.namespaces or p.namespace in self.namespaces)
                and (not self.priority_classes or p.priority_class in self.priority_classes)
                and (not self.scheduler_names or p.scheduler_name in self.scheduler_names))


@dataclass(frozen=True, kw_only=True)
class Converted:
    """The snapshot, and what was wrong with the input: per pod uid, and per node (a topology
    annotation that does not parse; the controller emits those as Warning Events on the Node)."""

    snapshot: Snapshot
    problems: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # pod uid -> warnings
    node_problems: Mapping[str, str] = field(default_factory=dict)  # node name -> warning
    # the nodes that changed since the previous snapshot of the same model (their Node, their
    # pods, or a gang with a member there), for policies.plan_cache.PlanCache.carried; None:
    # unknown (a whole rebuild, or the model's first)
    changed_nodes: frozenset[str] | None = field(default=None, compare=False)


def scope(cfg: Config) -> Scope:
    return Scope(namespaces=frozenset(cfg.namespaces),
                 priority_classes=frozenset(cfg.priority_classes),
                 scheduler_names=frozenset(cfg.scheduler_names))


def limits(cfg: Config) -> ann.Limits:
    """What the config lets pods ask for, as ``policies`` takes it."""
    return ann.Limits(
        max_checkpoint_seconds=cfg.max_checkpoint_seconds,
        max_min_runtime=cfg.max_min_runtime_seconds,
        opt_out_namespaces=frozenset(cfg.opt_out_namespaces),
        opt_out_priority_classes=frozenset(cfg.opt_out_priority_classes),
        unknown_checkpoint=ann.parse_unknown_checkpoint(cfg.unknown_checkpoint),
    )


def planner_config(cfg: Config) -> preemption.PlannerConfig:
    return preemption.PlannerConfig(
        drain=cfg.drain, max_checkpoint_seconds=cfg.max_checkpoint_seconds,
        fairness_penalty_seconds=cfg.fairness_penalty_seconds,
        restart_seconds=cfg.restart_cost_seconds,
    )


def to_pod(p: PodInfo, now: float, limits: ann.Limits, in_scope: bool,
           podgroups: Mapping[str, native_gangs.NativeGroup] | None = None,
           ) -> tuple[Pod, list[str]]:
    """``podgroups``: the native PodGroups by ``<namespace>/<name>`` (absent: unknown)."""
    requests = p.requests
    pod, found = ann.build_pod(
        uid=p.uid, name=p.name, namespace=p.namespace, labels=p.labels,
        annotations=p.annotations, now=now, limits=limits, priority=p.priority,
        priority_class=p.priority_class, requests=requests or Resources(), node=p.node,
        start_time=p.start_time if p.start_time is not None else p.created,
        owner_uid=p.owner_uid, terminating=p.deleting, in_scope=in_scope,
    )
    problems = [str(x) for x in found]
    if p.pod_group is not None:  # the native convention comes first (policies.native_gangs)
        gang, total = native_gangs.membership(
            namespace=p.namespace, ref=p.pod_group, bound=p.node is not None,
            group=(podgroups or {}).get(f"{p.namespace}/{p.pod_group}"))
        pod = dataclasses.replace(pod, gang=gang, gang_total=total)
    if requests is None:
        problems.append("pod states no resource requests; planned as requesting nothing")
    return pod, problems


def to_node(n: NodeInfo, health: Health = Health.UNKNOWN) -> tuple[Node, str | None]:
    topology, problem = None, None
    if n.topology is not None:
        try:
            topology = parse_node_topology(n.topology)
        except TopologyError as e:
            problem = f"{TOPOLOGY_ANNOTATION}: {e}; node treated as topology unknown"
    # the fabric clique (multi-node NVLink domain) comes from the same hwprobe report
    return Node(name=n.name, allocatable=n.allocatable, topology=topology,
                unschedulable=n.unschedulable, health=health,
                clique=topology.clique if topology is not None else None), problem


def with_gpu_use(node: Node, raw: str, pods: Iterable[Pod], now: float
                 ) -> tuple[Node, str | None]:
    """``node`` with the GPUs in use from hwprobe's report (``policies.gpu_use``), or as it was
    and why the report is not used (the worst-case NVLink rule stays)."""
    try:
        report = gpu_use.parse_gpu_use(raw)
    except gpu_use.GpuUseError as e:
        return node, f"{gpu_use.ANNOTATION}: {e}; GPUs in use treated as unknown"
    use, why = gpu_use.attach(report, node.topology, pods, now)
    if use is None:
        return node, f"{gpu_use.ANNOTATION}: {why}"
    return dataclasses.replace(node, gpu_use=use), None


def to_pdb(b: PdbInfo) -> PodDisruptionBudget:
    return PodDisruptionBudget(
        name=b.name, namespace=b.namespace, match_labels=b.match_labels,
        match_expressions=b.match_expressions, match_all=b.selector == "empty",
        disruptions_allowed=b.disruptions_allowed)


def snapshot(*, now: float, nodes: Iterable[NodeInfo], pods: Iterable[PodInfo],
             pdbs: Iterable[PdbInfo], scope: Scope, limits: ann.Limits,
             recent_preemptions: Mapping[str, int] | None = None,
             health: Mapping[str, Health] | None = None,
             podgroups: Mapping[str, native_gangs.NativeGroup] | None = None) -> Converted:
    """Bound, unfinished pods hold capacity; pending pods are listed too (for gang membership).
    Pods outside the scope are never candidates (``preemptible=False``).
    ``recent_preemptions``: per workload key (``Victim.workload``, ``Pod.workload``), how
    often it was preempted within the fairness window, from the stored plan history.
    ``health``: each node's GPU health (``controller.health``; absent: unknown).
    ``podgroups``: native PodGroups by ``<namespace>/<name>`` (``controller.podgroups``)."""
    model_pods, problems = [], {}
    for p in pods:
        if p.done:
            continue
        pod, pp = to_pod(p, now, limits, scope.covers(p), podgroups)
        model_pods.append(pod)
        if pp:
            problems[p.uid] = tuple(pp)
    model_nodes, node_problems = [], {}
    states = health or {}
    on_node: dict[str, list[Pod]] = {}
    for pod in model_pods:
        if pod.node is not None:
            on_node.setdefault(pod.node, []).append(pod)
    for n in nodes:
        node, problem = to_node(n, states.get(n.name, Health.UNKNOWN))
        if n.gpu_use is not None:
            node, use_problem = with_gpu_use(node, n.gpu_use, on_node.get(n.name, ()), now)
            problem = "; ".join(filter(None, (problem, use_problem))) or None
        model_nodes.append(node)
        if problem:
            node_problems[n.name] = problem
    return Converted(
        snapshot=Snapshot(now=now, nodes=tuple(model_nodes), pods=tuple(model_pods),
                          pdbs=tuple(to_pdb(b) for b in pdbs),
                          recent_preemptions=dict(recent_preemptions or {}),
                          unknown_checkpoint=limits.unknown_checkpoint),
        problems=problems, node_problems=node_problems)


def _tolerates(tolerations: Iterable[Mapping], taint: Mapping) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _requirement(req: Mapping, value: str | None) -> bool:
    op, values = req.get("operator"), req.get("values") or []
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False  # unknown operator: not a node we can be sure of


def _term(term: Mapping, n: NodeInfo) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches nothing
    return (all(_requirement(e, n.labels.get(e.get("key", ""))) for e in exprs)
            and all(_requirement(f, n.name if f.get("key") == "metadata.name" else None)
                    for f in fields))


def node_exclusion(n: NodeInfo, pods: Iterable[PodInfo]) -> RejectReason | None:
    """Why some preemptor pod may not use node ``n``: its nodeSelector, its required node
    affinity, or a NoSchedule/NoExecute taint it does not tolerate (another plan's reservation
    taint named as such), or MIG slices of other profiles than the one asked for (the planner
    pools a node's MIG slices, which is exact only while they are all of one profile); None
    when every pod may (inter-pod affinity is not evaluated)."""
    pods = list(pods)
    mig = frozenset().union(*(p.mig for p in pods))
    if mig and (len(mig) > 1 or n.mig != mig):
        return RejectReason.MIG_PROFILE
    for p in pods:
        if any(n.labels.get(k) != v for k, v in p.node_selector.items()):
            return RejectReason.NODE_SELECTOR
    for p in pods:
        if p.required_terms and not any(_term(t, n) for t in p.required_terms):
            return RejectReason.NODE_AFFINITY
    reserved = False
    for p in pods:
        for taint in n.taints:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(
                    p.tolerations, taint):
                if taint.get("key") != ann.RESERVED_TAINT:
                    return RejectReason.NODE_TAINT
                reserved = True
    return RejectReason.NODE_RESERVED if reserved else None


def node_allows(n: NodeInfo, pods: Iterable[PodInfo]) -> bool:
    """Whether every preemptor pod may use node ``n`` (see ``node_exclusion``)."""
    return node_exclusion(n, pods) is None


def for_preemptor(snap: Snapshot, nodes: Mapping[str, NodeInfo], preemptor: Iterable[PodInfo],
                  *, reserved_nodes: frozenset[str], busy_pods: frozenset[str],
                  blocked_pods: frozenset[str] = frozenset()) -> Snapshot:
    """The snapshot as one preemptor sees it, each exclusion with its reason: nodes it may not
    use (selector, affinity, taints, a reservation taint, or ``reserved_nodes``: targets of
    other active plans) are closed; ``busy_pods`` (victims of other active plans) and
    ``blocked_pods`` (whose eviction was refused lately) are no candidates."""
    pre = list(preemptor)
    closed = {}
    for n in snap.nodes:
        info = nodes.get(n.name)
        why = RejectReason.UNSCHEDULABLE if info is None else node_exclusion(info, pre)
        if why is None and n.name in reserved_nodes:
            why = RejectReason.NODE_HELD
        if why is not None:
            closed[n.name] = why
    held = dict.fromkeys(blocked_pods, PodHold.EVICTION_BLOCKED)
    held.update(dict.fromkeys(busy_pods, PodHold.HELD_BY_PLAN))
    return snap.restricted(closed=closed, held=held)
