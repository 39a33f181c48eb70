"""The reconcile pass: carry every stored plan one step further, then plan for new preemptors.

One ``tick()`` reads the watch cache through ``controller.kube.cluster_model`` (never the API
server, except inside ``Actions``), so a pass costs what changed since the last one, and a restarted
controller rebuilds everything from the stored plans:

1. **Stored plans** (ConfigMaps in the controller's own namespace, see
``controller.planning.plans``).
   Every plan not yet Done or Aborted is re-validated against live state and advanced one step
   (``controller.planning.advance``). Finished plans lift their reservations, clean up after aborts
   and are deleted after ``planHistorySeconds``. In dry-run, stored plans are only reported.
2. **New preemptors**, in queue order (priority, then gang size, then age, then uid):
   (a) pods ``PodScheduled=False/Unschedulable`` with ``preemptionPolicy: Never``;
   (b) gangs whose members carry the ``ckpt-preempt.io/admission`` gate, once every member of
   the declared gang-total exists (and at least a Volcano or coscheduling PodGroup's
   minMember, ``controller.kube.group_crds``); the queue and each plan's record are built by
   ``controller.planning.preemptors``. The restriction step (``plans.restriction``) closes nodes
   and victims that running plans hold; a preemptor whose aborted plan still has terminating
   victims waits for them to go.

3. **GPU health** (``controller.health.health``, when ``prometheusUrl`` is set): the latest cached
   report gives every node's state to the planner (failing nodes are closed) and asks
   checkpointing pods on nodes that turned degraded or failing to checkpoint, without eviction.
4. **Early warning** (``controller.planning.disruption``): checkpointing pods of nodes that show a
   disruption signal (a cordon, an autoscaler's or a termination handler's taint) are asked to
   checkpoint before anyone evicts them; nothing is evicted for it.

Anything unexpected in one plan or one preemptor is logged, counted and skipped: the loop never
dies of bad input, and evicts only victims of a stored plan that passes ``lifecycle.check``.

Planning is sequential (each plan closes its nodes and victims to the next); the writes are not:
each plan's sequence of writes (store it, then advance it) is one task of a
``controller.writes.write_lanes.Lanes`` batch, up to ``writeConcurrency`` at once, and so is each
stored plan's step and each reservation lifted. Tasks that touch a common pod, node or plan run in
the order they were submitted; a ``NotLeader`` in any task ends the pass.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.controller.core.metrics import Metrics
from ckpt_preempt.controller.health.health import ProactiveCheckpoint, PrometheusHealth, states
from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.cluster_model import ClusterModel, View
from ckpt_preempt.controller.kube.records import ADMISSION_GATE, PodInfo
from ckpt_preempt.controller.kube.watch import ClusterCache
from ckpt_preempt.controller.planning.advance import Memory, NewPlan, PlanStepper, World
from ckpt_preempt.controller.planning.disruption import EarlyWarning
from ckpt_preempt.controller.planning.disruption_api import EvictionRequestApi
from ckpt_preempt.controller.planning.plans import (
    PlanBook,
    Stored,
    history,
    restriction,
    waiting_for_victims,
)
from ckpt_preempt.controller.planning.preemptors import (
    Candidate,
    candidates,
    plan_record,
    queued_gpus,
)
from ckpt_preempt.controller.writes.actions import Actions, Conflict, NotLeader, WriteFailed
from ckpt_preempt.controller.writes.write_lanes import Lanes, plan_objects
from ckpt_preempt.policies.baselines import kube_default
from ckpt_preempt.policies.lifecycle.plan_record import PLAN_ANNOTATION, Mode, PlanRecord, State
from ckpt_preempt.policies.model.annotations import RESERVED_TAINT
from ckpt_preempt.policies.model.health import Health
from ckpt_preempt.policies.planner import bound, preemption
from ckpt_preempt.policies.planner.plan_cache import PlanCache

log = logging.getLogger("ckpt_preempt.reconcile")
RESERVATION_GRACE_SECONDS = 60.0  # after bindBy, a reservation is lifted whatever happened
UNKNOWN_RESERVATION_SECONDS = 15.0  # a taint whose plan is nowhere is lifted after this
PRUNE_SECONDS = 60.0  # how often the process forgets gone pods and plans
# with no preemptor due, the planner's caches are filled ahead this often, this many nodes a time
# (about 20 ms at 12,500 nodes / 100k pods: bench/plan_latency.py --warm)
WARM_EVERY_SECONDS = 1.0
WARM_NODES_PER_PASS = 500


@contextlib.contextmanager
def cycle_objects_frozen() -> Iterator[None]:
    """Keep the cyclic GC off everything alive now (the cycle's snapshot and the watch cache)
    while the queue is planned, and give it back afterwards.

    A full (generation-2) collection walks every live object; with a 40k-pod snapshot that is
    tens of milliseconds landing inside whichever plan happens to trigger it (the p99 of
    bench/plan_latency.py). Nothing is leaked: refcounting still frees frozen objects, and
    ``gc.unfreeze`` hands them back to the oldest generation.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class Reconciler:
    def __init__(self, cache: ClusterCache, actions: Actions, cfg: Config, metrics: Metrics,
                 *, clock: Callable[[], float] = time.time,
                 health: PrometheusHealth | None = None) -> None:
        self.cache, self.actions, self.cfg, self.metrics = cache, actions, cfg, metrics
        self.health = health
        self.clock = clock
        self.mem = Memory()
        self.book = PlanBook()
        self._pruned = 0.0
        self._unknown_reservations: dict[str, float] = {}  # plan id -> first seen without plan
        self._pool: ThreadPoolExecutor | None = None  # the write lanes' threads (_lanes)
        self.scope = convert.scope(cfg)
        self.limits = convert.limits(cfg)
        # the cluster as the planner sees it, kept up to date from the cache's changes
        self.model = ClusterModel(pods=cache.pods, nodes=cache.nodes, pdbs=cache.pdbs,
                                  podgroups=cache.podgroups, scope=self.scope,
                                  limits=self.limits)
        self.stepper = PlanStepper(actions, cfg, metrics, self.book, self.mem, self.limits,
                                   self.scope, self._note_once)
        self.proactive = ProactiveCheckpoint(actions, cfg, self.scope, self.limits, metrics)
        self.early_warning = EarlyWarning(actions, cfg, self.scope, self.limits)
        self.eviction_requests = EvictionRequestApi(actions, cfg)
        self.plan_cache: PlanCache | None = None  # the last cycle's, carried into the next
        self._warmed_at = float("-inf")

    # ----------------------------------------------------------------------------- one pass
    def tick(self) -> None:
        now = self.clock()
        view = self.model.sync(now)
        world = World(by_uid=view.by_uid, nodes=view.nodes, pdbs=view.pdbs, now=now,
                      podgroups=view.podgroups)
        stored, unreadable = self.book.load(self.cache.plans.items())
        for name, why in unreadable:
            self._log_once(("unreadable-plan", name, why), "stored plan %s is unreadable and "
                           "never acted on: %s", name, why)
        for p in view.plan_annotated:
            if self.scope.covers(p):
                self._warn_once(p, Reason.INVALID_ANNOTATION,
                                f"{PLAN_ANNOTATION} on a pod is ignored: plans are "
                                "kept only in the controller's namespace")
        active = [s for s in stored if not s.record.state.terminal]
        self.metrics.active_plans.set(len(active))
        with self._lanes() as lanes:  # every task below is done when it closes
            self._release_reservations(stored, world, lanes)
            if self.cfg.dry_run:
                for s in active:
                    self._note_once_plan(s.record, world, "(dry run) stored plan "
                                         f"{s.record.id} is {s.record.state}; not advanced")
            else:
                for s in stored:
                    if s.record.state is State.DONE:
                        continue  # nothing is left to do for it (stepper.tidy)
                    lanes.submit(plan_objects(s.record), self._run_guarded, s.record.id,
                                 self._step_stored, s, world)
        stored = self.book.with_own_writes(stored)  # with this pass's writes
        report = self.health.report() if self.health is not None else None
        held = {v.uid for s in stored if not s.record.state.terminal for v in s.record.victims}
        if report is not None:
            self._run_guarded("health checkpoints", self.proactive.step, report,
                              view.by_uid.values(), now, held)
        self._run_guarded("early warning", self.early_warning.step, view.nodes.values(),
                          view.by_uid.values(), now, held)
        self._run_guarded("eviction requests", self.eviction_requests.report_once)
        self._plan_new(view, world, [s.record for s in stored], now, states(report))
        if now - self._pruned > PRUNE_SECONDS:
            self._prune(world.by_uid, stored, now)

    def _lanes(self) -> Lanes:
        width = self.cfg.write_concurrency
        if self._pool is None and width > 1:
            self._pool = Lanes.pool(width)  # its threads, kept for every pass
        return Lanes(width, on_error=self.metrics.loop_errors.inc, pool=self._pool)

    def _step_stored(self, s: Stored, world: World) -> None:
        if s.record.state.terminal:
            self.stepper.tidy(s.record, world)
            return
        self.stepper.advance(s.record, s.rv, world)

    def _run_guarded(self, what: str, fn: Callable[..., None], *args) -> None:
        try:
            fn(*args)
        except NotLeader:
            raise
        except Conflict as e:
            log.info("%s: %s; will re-read", what, e)
        except WriteFailed as e:  # refused, timed out, unreachable: decided again next pass
            log.warning("%s: %s", what, e)
        except Exception:
            log.exception("%s: step failed", what)
            self.metrics.loop_errors.inc()

    def _prune(self, by_uid: Mapping[str, PodInfo], stored: list[Stored], now: float) -> None:
        """Forget pods and plans that are gone, and delete finished plans past their history
        window, so a long-running controller and its namespace stay small."""
        m = self.mem
        live_plans = {s.record.id for s in stored if not s.record.state.terminal}
        m.next_try = {u: t for u, t in m.next_try.items() if u in by_uid}
        m.blocked = {u: t for u, t in m.blocked.items() if u in by_uid and t > now}
        m.emitted = {k for k in m.emitted if k[0] in by_uid or k[0] in live_plans}
        for name in ("requested", "evicted", "steered", "acked", "reserved"):
            setattr(m, name, {k for k in getattr(m, name) if k[0] in live_plans})
        m.gang_waiting = {k: t for k, t in m.gang_waiting.items() if now - t < 86400}
        self._pruned = now
        self._unknown_reservations = {k: t for k, t in self._unknown_reservations.items()
                                      if now - t < 3600}
        for s in stored:
            if s.record.state.terminal and now - s.record.created > self.cfg.plan_history_seconds:
                self._run_guarded(s.record.id, self.actions.delete_plan, s.record.id, s.rv)
                self.book.forget(s.record.id)

    def _release_reservations(self, stored: list[Stored], world: World, lanes: Lanes) -> None:
        """Lift a reservation taint once its plan is over (Done, Aborted, or past its bind
        deadline plus a grace period), or when no stored plan has its id."""
        records = {s.record.id: s.record for s in stored}
        now = world.now
        for node in world.nodes.values():
            for t in node.taints:
                if t.get("key") != RESERVED_TAINT:
                    continue
                plan = t.get("value", "")
                r = records.get(plan)
                if r is None:  # the node's watch may run ahead of the plans': wait a little
                    since = self._unknown_reservations.setdefault(plan, now)
                    if now - since < UNKNOWN_RESERVATION_SECONDS:
                        continue
                else:
                    self._unknown_reservations.pop(plan, None)
                if (r is None or r.state.terminal
                        or now > r.bind_by + RESERVATION_GRACE_SECONDS) and not self.cfg.dry_run:
                    lanes.submit({f"node/{node.name}"}, self._run_guarded,
                                 f"unreserve {node.name}", self.actions.unreserve, node.name, plan)

    # ---------------------------------------------------------------------------- new plans
    def _plan_new(self, view: View, world: World, stored: list[PlanRecord],
                  now: float, health: Mapping[str, Health]) -> None:
        active = [r for r in stored if not r.state.terminal]
        planned = {pl.uid for r in active for pl in r.placements}
        planned |= waiting_for_victims(stored, set(view.terminating))
        pods = list(view.pending)  # the only pods that can be preemptors
        if not any(p.uid not in planned and self.mem.next_try.get(p.uid, 0.0) <= now
                   and (ADMISSION_GATE in p.gates
                        or (p.unschedulable and p.preemption_policy == "Never"))
                   for p in pods):
            self._warm(stored, now, health)  # nothing due: work ahead for the next preemptor
            return
        conv = self._snapshot(stored, now, health)
        with cycle_objects_frozen(), self._lanes() as lanes:
            self._plan_queue(pods, world, conv, active, planned, now, lanes)

    def _warm(self, stored: list[PlanRecord], now: float,
              health: Mapping[str, Health]) -> None:
        """At most once a ``WARM_EVERY_SECONDS``, carry the planner's caches to a fresh
        snapshot and find the evictable pods of up to ``WARM_NODES_PER_PASS`` more nodes
        (``preemption.warm``): the first plans after a start or a quiet spell then find them.
        Read-only; once every node is known, only what changed is redone."""
        if now - self._warmed_at < WARM_EVERY_SECONDS and now >= self._warmed_at:
            return
        self._warmed_at = now
        self._snapshot(stored, now, health)
        with cycle_objects_frozen():
            preemption.warm(self.plan_cache, self._loop_planner_config(), WARM_NODES_PER_PASS)

    def _snapshot(self, stored: list[PlanRecord], now: float,
                  health: Mapping[str, Health]) -> convert.Converted:
        """The model's snapshot for ``now``, with the planner's caches carried onto it
        (``self.plan_cache``: what they know of the nodes that did not change comes from the
        last cycle's)."""
        conv = self.model.snapshot(now=now, health=health, **history(stored, now, self.cfg))
        self.plan_cache = PlanCache.carried(self.plan_cache, conv.snapshot, conv.changed_nodes)
        return conv

    def _loop_planner_config(self) -> preemption.PlannerConfig:
        # the loop reads no per-node rejections (explain does): skip recording them
        return replace(convert.planner_config(self.cfg), record_rejections=False)

    def _plan_queue(self, pods: list[PodInfo], world: World, conv: convert.Converted,
                    active: list[PlanRecord], planned: set[str], now: float,
                    lanes: Lanes) -> None:
        """Plan the queue in order; each plan made is stored and advanced by a task of
        ``lanes`` while the next is planned (it shares no pod or node with any other)."""
        for uid, problems in conv.problems.items():  # victims' bad input is reported too
            p = world.by_uid.get(uid)
            if p is not None and self.scope.covers(p):
                for problem in problems:
                    self._warn_once(p, Reason.INVALID_ANNOTATION, problem)
        held = restriction(active, self.mem.blocked, now)
        reserved, busy = set(held.reserved_nodes), set(held.held_pods)
        blocked = held.blocked_pods
        # the starvation bound: workloads preempted as often as it allows are no victims
        bounded = bound.pods_at_bound(conv.snapshot, convert.preemption_bound(self.cfg))
        cache = self.plan_cache  # this cycle's (_snapshot), shared by every plan of the queue
        queue = candidates(pods, conv, planned, scope=self.scope,
                           minimums=self.cache.groups.minimums, warn=self._warn_once)
        queued = queued_gpus(queue, conv.snapshot.pod_by_uid)
        for cand, others in zip(queue, queued, strict=True):
            if now < self.mem.next_try.get(cand.anchor.uid, 0.0):
                continue
            lanes.check()  # a task met NotLeader: plan no further
            try:
                made = self._plan_one(cand, conv, world.nodes, frozenset(reserved),
                                      frozenset(busy), blocked, now, cache, bounded, others)
            except (Conflict, NotLeader) as e:
                log.info("%s: %s", cand.key, e)
                if isinstance(e, NotLeader):
                    raise
                continue
            except WriteFailed as e:
                log.warning("%s: plan not stored: %s", cand.key, e)
                continue
            if made is None:
                continue
            r = made.record
            clash = (r.victim_uids & (busy | blocked)) | (r.nodes & reserved)
            if clash:  # the restriction closed them: a planner fault, never a second eviction
                log.error("%s: plan %s uses what other plans hold (%s); not stored", cand.key,
                          r.id, ", ".join(sorted(clash)))
                self.metrics.loop_errors.inc()
                continue
            reserved |= r.nodes
            busy |= r.victim_uids
            lanes.submit(plan_objects(r), self._run_guarded, f"{cand.key}: plan {r.id}",
                         self.stepper.store_and_start, made, world)

    def _plan_one(self, cand: Candidate, conv: convert.Converted, nodes, reserved, busy,
                  blocked, now: float, cache: PlanCache | None = None,
                  bounded: frozenset[str] = frozenset(), queued: float = 0.0
                  ) -> NewPlan | None:
        """The plan for `cand`, not yet stored (only Events are sent here)."""
        model = conv.snapshot.pod_by_uid
        snap = convert.for_preemptor(conv.snapshot, nodes, cand.members,
                                     reserved_nodes=reserved, busy_pods=busy,
                                     blocked_pods=blocked, bounded_pods=bounded,
                                     queued_gpus=queued)
        members = [model[p.uid] for p in cand.members]
        t0 = time.perf_counter()
        plan = preemption.plan(snap, members, self._loop_planner_config(), cache)
        self.metrics.plan_latency.observe(time.perf_counter() - t0)
        for p in cand.members:
            self.mem.next_try[p.uid] = now + self.cfg.retry_seconds
        if not plan.feasible or (cand.mode is Mode.NOMINATE and not plan.victim_groups):
            if not plan.feasible:
                self.metrics.plans.labels("infeasible").inc()
                self._note_once(cand.anchor, Reason.PREEMPTION_NOT_POSSIBLE, plan.reason)
                self._gang_timeout(cand, now)
            return None
        self.mem.gang_waiting.pop(cand.key, None)
        kd = kube_default.plan(snap, members, kube_default.KubeDefaultConfig(seed=0))
        record = plan_record(cand, plan, conv, now, self.cfg)
        body = plan.reason
        if plan.victim_groups:
            body += (f"; victims {', '.join(f'{v.namespace}/{v.name}' for v in plan.victims)} "
                     f"on {', '.join(plan.target_nodes)}")
        if kd.feasible and plan.victim_groups:
            body += f"; kube-default would lose {kd.lost_gpu_seconds / 3600:.2f} GPU-h"
        if self.cfg.dry_run:
            self._note_once(cand.anchor, Reason.PREEMPTION_PLANNED, "(dry run) " + body,
                            key=(tuple(v.uid for v in plan.victims), plan.target_nodes))
            return None
        return NewPlan(record=record, key=cand.key, members=cand.members, body=body,
                       lost_gpu_hours=plan.lost_gpu_seconds / 3600,
                       saved_gpu_hours=(kd.lost_gpu_seconds - plan.lost_gpu_seconds) / 3600
                       if kd.feasible else None)

    def _gang_timeout(self, cand: Candidate, now: float) -> None:
        if cand.mode is not Mode.ADMIT:
            return
        since = self.mem.gang_waiting.setdefault(cand.key, now)
        if now - since >= self.cfg.gang_timeout_seconds:
            for p in cand.members:
                self._note_once(p, Reason.GANG_TIMED_OUT, f"gang {cand.key} could not be "
                                f"placed for {now - since:.0f}s", warning=True)

    # -------------------------------------------------------------------------------- events
    def _log_once(self, key: tuple, msg: str, *args) -> None:
        if self.mem.once(key):
            log.warning(msg, *args)

    def _note_once_plan(self, r: PlanRecord, world: World, message: str) -> None:
        anchor = world.by_uid.get(r.anchor.uid)
        if anchor is not None:
            self._note_once(anchor, Reason.PREEMPTION_PLANNED, message, key=(r.id, r.state))

    def _warn_once(self, pod: PodInfo, reason: str, message: str) -> None:
        self._note_once(pod, reason, message, warning=True)

    def _note_once(self, pod: PodInfo, reason: str, message: str, *,
                   warning: bool = False, key: object = None) -> None:
        """Once per pod, reason and `key` (default: the message) for this process."""
        if self.mem.once((pod.uid, reason, message if key is None else key)):
            self.actions.emit(pod, reason, message, warning=warning)
