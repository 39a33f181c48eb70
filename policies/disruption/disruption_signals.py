"""Early warning: which pods to ask to checkpoint when their node shows a disruption signal.
Pure: no I/O, no clock (``now`` is passed in), no randomness.

A node that is cordoned, or carries a taint that evictions follow (Karpenter's disruption,
cluster-autoscaler's scale-down, a spot or maintenance termination notice), will soon have its
pods evicted by someone else. ``step`` answers, for one pass, which checkpointing pods on such
nodes get the ``ckpt-preempt.io/drain`` request now, before the first Eviction arrives; the
controller (``controller/planning/disruption.py``) writes them. Nothing here evicts or moves
anything.

The signals are configuration (``earlyWarningSignals``); ``DEFAULT_SIGNALS`` are, each from the
code that writes it:

- ``node.kubernetes.io/unschedulable:NoSchedule``: a cordon (``kubectl cordon``/``drain``); the
  node lifecycle controller taints a node whose ``spec.unschedulable`` is true with it, and a node
  with ``spec.unschedulable`` counts as carrying it (it shows before the taint does).
- ``karpenter.sh/disrupted:NoSchedule``: Karpenter's disruption and termination controllers,
  kubernetes-sigs/karpenter@09ae891010dcbbe5e6def9b1439fd7681d057aea pkg/apis/v1/taints.go
  (``DisruptedNoScheduleTaint``).
- ``ToBeDeletedByClusterAutoscaler:NoSchedule``: cluster-autoscaler's scale-down,
  kubernetes/autoscaler@0af55ac5aff4ee6935ceefd6d84b4a23f3c0fa90
  cluster-autoscaler/utils/taints/taints.go (``ToBeDeletedTaint``, ``MarkToBeDeleted``). Its
  soft ``DeletionCandidateOfClusterAutoscaler:PreferNoSchedule`` only marks a candidate, and is
  left out.
- ``cloud.google.com/impending-node-termination`` (any effect): GKE's node termination taint
  (spot/preemptible notice; named in the same autoscaler file as
  ``gkeNodeTerminationHandlerTaint``, and the ``--taint`` example of
  GoogleCloudPlatform/k8s-node-termination-handler, ``...::NoSchedule``).
- ``aws-node-termination-handler/spot-itn``, ``.../scheduled-maintenance`` and
  ``.../asg-lifecycle-termination``, all NoSchedule: the AWS node termination handler with
  ``TAINT_NODE``, aws/aws-node-termination-handler@027252891ed6b24c357e9254c629f84cb836a180
  pkg/node/node.go (``SpotInterruptionTaint``, ``ScheduledMaintenanceTaint``,
  ``ASGLifecycleTerminationTaint``). Its ``rebalance-recommendation`` taint is only advice to
  move, and is left out by default.

Rules (hypothesis properties in tests/policies/test_disruption_signals.py):

- **Rounds, rate-limited per node.** A node that shows a signal gets a round: an id
  ``disruption/<hash>`` unique to that node and round, and its eligible pods are asked under it.
  A new round starts at most once per ``window_seconds`` per node: a node whose signal flaps
  (taint off and on) is not asked again within the window. While a round lasts (the node keeps
  showing a signal), a pod not asked yet (a write that raced, a pod seen late) is asked in a
  later pass; one that carries the round's request is never asked twice.
- **Never over a standing request.** A pod whose drain request of any origin (a plan, the
  eviction gate, health, an earlier round) is not acknowledged is not asked: its request stands
  and its deadline comes once. A pod that acknowledged a disruption request less than
  ``window_seconds`` ago is not asked again either (a restarted or new leader has no memory of
  its rounds). A malformed drain annotation counts as none: bad input never makes a pod immune.
- **Only who may be asked.** The pod checkpoints on request, is bound to the node, is not
  finished or terminating, is not an excluded namespace's or priority class's, and is no
  running plan's victim (the plan asks it itself). The deadline is the pod's
  ``checkpoint-seconds`` capped by the admin's ``max_checkpoint_seconds``; no time, no request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from ckpt_preempt.policies.lifecycle.plan_record import (
    DISRUPTION_ID_HEX,
    DISRUPTION_PREFIX,
    DrainRequest,
    acked,
    standing_request,
)
from ckpt_preempt.policies.model.annotations import ANY

CORDON_TAINT = "node.kubernetes.io/unschedulable"  # what a cordon's spec.unschedulable becomes
DEFAULT_SIGNALS = (
    f"{CORDON_TAINT}:NoSchedule",
    "karpenter.sh/disrupted:NoSchedule",
    "ToBeDeletedByClusterAutoscaler:NoSchedule",
    "cloud.google.com/impending-node-termination",
    "aws-node-termination-handler/spot-itn:NoSchedule",
    "aws-node-termination-handler/scheduled-maintenance:NoSchedule",
    "aws-node-termination-handler/asg-lifecycle-termination:NoSchedule",
)
# At most one round per node this often. An assumption, not measured: long enough that a taint
# a retrying tool removes and adds again asks nobody twice, short enough that a node disrupted
# again later the same hour warns again.
WINDOW_SECONDS = 600.0
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_TAINT_KEY = 316  # a qualified name: 253-character prefix, "/", 63-character name


@dataclass(frozen=True, kw_only=True)
class Signal:
    """A taint that precedes evictions: ``key``, and ``effect`` ("" = any effect)."""

    key: str
    effect: str = ""

    def __str__(self) -> str:
        return f"{self.key}:{self.effect}" if self.effect else self.key


def parse_signal(text: str) -> Signal:
    """``key`` or ``key:Effect``; ValueError says what is wrong."""
    key, sep, effect = text.partition(":")
    if not key or len(key) > MAX_TAINT_KEY or key != key.strip() or " " in key:
        raise ValueError(f"{text!r}: expected a taint key, optionally with :Effect")
    if sep and effect not in EFFECTS:
        raise ValueError(f"{text!r}: effect must be one of {', '.join(EFFECTS)}")
    return Signal(key=key, effect=effect)


class NodeLike(Protocol):
    """What is read of a node (the controller's watch-cache record has these fields)."""

    name: str
    unschedulable: bool
    taints: tuple[Mapping, ...]


@dataclass(frozen=True, kw_only=True)
class NodeView:
    name: str
    unschedulable: bool
    taints: tuple[Mapping, ...]  # as the API server has them: key, value, effect


def signals_on(node: NodeLike, signals: Iterable[Signal]) -> tuple[str, ...]:
    """The configured signals this node shows, by name, sorted."""
    return _showing(node, _by_key(signals))


def _by_key(signals: Iterable[Signal]) -> Mapping[str, tuple[Signal, ...]]:
    by_key: dict[str, tuple[Signal, ...]] = {}
    for s in signals:
        by_key[s.key] = (*by_key.get(s.key, ()), s)
    return by_key


def _showing(node: NodeLike, by_key: Mapping[str, tuple[Signal, ...]]) -> tuple[str, ...]:
    """One look per taint, so a pass over every node of a large cluster stays cheap."""
    if not node.taints and not node.unschedulable:
        return ()
    found = set()
    if node.unschedulable:
        found.update(str(s) for s in by_key.get(CORDON_TAINT, ())
                     if s.effect in ("", "NoSchedule"))
    for t in node.taints:
        if not isinstance(t, dict):  # raw JSON; anything else is no taint
            continue
        for s in by_key.get(t.get("key"), ()):
            if not s.effect or t.get("effect") == s.effect:
                found.add(str(s))
    return tuple(sorted(found)) if found else ()


@dataclass(frozen=True, kw_only=True)
class PodView:
    uid: str
    namespace: str
    name: str
    node: str | None
    priority_class: str
    annotations: Mapping[str, str]
    checkpoints: bool  # checkpoints on request (the admin's limits applied)
    checkpoint_seconds: float | None
    finished: bool = False  # terminating, Succeeded or Failed
    held: bool = False  # a running plan's victim

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, kw_only=True)
class Limits:
    max_checkpoint_seconds: float
    window_seconds: float = WINDOW_SECONDS
    excluded_namespaces: frozenset[str] = frozenset()
    excluded_priority_classes: frozenset[str] = frozenset()

    def excludes(self, p: PodView) -> bool:
        return bool({ANY, p.namespace} & self.excluded_namespaces
                    or (p.priority_class
                        and {ANY, p.priority_class} & self.excluded_priority_classes))


