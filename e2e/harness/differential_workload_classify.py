"""Judging one workload differential case: policies.baselines.kube_workload against
kube-scheduler's workload-aware preemption (GenericWorkload on) on random clusters with native
PodGroups (e2e/harness/differential_workload.py says what a case is and how it is observed);
`python -m bench.differential --workload` runs many.

`classify` compares kube-scheduler's victims with kube_workload's on the same snapshot:

- agree: the same victim set (by name); both empty when neither preempts;
- tie (documented tie-break): kube_workload itself reaches kube-scheduler's choice when only an
  order that upstream leaves to chance changes (TIE_WHY): where the node walk starts (its
  seed, TIE_SEEDS of them; it matters from 100 nodes on), the order parallel Filter lists
  fitting nodes in (node orders shuffled), the order of equally important victims (the
  scheduler cache's; pod orders shuffled), or the PDB lister's;
- real: anything else, with the whole state;
- anomaly: the run gave no clean answer (no outcome in time, some members bound and not all).

Every case is stored with its state (`state`, `snapshot_of`), so bench/differential.py's
`--replay` can classify a stored run again with another kube_workload (as the README's figure
for the model before this mode was measured).
"""

from __future__ import annotations

import itertools
import random
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field, replace

from kubernetes.client.rest import ApiException

