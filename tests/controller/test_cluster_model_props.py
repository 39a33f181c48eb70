"""The incremental cluster model equals a full rebuild (``convert.snapshot``) after any sequence
of watch events: adds, modifications and deletions of nodes, pods (gangs among them) and PDBs,
node deletions that leave their pods behind, relists after a 410 that missed events, a clock
that moves (now and then backwards) and node health that changes. The nodes the model reports
changed since its last snapshot (for the planner's caches) include every node that did."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.controller.kube.cluster_model import ClusterModel
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.health import Health
from ckpt_preempt.policies.model.model import UnknownCheckpoint
from ckpt_preempt.policies.model.snapshot import workload_gpus
from ckpt_preempt.policies.model.times import rfc3339
from ckpt_preempt.policies.planner import plan_cache
from e2e.harness.offline import LoggedStore
from tests.controller.fakes import T0, node, pdb, pod, reservation

NODES = [f"n{i}" for i in range(5)]
KEYS = [f"{ns}/p{i}" for ns in ("a", "b") for i in range(6)]
GANG = "scheduling.ai/gang-name"
GANG_TOTAL = "scheduling.ai/gang-total"


class World:
    def __init__(self, scope: convert.Scope, limits: ann.Limits) -> None:
        self.pods, self.nodes, self.pdbs = LoggedStore(), LoggedStore(), LoggedStore()
        self.scope, self.limits = scope, limits
        self.model = ClusterModel(pods=self.pods, nodes=self.nodes, pdbs=self.pdbs,
                                  scope=scope, limits=limits)
        self.generation: dict[str, int] = {}
        self.now = T0
        self.health: dict[str, Health] = {}
        self.previous: Any = None  # the last check's full rebuild


def make_pod(w: World, key: str, d: st.DataObject) -> Any:
    ns, name = key.split("/")
    uid = f"{key}#{w.generation.get(key, 0)}"
    old = w.pods.items.get(key)
    if old is not None and d.draw(st.booleans()):
        return replace(old, resource_version=old.resource_version + "+",  # a small change
                       node=d.draw(st.sampled_from([None, *NODES])),
                       deleting=d.draw(st.booleans()))
    annotations = {}
    if d.draw(st.booleans()):
        annotations[ann.CHECKPOINT] = d.draw(st.sampled_from(["periodic", "on-request", "bad"]))
        offset = d.draw(st.sampled_from([None, -900, -30, 20, 45, 120, 400]))
        if offset is not None:
            annotations[ann.LAST_CHECKPOINT] = rfc3339(T0 + offset)
    if d.draw(st.integers(0, 5)) == 0:
        annotations[ann.PREEMPTIBLE] = "maybe"
    if d.draw(st.integers(0, 9)) == 0:
        annotations[plan_record.PLAN_ANNOTATION] = "legacy"
    labels = {"app": d.draw(st.sampled_from(["x", "y"]))}
    gang = d.draw(st.sampled_from([None, None, "g1", "g2"]))
    if gang:
        labels[GANG] = gang
        labels[GANG_TOTAL] = "3"
    p = pod(name, ns=ns, uid=uid, node=d.draw(st.sampled_from([None, None, *NODES, "ghost"])),
            gpus=d.draw(st.sampled_from([0, 1, 2, 4, 8])), priority=d.draw(st.integers(0, 3)),
            started=T0 - d.draw(st.sampled_from([60, 3600, 7200])), annotations=annotations,
            labels=labels, pending=d.draw(st.booleans()), deleting=d.draw(st.integers(0, 6)) == 0,
            gates=d.draw(st.sampled_from([(), (records.ADMISSION_GATE,)])))
    if d.draw(st.integers(0, 6)) == 0:
        p = replace(p, phase=d.draw(st.sampled_from(["Succeeded", "Failed"])))
    return p


def make_node(name: str, d: st.DataObject) -> Any:
    n = node(name, gpus=d.draw(st.sampled_from([0, 4, 8])),
             taints=[reservation("p1")] if d.draw(st.integers(0, 4)) == 0 else [])
    topology = d.draw(st.sampled_from([None, None, "{not json"]))
    return replace(n, topology=topology, unschedulable=d.draw(st.integers(0, 5)) == 0)


def step(w: World, d: st.DataObject) -> None:
    what = d.draw(st.sampled_from(
        ["pod", "pod", "pod", "pod", "del-pod", "node", "del-node", "pdb", "del-pdb", "relist",
         "clock", "health"]))
    if what == "pod":
        key = d.draw(st.sampled_from(KEYS))
        w.pods.put(key, make_pod(w, key, d))
    elif what == "del-pod":
        key = d.draw(st.sampled_from(KEYS))
        w.pods.delete(key)
        w.generation[key] = w.generation.get(key, 0) + 1
    elif what == "node":
        name = d.draw(st.sampled_from(NODES))
        w.nodes.put(name, make_node(name, d))
    elif what == "del-node":  # its pods stay, bound to a node that is gone
        w.nodes.delete(d.draw(st.sampled_from(NODES)))
    elif what == "pdb":
        ns = d.draw(st.sampled_from(["a", "b"]))
        b = pdb(d.draw(st.sampled_from(["b1", "b2"])), ns=ns,
                match={"app": d.draw(st.sampled_from(["x", "y"]))},
                allowed=d.draw(st.integers(0, 2)))
        w.pdbs.put(f"{ns}/{b.name}", b)
    elif what == "del-pdb":
        w.pdbs.delete(d.draw(st.sampled_from(["a/b1", "a/b2", "b/b1", "b/b2"])))
    elif what == "relist":  # after a 410: events were missed, and the list has its own order
        store = d.draw(st.sampled_from([w.pods, w.nodes, w.pdbs]))
        items = dict(store.items)
        if store is w.pods:
            for key in d.draw(st.lists(st.sampled_from(KEYS), max_size=3)):
                if d.draw(st.booleans()):
                    items.pop(key, None)
                    w.generation[key] = w.generation.get(key, 0) + 1
                else:
                    items[key] = make_pod(w, key, d)
        order = sorted(items, key=lambda k: random.Random(d.draw(st.integers())).random())
        store.relist({k: items[k] for k in order})
    elif what == "clock":
        w.now += d.draw(st.sampled_from([-50, 0, 10, 30, 100, 500]))
    else:
        w.health = {n: d.draw(st.sampled_from(list(Health))) for n in
                    d.draw(st.lists(st.sampled_from(NODES), max_size=3))}


def check(w: World) -> None:
    view = w.model.sync(w.now)
    recent = {"a/x": 1}
    live = [p for p in w.pods.items.values() if not p.done]
    # every workload preempted twice, each when it held one GPU: those holding more now lose
    # their counts (policies.planner.bound.attributable), in both builds alike
    args = dict(now=w.now, nodes=w.nodes.items.values(), pods=live,
                pdbs=w.pdbs.items.values(), scope=w.scope, limits=w.limits)
    history = dict.fromkeys({p.workload for p in convert.snapshot(**args).snapshot.pods}, 2)
    sizes = dict.fromkeys(history, 1.0)
    got = w.model.snapshot(now=w.now, recent_preemptions=recent, health=w.health,
                           preemption_history=history, preempted_gpus=sizes)
    want = convert.snapshot(**args, recent_preemptions=recent, health=w.health,
                            preemption_history=history, preempted_gpus=sizes)
    g, r = got.snapshot, want.snapshot
    assert g == r  # now, nodes and pods in the cache's order, PDBs, fairness, policy
    assert g.gpus_by_workload == r.gpus_by_workload == workload_gpus(r.pods)
    assert got.problems == want.problems
    assert got.node_problems == want.node_problems
    for index in ("node_by_name", "pod_by_uid", "pods_on_node", "free_by_node",
                  "free_gpus_index", "largest_allocatable", "gangs", "pdbs_by_namespace",
                  "unknown_checkpoint_age"):
        assert getattr(g, index) == getattr(r, index), index
    assert g._index == r._index
    assert view.by_uid == {p.uid: p for p in live}
    assert dict(view.nodes) == dict(w.nodes.items)
    assert view.pdbs == tuple(w.pdbs.items.values())
    assert view.pending == tuple(p for p in live if not p.node and not p.deleting)
    assert view.terminating == {p.uid for p in live if p.deleting}
    assert view.plan_annotated == tuple(p for p in live
                                        if plan_record.PLAN_ANNOTATION in p.annotations)
    # what the planner's caches are told changed covers every node that did
    if w.previous is not None and got.changed_nodes is not None:
        assert plan_cache.changed_nodes(w.previous, r) <= got.changed_nodes
    w.previous = r


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=st.data(), median=st.booleans(), scoped=st.booleans())
def test_the_model_equals_a_full_rebuild_after_every_event(d, median, scoped):
    limits = ann.Limits(unknown_checkpoint=UnknownCheckpoint(kind="cluster-median")) \
        if median else ann.Limits()
    w = World(convert.Scope(namespaces=frozenset({"a"}) if scoped else frozenset()), limits)
    for _ in range(d.draw(st.integers(1, 40))):
        for _ in range(d.draw(st.integers(1, 3))):  # a pass may see several events at once
            step(w, d)
        check(w)