@dataclass(frozen=True, kw_only=True)
class Round:
    id: str
    node: str
    started: float
    signals: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Memory:
    """What a controller remembers between passes: each node's latest round, and the nodes
    whose current showing of a signal that round belongs to."""

    rounds: Mapping[str, Round] = field(default_factory=dict)
    current: frozenset[str] = frozenset()


@dataclass(frozen=True, kw_only=True)
class Ask:
    pod: PodView
    node: str
    round: Round
    request: DrainRequest


@dataclass(frozen=True, kw_only=True)
class Outcome:
    memory: Memory
    asks: tuple[Ask, ...]
    started: tuple[Round, ...]  # rounds that began in this pass
    suppressed: tuple[str, ...]  # nodes showing a signal within the window of their last round


def round_id(node: str, started: float) -> str:
    digest = hashlib.sha256(f"{node}\n{started!r}".encode()).hexdigest()[:DISRUPTION_ID_HEX]
    return f"{DISRUPTION_PREFIX}{digest}"


def why_not(p: PodView, rnd: Round, now: float, limits: Limits) -> str | None:
    """Why pod ``p`` on a node in round ``rnd`` is not asked now, or None: ask it."""
    if p.finished:
        return "finished or terminating"
    if not p.checkpoints:
        return "does not checkpoint on request"
    if limits.excludes(p):
        return "excluded namespace or priority class"
    if p.held:
        return "a running plan's victim"
    standing = standing_request(p.annotations)
    if standing is not None:
        if standing.plan == rnd.id:
            return "already asked in this round"
        if not acked(p.annotations, standing.plan):
            return f"a request stands ({standing.plan})"
        if standing.plan.startswith(DISRUPTION_PREFIX) and \
                now - standing.requested < limits.window_seconds:
            return "checkpointed for a disruption within the window"
    if _seconds(p, limits) <= 0:
        return "no time to checkpoint within the maximum"
    return None


