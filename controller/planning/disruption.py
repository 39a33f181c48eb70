"""Early warning in the reconcile pass: ask checkpointing pods of a node that shows a disruption
signal to checkpoint at once (``policies.disruption.disruption_signals`` decides; this writes).

``EarlyWarning.step`` runs once per pass of the leader (``controller/planning/reconcile.py``), on
the pass's view of the watch cache: nodes (their taints and ``spec.unschedulable``) and pods. Each
pod the pure step names gets the ``ckpt-preempt.io/drain`` request whose plan is the round's
disruption id, through ``Actions.request_checkpoint`` (the one write path: dry-run, leadership
and the audit log; ``only_if_unchanged``, so a request built from a stale view never replaces
a request written meanwhile), and a ``DisruptionCheckpointRequested`` Event. Nothing here
evicts, and no plan is touched: the eviction comes from whoever tainted the node, and the
eviction gate (branch of issue 23, ``policies/disruption/eviction_gate.py``) holds it until the pod
acks this request or its deadline passes. A dry run emits the Event with "(dry run)" and writes
nothing else. A follower never runs a pass, and ``Actions`` refuses its writes anyway.

The memory of rounds (``disruption_signals.Memory``) lives in this process: a new leader
starts without it, and relies on the pods' own annotations (a standing request, or a
disruption ack within the window) not to ask twice.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.records import NodeInfo, PodInfo
from ckpt_preempt.controller.writes.actions import Actions
from ckpt_preempt.policies.disruption import disruption_signals as ds
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.model.times import rfc3339

log = logging.getLogger("ckpt_preempt.disruption")


class EarlyWarning:
    def __init__(self, actions: Actions, cfg: Config, scope: convert.Scope,
                 limits: ann.Limits) -> None:
        self.actions, self.cfg, self.scope, self.pod_limits = actions, cfg, scope, limits
        self.signals = tuple(ds.parse_signal(s) for s in cfg.early_warning_signals)
        self.limits = ds.Limits(
            max_checkpoint_seconds=cfg.max_checkpoint_seconds,
            window_seconds=cfg.early_warning_window_seconds,
            excluded_namespaces=frozenset(cfg.early_warning_excluded_namespaces),
            excluded_priority_classes=frozenset(cfg.early_warning_excluded_priority_classes))
        self.memory = ds.Memory()

    def step(self, nodes: Iterable[NodeInfo], pods: Iterable[PodInfo], now: float,
             held: Collection[str] = ()) -> list[str]:
        """Send this pass's requests; returns the keys of the pods asked."""
        if not self.cfg.early_warning:
            return []
        nodes = list(nodes)
        out = ds.rounds(self.memory, nodes, now, self.signals, self.limits)
        live = ds.current_rounds(out.memory)
        # convert only the pods of nodes with a round that do not carry its request yet
        by_uid = {p.uid: p for p in pods if p.node in live and self.scope.covers(p)
                  and not plan_record.drain_requested(p.annotations, live[p.node].id)
                  } if live else {}
        out = ds.ask(out, [self._view(p, now, held) for p in by_uid.values()], now,
                     self.limits)
        self.memory = ds.forget(out.memory, now, self.limits.window_seconds,
                                (n.name for n in nodes))
        for rnd in out.started:
            log.info("disruption signal: asking checkpointing pods to checkpoint",
                     extra={"node": rnd.node, "plan": rnd.id, "signals": list(rnd.signals)})
        asked = []
        for a in out.asks:
            if self.cfg.dry_run and a.round not in out.started:
                continue  # nothing was written: one "(dry run)" Event per round is enough
            if self._ask(by_uid[a.pod.uid], a):
                asked.append(a.pod.key)
        return asked

    def _view(self, p: PodInfo, now: float, held: Collection[str]) -> ds.PodView:
        pod, _ = convert.to_pod(p, now, self.pod_limits, True)
        return ds.PodView(
            uid=p.uid, namespace=p.namespace, name=p.name, node=p.node,
            priority_class=p.priority_class, annotations=p.annotations,
            checkpoints=pod.checkpoint is CheckpointMode.ON_REQUEST,
            checkpoint_seconds=pod.checkpoint_seconds,
            finished=p.deleting or p.done, held=p.uid in held)

    def _ask(self, p: PodInfo, a: ds.Ask) -> bool:
        message = (f"node {a.node} shows {', '.join(a.round.signals)}: evictions may follow; "
                   f"asked to checkpoint by {rfc3339(a.request.deadline)} (request "
                   f"{a.round.id}; ckpt-preempt evicts nothing for it)")
        if self.cfg.dry_run:
            self.actions.emit(p, Reason.DISRUPTION_CHECKPOINT_REQUESTED, "(dry run) " + message)
            return False
        if not self.actions.request_checkpoint(p, a.request, only_if_unchanged=True):
            return False  # changed since read, or terminating: the next pass decides again
        self.actions.emit(p, Reason.DISRUPTION_CHECKPOINT_REQUESTED, message)
        log.info("disruption checkpoint requested", extra={"pod": p.key, "node": a.node,
                                                           "plan": a.round.id})
        return True
