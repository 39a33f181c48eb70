"""The extender's three verbs on a ``ClusterView``: filter (NVLink within a node, and the
NVLink clique of an ``nvlink: required`` gang), prioritize (the placement scorer) and preempt
(reshape kube-scheduler's victims so the choice loses the least work).

Wire types are kube-scheduler's, k8s.io/kube-scheduler@v0.37.2 extender/v1/types.go: they
have no json tags, so keys are the Go field names (``Pod``, ``NodeNames``, ``FailedNodes``,
``NodeNameToMetaVictims``...); Go's decoder matches keys case-insensitively, and so does
``field``. The pod itself is a core/v1 Pod with its usual json names.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ckpt_preempt.controller.extender.extender_cliques import clique_rule
from ckpt_preempt.controller.extender.extender_model import (
    NEED_NO_DOMAIN_FITS,
    NEED_TOPOLOGY_UNKNOWN,
    ClusterView,
    NodeView,
    PendingPod,
    pod_shape,
)
from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.model import (
    NvlinkNeed,
    Pod,
    RejectReason,
    Resources,
    breaks_budget,
)
from ckpt_preempt.policies.placement.baselines import BestFit
from ckpt_preempt.policies.placement.devices import GpuNode, PodShape, fits
from ckpt_preempt.policies.placement.ours import Ours, OursConfig
from ckpt_preempt.policies.planner import cost, search

# k8s.io/kube-scheduler@v0.37.2 extender/v1/types.go MinExtenderPriority, MaxExtenderPriority
MIN_EXTENDER_PRIORITY, MAX_EXTENDER_PRIORITY = 0, 10
# Subsets of one node's offered victims searched exhaustively; above this many victims the
# offered set is kept whole (kube-scheduler's dry run already reprieved what it could).
MAX_VICTIMS_SEARCHED = 12
# Prioritize's memo of our key per (pod shape, node state) is dropped past this many entries
# (a few MB; 5,000 nodes in distinct states times a few shapes stay below it).
SCORE_MEMO_ENTRIES = 50_000
# The clock is read once per this many uncached scorings (reading it costs about as much).
BUDGET_CHECK_EVERY = 16


class BadRequest(ValueError):
    """The request cannot be served; the message is the one-line HTTP 400 body."""


def field(doc: Mapping, name: str):
    """``doc[name]`` matched case-insensitively, as Go's encoding/json does; None if absent."""
    if name in doc:
        return doc[name]
    low = name.lower()
    return next((v for k, v in doc.items() if isinstance(k, str) and k.lower() == low), None)


def pending_pod(args: Mapping) -> PendingPod:
    raw = field(args, "Pod")
    if not isinstance(raw, Mapping):
        raise BadRequest("request has no Pod object")
    try:
        info = records.pod_info(raw)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BadRequest(f"Pod is not a usable core/v1 Pod: {type(e).__name__} {e}") from None
    model, _ = convert.to_pod(info, time.time(), ann.Limits(), in_scope=True)
    return PendingPod(info=info, shape=pod_shape(info.requests), model=model)


def node_names(args: Mapping) -> tuple[list[str], bool]:
    """The candidate nodes' names, and whether they came as names (``nodeCacheCapable``)."""
    names = field(args, "NodeNames")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("NodeNames is not a list of strings")
        return names, True
    nodes = field(args, "Nodes")
    if not isinstance(nodes, Mapping):
        raise BadRequest("request has neither NodeNames nor Nodes")
    try:
        return [n["metadata"]["name"] for n in nodes.get("items") or []], False
    except (KeyError, TypeError) as e:
        raise BadRequest(f"Nodes.items has a node without metadata.name ({e})") from None


# --------------------------------------------------------------------------------------- filter


def nvlink_problem(pod: Pod, nv: NodeView) -> tuple[str | None, bool]:
    """Why ``pod`` (``nvlink: required``) cannot go on this node now, and whether preemption
    could change that; (None, _) when it can go."""
    needs = nv.nvlink_need
    need = needs[pod.gpus] if pod.gpus < len(needs) else NEED_NO_DOMAIN_FITS
    if need >= 0:
        if nv.free_gpus >= need:
            return None, True
        return (f"needs {need} free GPUs to be sure of one NVLink domain of {pod.gpus}, "
                f"{nv.free_gpus} free"), True
    topology = nv.node.topology
    if need == NEED_TOPOLOGY_UNKNOWN:
        return f"{RejectReason.NVLINK_UNKNOWN.value} ({pod.gpus} GPUs asked)", False
    largest = topology.largest_domain if topology else 0
    return (f"{RejectReason.NVLINK_INFEASIBLE.value} (largest NVLink domain {largest}, "
            f"{pod.gpus} GPUs asked)"), False


