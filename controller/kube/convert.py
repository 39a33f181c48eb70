"""Compact records → the policies ``Snapshot``.

The watch cache keeps only ``PodInfo`` / ``NodeInfo`` / ``PdbInfo`` (built from API objects in
``controller.kube.records``). ``snapshot()`` is the only place these become
``policies.model.model`` values; bad input becomes ``problems`` (the loop emits them as Warning
Events) and a safe choice, never an exception.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.kube.records import (
    TOPOLOGY_ANNOTATION,
    NodeInfo,
    PdbInfo,
    PodInfo,
)
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model import gpu_use, native_gangs
from ckpt_preempt.policies.model.health import Health
from ckpt_preempt.policies.model.model import (
    Node,
    Pod,
    PodDisruptionBudget,
    PodHold,
    RejectReason,
    Resources,
)
from ckpt_preempt.policies.model.snapshot import Snapshot, workload_gpus
from ckpt_preempt.policies.model.topology import TopologyError, parse_node_topology
from ckpt_preempt.policies.planner import bound, preemption


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
    # pods, or a gang with a member there), for policies.planner.plan_cache.PlanCache.carried; None:
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
        restart_workload_gpu_seconds=cfg.restart_cost_gpu_seconds_per_workload,
        shrink=cfg.elastic_shrink, rendezvous_seconds=cfg.rendezvous_cost_seconds,
        timing=cfg.plan_timing, report_parity=cfg.report_parity,
    )


def preemption_bound(cfg: Config) -> bound.Bound:
    """The starvation bound the config sets (``policies.planner.bound``)."""
    return bound.Bound(max_preemptions=cfg.max_preemptions_per_window,
                       window_seconds=cfg.preemption_bound_window_seconds)


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
        active_deadline_seconds=p.active_deadline_seconds,
    )
    problems = [str(x) for x in found]
    native = native_membership(p, podgroups)
    if native is not None:  # the native convention comes first (policies.model.native_gangs)
        gang, minimum = native  # minCount is a minimum, never an exact size
        pod = dataclasses.replace(pod, gang=gang, gang_total=None, gang_minimum=minimum)
    if requests is None:
        problems.append("pod states no resource requests; planned as requesting nothing")
    return pod, problems


def native_membership(p: PodInfo,
                      podgroups: Mapping[str, native_gangs.NativeGroup] | None = None,
                      ) -> tuple[str | None, int | None] | None:
    """(gang key, gang minimum) from the native PodGroup ``p`` names
    (``policies.model.native_gangs.membership``; ``podgroups`` by ``<namespace>/<name>``, a group
    not in it is unknown); None when it names none, and the label and annotation conventions
    decide."""
    if p.pod_group is None:
        return None
    # Trust: the group is looked up in the pod's own namespace only, so a reference cannot reach
    # (or take the minCount of) another namespace's PodGroup.
    return native_gangs.membership(
        namespace=p.namespace, ref=p.pod_group, bound=p.node is not None,
        group=(podgroups or {}).get(f"{p.namespace}/{p.pod_group}"))


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
    """``node`` with the GPUs in use from hwprobe's report (``policies.model.gpu_use``), or as it
    was
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
             podgroups: Mapping[str, native_gangs.NativeGroup] | None = None,
             preemption_history: Mapping[str, int] | None = None,
             preempted_gpus: Mapping[str, float] | None = None) -> Converted:
    """Bound, unfinished pods hold capacity; pending pods are listed too (for gang membership).
    Pods outside the scope are never candidates (``preemptible=False``).
    ``recent_preemptions``: per workload key (``Victim.workload``, ``Pod.workload``), how
    often it was preempted within the fairness window, from the stored plan history;
    ``preemption_history``: the same within the starvation bound's window
    (``policies.planner.bound``); both are attributed (``attributed``) by ``preempted_gpus``
    (``controller.planning.plans.preempted_gpus``).
    ``health``: each node's GPU health (``controller.health.health``; absent: unknown).
    ``podgroups``: native PodGroups by ``<namespace>/<name>`` (``controller.kube.podgroups``)."""
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
    holding = workload_gpus(model_pods) if preempted_gpus else None  # a pass, only if needed
    recent, history = attributed(recent_preemptions, preemption_history, preempted_gpus,
                                 holding or {})
    snap = Snapshot(now=now, nodes=tuple(model_nodes), pods=tuple(model_pods),
                    pdbs=tuple(to_pdb(b) for b in pdbs), recent_preemptions=recent,
                    unknown_checkpoint=limits.unknown_checkpoint, preemption_history=history)
    if holding is not None:
        snap = snap.with_gpus_by_workload(holding)
    return Converted(snapshot=snap, problems=problems, node_problems=node_problems)


def attributed(recent: Mapping[str, int] | None, history: Mapping[str, int] | None,
               preempted_gpus: Mapping[str, float] | None, holding: Mapping[str, float]
               ) -> tuple[dict[str, int], dict[str, int]]:
    """The preemption counts a snapshot carries: each workload's counts only while it holds
    (``holding``: ``Snapshot.gpus_by_workload``) no more GPUs than at one of them
    (``policies.planner.bound.attributable``)."""
    sizes = preempted_gpus or {}
    return (bound.attributable(recent or {}, sizes, holding),
            bound.attributable(history or {}, sizes, holding))


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
                  blocked_pods: frozenset[str] = frozenset(),
                  bounded_pods: frozenset[str] = frozenset(), queued_gpus: float = 0.0
                  ) -> Snapshot:
    """The snapshot as one preemptor sees it, each exclusion with its reason: nodes it may not
    use (selector, affinity, taints, a reservation taint, or ``reserved_nodes``: targets of
    other active plans) are closed; ``busy_pods`` (victims of other active plans) and
    ``blocked_pods`` (whose eviction was refused lately) and ``bounded_pods`` (their workload
    was preempted as often as the starvation bound allows: ``policies.planner.bound.pods_at_bound``)
    are no candidates. ``queued_gpus``: the GPUs other pending preemptors at its priority or
    above ask for (``Snapshot.queued_gpus``)."""
    pre = list(preemptor)
    closed = {}
    for n in snap.nodes:
        info = nodes.get(n.name)
        why = RejectReason.UNSCHEDULABLE if info is None else node_exclusion(info, pre)
        if why is None and n.name in reserved_nodes:
            why = RejectReason.NODE_HELD
        if why is not None:
            closed[n.name] = why
    held = dict.fromkeys(bounded_pods, PodHold.AT_PREEMPTION_BOUND)
    held.update(dict.fromkeys(blocked_pods, PodHold.EVICTION_BLOCKED))
    held.update(dict.fromkeys(busy_pods, PodHold.HELD_BY_PLAN))
    return snap.restricted(closed=closed, held=held, queued_gpus=queued_gpus)
