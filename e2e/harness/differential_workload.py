"""Differential check of ``policies.baselines.kube_workload`` against kube-scheduler's
workload-aware
preemption (KEP-5710; the ``GenericWorkload`` gate, native PodGroups).

One case is a small random cluster (seeded): 2-8 fake nodes of 1-8 GPUs and varied CPU and
memory, running single pods and PodGroups (``disruptionMode: All``, 2-4 members, minCount =
members, some across nodes) of a few lower priorities (some at the preemptor's own, which
cannot be preempted), a few PDBs over team labels; then one pending PodGroup of 2-4 members
(equal GPUs and CPU; memory drawn per member, so their order matters) at high priority that
does not fit as the cluster is. kube-scheduler (default profile,
GenericWorkload on, no ckpt-preempt controller) preempts; what it did is read back as in
e2e/harness/differential.py: the case's pods gone or being deleted, the ``Preempted`` events, and
the nodes the members were bound to. The same state, listed right before the preemptor's pods were
created and converted as the controller converts it (PodGroups included), goes to
``kube_workload.plan``; differential_workload_classify.py classifies.

    case = generate(seed, index)
    seen = run_case(cluster, case, run="r1")   # on a LocalCluster(..., native_workload=True)
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

from kubernetes import client

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.kube import convert, podgroups, records
from ckpt_preempt.policies.model.model import Pod
from ckpt_preempt.policies.model.snapshot import Snapshot
from e2e.harness import kube
from e2e.harness.differential import (
    CLASS_WEIGHTS,
    CLASSES,
    COARSE_START_AGES,
    MIN_AVAILABLE_SHARE,
    PREEMPTOR_CLASS,
    SETTLE_SECONDS,
    TIE_PRONE_SHARE,
    NodeSpec,
    PdbSpec,
    PodSpec,
    _pdb_body,
    _raw,
    _selector,
    _split,
    _ts,
    _wait_pdbs,
    _wait_ready,
    ensure_priority_classes,
    selects,
)

PREEMPTOR_GROUP = "preemptor"
GROUP_SHARE = 0.5  # of the GPUs in use, about this share runs in PodGroups
NO_PREEMPTION_QUIET_SECONDS = 3.0  # members Unschedulable, none nominated, nothing deleted
__all__ = ["ensure_priority_classes", "generate", "run_case"]


@dataclass(frozen=True, kw_only=True)
class GroupSpec:
    name: str
    priority_class: str
    members: tuple[str, ...]  # pod names


@dataclass(frozen=True, kw_only=True)
class WorkloadCase:
    seed: int
    index: int
    tie_prone: bool
    nodes: tuple[NodeSpec, ...]
    pods: tuple[PodSpec, ...]  # bound; group members too
    groups: tuple[GroupSpec, ...]  # the bound PodGroups
    pdbs: tuple[PdbSpec, ...]
    preemptor: tuple[PodSpec, ...]  # the pending group's members, in creation order


@dataclass(frozen=True, kw_only=True)
class WorkloadObservation:
    case: WorkloadCase
    namespace: str
    snapshot: Snapshot  # before the preemptor, converted as the controller does
    preemptor: tuple[Pod, ...]  # the pending members, in creation order
    victims: tuple[str, ...]  # pods of the case gone or deleting after kube-scheduler acted
    preempted_events: tuple[str, ...]
    nodes: tuple[str, ...]  # where each member was bound ("" if not)
    anomaly: str = ""
    seconds: float = 0.0


def generate(seed: int, index: int) -> WorkloadCase:
    """Case `index` of run `seed`: the same arguments always give the same case."""
    rng = random.Random(f"differential-workload:{seed}:{index}")
    tie_prone = rng.random() < TIE_PRONE_SHARE

    def shape() -> tuple[int, int, int]:
        return rng.randint(1, 8), rng.choice((8, 16, 32, 64)), rng.choice((32, 64, 128, 256))

    first = shape()
    nodes = tuple(NodeSpec(name=f"n{j}", gpus=g, cpu=c, memory_gi=m) for j, (g, c, m) in
                  enumerate(first if tie_prone else shape() for _ in range(rng.randint(2, 8))))
    ages = iter(rng.sample(range(600, 86_400), 8 * len(nodes) + 8))

    def age() -> int:
        return rng.choice(COARSE_START_AGES) if tie_prone else next(ages)

    left = {n.name: n.gpus - rng.choice((0, 0, 0, 1)) for n in nodes}
    placed: dict[str, list[tuple[str, int, str, dict, int]]] = {n.name: [] for n in nodes}
    groups = []
    target = GROUP_SHARE * sum(left.values())
    while sum(g for ps in placed.values() for _, g, *_ in ps) < target and len(groups) < 4:
        size, gpus = rng.randint(2, 4), rng.randint(1, 4)
        homes = []
        room = dict(left)
        for _ in range(size):
            fits = [n for n in room if room[n] >= gpus]
            if not fits:
                break
            n = rng.choice(fits)
            room[n] -= gpus
            homes.append(n)
        if len(homes) < size:
            break
        name = f"g{len(groups)}"
        pc = rng.choices(list(CLASSES), CLASS_WEIGHTS)[0]
        labels = {"app": "diff", "team": rng.choice("abc"), "tier": rng.choice("xy")}
        started = age()
        members = []
        for i, n in enumerate(homes):
            members.append(f"{name}-{i}")
            placed[n].append((f"{name}-{i}", gpus, pc, labels, started))
        left = room
        groups.append(GroupSpec(name=name, priority_class=pc, members=tuple(members)))
    for n in nodes:
        if left[n.name] > 0:
            k = rng.randint(1, min(4, left[n.name]))
            for i, g in enumerate(_split(left[n.name], k, rng)):
                if g:
                    placed[n.name].append((
                        f"s{n.name[1:]}-{i}", g, rng.choices(list(CLASSES), CLASS_WEIGHTS)[0],
                        {"app": "diff", "team": rng.choice("abc"), "tier": rng.choice("xy")},
                        age()))
    pods = []
    for n in nodes:
        mine = placed[n.name]
        cpu_left, mem_left = n.cpu * 1000, n.memory_gi * 1024
        for i, (name, g, pc, labels, started) in enumerate(mine):
            cpu = min(rng.choice((250, 500, 1000, 2000, 4000)), cpu_left // (len(mine) - i))
            mem = min(rng.choice((512, 1024, 4096, 16384)), mem_left // (len(mine) - i))
            cpu_left, mem_left = cpu_left - cpu, mem_left - mem
            pods.append(PodSpec(name=name, node=n.name, gpus=g, cpu_milli=cpu, memory_mi=mem,
                                priority_class=pc, started_ago=started, labels=labels))
    pdbs, teams = [], list("abc")
    for b in range(rng.choice((0, 0, 1, 2))):
        sel = _selector(rng, teams)
        if not sel:
            break
        covered = sum(selects(sel, p.labels) for p in pods)
        if rng.random() < MIN_AVAILABLE_SHARE:
            pdbs.append(PdbSpec(name=f"pdb{b}", selector=sel,
                                min_available=rng.randint(max(0, covered - 2), covered)))
        else:
            pdbs.append(PdbSpec(name=f"pdb{b}", selector=sel, max_unavailable=rng.randint(0, 2)))
    free = {n.name: n.gpus - sum(p.gpus for p in pods if p.node == n.name) for n in nodes}
    return WorkloadCase(seed=seed, index=index, tie_prone=tie_prone, nodes=nodes,
                        pods=tuple(pods), groups=tuple(groups), pdbs=tuple(pdbs),
                        preemptor=_preemptor(nodes, free, rng))


def _preemptor(nodes: tuple[NodeSpec, ...], free: Mapping[str, int],
               rng: random.Random) -> tuple[PodSpec, ...]:
    """2-4 members of equal GPUs and CPU (memory drawn for each) that do not all fit as the
    cluster is (fewer member-sized holes than members); sometimes more GPUs than any node has,
    so no preemption helps."""
    max_gpus = max(n.gpus for n in nodes)
    for _ in range(50):
        size, gpus = rng.randint(2, 4), rng.randint(1, max_gpus)
        if sum(f // gpus for f in free.values()) < size:
            break
    else:  # so much room free that 2-4 members always fit: no node can take one
        size, gpus = 2, max_gpus + 1
    if rng.random() < 0.05:
        gpus = max_gpus + 1
    cpu = rng.choice((100, 100, 500, 1000))
    return tuple(PodSpec(name=f"{PREEMPTOR_GROUP}-{i}", node="", gpus=gpus, cpu_milli=cpu,
                         memory_mi=rng.choice((64, 256, 1024)), priority_class=PREEMPTOR_CLASS,
                         started_ago=0) for i in range(size))


# ---------------------------------------------------------------------------- on the cluster


def _podgroup_body(name: str, size: int, priority_class: str) -> dict:
    return {"apiVersion": f"{podgroups.GROUP}/{podgroups.VERSION}", "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}},
                     "disruptionMode": {"all": {}}, "priorityClassName": priority_class}}


def _pod_body(p: PodSpec, pool: str, node: str | None, group: str | None) -> dict:
    body = kube.pod_body(p.name, gpus=p.gpus, cpu=f"{p.cpu_milli}m", memory=f"{p.memory_mi}Mi",
                         priority_class=p.priority_class, pool=pool, node_name=node,
                         labels=dict(p.labels), grace_seconds=0)
    if group:
        body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


def run_case(c: kube.Cluster, case: WorkloadCase, *, run: str,
             timeout: float = 60) -> WorkloadObservation:
    """Create the case in a fresh namespace on fresh nodes, let kube-scheduler preempt, read
    back what it did; the namespace and nodes are deleted afterwards."""
    t0 = time.monotonic()
    ns = pool = f"diffw-{run}-{case.index}"
    names = {n.name: f"{pool}-{n.name}" for n in case.nodes}
    custom = client.CustomObjectsApi(c.api)
    group_of = {m: g.name for g in case.groups for m in g.members}

    def create_group(name: str, size: int, pc: str) -> None:
        custom.create_namespaced_custom_object(podgroups.GROUP, podgroups.VERSION, ns,
                                               podgroups.PLURAL, _podgroup_body(name, size, pc))

    c.core.create_namespace({"metadata": {"name": ns}})
    try:
        for n in case.nodes:
            c.core.create_node(kube.node_body(names[n.name], gpus=n.gpus, cpu=str(n.cpu),
                                              memory=f"{n.memory_gi}Gi", pool=pool))
        for g in case.groups:
            create_group(g.name, len(g.members), g.priority_class)
        for p in case.pods:
            c.core.create_namespaced_pod(ns, _pod_body(p, pool, names[p.node],
                                                       group_of.get(p.name)))
        _wait_ready(c, ns, pool, len(case.nodes), len(case.pods), timeout)
        now = time.time()
        for p in case.pods:
            c.core.patch_namespaced_pod_status(
                p.name, ns, {"status": {"startTime": _ts(p.started_ago, now)}})
        for b in case.pdbs:
            c.policy.create_namespaced_pod_disruption_budget(ns, _pdb_body(b))
        _wait_pdbs(c, ns, len(case.pdbs), timeout)
        time.sleep(SETTLE_SECONDS)
        nodes = [records.node_info(d) for d in _raw(c.core.list_node,
                                                    label_selector=f"{kube.POOL_LABEL}={pool}")]
        pods = [records.pod_info(d) for d in _raw(c.core.list_namespaced_pod, ns)]
        pdbs = [records.pdb_info(d) for d in _raw(c.policy.list_namespaced_pod_disruption_budget,
                                                  ns)]
        create_group(PREEMPTOR_GROUP, len(case.preemptor), PREEMPTOR_CLASS)
        targets = [records.pod_info(c.api.sanitize_for_serialization(c.core.create_namespaced_pod(
            ns, _pod_body(p, pool, None, PREEMPTOR_GROUP)))) for p in case.preemptor]
        snap_now = time.time()
        listed = custom.list_namespaced_custom_object(podgroups.GROUP, podgroups.VERSION, ns,
                                                      podgroups.PLURAL).get("items") or []
        groups = {g.key: g for g in map(podgroups.podgroup_info, listed)}
        conv = convert.snapshot(now=snap_now, nodes=nodes, pods=[*pods, *targets], pdbs=pdbs,
                                scope=convert.Scope(), limits=convert.limits(Config()),
                                podgroups=groups)
        snap = convert.for_preemptor(conv.snapshot, {n.name: n for n in nodes}, targets,
                                     reserved_nodes=frozenset(), busy_pods=frozenset())
        bound, anomaly = _await_outcome(c, ns, [p.name for p in case.preemptor], timeout)
        before = {p.name for p in pods}
        after = {d["metadata"]["name"] for d in _raw(c.core.list_namespaced_pod, ns)
                 if not d["metadata"].get("deletionTimestamp")}
        events = _raw(c.core.list_namespaced_event, ns)
        preempted = sorted({e["involvedObject"]["name"] for e in events
                            if e.get("reason") == "Preempted"})
        back = {v: k for k, v in names.items()}
        return WorkloadObservation(
            case=case, namespace=ns, snapshot=snap,
            preemptor=tuple(snap.pod_by_uid[t.uid] for t in targets),
            victims=tuple(sorted(before - after)), preempted_events=tuple(preempted),
            nodes=tuple(back.get(n, n) for n in bound), anomaly=anomaly,
            seconds=time.monotonic() - t0)
    finally:
        c.core.delete_namespace(ns, grace_period_seconds=0)
        kube.delete_nodes(c, list(names.values()))


def _await_outcome(c: kube.Cluster, ns: str, members: list[str],
                   timeout: float) -> tuple[tuple[str, ...], str]:
    """(each member's node, anomaly): all bound, or all Unschedulable with none nominated for
    NO_PREEMPTION_QUIET_SECONDS (preemption found nothing to do)."""
    deadline, quiet_since = time.monotonic() + timeout, None
    bound: tuple[str, ...] = ()
    while time.monotonic() < deadline:
        got = [c.core.read_namespaced_pod(m, ns) for m in members]
        bound = tuple(p.spec.node_name or "" for p in got)
        if all(bound):
            return bound, ""
        waiting = all(not p.spec.node_name and not p.status.nominated_node_name
                      and (cond := kube.condition(p, "PodScheduled")) is not None
                      and cond.reason == "Unschedulable" for p in got)
        if waiting:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= NO_PREEMPTION_QUIET_SECONDS:
                return bound, "" if not any(bound) else "some members bound, not all"
        else:
            quiet_since = None
        time.sleep(0.1)
    return bound, f"no outcome within {timeout:.0f}s (bound {bound})"
