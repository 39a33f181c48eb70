"""API objects (raw JSON dicts from list/watch) → compact records → the policies ``Snapshot``.

The watch cache keeps only ``PodInfo`` / ``NodeInfo`` / ``PdbInfo`` (a few hundred bytes each),
never whole API objects, so memory stays bounded by what planning needs. ``snapshot()`` is the
only place these become ``policies.model`` values; bad input becomes ``problems`` (the loop
emits them as Warning Events) and a safe choice, never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from kubernetes.utils import parse_quantity

from policies import annotations as ann
from policies.model import Node, Pod, PodDisruptionBudget, Resources, Snapshot
from policies.topology import TopologyError, parse_node_topology

GPU = "nvidia.com/gpu"
ADMISSION_GATE = "ckpt-preempt.io/admission"
TOPOLOGY_ANNOTATION = "hwprobe.ckpt-preempt.io/topology"
_OURS = ("ckpt-preempt.io/", "scheduling.ai/", "kueue.x-k8s.io/", "scheduling.k8s.io/",
         "scheduling.x-k8s.io/", "jobset.sigs.k8s.io/", "leaderworkerset.sigs.k8s.io/")


@dataclass(frozen=True, kw_only=True, slots=True)
class PodInfo:
    uid: str
    name: str
    namespace: str
    resource_version: str
    created: float
    labels: Mapping[str, str]
    annotations: Mapping[str, str]  # ours and the gang conventions' only
    deleting: bool
    node: str | None
    phase: str
    priority: int
    priority_class: str
    preemption_policy: str
    requests: Resources | None  # None: no container states any request
    gates: tuple[str, ...]
    unschedulable: bool  # PodScheduled=False, reason Unschedulable
    nominated: str | None
    start_time: float | None
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping, ...]
    required_terms: tuple[Mapping, ...]  # required node affinity nodeSelectorTerms (ORed)

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


@dataclass(frozen=True, kw_only=True, slots=True)
class PdbInfo:
    name: str
    namespace: str
    match_labels: Mapping[str, str]
    has_expressions: bool
    disruptions_allowed: int


def _time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _qty(value: object) -> float:
    return float(parse_quantity(str(value)))


def pod_requests(spec: Mapping) -> Resources | None:
    """Effective requests: containers summed, then the max with each init container."""
    def one(c: Mapping) -> Resources | None:
        req = (c.get("resources") or {}).get("requests")
        if not req:
            return None
        return Resources(
            cpu_milli=math.ceil(_qty(req.get("cpu", 0)) * 1000),
            memory_mib=math.ceil(_qty(req.get("memory", 0)) / 2**20),
            gpus=int(_qty(req.get(GPU, 0))),
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
                              gpus=max(total.gpus, r.gpus))
    return total if seen else None


def pod_info(d: Mapping) -> PodInfo:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"),
                None)
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    try:
        requests = pod_requests(spec)
    except (ValueError, ArithmeticError):
        requests = None
    return PodInfo(
        uid=meta["uid"], name=meta["name"], namespace=meta["namespace"],
        resource_version=meta.get("resourceVersion", ""),
        created=_time(meta.get("creationTimestamp")) or 0.0,
        labels=dict(meta.get("labels") or {}),
        annotations={k: v for k, v in (meta.get("annotations") or {}).items()
                     if k.startswith(_OURS)},
        deleting=meta.get("deletionTimestamp") is not None,
        node=spec.get("nodeName") or None, phase=status.get("phase", ""),
        priority=int(spec.get("priority") or 0),
        priority_class=spec.get("priorityClassName") or "",
        preemption_policy=spec.get("preemptionPolicy") or "PreemptLowerPriority",
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
    )


def node_info(d: Mapping) -> NodeInfo:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    alloc = status.get("allocatable") or {}
    try:
        res = Resources(cpu_milli=math.floor(_qty(alloc.get("cpu", 0)) * 1000),
                        memory_mib=math.floor(_qty(alloc.get("memory", 0)) / 2**20),
                        gpus=int(_qty(alloc.get(GPU, 0))))
    except (ValueError, ArithmeticError):
        res = Resources()
    return NodeInfo(
        name=meta["name"], labels=dict(meta.get("labels") or {}), allocatable=res,
        topology=(meta.get("annotations") or {}).get(TOPOLOGY_ANNOTATION),
        unschedulable=bool(spec.get("unschedulable")), taints=tuple(spec.get("taints") or ()),
    )


def pdb_info(d: Mapping) -> PdbInfo:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    sel = spec.get("selector") or {}
    return PdbInfo(name=meta["name"], namespace=meta["namespace"],
                   match_labels=dict(sel.get("matchLabels") or {}),
                   has_expressions=bool(sel.get("matchExpressions")),
                   disruptions_allowed=int(status.get("disruptionsAllowed") or 0))


# ------------------------------------------------------------------------------- to the model


@dataclass(frozen=True, kw_only=True)
class Scope:
    """Which pods this controller may plan for and evict (empty = all)."""

    namespaces: frozenset[str] = frozenset()
    priority_classes: frozenset[str] = frozenset()

    def covers(self, p: PodInfo) -> bool:
        return ((not self.namespaces or p.namespace in self.namespaces)
                and (not self.priority_classes or p.priority_class in self.priority_classes))


@dataclass(frozen=True, kw_only=True)
class Converted:
    snapshot: Snapshot
    problems: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # pod uid -> warnings
    node_problems: Mapping[str, str] = field(default_factory=dict)


def to_pod(p: PodInfo, now: float, limits: ann.Limits, in_scope: bool) -> tuple[Pod, list[str]]:
    f = ann.parse_pod_fields(namespace=p.namespace, labels=p.labels, annotations=p.annotations,
                             now=now, limits=limits)
    problems = [str(x) for x in f.problems]
    requests = p.requests
    if requests is None:
        requests = Resources()
        problems.append("pod states no resource requests; planned as requesting nothing")
    return Pod(
        uid=p.uid, name=p.name, namespace=p.namespace, priority=p.priority, requests=requests,
        node=p.node, start_time=p.start_time if p.start_time is not None else p.created,
        checkpoint=f.checkpoint, last_checkpoint=f.last_checkpoint,
        checkpoint_seconds=f.checkpoint_seconds, min_runtime=f.min_runtime,
        preemptible=f.preemptible and in_scope, nvlink=f.nvlink, gang=f.gang,
        gang_total=f.gang_total, labels=p.labels, terminating=p.deleting,
    ), problems


def to_node(n: NodeInfo) -> tuple[Node, str | None]:
    topology, problem = None, None
    if n.topology is not None:
        try:
            topology = parse_node_topology(n.topology)
        except TopologyError as e:
            problem = f"{TOPOLOGY_ANNOTATION}: {e}; node treated as topology unknown"
    return Node(name=n.name, allocatable=n.allocatable, topology=topology,
                unschedulable=n.unschedulable), problem


def snapshot(*, now: float, nodes: Iterable[NodeInfo], pods: Iterable[PodInfo],
             pdbs: Iterable[PdbInfo], scope: Scope, limits: ann.Limits) -> Converted:
    """Bound, unfinished pods hold capacity; pending pods are listed too (for gang membership).
    Pods outside the scope are never candidates (``preemptible=False``)."""
    model_nodes, node_problems = [], {}
    for n in nodes:
        node, problem = to_node(n)
        model_nodes.append(node)
        if problem:
            node_problems[n.name] = problem
    model_pods, problems = [], {}
    for p in pods:
        if p.done:
            continue
        pod, pp = to_pod(p, now, limits, scope.covers(p))
        model_pods.append(pod)
        if pp:
            problems[p.uid] = tuple(pp)
    model_pdbs = tuple(
        PodDisruptionBudget(name=b.name, namespace=b.namespace, match_labels=b.match_labels,
                            disruptions_allowed=b.disruptions_allowed)
        for b in pdbs if not b.has_expressions)  # the Eviction API still enforces the others
    return Converted(snapshot=Snapshot(now=now, nodes=tuple(model_nodes), pods=tuple(model_pods),
                                       pdbs=model_pdbs),
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


def node_allows(n: NodeInfo, pods: Iterable[PodInfo]) -> bool:
    """nodeSelector, required node affinity and NoSchedule/NoExecute taints, for every
    preemptor pod (inter-pod affinity is not evaluated)."""
    for p in pods:
        if any(n.labels.get(k) != v for k, v in p.node_selector.items()):
            return False
        if p.required_terms and not any(_term(t, n) for t in p.required_terms):
            return False
        for taint in n.taints:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(
                    p.tolerations, taint):
                return False
    return True


def for_preemptor(snap: Snapshot, nodes: Mapping[str, NodeInfo], preemptor: Iterable[PodInfo],
                  *, reserved_nodes: frozenset[str], busy_pods: frozenset[str]) -> Snapshot:
    """The snapshot as one preemptor sees it: nodes it may not use (selector, taints, or held
    by another active plan) are unschedulable; victims of other active plans are not
    candidates again."""
    pre = list(preemptor)
    closed = [n.name for n in snap.nodes
              if n.name in reserved_nodes or n.name not in nodes
              or not node_allows(nodes[n.name], pre)]
    return snap.restricted(unschedulable=closed, terminating=busy_pods)