def filter_nodes(view: ClusterView, args: Mapping) -> dict:
    pod = pending_pod(args)
    names, as_names = node_names(args)
    kept, failed, unresolvable = [], {}, {}
    rule = clique_rule(view, pod)
    within = pod.model.nvlink is NvlinkNeed.REQUIRED and pod.model.gpus > 1
    if not within and rule is None:
        kept = names
    else:
        for name in names:
            nv = view.nodes.get(name)
            if nv is None:
                failed[name] = "node not yet in the extender's cache"
                continue
            problem = None if rule is None else rule.problem(nv.node.clique)
            if problem is not None:  # preemption cannot move a node into another clique
                unresolvable[name] = problem
                continue
            if not within:
                kept.append(name)
                continue
            problem, resolvable = nvlink_problem(pod.model, nv)
            if problem is None:
                kept.append(name)
            elif resolvable:
                failed[name] = problem
            else:
                unresolvable[name] = problem
    out: dict = {"FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
    if as_names:
        out["NodeNames"] = kept
    else:
        keep = set(kept)
        out["Nodes"] = {"items": [n for n in field(args, "Nodes").get("items") or []
                                  if n["metadata"]["name"] in keep]}
    return out


# ------------------------------------------------------------------------------------ prioritize


class Scorer:
    """Our placement scorer (``policies.placement.ours.Ours``) with its target workload learned
    online from every pod the extender sees, under a per-request time budget: when scoring the
    candidates' node states not yet memoised would take longer, they are scored again by BestFit
    and ``on_fallback`` is called. Scoring is serialised (the scorer memoises). The rare-fit term
    of Ours is on, its cut-off learned online from the pods seen like the target; the pods the
    extender sees ask for whole GPUs (``pod_shape``), so the cut-off stays 0 and the term adds
    nothing until shared-GPU requests are modelled."""

    def __init__(self, budget_seconds: float, on_fallback: Callable[[], None] = lambda: None,
                 config: OursConfig | None = None) -> None:
        self.budget_seconds = budget_seconds
        self.on_fallback = on_fallback
        self.ours = Ours((), config or OursConfig(target="online"))
        self.cheap = BestFit()
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        # our key per (pod shape, node state): nodes in one state score alike, and a large
        # cluster has many nodes in few states (empty, full, one common pod shape); kept while
        # the target workload stays the same, at most SCORE_MEMO_ENTRIES entries
        self._memo: dict[PodShape, dict[tuple, tuple | None]] = {}
        self._memo_version = self.ours.version

    def learn(self, view: ClusterView) -> None:
        """Observe each pod once; forget the uids of pods that are gone (bounded memory)."""
        with self._lock:
            for uid, p in view.pods.items():
                if uid not in self._seen:
                    self._seen.add(uid)
                    self.ours.observe(pod_shape(p.requests))
            self._seen.intersection_update(view.pods.keys())

    def score(self, view: ClusterView, pod: PendingPod, names: list[str]) -> list[dict]:
        deadline = time.perf_counter() + self.budget_seconds
        with self._lock:
            if pod.info.uid not in self._seen:
                self._seen.add(pod.info.uid)
                self.ours.observe(pod.shape)
            size = sum(map(len, self._memo.values()))
            if self.ours.version != self._memo_version or size > SCORE_MEMO_ENTRIES:
                self._memo = {}
                self._memo_version = self.ours.version
            try:
                keys = _keys(view, names, self._ours_keys(pod.shape, deadline))
            except _OverBudget:  # what was scored so far stays memoised for the next request
                self.on_fallback()
                keys = _keys(view, names, _key_of(self.cheap.evaluate, pod.shape))
        return to_extender_scores(keys)

    def _ours_keys(self, shape: PodShape, deadline: float) -> Callable[[GpuNode], tuple | None]:
        """Our key for ``shape`` on a node, memoised by the node's state. Only scoring a state
        not memoised counts against the budget (a lookup costs less than BestFit would): past
        ``deadline`` it raises ``_OverBudget``, checked at the first miss and every
        ``BUDGET_CHECK_EVERY`` after it."""
        memo = self._memo.setdefault(shape, {})
        fresh = _key_of(self.ours.evaluate, shape)
        misses = 0

        def key(node: GpuNode) -> tuple | None:
            nonlocal misses
            state = (node.model, node.cpu_free, node.memory_free, node.gpu_free)
            if state in memo:
                return memo[state]
            misses += 1
            if misses % BUDGET_CHECK_EVERY == 1 and time.perf_counter() > deadline:
                raise _OverBudget
            got = memo[state] = fresh(node)
            return got
        return key


class _OverBudget(Exception):
    """Scoring a request's nodes with our scorer ran past its time budget."""


def _key_of(evaluate, shape: PodShape) -> Callable[[GpuNode], tuple | None]:
    """A node's key for ``shape`` by ``evaluate`` (None: the pod does not fit)."""
    def key(node: GpuNode) -> tuple | None:
        if not fits(node, shape):
            return None
        got, _ = evaluate(node, shape)
        return got if isinstance(got, tuple) else (got,)
    return key


def _keys(view, names, key_of) -> dict[str, tuple | None]:
    keys: dict[str, tuple | None] = {}
    for name in names:
        nv = view.nodes.get(name)
        keys[name] = None if nv is None else key_of(nv.gpu)
    return keys


def to_extender_scores(keys: Mapping[str, tuple | None]) -> list[dict]:
    """Map scorer keys (higher is better, compared as tuples) to kube-scheduler's extender
    range: the best nodes get MAX_EXTENDER_PRIORITY, the others spread linearly over what is
    left by their first component, so the best node always stands out by at least one point
    (kube-scheduler multiplies it by the weight and by 10, schedule_one.go prioritizeNodes).
    Nodes where the pod does not fit (or unknown ones) get MIN_EXTENDER_PRIORITY."""
    scored = [k for k in keys.values() if k is not None]
    if not scored:
        return [{"Host": n, "Score": MIN_EXTENDER_PRIORITY} for n in keys]
    best = max(scored)
    lo, top = min(k[0] for k in scored), best[0]
    span = MAX_EXTENDER_PRIORITY - 1 - MIN_EXTENDER_PRIORITY
    out = []
    for name, k in keys.items():
        if k is None:
            s = MIN_EXTENDER_PRIORITY
        elif k == best:
            s = MAX_EXTENDER_PRIORITY
        elif top == lo:
            s = MAX_EXTENDER_PRIORITY - 1
        else:
            s = MIN_EXTENDER_PRIORITY + int(span * (k[0] - lo) / (top - lo))
        out.append({"Host": name, "Score": s})
    return out


def prioritize(view: ClusterView, args: Mapping, scorer: Scorer) -> list[dict]:
    pod = pending_pod(args)
    names, _ = node_names(args)
    return scorer.score(view, pod, names)


# --------------------------------------------------------------------------------------- preempt


@dataclass(frozen=True, kw_only=True)
class PreemptSettings:
    """What the planner's cost needs from the controller's config (``controller.kube.convert``).
    No drain happens on this path (kube-scheduler deletes the victims itself), so lost work is
    always the work since the last checkpoint."""

    limits: ann.Limits = ann.Limits()
    restart_seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class NodeChoice:
    node: str
    victims: tuple[str, ...]  # uids
    lost_gpu_seconds: float
    pdb_violations: int


def offered_victims(args: Mapping) -> dict[str, tuple[str, ...]]:
    """Per candidate node, the uids of the victims kube-scheduler offered."""
    meta = field(args, "NodeNameToMetaVictims")
    full = field(args, "NodeNameToVictims")
    src, key = (meta, "UID") if meta is not None else (full, None)
    if not isinstance(src, Mapping):
        raise BadRequest("request has neither NodeNameToMetaVictims nor NodeNameToVictims")
    out = {}
    try:
        for node, victims in src.items():
            pods = field(victims or {}, "Pods") or []
            out[node] = tuple(str(field(p, key) if key else p["metadata"]["uid"]) for p in pods)
    except (KeyError, TypeError, AttributeError) as e:
        raise BadRequest(f"a victim has no UID ({type(e).__name__} {e})") from None
    return out


def _unknown_age(view: ClusterView, now: float, limits: ann.Limits) -> float | None:
    policy = limits.unknown_checkpoint
    if policy.kind != "cluster-median":
        return policy.seconds
    from ckpt_preempt.policies.model.snapshot import Snapshot

    pods = tuple(convert.to_pod(p, now, limits, True)[0] for p in view.pods.values() if p.node)
    return Snapshot(now=now, nodes=(), pods=pods, unknown_checkpoint=policy).unknown_checkpoint_age


def choose_on_node(view: ClusterView, pod: Pod, node: str, offered: tuple[str, ...], now: float,
                   settings: PreemptSettings, unknown_age: float | None,
                   ) -> tuple[NodeChoice | None, str]:
    """The offered victims' subset that frees enough for ``pod`` (NVLink included), splits no
    gang, evicts nobody the planner may not evict, and loses the fewest GPU-seconds; or None
    and why the node is dropped."""
    nv = view.nodes.get(node)
    if nv is None:
        return None, "node not in the extender's cache"
    if not offered:
        return None, "no victims offered"
    infos = []
    for uid in offered:
        info = view.pods.get(uid)
        if info is None or info.node != node:
            return None, f"victim {uid} not on this node in the extender's cache"
        infos.append(info)
    need_gpus, why = search.nvlink_gpus(pod, nv.node, nv.node.allocatable.gpus)
    if why is not None:
        return None, why.value
    need = replace(pod.requests, gpus=need_gpus)  # MIG slices (gpu_milli) kept
    models = [convert.to_pod(i, now, settings.limits, True)[0] for i in infos]
    lost = [cost.lost_gpu_seconds(m, now, drain=False, max_checkpoint_seconds=0.0,
                                  unknown_age=unknown_age,
                                  restart_seconds=settings.restart_seconds)[0] for m in models]
    allowed = [cost.ineligibility(m, pod.priority, now) is None for m in models]
    sizes = range(1, len(models) + 1) if len(models) <= MAX_VICTIMS_SEARCHED else [len(models)]
    best: tuple | None = None
    reason = "the offered victims do not free enough"
    for k in sizes:
        for idx in itertools.combinations(range(len(models)), k):
            freed = sum((models[i].requests for i in idx), Resources())
            if not need.fits_in(nv.free + freed):
                continue
            if not all(allowed[i] for i in idx):
                reason = "enough is freed only by evicting a pod the planner may not evict"
                continue
            uids = {models[i].uid for i in idx}
            if any(not view.gang_members.get(view.gang_of.get(u, ""), frozenset()) <= uids
                   for u in uids if u in view.gang_of):
                reason = "its victims would split a gang across nodes"
                continue
            key = (sum(lost[i] for i in idx), k, idx)
            if best is None or key < best:
                best = key
    if best is None:
        return None, reason
    chosen = [models[i] for i in best[2]]
    violations = sum(breaks_budget(chosen, view.pdbs))
    return NodeChoice(node=node, victims=tuple(m.uid for m in chosen),
                      lost_gpu_seconds=best[0], pdb_violations=violations), ""


def preempt(view: ClusterView, args: Mapping, settings: PreemptSettings,
            ) -> tuple[dict, dict[str, str]]:
    """Keep only the candidate nodes whose best victim set loses the least work (ties: all of
    them, for kube-scheduler's own SelectCandidate to pick among), with those victims. Returns
    the ExtenderPreemptionResult and, per dropped node, why.

    A node the clique rule rules out (``extender_cliques``) is dropped: kube-scheduler offers
    nodes that failed its own filters (no GPUs free), which the filter verb never saw."""
    pending = pending_pod(args)
    offered = offered_victims(args)
    now = time.time()
    age = _unknown_age(view, now, settings.limits)
    rule = clique_rule(view, pending)
    choices, dropped = [], {}
    for node, uids in offered.items():
        nv = view.nodes.get(node)
        why = None if rule is None or nv is None else rule.problem(nv.node.clique)
        if why is not None:
            dropped[node] = why
            continue
        choice, why = choose_on_node(view, pending.model, node, uids, now, settings, age)
        if choice is None:
            dropped[node] = why
        else:
            choices.append(choice)
    least = min((c.lost_gpu_seconds for c in choices), default=0.0)
    kept = {}
    for c in choices:
        if c.lost_gpu_seconds <= least + 1e-6:
            kept[c.node] = {"Pods": [{"UID": u} for u in c.victims],
                            "NumPDBViolations": c.pdb_violations}
        else:
            dropped[c.node] = (f"loses {c.lost_gpu_seconds:.0f} GPU-seconds, "
                               f"another node {least:.0f}")
    return {"NodeNameToMetaVictims": kept}, dropped