def _seconds(p: PodView, limits: Limits) -> float:
    cap = max(0.0, limits.max_checkpoint_seconds)
    s = p.checkpoint_seconds
    if s is None or s != s or s < 0:  # none declared (or nonsense): the cap
        return cap
    return min(s, cap)


def rounds(memory: Memory, nodes: Iterable[NodeLike], now: float, signals: Iterable[Signal],
           limits: Limits) -> Outcome:
    """The nodes' part of a pass: which rounds start, go on, or are held back by the window.
    Its ``asks`` are empty; ``ask`` fills them for the pods of ``current_rounds``."""
    by_key = _by_key(signals)
    known = dict(memory.rounds)
    current, started, suppressed = set(), [], []
    for node in nodes:
        shown = _showing(node, by_key)
        if not shown:
            continue
        last = known.get(node.name)
        if node.name in memory.current and last is not None:
            current.add(node.name)  # the same showing: its round goes on
        elif last is None or now - last.started >= limits.window_seconds:
            rnd = Round(id=round_id(node.name, now), node=node.name, started=now, signals=shown)
            known[node.name] = rnd
            current.add(node.name)
            started.append(rnd)
        else:
            suppressed.append(node.name)
    return Outcome(memory=replace(memory, rounds=known, current=frozenset(current)), asks=(),
                   started=tuple(started), suppressed=tuple(sorted(suppressed)))


def current_rounds(memory: Memory) -> Mapping[str, Round]:
    """Node -> its round, for the nodes that show a signal now (after ``rounds``)."""
    return {n: memory.rounds[n] for n in memory.current}


def ask(outcome: Outcome, pods: Iterable[PodView], now: float, limits: Limits) -> Outcome:
    """The pods' part of a pass: who on a node with a current round is asked, and with what."""
    live = current_rounds(outcome.memory)
    asks = []
    for p in pods:
        rnd = live.get(p.node) if p.node is not None else None
        if rnd is not None and why_not(p, rnd, now, limits) is None:
            request = DrainRequest(plan=rnd.id, requested=now, deadline=now + _seconds(p, limits))
            asks.append(Ask(pod=p, node=rnd.node, round=rnd, request=request))
    asks.sort(key=lambda a: (a.node, a.pod.namespace, a.pod.name))
    return replace(outcome, asks=tuple(asks))


def step(memory: Memory, nodes: Iterable[NodeLike], pods: Iterable[PodView], now: float,
         signals: Iterable[Signal], limits: Limits) -> Outcome:
    """One pass: the rounds that start or go on, and the pods asked in them."""
    return ask(rounds(memory, nodes, now, signals, limits), pods, now, limits)


def forget(memory: Memory, now: float, window_seconds: float,
           nodes: Iterable[str]) -> Memory:
    """Drop rounds that no longer limit anything: older than the window and not current, or of
    nodes that are gone."""
    alive = set(nodes)
    keep = {n: r for n, r in memory.rounds.items()
            if n in alive and (n in memory.current or now - r.started < window_seconds)}
    return replace(memory, rounds=keep, current=memory.current & alive)
