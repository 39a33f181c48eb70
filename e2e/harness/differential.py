"""Differential check of ``policies.baselines.kube_default`` against the real kube-scheduler.

One case is a small random cluster (seeded): 2-12 fake nodes with 1-8 GPUs, 1-6 bound pods per
node of a few lower priorities (some at the preemptor's own priority, which cannot be
preempted), distinct or deliberately equal start times, a few PDBs over random label sets, then
one pending high-priority pod that fits nowhere without preemption (sometimes nowhere at all).
kube-scheduler (default profile, DefaultPreemption on, no ckpt-preempt controller) preempts;
what it did is read back from the API: the pods of the case that are gone or being deleted
(kwok deletes a pod at once), the ``Preempted`` events, and the node the preemptor was bound to.
The same state, listed right before the preemptor was created and converted as the controller
converts it (``controller.kube.convert``), goes to ``kube_default.plan``; ``classify`` compares.

    case = generate(seed, index)
    seen = run_case(cluster, case, run="r1")        # creates, observes, deletes the case

differential_classify.py classifies what was seen (agree / documented tie / real / anomaly);
`python -m bench.differential` runs many cases, e2e/test_kube_differential.py a few.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.policies.model.model import LabelRequirement, Pod
from ckpt_preempt.policies.model.snapshot import Snapshot
from e2e.harness import kube

PREEMPTOR = "preemptor"
PREEMPTOR_CLASS, PREEMPTOR_PRIORITY = "diff-high", 1000
# Victim classes; "diff-peer" has the preemptor's priority, so its pods are never victims.
CLASSES = {"diff-low-10": 10, "diff-low-20": 20, "diff-low-30": 30, "diff-peer": 1000}
CLASS_WEIGHTS = (0.35, 0.3, 0.25, 0.1)
TIE_PRONE_SHARE = 0.3  # cases with same-shape nodes and start times from a coarse grid ...
CLONE_SHARE = 0.6  # ... where each node after the first copies the first one's pods this often
COARSE_START_AGES = (3600, 7200, 10800)  # seconds ago, tie-prone cases
UNLABELED_SHARE = 0.1  # pods without any label (kube-scheduler: such a pod breaks no PDB)
EMPTY_SELECTOR_SHARE = 0.08  # PDBs with selector {} among all PDBs
MIN_AVAILABLE_SHARE = 0.6  # PDBs with minAvailable (the others have maxUnavailable)
SETTLE_SECONDS = 1.0  # for kube-scheduler's informers to see the last status/PDB writes
NO_PREEMPTION_QUIET_SECONDS = 2.5  # Unschedulable, nothing nominated, nothing deleted


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    name: str
    gpus: int
    cpu: int  # cores
    memory_gi: int


@dataclass(frozen=True, kw_only=True)
class PodSpec:
    name: str
    node: str  # "" for the preemptor
    gpus: int
    cpu_milli: int
    memory_mi: int
    priority_class: str
    started_ago: int  # seconds before the case starts
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PdbSpec:
    name: str
    selector: Mapping  # a policy/v1 LabelSelector; {} selects the whole namespace
    min_available: int | None = None
    max_unavailable: int | None = None


@dataclass(frozen=True, kw_only=True)
class Case:
    seed: int
    index: int
    tie_prone: bool
    nodes: tuple[NodeSpec, ...]
    pods: tuple[PodSpec, ...]
    pdbs: tuple[PdbSpec, ...]
    preemptor: PodSpec


def _split(total: int, parts: int, rng: random.Random) -> list[int]:
    cuts = sorted(rng.randint(0, total) for _ in range(parts - 1))
    return [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]


def _selector(rng: random.Random, teams: list[str] | None) -> dict:
    """A random PDB selector; with `teams` (PDB edge cases off), one that selects only
    labeled pods of one team not used before (so no two PDBs overlap), or {} when none is left."""
    if teams is not None:
        if not teams:
            return {}
        team = teams.pop(rng.randrange(len(teams)))
        return rng.choice([{"matchLabels": {"team": team}},
                           {"matchLabels": {"team": team, "tier": rng.choice("xy")}},
                           {"matchExpressions": [{"key": "team", "operator": "In",
                                                  "values": [team]}]}])
    if rng.random() < EMPTY_SELECTOR_SHARE:
        return {}
    team, tier = rng.choice("abc"), rng.choice("xy")
    return rng.choice([
        {"matchLabels": {"team": team}},
        {"matchLabels": {"team": team, "tier": tier}},
        {"matchExpressions": [{"key": "team", "operator": "In",
                               "values": sorted({team, rng.choice("abc")})}]},
        {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": [tier]}]},
    ])


def selects(selector: Mapping, labels: Mapping[str, str]) -> bool:
    """Whether a policy/v1 label selector (as a dict; {} = everything) selects `labels`."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(LabelRequirement(key=e["key"], operator=e["operator"],
                                values=tuple(e["values"])).matches(labels)
               for e in selector.get("matchExpressions") or ())


