"""Chaos run: preemptors keep coming while controller replicas are SIGKILLed at seeded random
points; the promises are checked at the end from the API server's audit log and API state.

    .venv/bin/python bench/chaos.py [--seed 1] [--drains 100] [--faults 0.15] [--max-seconds 900]

Starts its own local control plane (audit log on), N fake 8-GPU nodes filled with victims
(single pods and gangs; `checkpoint: on-request` ones acknowledged by an in-process acker
writing `checkpoint-done` as the admin, some never; grace periods of 0-4 s, so kwok keeps them
Terminating a while, as a kubelet would), bystanders that must never be evicted (equal priority,
or outside the controller's namespaces), and 2 controller replicas as processes. A driver keeps
up to `in_flight` preemptors pending (8- and 4-GPU pods and 2-pod gangs, unschedulable in
mode (a) or gated in mode (b)), withdraws some while their plan drains, lets bound ones run
briefly, then puts victims in their place and deletes them. A killer SIGKILLs a replica (the
Lease holder 3 times in 4) at seeded random times and restarts it, under a new identity or its
old one. `--faults R` also puts every replica behind e2e/faultproxy.py (R of writes and of
evictions answered 409/429/500/503, watches cut). Choices come from the seed; how they
interleave with the controller depends on timing, so two runs of a seed are alike, not equal.

When `drains` plans are Done, it stops, withdraws preemptors still pending and lets the
controller settle; then it checks (`Invariants`):

- double evictions: a pod evicted successfully more than once (audit log);
- evictions outside a plan: each successful eviction must name a victim of a stored plan
  whose newest version written *before* the eviction was `Evicting`, in scope and of lower
  priority than that plan's preemptors (plan versions: the ConfigMap writes in the audit log);
- partial gangs: a victim gang with some members evicted and others still running;
- unfinished plans, drain annotations left on live pods of finished plans, reservation taints
  left on nodes, pods gone without an eviction, Done plans whose preemptor is not bound, and
  stored plans that do not parse (the harness and the replicas must run the same code: a
  replica restarted after the plan format changed stores plans the checks cannot read).

Prints one JSON line (figures and the violation counts); violations are listed on stderr.
Exit status 0 when every invariant holds and `drains` were reached, 1 otherwise, 2 on bad input.
The same driver runs in e2e/test_chaos.py (short) and e2e/test_api_faults.py (faults, no kills).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import urllib3  # noqa: E402
from kubernetes import config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from ckpt_preempt.controller.kube.records import ADMISSION_GATE  # noqa: E402
from ckpt_preempt.policies.lifecycle import plan_record  # noqa: E402
from ckpt_preempt.policies.lifecycle.plan_record import PlanRecord, State  # noqa: E402
from ckpt_preempt.policies.model.annotations import RESERVED_TAINT  # noqa: E402
from e2e import kube  # noqa: E402
from e2e.faultproxy import FaultProxy, Faults  # noqa: E402
from e2e.localcluster import (  # noqa: E402
    ADMIN_TOKEN,
    AuditEvent,
    LocalCluster,
    TestbinMissing,
    find_testbin,
    read_audit,
)
from e2e.test_controller_support import (  # noqa: E402
    HIGH_KUBE,
    HIGH_NEVER,
    LOW,
    LOWER,
    config_for,
    priority_classes,
    rfc3339,
    start_controller_process,
)

GPUS_PER_NODE = 8
PRIORITY = {HIGH_NEVER: 1000, HIGH_KUBE: 1000, LOW: 100, LOWER: 50}
ACKS_LABEL = "e2e.ckpt-preempt.io/acks"  # victims the acker answers
ROLE_LABEL = "e2e.ckpt-preempt.io/role"
VICTIM, BYSTANDER, PREEMPTOR = "victim", "bystander", "preemptor"
LOOP_SECONDS = 0.3


@dataclass(frozen=True, kw_only=True)
class ChaosConfig:
    seed: int = 1
    drains: int = 100  # stop creating preemptors once this many plans are Done ...
    min_kills: int = 0  # ... and this many SIGKILLs happened
    max_seconds: float = 900.0  # ... or after this long
    nodes: int = 8
    in_flight: int = 3  # preemptors pending at once
    replicas: int = 2
    kill_every: tuple[float, float] | None = (4.0, 12.0)  # seconds between SIGKILLs; None: none
    restart_after: tuple[float, float] = (0.3, 3.0)
    faults: Faults | None = None  # put the replicas behind a fault proxy
    withdraw_share: float = 0.1  # preemptors deleted while their plan drains
    patience_seconds: float = 45.0  # a preemptor still pending after this is withdrawn
    settle_seconds: float = 60.0


@dataclass(frozen=True, kw_only=True)
class Made:
    """A pod the driver created."""

    namespace: str
    name: str
    uid: str
    role: str
    priority: int
    gang: str | None
    gpus: int
    node: str | None  # bound at creation (victims and bystanders)


@dataclass
class Group:
    """A preemptor: one pod or a gang, pending until every member is bound."""

    key: str
    mode: str  # nominate | admit
    members: list[str]
    created: float
    withdraw: bool  # delete it once its plan is Draining
    hold: float  # seconds it runs once bound, before the driver deletes it
    bound_at: float | None = None
    ended: str | None = None  # finished | withdrawn-draining | withdrawn-patience | -at-end


@dataclass(frozen=True, kw_only=True)
class Invariants:
    """Each field lists violations, one line each; all empty = every promise held."""

    double_evictions: tuple[str, ...]
    evictions_outside_plan: tuple[str, ...]
    partial_gangs: tuple[str, ...]
    unfinished_plans: tuple[str, ...]
    leftover_drain: tuple[str, ...]
    leftover_taints: tuple[str, ...]
    vanished: tuple[str, ...]
    done_but_unbound: tuple[str, ...]
    unreadable_plans: tuple[str, ...]  # stored plan versions this code cannot parse

    def counts(self) -> dict[str, int]:
        return {f.name: len(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def lines(self) -> list[str]:
        return [f"{f.name}: {v}" for f in dataclasses.fields(self) for v in getattr(self, f.name)]

    @property
    def ok(self) -> bool:
        return not any(self.counts().values())


@dataclass(frozen=True, kw_only=True)
class Report:
    figures: dict
    invariants: Invariants


# ---------------------------------------------------------------------------------- checks
@dataclass(frozen=True, kw_only=True)
class PlanVersion:
    record: PlanRecord
    written: float  # when the API server completed the write (audit clock)


def plan_versions(events: list[AuditEvent], plan_namespace: str) -> tuple[list[PlanVersion],
                                                                            list[str]]:
    """Every plan version written to a ConfigMap in `plan_namespace`, oldest first, and the
    writes whose plan did not parse (those are violations of their own)."""
    out, bad = [], []
    for e in events:
        if (e.resource != "configmaps" or e.namespace != plan_namespace or not e.ok
                or e.verb not in ("create", "update", "patch") or not e.response):
            continue
        raw = (e.response.get("data") or {}).get(plan_record.PLAN_DATA_KEY)
        if raw is None:
            continue
        try:
            out.append(PlanVersion(record=plan_record.plan_from_annotation(raw),
                                   written=e.completed))
        except plan_record.PlanFormatError as err:
            bad.append(f"{e.name}: {err}")
    return out, bad


def evictions(events: list[AuditEvent]) -> list[AuditEvent]:
    return [e for e in events if e.resource == "pods" and e.subresource == "eviction"
            and e.verb == "create" and e.ok]


def check_evictions(events: list[AuditEvent], made: dict[str, Made], scope: set[str],
                    versions: list[PlanVersion]) -> tuple[list[str], list[str]]:
    """(double evictions, evictions outside a valid stored plan)."""
    evicted = evictions(events)
    per_pod = Counter((e.namespace, e.name) for e in evicted)
    doubles = [f"{ns}/{name} evicted {n} times" for (ns, name), n in sorted(per_pod.items())
               if n > 1]
    outside = []
    for e in evicted:
        pod = made.get(f"{e.namespace}/{e.name}")
        if pod is None:
            outside.append(f"{e.namespace}/{e.name}: not a pod of this run")
            continue
        latest: dict[str, PlanRecord] = {}
        for v in versions:
            if v.written < e.received and pod.uid in v.record.victim_uids:
                latest[v.record.id] = v.record
        acting = [r for r in latest.values() if r.state is State.EVICTING]
        if not acting:
            states = ", ".join(f"{r.id}={r.state}" for r in latest.values()) or "none"
            outside.append(f"{e.namespace}/{e.name} ({pod.role}): no Evicting plan names it "
                           f"before the eviction (plans naming it: {states})")
            continue
        if pod.namespace not in scope:
            outside.append(f"{e.namespace}/{e.name}: outside the controller's namespaces")
        for r in acting:
            floor = min((made[f"{p.namespace}/{p.name}"].priority for p in r.placements
                         if f"{p.namespace}/{p.name}" in made), default=None)
            if floor is None or pod.priority >= floor:
                outside.append(f"{e.namespace}/{e.name}: priority {pod.priority} not below "
                               f"plan {r.id}'s preemptors ({floor})")
    return doubles, outside


def check_gangs(events: list[AuditEvent], made: dict[str, Made], alive: set[str]) -> list[str]:
    evicted = {f"{e.namespace}/{e.name}" for e in evictions(events)}
    gangs: dict[str, list[Made]] = defaultdict(list)
    for m in made.values():
        if m.role == VICTIM and m.gang:
            gangs[f"{m.namespace}/{m.gang}"].append(m)
    out = []
    for key, members in sorted(gangs.items()):
        gone = [m.name for m in members if f"{m.namespace}/{m.name}" in evicted]
        left = [m.name for m in members if f"{m.namespace}/{m.name}" in alive
                and f"{m.namespace}/{m.name}" not in evicted]
        if gone and left:
            out.append(f"gang {key}: evicted {gone}, still running {left}")
    return out


def check_end_state(made: dict[str, Made], events: list[AuditEvent], final: list[PlanRecord],
                    pods: list, nodes: list) -> dict[str, list[str]]:
    """What API state must look like once everything settled."""
    by_id = {r.id: r for r in final}
    out: dict[str, list[str]] = {k: [] for k in ("unfinished_plans", "leftover_drain",
                                                 "leftover_taints", "vanished",
                                                 "done_but_unbound")}
    out["unfinished_plans"] = [f"plan {r.id} still {r.state}" for r in final
                               if not r.state.terminal]
    live = {f"{p.metadata.namespace}/{p.metadata.name}": p for p in pods}
    for key, p in sorted(live.items()):
        raw = (p.metadata.annotations or {}).get(plan_record.DRAIN_ANNOTATION)
        if raw is None or p.metadata.deletion_timestamp is not None:
            continue
        try:
            plan = plan_record.drain_from_annotation(raw).plan
        except plan_record.DrainFormatError:
            plan = "?"
        r = by_id.get(plan)
        if r is None or r.state.terminal:
            out["leftover_drain"].append(f"{key}: drain request of plan {plan} "
                                         f"({r.state if r else 'no such plan'})")
    for n in nodes:
        for t in n.spec.taints or []:
            if t.key == RESERVED_TAINT:
                r = by_id.get(t.value)
                out["leftover_taints"].append(f"node {n.metadata.name}: reserved for plan "
                                              f"{t.value} ({r.state if r else 'no such plan'})")
    evicted = {f"{e.namespace}/{e.name}" for e in evictions(events)}
    out["vanished"] = [f"{k} ({m.role})" for k, m in sorted(made.items())
                       if m.role != PREEMPTOR and k not in live and k not in evicted]
    for r in final:
        if r.state is not State.DONE:
            continue
        for pl in r.placements:
            p = live.get(f"{pl.namespace}/{pl.name}")
            if p is not None and p.metadata.uid == pl.uid and not p.spec.node_name:
                out["done_but_unbound"].append(f"plan {r.id}: {pl.namespace}/{pl.name}")
    return out


# ------------------------------------------------------------------------------- replicas
class Replicas:
    """Controller processes; a killed one is restarted under a new identity or, as a
    StatefulSet pod would be, under its old one (seeded)."""

    def __init__(self, c: kube.Cluster, cfg, workdir: Path, count: int, rnd: random.Random):
        self.c, self.cfg, self.dir, self.rnd = c, cfg, workdir, rnd
        self.procs: list[subprocess.Popen | None] = [None] * count
        self.identity = [f"r{i}" for i in range(count)]
        self.starts = Counter()
        self.kills, self.leader_kills = 0, 0

    def start(self, i: int) -> None:
        self.starts[i] += 1
        self.procs[i] = start_controller_process(
            self.c, self.cfg, self.dir, identity=self.identity[i],
            log_name=f"{self.identity[i]}-{self.starts[i]}.log")

    def start_all(self) -> None:
        for i in range(len(self.procs)):
            self.start(i)

    def leader(self) -> int | None:
        try:
            lease = self.c.coordination.read_namespaced_lease(self.cfg.lease_name,
                                                              self.cfg.lease_namespace)
        except ApiException:
            return None
        holder = lease.spec.holder_identity
        return self.identity.index(holder) if holder in self.identity else None

    def kill(self, i: int) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
            self.kills += 1
        if self.rnd.random() < 0.5:
            self.identity[i] = f"r{i}-{self.starts[i]}"

    def stop_all(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def logs_tail(self, lines: int = 30) -> str:
        out = []
        for f in sorted(self.dir.glob("r*.log")):
            text = [line for line in f.read_text(errors="replace").splitlines()
                    if "InsecureRequestWarning" not in line and "warnings.warn(" not in line]
            text = text[-lines:]
            out.append(f"--- {f.name}\n" + "\n".join(text))
        return "\n".join(out)


# ---------------------------------------------------------------------------------- driver
class Chaos:
    def __init__(self, c: kube.Cluster, namespace: str, pool: str, cfg: ChaosConfig,
                 workdir: Path) -> None:
        self.c, self.ns, self.pool, self.cfg, self.dir = c, namespace, pool, cfg, workdir
        self.out_ns = f"{namespace}-out"  # bystanders the controller may never touch
        self.rnd = random.Random(cfg.seed)
        self.made: dict[str, Made] = {}
        self.groups: dict[str, Group] = {}
        self.nodes: list[str] = []
        self.ctl_cfg = config_for(namespace, eviction_timeout_seconds=30.0,
                                  max_checkpoint_seconds=30.0)
        self.stop = threading.Event()
        self.acks = 0
        self.kills_mid_plan = 0  # kills while some plan was not finished
        self.proxy: FaultProxy | None = None
        self.seq = 0

    # -- setup ----------------------------------------------------------------------------
    def setup(self) -> None:
        priority_classes(self.c)
        self.c.core.create_namespace({"metadata": {"name": self.out_ns}})
        self.nodes = kube.create_gpu_nodes(self.c, self.cfg.nodes, prefix=f"{self.pool}-n",
                                           pool=self.pool, gpus=GPUS_PER_NODE)
        for node in self.nodes[: max(1, self.cfg.nodes // 4)]:
            self._pod(BYSTANDER, HIGH_KUBE, 2, node=node)  # same priority as the preemptors
            self._pod(BYSTANDER, LOWER, 2, node=node, namespace=self.out_ns)  # out of scope
        self._refill({n: self._free(n, []) for n in self.nodes})

    def teardown(self) -> None:
        """Remove what setup() made outside the caller's namespace (nodes, the out-of-scope
        namespace)."""
        kube.delete_nodes(self.c, self.nodes)
        with contextlib.suppress(ApiException):
            self.c.core.delete_namespace(self.out_ns, grace_period_seconds=0)

    # -- pods -----------------------------------------------------------------------------
    def _name(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}{self.seq}"

    def _pod(self, role: str, pclass: str, gpus: int, *, node: str | None = None,
             namespace: str | None = None, name: str | None = None, gang: str | None = None,
             gang_total: int | None = None, gates: tuple[str, ...] = (),
             **kw) -> Made:
        ns = namespace or self.ns
        name = name or self._name({VICTIM: "v", BYSTANDER: "b", PREEMPTOR: "p"}[role])
        labels = {ROLE_LABEL: role, **kw.pop("labels", {})}
        pod = kube.create_pod(self.c, ns, name, gpus=gpus, pool=self.pool, priority_class=pclass,
                              node_name=node, gang=gang, gang_total=gang_total, labels=labels,
                              scheduling_gates=gates, **kw)
        m = Made(namespace=ns, name=name, uid=pod.metadata.uid, role=role,
                 priority=PRIORITY[pclass], gang=gang, gpus=gpus, node=node)
        self.made[f"{ns}/{name}"] = m
        return m

    def _victim_kwargs(self) -> dict:
        r = self.rnd.random()
        kw: dict = {"grace_seconds": self.rnd.choice((0, 1, 2, 4))}
        if r < 0.45:
            kw.update(checkpoint="on-request", checkpoint_seconds=self.rnd.randint(2, 5),
                      labels={ACKS_LABEL: "yes" if self.rnd.random() < 0.6 else "no"})
        elif r < 0.8:
            kw.update(checkpoint="periodic",
                      last_checkpoint=rfc3339(self.rnd.uniform(60, 7200)))
        return kw

    def _refill(self, free: dict[str, int]) -> None:
        """Fill free GPUs with victims: pods of 8, 4 or 2 GPUs, some as 2-pod gangs (on one
        node or across two)."""
        pieces: list[tuple[str, int]] = []
        for node, gpus in sorted(free.items()):
            while gpus > 0:
                size = self.rnd.choice([s for s in (8, 4, 4, 2) if s <= gpus] or [gpus])
                pieces.append((node, size))
                gpus -= size
        self.rnd.shuffle(pieces)
        while pieces:
            node, size = pieces.pop()
            pclass = self.rnd.choice((LOW, LOWER))
            mate = next((i for i, (n, s) in enumerate(pieces) if s == size), None)
            if mate is not None and self.rnd.random() < 0.35:
                node2, _ = pieces.pop(mate)
                gang, kw = self._name("g"), self._victim_kwargs()
                for i, n in enumerate((node, node2)):
                    self._pod(VICTIM, pclass, size, node=n, name=f"{gang}-{i}", gang=gang,
                              gang_total=2, **dict(kw, labels=dict(kw.get("labels", {}))))
            else:
                self._pod(VICTIM, pclass, size, node=node, **self._victim_kwargs())

    def _free(self, node: str, pods: list) -> int:
        used = sum(self._gpus(p) for p in pods if p.spec.node_name == node
                   and p.status.phase not in ("Succeeded", "Failed"))
        bystanders = sum(m.gpus for m in self.made.values()
                         if m.namespace == self.out_ns and m.node == node)
        return GPUS_PER_NODE - used - bystanders

    @staticmethod
    def _gpus(p) -> int:
        return sum(int((c.resources.requests or {}).get(kube.GPU, 0)) for c in p.spec.containers)

    def _launch(self, candidates: int) -> None:
        """One new preemptor, of a kind that fits the nodes that could be freed: a pod or a
        2-pod gang, pending (mode a) or gated (mode b)."""
        kinds = [(mode, 4, size) for mode in ("nominate", "admit") for size in (1, 2)]
        if candidates >= 1:
            kinds += [("nominate", 8, 1), ("admit", 8, 1)]
        if candidates >= 2:
            kinds += [("nominate", 8, 2), ("admit", 8, 2)]
        mode, gpus, size = self.rnd.choice(kinds)
        withdraw = self.rnd.random() < self.cfg.withdraw_share
        hold = self.rnd.uniform(0.5, 3.0)
        gates = (ADMISSION_GATE,) if mode == "admit" else ()
        if size == 1:
            names = [self._pod(PREEMPTOR, HIGH_NEVER, gpus, gates=gates, grace_seconds=0).name]
            key = names[0]
        else:
            key = self._name("q")
            names = [self._pod(PREEMPTOR, HIGH_NEVER, gpus, name=f"{key}-{i}", gang=key,
                               gang_total=size, gates=gates, grace_seconds=0).name
                     for i in range(size)]
        self.groups[key] = Group(key=key, mode=mode, members=names, created=time.monotonic(),
                                 withdraw=withdraw, hold=hold)

    def _delete(self, g: Group, why: str) -> None:
        for name in g.members:
            with contextlib.suppress(ApiException):
                self.c.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=0)
        g.ended = why

    # -- the run --------------------------------------------------------------------------
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
        pods = self.c.core.list_namespaced_pod(self.ns).items
        by_name = {p.metadata.name: p for p in pods}
        plans = self.plans()
        active = [r for r in plans if not r.state.terminal]
        now = time.monotonic()
        for g in self.groups.values():
            if g.ended:
                continue
            members = [by_name.get(n) for n in g.members]
            if all(p is not None and p.spec.node_name for p in members):
                g.bound_at = g.bound_at or now
                if now - g.bound_at > g.hold:  # victims take its place before it goes, so
                    freed: Counter[str] = Counter()  # kube-scheduler never sees free GPUs
                    for p in members:
                        freed[p.spec.node_name] += self._gpus(p)
                    self._refill(dict(freed))
                    self._delete(g, "finished")
                continue
            uids = {p.metadata.uid for p in members if p is not None}
            draining = any(r.state is State.DRAINING and uids & {pl.uid for pl in r.placements}
                           for r in active)
            if g.withdraw and draining:
                self._delete(g, "withdrawn-draining")
            elif now - g.created > self.cfg.patience_seconds:
                self._delete(g, "withdrawn-patience")
        busy = {pl.node for r in active for pl in r.placements}
        busy |= {v.node for r in active for v in r.victims}
        busy |= {p.status.nominated_node_name for p in pods if p.status.nominated_node_name}
        nodes = {n.metadata.name: n for n in self.c.core.list_node(
            label_selector=f"{kube.POOL_LABEL}={self.pool}").items}
        reserved = {name for name, n in nodes.items()
                    if any(t.key == RESERVED_TAINT for t in n.spec.taints or [])}
        free = {n: self._free(n, pods) for n in self.nodes
                if n not in busy and n not in reserved}
        self._refill({n: f for n, f in free.items() if f > 0})
        if launching:
            pending = [g for g in self.groups.values() if not g.ended and g.bound_at is None]
            preempted = {p.spec.node_name for p in pods
                         if p.metadata.labels.get(ROLE_LABEL) == PREEMPTOR}
            candidates = len([n for n in self.nodes if n not in busy | reserved | preempted
                              and not any(m.node == n and m.role == BYSTANDER
                                          for m in self.made.values())])
            if len(pending) < self.cfg.in_flight:
                self._launch(candidates - len(pending))
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

    def _killer(self, replicas: Replicas) -> None:
        every = self.cfg.kill_every
        if every is None:
            return
        rnd = random.Random(f"{self.cfg.seed}/kills")
        while not self.stop.wait(rnd.uniform(*every)):
            leader = replicas.leader()
            if leader is not None and rnd.random() < 0.75:
                i = leader
            else:
                i = rnd.randrange(len(replicas.procs))
            replicas.leader_kills += i == leader
            with contextlib.suppress(ApiException, OSError):
                self.kills_mid_plan += any(not r.state.terminal for r in self.plans())
            replicas.kill(i)
            if self.stop.wait(rnd.uniform(*self.cfg.restart_after)):
                replicas.start(i)
                return
            replicas.start(i)

    def _settle(self) -> list[PlanRecord]:
        """Withdraw what is still pending, then wait for plans to finish and cleanup to land."""
        for g in self.groups.values():
            if not g.ended and g.bound_at is None:
                self._delete(g, "withdrawn-at-end")
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
        threads = [threading.Thread(target=self._acker, daemon=True),
                   threading.Thread(target=self._killer, args=(replicas,), daemon=True)]
        drains = 0
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
                out_pods = self.c.core.list_namespaced_pod(self.out_ns).items
                nodes = self.c.core.list_node(
                    label_selector=f"{kube.POOL_LABEL}={self.pool}").items
            finally:
                self.stop.set()
                replicas.stop_all()
        events = [e for e in read_audit(self.c.local.audit_log)  # this run's namespaces
                  if e.namespace in (self.ns, self.out_ns, self.ctl_cfg.plan_namespace)]
        versions, malformed = plan_versions(events, self.ctl_cfg.plan_namespace)
        doubles, outside = check_evictions(events, self.made, {self.ns}, versions)
        alive = {f"{p.metadata.namespace}/{p.metadata.name}" for p in pods + out_pods
                 if p.metadata.deletion_timestamp is None}
        end = check_end_state(self.made, events, final, pods + out_pods, nodes)
        inv = Invariants(double_evictions=tuple(doubles),
                         evictions_outside_plan=tuple(outside),
                         unreadable_plans=tuple(malformed),
                         partial_gangs=tuple(check_gangs(events, self.made, alive)),
                         **{k: tuple(v) for k, v in end.items()})
        states = Counter(str(r.state) for r in final)
        ended = Counter(g.ended or ("running" if g.bound_at else "pending")
                        for g in self.groups.values())
        figures = {
            "seed": self.cfg.seed, "drains": sum(1 for r in final
                                                 if r.state is State.DONE and r.victims),
            "plans": dict(sorted(states.items())), "plan_versions": len(versions),
            "evictions": len(evictions(events)), "acks": self.acks,
            "done_by_mode": dict(sorted(Counter(str(r.mode) for r in final
                                                if r.state is State.DONE).items())),
            "drained_victims": sum(v.drain for r in final if r.state is State.DONE
                                   for v in r.victims),
            "kills": replicas.kills, "leader_kills": replicas.leader_kills,
            "kills_mid_plan": self.kills_mid_plan,
            "starts": sum(replicas.starts.values()),
            "preemptors": len(self.groups),
            "preemptors_bound": sum(1 for g in self.groups.values() if g.bound_at is not None),
            "preemptors_ended": dict(sorted(ended.items())),
            "victims_made": sum(1 for m in self.made.values() if m.role == VICTIM),
            "run_seconds": round(run_seconds, 1), "wall_seconds": round(time.monotonic() - t0, 1),
            "invariants": inv.counts(),
        }
        if self.proxy is not None:
            figures["faults"] = {f"{cls}:{what}": n for (cls, what), n
                                 in sorted(self.proxy.counts.items())
                                 if what.startswith(("injected", "cut", "gone"))}
        self.replicas = replicas
        return Report(figures=figures, invariants=inv)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--drains", type=int, default=100)
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--in-flight", type=int, default=3)
    p.add_argument("--max-seconds", type=float, default=900.0)
    p.add_argument("--faults", type=float, default=0.0,
                   help="share of writes/evictions failed by the fault proxy (0: no proxy)")
    p.add_argument("--no-kills", action="store_true")
    p.add_argument("--workdir", help="keep the cluster's and the replicas' logs here")
    args = p.parse_args(argv)
    if not 0 <= args.faults < 1 or args.drains < 1 or args.nodes < 2 or args.in_flight < 1:
        print("chaos: need 0 <= --faults < 1, --drains >= 1, --nodes >= 2, --in-flight >= 1",
              file=sys.stderr)
        return 2
    faults = Faults(seed=args.seed, rates={"write": args.faults, "read": args.faults / 3,
                                           "watch": 0.3}) if args.faults else None
    cfg = ChaosConfig(seed=args.seed, drains=args.drains, nodes=args.nodes,
                      in_flight=args.in_flight, max_seconds=args.max_seconds, faults=faults,
                      kill_every=None if args.no_kills else (4.0, 12.0))
    try:
        bins = find_testbin()
    except TestbinMissing as e:
        print(f"chaos: {e}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    with contextlib.ExitStack() as stack:
        tmp = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="chaos-"))
        lc = stack.enter_context(LocalCluster(bins, Path(tmp) / "cluster", audit=True))
        api = config.new_client_from_config(config_file=str(lc.kubeconfig))
        c = kube.Cluster("local", lc.kubeconfig, api, local=lc)
        ns = f"chaos-{uuid.uuid4().hex[:6]}"
        c.core.create_namespace({"metadata": {"name": ns}})
        report = Chaos(c, ns, f"p{uuid.uuid4().hex[:6]}", cfg, Path(tmp)).run()
    print(json.dumps(report.figures))
    for line in report.invariants.lines():
        print(line, file=sys.stderr)
    return 0 if report.invariants.ok and report.figures["drains"] >= args.drains else 1


if __name__ == "__main__":
    sys.exit(main())
