"""The chaos driver (`Chaos`): sets the cluster up, keeps preemptors coming while the replicas
are killed, acknowledges drain requests as training jobs would, lets the controller settle,
then checks the promises and reports.

A loop keeps up to `in_flight` preemptors pending, withdraws some while their plan drains, lets
bound ones run briefly, then puts victims in their place and deletes them. An acker writes
`checkpoint-done` as the admin on victims labelled for it, 0.2-2 s after their drain request.
When `drains` plans are Done (and `min_kills` kills happened), it stops, withdraws preemptors
still pending and waits until plans are finished and no drain request or reservation is left.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
import time
from collections import Counter
from pathlib import Path

from kubernetes.client.rest import ApiException

from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.lifecycle.plan_record import PlanRecord, State
from ckpt_preempt.policies.model.annotations import RESERVED_TAINT
from e2e.harness import kube
from e2e.harness.chaos.checks import check_all
from e2e.harness.chaos.config import (
    ACKS_LABEL,
    BYSTANDER,
    LOOP_SECONDS,
    PREEMPTOR,
    ROLE_LABEL,
    ChaosConfig,
)
from e2e.harness.chaos.faults import Replicas, kill_at_random
from e2e.harness.chaos.pods import Population
from e2e.harness.chaos.report import Report, figures
from e2e.harness.controller_run import config_for, rfc3339
from e2e.harness.faultproxy import FaultProxy
from e2e.harness.localcluster import ADMIN_TOKEN, read_audit


class Chaos:
    def __init__(self, c: kube.Cluster, namespace: str, pool: str, cfg: ChaosConfig,
                 workdir: Path) -> None:
        self.c, self.ns, self.pool, self.cfg, self.dir = c, namespace, pool, cfg, workdir
        self.pods = Population(c, namespace, pool, cfg)
        self.ctl_cfg = config_for(namespace, eviction_timeout_seconds=30.0,
                                  max_checkpoint_seconds=30.0)
        self.stop = threading.Event()
        self.acks = 0
        self.kills_mid_plan = 0  # kills while some plan was not finished
        self.proxy: FaultProxy | None = None
        self.replicas: Replicas | None = None  # once run() made them

    def setup(self) -> None:
        self.pods.setup()

    def teardown(self) -> None:
        """Remove what setup() made outside the caller's namespace (nodes, the out-of-scope
        namespace)."""
        self.pods.teardown()

    def plans(self) -> list[PlanRecord]:
        items = self.c.core.list_namespaced_config_map(self.ns).items
        out = []
        for cm in items:
            raw = (cm.data or {}).get(plan_record.PLAN_DATA_KEY)
            with contextlib.suppress(plan_record.PlanFormatError):
                if raw is not None:
                    out.append(plan_record.plan_from_annotation(raw))
        return out

    def _tick(self, launching: bool) -> int:
        world = self.pods
        pods = self.c.core.list_namespaced_pod(self.ns).items
        by_name = {p.metadata.name: p for p in pods}
        plans = self.plans()
        active = [r for r in plans if not r.state.terminal]
        now = time.monotonic()
        for g in world.groups.values():
            if g.ended:
                continue
            members = [by_name.get(n) for n in g.members]
            if all(p is not None and p.spec.node_name for p in members):
                g.bound_at = g.bound_at or now
                if now - g.bound_at > g.hold:  # victims take its place before it goes, so
                    freed: Counter[str] = Counter()  # kube-scheduler never sees free GPUs
                    for p in members:
                        freed[p.spec.node_name] += world.gpus(p)
                    world.refill(dict(freed))
                    world.delete(g, "finished")
                continue
            uids = {p.metadata.uid for p in members if p is not None}
            draining = any(r.state is State.DRAINING and uids & {pl.uid for pl in r.placements}
                           for r in active)
            if g.withdraw and draining:
                world.delete(g, "withdrawn-draining")
            elif now - g.created > self.cfg.patience_seconds:
                world.delete(g, "withdrawn-patience")
        busy = {pl.node for r in active for pl in r.placements}
        busy |= {v.node for r in active for v in r.victims}
        busy |= {p.status.nominated_node_name for p in pods if p.status.nominated_node_name}
        nodes = {n.metadata.name: n for n in self.c.core.list_node(
            label_selector=f"{kube.POOL_LABEL}={self.pool}").items}
        reserved = {name for name, n in nodes.items()
                    if any(t.key == RESERVED_TAINT for t in n.spec.taints or [])}
        free = {n: world.free(n, pods) for n in world.nodes
                if n not in busy and n not in reserved}
        world.refill({n: f for n, f in free.items() if f > 0})
        if launching:
            pending = [g for g in world.groups.values() if not g.ended and g.bound_at is None]
            preempted = {p.spec.node_name for p in pods
                         if p.metadata.labels.get(ROLE_LABEL) == PREEMPTOR}
            candidates = len([n for n in world.nodes if n not in busy | reserved | preempted
                              and not any(m.node == n and m.role == BYSTANDER
                                          for m in world.made.values())])
            if len(pending) < self.cfg.in_flight:
                world.launch(candidates - len(pending))
        return sum(1 for r in plans if r.state is State.DONE and r.victims)

    def _acker(self) -> None:
        """Answers drain requests on victims labelled acks=yes, after 0.2-2 s, as the admin."""
        rnd, due = random.Random(f"{self.cfg.seed}/acks"), {}
        core = kube.Cluster("ack", self.c.kubeconfig, kube.client_copy(self.c.api)).core
        while not self.stop.wait(0.2):
            with contextlib.suppress(ApiException, OSError):
                for p in core.list_namespaced_pod(
                        self.ns, label_selector=f"{ACKS_LABEL}=yes").items:
                    raw = (p.metadata.annotations or {}).get(plan_record.DRAIN_ANNOTATION)
                    if raw is None or p.metadata.deletion_timestamp is not None:
                        continue
                    with contextlib.suppress(plan_record.DrainFormatError):
                        plan = plan_record.drain_from_annotation(raw).plan
                        key = (p.metadata.name, plan)
                        if plan_record.acked(p.metadata.annotations, plan):
                            continue
                        when = due.setdefault(key, time.monotonic() + rnd.uniform(0.2, 2.0))
                        if time.monotonic() >= when:
                            core.patch_namespaced_pod(p.metadata.name, self.ns, {"metadata": {
                                "annotations": {plan_record.DONE_ANNOTATION: plan,
                                                "ckpt-preempt.io/last-checkpoint": rfc3339()}}})
                            self.acks += 1

    def _count_kill_mid_plan(self) -> None:
        with contextlib.suppress(ApiException, OSError):
            self.kills_mid_plan += any(not r.state.terminal for r in self.plans())

    def _settle(self) -> list[PlanRecord]:
        """Withdraw what is still pending, then wait for plans to finish and cleanup to land."""
        for g in self.pods.groups.values():
            if not g.ended and g.bound_at is None:
                self.pods.delete(g, "withdrawn-at-end")
        deadline = time.monotonic() + self.cfg.settle_seconds
        while True:
            plans = self.plans()
            pods = self.c.core.list_namespaced_pod(self.ns).items
            nodes = self.c.core.list_node(label_selector=f"{kube.POOL_LABEL}={self.pool}").items
            quiet = (all(r.state.terminal for r in plans)
                     and not any(plan_record.DRAIN_ANNOTATION in (p.metadata.annotations or {})
                                 for p in pods if p.metadata.deletion_timestamp is None)
                     and not any(t.key == RESERVED_TAINT for n in nodes
                                 for t in n.spec.taints or []))
            if quiet or time.monotonic() > deadline:
                return plans
            time.sleep(0.5)

    def run(self) -> Report:
        t0 = time.monotonic()
        self.setup()
        proxy_ctx = contextlib.nullcontext()
        c = self.c
        if self.cfg.faults is not None:
            self.proxy = FaultProxy(self.c.local.server, self.cfg.faults)
            proxy_ctx = self.proxy
            kubeconfig = self.proxy.kubeconfig(self.dir / "proxied.kubeconfig", ADMIN_TOKEN)
            c = dataclasses.replace(self.c, kubeconfig=kubeconfig)
        replicas = Replicas(c, self.ctl_cfg, self.dir, self.cfg.replicas,
                            random.Random(f"{self.cfg.seed}/identities"))
        killer_args = (self.stop, self.cfg, replicas, self._count_kill_mid_plan)
        threads = [threading.Thread(target=self._acker, daemon=True),
                   threading.Thread(target=kill_at_random, args=killer_args, daemon=True)]
        drains = 0
        out_ns = self.pods.out_ns
        with proxy_ctx:
            replicas.start_all()
            for t in threads:
                t.start()
            try:
                while ((drains < self.cfg.drains or replicas.kills < self.cfg.min_kills)
                       and time.monotonic() - t0 < self.cfg.max_seconds):
                    drains = self._tick(launching=True)
                    time.sleep(LOOP_SECONDS)
                run_seconds = time.monotonic() - t0
                self.stop.set()
                for t in threads:
                    t.join(30)
                for i, p in enumerate(replicas.procs):
                    if p is None or p.poll() is not None:
                        replicas.start(i)
                final = self._settle()
                pods = self.c.core.list_namespaced_pod(self.ns).items
                out_pods = self.c.core.list_namespaced_pod(out_ns).items
                nodes = self.c.core.list_node(
                    label_selector=f"{kube.POOL_LABEL}={self.pool}").items
            finally:
                self.stop.set()
                replicas.stop_all()
        events = [e for e in read_audit(self.c.local.audit_log)  # this run's namespaces
                  if e.namespace in (self.ns, out_ns, self.ctl_cfg.plan_namespace)]
        inv, versions = check_all(events, self.pods.made, {self.ns}, self.ctl_cfg.plan_namespace,
                                  final, pods + out_pods, nodes)
        self.replicas = replicas
        return Report(figures=figures(
            seed=self.cfg.seed, final=final, versions=versions, events=events, acks=self.acks,
            replicas=replicas, kills_mid_plan=self.kills_mid_plan, groups=self.pods.groups,
            made=self.pods.made, run_seconds=run_seconds,
            wall_seconds=time.monotonic() - t0, invariants=inv, proxy=self.proxy),
            invariants=inv)