def generate(seed: int, index: int, *, pdb_edges: bool = True) -> Case:
    """Case `index` of run `seed`: the same arguments always give the same case.
    `pdb_edges=False` leaves out where kube-scheduler's PDB rules differ from policy/v1
    eviction (RULES in differential_classify.py): unlabeled pods, empty PDB selectors and pods
    two PDBs cover."""
    rng = random.Random(f"differential:{seed}:{index}")
    tie_prone = rng.random() < TIE_PRONE_SHARE
    shape = (rng.randint(1, 8), rng.choice((8, 16, 32, 64)), rng.choice((32, 64, 128, 256)))
    nodes = tuple(
        NodeSpec(name=f"n{j}", gpus=g, cpu=c, memory_gi=m) for j, (g, c, m) in enumerate(
            shape if tie_prone else (rng.randint(1, 8), rng.choice((8, 16, 32, 64)),
                                     rng.choice((32, 64, 128, 256)))
            for _ in range(rng.randint(2, 12))))
    ages = iter(rng.sample(range(600, 86_400), 6 * len(nodes)))
    pods, free, template = [], {}, None
    for n in nodes:
        if tie_prone and template is not None and rng.random() < CLONE_SHARE:
            mine = [replace(p, name=f"v{n.name[1:]}-{i}", node=n.name)
                    for i, p in enumerate(template)]
        else:
            mine = _node_pods(n, rng, pdb_edges=pdb_edges, age=lambda: (
                rng.choice(COARSE_START_AGES) if tie_prone else next(ages)))
            template = template or mine
        pods += mine
        free[n.name] = (n.gpus - sum(p.gpus for p in mine),
                        n.cpu * 1000 - sum(p.cpu_milli for p in mine),
                        n.memory_gi * 1024 - sum(p.memory_mi for p in mine))
    pdbs, teams = [], None if pdb_edges else list("abc")
    for b in range(rng.choice((0, 1, 1, 2, 3))):
        sel = _selector(rng, teams)
        if not (sel or pdb_edges):
            break
        covered = sum(selects(sel, p.labels) for p in pods)
        if rng.random() < MIN_AVAILABLE_SHARE:
            pdbs.append(PdbSpec(name=f"pdb{b}", selector=sel,
                                min_available=rng.randint(max(0, covered - 2), covered)))
        else:  # bare pods: the disruption controller finds no scale, so 0 disruptions allowed
            pdbs.append(PdbSpec(name=f"pdb{b}", selector=sel, max_unavailable=rng.randint(0, 2)))
    return Case(seed=seed, index=index, tie_prone=tie_prone, nodes=nodes, pods=tuple(pods),
                pdbs=tuple(pdbs), preemptor=_preemptor(nodes, free, rng))