from ckpt_preempt.policies.baselines import kube_workload
from ckpt_preempt.policies.baselines.kube_default import KubeDefaultConfig
from ckpt_preempt.policies.model.model import (
    LabelRequirement,
    Node,
    Pod,
    PodDisruptionBudget,
    RejectReason,
    Resources,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from e2e.harness import differential_workload as dw
from e2e.harness import kube

TIE_SEEDS = 32  # random picks among equal top-scoring nodes tried
ORDER_SHUFFLES = 16  # pod orders tried for equally important victims
TIE_WHY = {  # in the order they are tried
    "node": "where the node walk starts (nextStartNodeIndex; from the seed above 100 nodes)",
    "filter-order": "Filter runs on parallel goroutines and lists the fitting nodes in the "
                    "order they finish, which decides among equal top scores (the heap keeps "
                    "that order); kube_workload walks the node list in order",
    "victim-order": "units equal under MoreImportantVictim are reprieved in the scheduler "
                    "cache's node and pod order",
    "pdb-order": "FilterVictimsWithPDBViolation charges a pod to its PDBs in the PDB lister's "
                 "order (a map's) and stops at the first one it breaks",
}


@dataclass(frozen=True, kw_only=True)
class Verdict:
    kind: str  # "agree", "tie", "real", "anomaly"
    case: int
    kube: dict  # {"nodes", "victims", "victim_gpus"}
    ours: dict
    events_differ: bool = False
    detail: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return asdict(self)


def predict(snap: Snapshot, members: tuple[Pod, ...], seed: int = 0) -> dict:
    plan = kube_workload.plan(snap, list(members), KubeDefaultConfig(seed=seed))
    by_uid = {p.uid: p.name for p in members}
    return {"nodes": [by_uid.get(p.pod_uid, p.pod_uid) + "@" + p.node for p in plan.placements]
            if plan.feasible else [],
            "victims": sorted(v.name for v in plan.victims)}


def _variants(snap: Snapshot, tie: str) -> list[Snapshot]:
    if tie == "node":
        return [snap]
    if tie == "pdb-order":
        return [replace(snap, pdbs=tuple(o)) for o in itertools.permutations(snap.pdbs)]
    rng = random.Random(0)
    if tie == "filter-order":
        out = [replace(snap, nodes=snap.nodes[::-1])]
        for _ in range(ORDER_SHUFFLES):
            nodes = list(snap.nodes)
            rng.shuffle(nodes)
            out.append(replace(snap, nodes=tuple(nodes)))
        return out
    out = [snap, replace(snap, pods=snap.pods[::-1])]
    for _ in range(ORDER_SHUFFLES):
        pods = list(snap.pods)
        rng.shuffle(pods)
        out.append(replace(snap, pods=tuple(pods)))
    return out


def reachable(snap: Snapshot, members: tuple[Pod, ...], tie: str) -> set[tuple[str, ...]]:
    return {tuple(predict(s, members, seed)["victims"])
            for s in _variants(snap, tie) for seed in range(TIE_SEEDS)}


def classify(snap: Snapshot, members: tuple[Pod, ...], kube_victims: tuple[str, ...], *,
             case: int, kube_nodes=(), events=None, anomaly: str = "",
             state: dict | None = None) -> Verdict:
    gpus = {p.name: p.gpus for p in snap.pods}
    ours = predict(snap, members)
    ours["victim_gpus"] = sum(gpus.get(n, 0) for n in ours["victims"])
    theirs = {"nodes": list(kube_nodes), "victims": sorted(kube_victims),
              "victim_gpus": sum(gpus.get(n, 0) for n in kube_victims)}
    base = {"case": case, "kube": theirs, "ours": ours,
            "events_differ": events is not None and set(events) != set(kube_victims)}
    detail = {"state": state} if state is not None else {}
    if anomaly:
        return Verdict(kind="anomaly", detail={"why": anomaly, **detail}, **base)
    if ours["victims"] == theirs["victims"]:
        return Verdict(kind="agree", detail=detail, **base)
    for tie in TIE_WHY:
        if tuple(theirs["victims"]) in reachable(snap, members, tie):
            return Verdict(kind="tie", detail={"tie": tie, "why": TIE_WHY[tie], **detail},
                           **base)
    return Verdict(kind="real", detail=detail, **base)


def state(seen: dw.WorkloadObservation) -> dict:
    """What `snapshot_of` needs to rebuild the snapshot and the members."""
    s = seen.snapshot
    return {
        "now": s.now, "namespace": seen.namespace, "seed": seen.case.seed,
        "index": seen.case.index, "members": [p.uid for p in seen.preemptor],
        "nodes": [[n.name, asdict(n.allocatable), str(n.closed or "")] for n in s.nodes],
        "pods": [{"n": p.name, "u": p.uid, "node": p.node, "prio": p.priority,
                  "start": p.start_time, "req": asdict(p.requests), "labels": dict(p.labels),
                  "gang": p.gang} for p in s.pods],
        "pdbs": [{"name": b.name, "match_labels": dict(b.match_labels),
                  "match_expressions": [asdict(e) for e in b.match_expressions],
                  "allowed": b.disruptions_allowed} for b in s.pdbs],
    }


def snapshot_of(st: dict) -> tuple[Snapshot, tuple[Pod, ...]]:
    ns = st["namespace"]
    snap = Snapshot(
        now=st["now"],
        nodes=tuple(Node(name=n, allocatable=Resources(**a),
                         excluded=RejectReason(c) if c else None) for n, a, c in st["nodes"]),
        pods=tuple(Pod(uid=p["u"], name=p["n"], namespace=ns, priority=p["prio"],
                       requests=Resources(**p["req"]), node=p["node"], start_time=p["start"],
                       labels=p["labels"], gang=p["gang"]) for p in st["pods"]),
        pdbs=tuple(PodDisruptionBudget(
            name=b["name"], namespace=ns, match_labels=b["match_labels"],
            match_expressions=tuple(LabelRequirement(key=e["key"], operator=e["operator"],
                                                     values=tuple(e["values"]))
                                    for e in b["match_expressions"]),
            disruptions_allowed=b["allowed"]) for b in st["pdbs"]))
    return snap, tuple(snap.pod_by_uid[u] for u in st["members"])


def classify_seen(seen: dw.WorkloadObservation) -> Verdict:
    return classify(seen.snapshot, seen.preemptor, seen.victims, case=seen.case.index,
                    kube_nodes=[f"{p.name}@{n}" for p, n in zip(seen.preemptor, seen.nodes,
                                                                strict=True)],
                    events=seen.preempted_events, anomaly=seen.anomaly, state=state(seen))


def summary(verdicts: list[Verdict], seconds: float) -> dict:
    kinds = Counter(v.kind for v in verdicts)
    clean = len(verdicts) - kinds["anomaly"]
    counted = [v for v in verdicts if v.kind != "anomaly"]
    return {"cases": len(verdicts), "agreements": kinds["agree"],
            "documented_ties": kinds["tie"], "real_disagreements": kinds["real"],
            "anomalies": kinds["anomaly"],
            "agreement_rate": round((kinds["agree"] + kinds["tie"]) / clean, 4) if clean else None,
            "ties_by_kind": dict(Counter(v.detail["tie"] for v in verdicts if v.kind == "tie")),
            "kube_preempted": sum(bool(v.kube["victims"]) for v in counted),
            "kube_victim_gpus": sum(v.kube["victim_gpus"] for v in counted),
            "ours_victim_gpus": sum(v.ours["victim_gpus"] for v in counted),
            "event_mismatches": sum(v.events_differ for v in verdicts),
            "wall_seconds": round(seconds, 1)}


def run(c: kube.Cluster, cases: int, seed: int, *, log=sys.stderr) -> list[Verdict]:
    dw.ensure_priority_classes(c)
    tag = uuid.uuid4().hex[:5]
    verdicts = []
    for i in range(cases):
        t0 = time.monotonic()
        try:
            v = classify_seen(dw.run_case(c, dw.generate(seed, i), run=tag))
        except (kube.WaitTimeout, ApiException) as e:  # one broken case does not end the run
            v = Verdict(kind="anomaly", case=i, kube={"victims": [], "victim_gpus": 0},
                        ours={"victims": [], "victim_gpus": 0},
                        detail={"why": f"{type(e).__name__}: {e}"[:2000]})
        verdicts.append(v)
        print(f"case {i + 1}/{cases}: {v.kind:7s} kube={v.kube['victims']} "
              f"ours={v.ours['victims']} ({time.monotonic() - t0:.1f}s)", file=log, flush=True)
    return verdicts
