"""Judging one differential case (e2e/harness/differential.py made and observed it):
`classify` compares kube-scheduler's victims with ``policies.baselines.kube_default``'s on the
same snapshot.

- agree: the same victim set (by name); both empty when neither finds a node;
- tie (documented tie-break): kube_default itself reaches kube-scheduler's choice when only an
  order that upstream leaves to chance changes: its random offset (several nodes equal on
  every criterion of pickOneNodeForPreemption; kube-scheduler takes the first in a Go map's
  iteration order), or the order of victims equal under MoreImportantVictim (same priority and
  start time: kube-scheduler keeps its cache's pod order, which pod updates reshuffle);
- real: anything else, with the whole state and the upstream rules (`RULES`) that explain it;
- anomaly: the run gave no clean answer (no outcome in time, or a bind without preemption).

    verdicts = run(cluster, cases, seed)        # generate, observe and classify each case
    summary(verdicts, seconds)                  # the figures bench/differential.py prints
    classify(observation(stored_verdict))       # a stored case again, without a cluster
"""

from __future__ import annotations

import itertools
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from kubernetes.client.rest import ApiException

from ckpt_preempt.policies.baselines import kube_default
from ckpt_preempt.policies.model.model import (
    LabelRequirement,
    Node,
    Pod,
    PodDisruptionBudget,
    RejectReason,
    Resources,
    breaks_budget,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from e2e.harness import differential, kube
from e2e.harness.differential import Observation

TIE_SEEDS = 32  # random offsets tried when looking for a tie kube_default itself can reach
ORDER_SHUFFLES = 16  # pod orders tried when looking for a tie between equal victims


@dataclass(frozen=True, kw_only=True)
class Verdict:
    kind: str  # "agree", "tie" (documented tie-break), "real", "anomaly"
    case: int
    kube: dict  # {"node", "victims"} as kube-scheduler did it
    ours: dict  # the same from kube_default.plan (random offset seed 0)
    events_differ: bool = False  # the "Preempted" events name other pods than the deletions
    detail: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return asdict(self)


def _outcome(plan) -> tuple[str, tuple[str, ...]]:
    if not plan.feasible:
        return "", ()
    return plan.placements[0].node, tuple(sorted(v.name for v in plan.victims))


def predict(snap: Snapshot, preemptor: Pod, seed: int = 0) -> tuple[str, tuple[str, ...]]:
    """(node, sorted victim names) by kube_default; ("", ()) when it finds no plan."""
    cfg = replace(kube_default.KubeDefaultConfig(), seed=seed)
    return _outcome(kube_default.plan(snap, [preemptor], cfg))


def _with_label_guard(b):
    """The PDB as kube-scheduler applies it to unlabeled pods: it never charges them."""
    guard = LabelRequirement(key="app", operator="Exists")  # every labeled pod carries app
    return replace(b, match_all=False, match_expressions=(*b.match_expressions, guard))


# PDB rules of kube-scheduler v1.37.2 (the testbin's; FilterVictimsWithPDBViolation in
# pkg/scheduler/framework/preemption/util.go) that differ from policy/v1 eviction, as snapshot
# rewrites: a real disagreement that a rewrite reproduces is explained by kube_default missing
# that rule (it follows them; these name a regression). A third rule has no rewrite
# (EARLY_STOP): that function stops charging a pod's PDBs at the first one it breaks (in the
# PDB lister's order, a map's).
RULES: dict[str, Callable[[Snapshot], Snapshot]] = {
    # "A PDB with a nil or empty selector matches nothing."
    "empty-selector-pdb-ignored": lambda s: replace(
        s, pdbs=tuple(b for b in s.pdbs if not b.match_all)),
    # a pod without labels breaks no PDB (returns before looking at the PDBs)
    "unlabeled-pod-breaks-no-pdb": lambda s: replace(
        s, pdbs=tuple(_with_label_guard(b) for b in s.pdbs)),
}


def _orders(snap: Snapshot) -> list[Snapshot]:
    """The snapshot with its pods in several orders (list order, reversed, shuffled): for
    victims equal under MoreImportantVictim (same priority and start time), kube-scheduler's
    order is its cache's, which every pod update reshuffles (NodeInfo.RemovePod swaps the last
    pod into the gap; an update is a remove and an add), and Go's sort.Slice keeps it for
    short lists (insertion sort up to 12 elements: Go's sort/zsortfunc.go, maxInsertion);
    kube_default's is the snapshot's."""
    rng = random.Random(0)
    out = [snap, replace(snap, pods=snap.pods[::-1])]
    for _ in range(ORDER_SHUFFLES):
        pods = list(snap.pods)
        rng.shuffle(pods)
        out.append(replace(snap, pods=tuple(pods)))
    return out


def _reachable(snap: Snapshot, pre: Pod, tie: str) -> dict[tuple[str, ...], str]:
    """Victim sets kube_default reaches when only what upstream leaves to chance changes ->
    the node: its random offset (tie "node", TIE_SEEDS of them), plus the order of equally
    important victims ("victim-order") or of the PDBs ("pdb-order": upstream charges a pod to
    its PDBs in the lister's order, a map's, and stops at the first it breaks)."""
    if tie == "node":
        variants = [snap]
    elif tie == "victim-order":
        variants = _orders(snap)
    else:
        variants = [replace(snap, pdbs=tuple(o))
                    for o in itertools.permutations(snap.pdbs, min(len(snap.pdbs), 5))]
    out: dict[tuple[str, ...], str] = {}
    for s in variants:
        for seed in range(TIE_SEEDS):
            node, victims = predict(s, pre, seed)
            out.setdefault(victims, node)
    return out


def criteria(snap: Snapshot, names: tuple[str, ...]) -> dict:
    """pickOneNodeForPreemption's criteria for this victim set (PDB breaks counted in
    importance order, as the reprieve meets them)."""
    by_name = {p.name: p for p in snap.pods}
    pods = sorted((by_name[n] for n in names if n in by_name),
                  key=lambda p: (-p.priority, p.start_time or snap.now, p.uid))
    if not pods:
        return {}
    top = pods[0].priority
    return {"pdb_violations": sum(kube_default.scheduler_breaks_budget(pods, snap.pdbs)),
            "top_priority": top, "priority_sum": sum(p.priority for p in pods),
            "victims": len(pods),
            "earliest_top_start_age": round(snap.now - min(
                p.start_time or snap.now for p in pods if p.priority == top))}


def state(seen: Observation) -> dict:
    """Everything needed to replay a case (``replay``) or follow it by hand."""
    s = seen.snapshot
    free = {n.name: s.free(n.name) for n in s.nodes}
    return {
        "now": s.now, "namespace": seen.namespace, "preemptor_uid": seen.preemptor.uid,
        "nodes": [{"name": n.name, "allocatable": asdict(n.allocatable),
                   "free": asdict(free[n.name]), "closed": str(n.closed or "")} for n in s.nodes],
        "pods": [{"name": p.name, "uid": p.uid, "node": p.node, "priority": p.priority,
                  "start_time": p.start_time,
                  "start_age": None if p.start_time is None else round(s.now - p.start_time),
                  "requests": asdict(p.requests), "labels": dict(p.labels)}
                 for p in s.pods],
        "pdbs": [{"name": b.name, "match_labels": dict(b.match_labels),
                  "match_expressions": [asdict(e) for e in b.match_expressions],
                  "match_all": b.match_all, "disruptions_allowed": b.disruptions_allowed}
                 for b in s.pdbs],
        "preempted_events": list(seen.preempted_events), "nominated": seen.nominated,
    }


def _case_ref(seen: Observation) -> dict:
    """What regenerates the case: ``differential.generate(seed, index, pdb_edges=...)``."""
    return {"seed": seen.case.seed, "index": seen.case.index, "tie_prone": seen.case.tie_prone}


def observation(verdict: dict, *, pdb_edges: bool = True) -> Observation:
    """The Observation a stored verdict (``Verdict.as_json``, tie or real) was made from; the
    case is generated again (`pdb_edges` as in the run), the snapshot is the stored state."""
    st, c = verdict["detail"]["state"], verdict["detail"]["case"]
    ns = st["namespace"]
    snap = Snapshot(
        now=st["now"],
        nodes=tuple(Node(name=n["name"], allocatable=Resources(**n["allocatable"]),
                         excluded=RejectReason(n["closed"]) if n["closed"] else None)
                    for n in st["nodes"]),
        pods=tuple(Pod(uid=p["uid"], name=p["name"], namespace=ns, priority=p["priority"],
                       requests=Resources(**p["requests"]), node=p["node"],
                       start_time=p["start_time"], labels=p["labels"]) for p in st["pods"]),
        pdbs=tuple(PodDisruptionBudget(
            name=b["name"], namespace=ns, match_labels=b["match_labels"],
            match_expressions=tuple(LabelRequirement(key=e["key"], operator=e["operator"],
                                                     values=tuple(e["values"]))
                                    for e in b["match_expressions"]),
            match_all=b["match_all"], disruptions_allowed=b["disruptions_allowed"])
            for b in st["pdbs"]))
    case = differential.generate(c["seed"], c["index"], pdb_edges=pdb_edges)
    return Observation(case=case, namespace=ns, snapshot=snap,
                       preemptor=snap.pod_by_uid[st["preemptor_uid"]],
                       victims=tuple(verdict["kube"]["victims"]),
                       preempted_events=tuple(st["preempted_events"]), node=verdict["kube"]["node"],
                       nominated=st["nominated"])


EARLY_STOP = "pdb-charge-stops-at-first-break"


def early_stop_nodes(snap: Snapshot, pre: Pod, nodes: set[str]) -> list[str]:
    """Nodes among `nodes` where stopping at a pod's first broken PDB, in some PDB list order
    (upstream's is a map's), changes which of the potential victims break a PDB, against
    charging every PDB covering a pod (policies.model.model.breaks_budget). The scheduler's charge
    is
    kube_default.scheduler_breaks_budget (its two matching rules included, which RULES did not
    explain when this is asked). No rewrite of the snapshot can mimic the order, so these are
    only suspects."""
    out = []
    for name in sorted(n for n in nodes if n):
        potential = sorted(
            (p for p in snap.pods_on_node.get(name, ()) if p.priority < pre.priority),
            key=lambda p: (-p.priority, p.start_time or snap.now))
        ours = breaks_budget(potential, snap.pdbs)
        if any(kube_default.scheduler_breaks_budget(potential, order) != ours
               for order in itertools.permutations(snap.pdbs)):
            out.append(name)
    return out


def classify(seen: Observation) -> Verdict:
    snap, pre = seen.snapshot, seen.preemptor
    node, victims = predict(snap, pre)
    base = {"case": seen.case.index,
            "kube": {"node": seen.node, "victims": list(seen.victims)},
            "ours": {"node": node, "victims": list(victims)},
            "events_differ": set(seen.preempted_events) != set(seen.victims)}
    if not seen.anomaly and seen.node and not seen.victims:
        anomaly = "kube-scheduler bound the preemptor without preempting"
    else:
        anomaly = seen.anomaly
    if anomaly:
        return Verdict(kind="anomaly", detail={"why": anomaly, "state": state(seen)}, **base)
    if victims == seen.victims:
        return Verdict(kind="agree", **base)
    for tie in TIE_WHY:
        reachable = _reachable(snap, pre, tie)
        if seen.victims in reachable:
            return Verdict(kind="tie", detail={
                "tie": tie, "why": TIE_WHY[tie], "kube_criteria": criteria(snap, seen.victims),
                "ours_criteria": criteria(snap, victims),
                "tied_choices": [{"node": n, "victims": list(v)} for v, n in reachable.items()],
                "state": state(seen), "case": _case_ref(seen)}, **base)
    explained = []
    names = list(RULES)
    for mask in range(1, 2 ** len(names)):
        chosen = [n for i, n in enumerate(names) if mask >> i & 1]
        if any(set(e) <= set(chosen) for e in explained):
            continue  # a smaller set of rules explains it already
        rewritten = snap
        for rule in chosen:
            rewritten = RULES[rule](rewritten)
        if any(seen.victims in _reachable(rewritten, pre, tie) for tie in TIE_WHY):
            explained.append(chosen)
    suspects = [] if explained else early_stop_nodes(snap, pre, {seen.node, node})
    return Verdict(kind="real", detail={
        "explained_by": explained, "suspected": [EARLY_STOP] if suspects else [],
        "suspected_on_nodes": suspects,
        "kube_criteria": criteria(snap, seen.victims), "ours_criteria": criteria(snap, victims),
        "state": state(seen), "case": _case_ref(seen)}, **base)


TIE_WHY = {  # in the order they are tried
    "node": "nodes equal on every pickOneNodeForPreemption criterion: kube-scheduler takes the "
            "first in a Go map's iteration order, kube_default the first from its random offset",
    "victim-order": "victims equal under MoreImportantVictim (priority, start time) are "
                    "reprieved in the scheduler cache's pod order, which pod updates reshuffle",
    "pdb-order": "FilterVictimsWithPDBViolation charges a pod to its PDBs in the PDB lister's "
                 "order (a map's) and stops at the first one it breaks",
}


def summary(verdicts: list[Verdict], seconds: float) -> dict:
    kinds = Counter(v.kind for v in verdicts)
    clean = len(verdicts) - kinds["anomaly"]
    rules = Counter("+".join(sorted(e)) for v in verdicts if v.kind == "real"
                    for e in (v.detail["explained_by"] or [
                        [f"{x} (suspected)" for x in v.detail["suspected"]]])[:1] if e)
    return {"cases": len(verdicts), "agreements": kinds["agree"],
            "documented_ties": kinds["tie"], "real_disagreements": kinds["real"],
            "anomalies": kinds["anomaly"],
            "agreement_rate": round((kinds["agree"] + kinds["tie"]) / clean, 4) if clean else None,
            "ties_by_kind": dict(Counter(v.detail["tie"] for v in verdicts if v.kind == "tie")),
            "real_explained_by": dict(rules),
            "real_unexplained": sum(not (v.detail["explained_by"] or v.detail["suspected"])
                                    for v in verdicts if v.kind == "real"),
            "kube_preempted": sum(bool(v.kube["victims"]) for v in verdicts),
            "event_mismatches": sum(v.events_differ for v in verdicts),
            "wall_seconds": round(seconds, 1)}


def run(c: kube.Cluster, cases: int, seed: int, *, pdb_edges: bool = True,
        log=sys.stderr) -> list[Verdict]:
    differential.ensure_priority_classes(c)
    tag = uuid.uuid4().hex[:5]
    verdicts = []
    for i in range(cases):
        case = differential.generate(seed, i, pdb_edges=pdb_edges)
        t0 = time.monotonic()
        try:
            v = classify(differential.run_case(c, case, run=tag))
        except (kube.WaitTimeout, ApiException) as e:  # one broken case does not end the run
            v = Verdict(kind="anomaly", case=i, kube={}, ours={},
                        detail={"why": f"{type(e).__name__}: {e}"[:2000]})
        verdicts.append(v)
        print(f"case {i + 1}/{cases}: {v.kind:7s} kube={v.kube.get('node') or '-'} "
              f"{v.kube.get('victims')} ours={v.ours.get('node') or '-'} "
              f"{v.ours.get('victims')} ({time.monotonic() - t0:.1f}s)", file=log, flush=True)
    return verdicts