def _node_pods(n: NodeSpec, rng: random.Random, *, pdb_edges: bool,
               age: Callable[[], int]) -> list[PodSpec]:
    """1-6 pods bound to `n`, all of its GPUs taken (one may be left free), CPU and memory
    within its capacity."""
    k = rng.randint(1, 6)
    gpus = _split(n.gpus - rng.choice((0, 0, 0, 1)), k, rng)
    cpu_left, mem_left = n.cpu * 1000, n.memory_gi * 1024
    out = []
    for i in range(k):
        cpu = min(rng.choice((250, 500, 1000, 2000, 4000)), cpu_left // (k - i))
        mem = min(rng.choice((512, 1024, 4096, 16384)), mem_left // (k - i))
        cpu_left, mem_left = cpu_left - cpu, mem_left - mem
        labels = ({} if rng.random() < UNLABELED_SHARE and pdb_edges else
                  {"app": "diff", "team": rng.choice("abc"), "tier": rng.choice("xy")})
        out.append(PodSpec(name=f"v{n.name[1:]}-{i}", node=n.name, gpus=gpus[i], cpu_milli=cpu,
                           memory_mi=mem, labels=labels, started_ago=age(),
                           priority_class=rng.choices(list(CLASSES), CLASS_WEIGHTS)[0]))
    return out


def _preemptor(nodes: tuple[NodeSpec, ...], free: dict, rng: random.Random) -> PodSpec:
    """A pod that fits on no node as it is: more GPUs than any node has free (sometimes more
    than any node has at all), or, one case in six, more CPU than any node has free."""
    max_gpus, max_free = max(n.gpus for n in nodes), max(f[0] for f in free.values())
    gpus, cpu = rng.randint(max_free + 1, max_gpus) if max_free < max_gpus else 0, 100
    if rng.random() < 0.1:
        gpus = max_gpus + 1
    elif gpus == 0 or rng.random() < 1 / 6:
        gpus = min(gpus, max_free)
        cpu = max(f[1] for f in free.values()) + rng.choice((100, 1000, 4000))
    return PodSpec(name=PREEMPTOR, node="", gpus=gpus, cpu_milli=cpu, memory_mi=64,
                   priority_class=PREEMPTOR_CLASS, started_ago=0)


# ---------------------------------------------------------------------------- on the cluster


@dataclass(frozen=True, kw_only=True)
class Observation:
    case: Case
    namespace: str
    snapshot: Snapshot  # before the preemptor, converted as the controller does
    preemptor: Pod
    victims: tuple[str, ...]  # pods of the case gone or deleting after kube-scheduler acted
    preempted_events: tuple[str, ...]  # pods with a "Preempted" event
    node: str  # where the preemptor was bound ("" if nowhere)
    nominated: str  # the nominatedNodeName last seen on it before binding
    anomaly: str = ""  # the run did not give a clean answer (say why)
    seconds: float = 0.0


def ensure_priority_classes(c: kube.Cluster) -> None:
    kube.ensure_priority_class(c, PREEMPTOR_CLASS, PREEMPTOR_PRIORITY)
    for name, value in CLASSES.items():
        kube.ensure_priority_class(c, name, value)


def _ts(seconds_ago: float, now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - seconds_ago))


def _raw(fn: Callable, *args, **kw) -> list[dict]:
    return json.loads(fn(*args, _preload_content=False, **kw).data).get("items") or []


def _pdb_body(b: PdbSpec) -> dict:
    spec: dict = {"selector": dict(b.selector)}
    if b.min_available is not None:
        spec["minAvailable"] = b.min_available
    else:
        spec["maxUnavailable"] = b.max_unavailable
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": b.name}, "spec": spec}


def _pod_body(p: PodSpec, pool: str, node: str | None) -> dict:
    body = kube.pod_body(p.name, gpus=p.gpus, cpu=f"{p.cpu_milli}m", memory=f"{p.memory_mi}Mi",
                         priority_class=p.priority_class, pool=pool, node_name=node,
                         labels=dict(p.labels), grace_seconds=0)
    if not p.labels:
        body["metadata"].pop("labels")
    return body


# the case's own pods (bound by name to its nodes) reach Running through kwok; on a loaded CI
# machine one of two was still pending after 60 s while the control plane deleted an earlier
# test's namespace, so setting up gets longer than the outcome's wait (``timeout``)
READY_TIMEOUT_SECONDS = 180.0


def run_case(c: kube.Cluster, case: Case, *, run: str, timeout: float = 60) -> Observation:
    """Create the case in a fresh namespace on fresh nodes, let kube-scheduler preempt, read
    back what it did; the namespace and nodes are deleted afterwards."""
    t0 = time.monotonic()
    ns = pool = f"diff-{run}-{case.index}"
    names = {n.name: f"{pool}-{n.name}" for n in case.nodes}
    c.core.create_namespace({"metadata": {"name": ns}})
    try:
        for n in case.nodes:
            c.core.create_node(kube.node_body(names[n.name], gpus=n.gpus, cpu=str(n.cpu),
                                              memory=f"{n.memory_gi}Gi", pool=pool))
        for p in case.pods:
            c.core.create_namespaced_pod(ns, _pod_body(p, pool, names[p.node]))
        _wait_ready(c, ns, pool, len(case.nodes), len(case.pods),
                    max(timeout, READY_TIMEOUT_SECONDS))
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
        created = c.api.sanitize_for_serialization(c.core.create_namespaced_pod(
            ns, _pod_body(case.preemptor, pool, None)))
        snap_now = time.time()
        target = records.pod_info(created)
        conv = convert.snapshot(now=snap_now, nodes=nodes, pods=[*pods, target],
                                pdbs=pdbs, scope=convert.Scope(),
                                limits=convert.limits(Config()))
        snap = convert.for_preemptor(conv.snapshot, {n.name: n for n in nodes}, [target],
                                     reserved_nodes=frozenset(), busy_pods=frozenset())
        node, nominated, anomaly = _await_outcome(c, ns, timeout)
        before = {p.name for p in pods}
        after = {d["metadata"]["name"] for d in _raw(c.core.list_namespaced_pod, ns)
                 if not d["metadata"].get("deletionTimestamp")}
        events = _raw(c.core.list_namespaced_event, ns)
        preempted = sorted({e["involvedObject"]["name"] for e in events
                            if e.get("reason") == "Preempted"})
        return Observation(case=case, namespace=ns, snapshot=snap,
                           preemptor=snap.pod_by_uid[target.uid],
                           victims=tuple(sorted(before - after)),
                           preempted_events=tuple(preempted), node=node,
                           nominated=nominated, anomaly=anomaly,
                           seconds=time.monotonic() - t0)
    finally:
        c.core.delete_namespace(ns, grace_period_seconds=0)
        kube.delete_nodes(c, list(names.values()))


def _wait_ready(c: kube.Cluster, ns: str, pool: str, n_nodes: int, n_pods: int,
                timeout: float) -> None:
    def ready():
        nodes = _raw(c.core.list_node, label_selector=f"{kube.POOL_LABEL}={pool}")
        tainted = [d["metadata"]["name"] for d in nodes
                   if any(t["key"].startswith("node.kubernetes.io/")
                          for t in (d.get("spec") or {}).get("taints") or [])]
        running = sum(d["status"].get("phase") == "Running"
                      for d in _raw(c.core.list_namespaced_pod, ns))
        ok = len(nodes) == n_nodes and not tainted and running == n_pods
        return ok or kube.NotYet(f"{len(nodes)} nodes, tainted {tainted}, {running}/{n_pods} "
                                 "pods running")
    kube.wait_for(f"case {ns} ready", ready, timeout=timeout, interval=0.2)


def _wait_pdbs(c: kube.Cluster, ns: str, n: int, timeout: float) -> None:
    def synced():
        items = _raw(c.policy.list_namespaced_pod_disruption_budget, ns)
        late = [d["metadata"]["name"] for d in items if (d.get("status") or {}).get(
            "observedGeneration") != d["metadata"].get("generation")]
        return (len(items) == n and not late) or kube.NotYet(f"not synced: {late}")
    kube.wait_for(f"PDBs of {ns} synced by the disruption controller", synced,
                  timeout=timeout, interval=0.1)


def _await_outcome(c: kube.Cluster, ns: str, timeout: float) -> tuple[str, str, str]:
    """(bound node, last nominated node, anomaly): bound, or Unschedulable with nothing
    nominated for NO_PREEMPTION_QUIET_SECONDS (preemption found no candidate)."""
    deadline, quiet_since, nominated = time.monotonic() + timeout, None, ""
    while time.monotonic() < deadline:
        pod = c.core.read_namespaced_pod(PREEMPTOR, ns)
        nominated = pod.status.nominated_node_name or nominated
        if pod.spec.node_name:
            return pod.spec.node_name, nominated, ""
        cond = kube.condition(pod, "PodScheduled")
        unschedulable = cond is not None and cond.reason == "Unschedulable"
        if unschedulable and not pod.status.nominated_node_name:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= NO_PREEMPTION_QUIET_SECONDS:
                return "", nominated, ""
        else:
            quiet_since = None
        time.sleep(0.1)
    return "", nominated, f"no outcome within {timeout:.0f}s (nominated {nominated!r})"
