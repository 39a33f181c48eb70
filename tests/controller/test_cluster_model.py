"""Edge cases of the incremental cluster model (controller/kube/cluster_model.py) and of the change
log the real Informer keeps for it (controller/kube/watch.py)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.cluster_model import ClusterModel
from ckpt_preempt.controller.kube.informer import Informer
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.times import rfc3339
from tests.controller.fakes import T0, FakeCache, node, pod

GANG = {"scheduling.ai/gang-name": "llm", "scheduling.ai/gang-total": "3"}


def model_of(cache: FakeCache) -> ClusterModel:
    return ClusterModel(pods=cache.pods, nodes=cache.nodes, pdbs=cache.pdbs,
                        scope=convert.Scope(), limits=ann.Limits())


def rebuilt(cache: FakeCache, now: float) -> convert.Converted:
    return convert.snapshot(now=now, nodes=cache.nodes.items(),
                            pods=[p for p in cache.pods.items() if not p.done],
                            pdbs=cache.pdbs.items(), scope=convert.Scope(), limits=ann.Limits())


def test_a_pod_deleted_and_created_again_moves_to_the_end_as_in_the_cache():
    cache = FakeCache(pods=[pod("a", node="n1"), pod("b", node="n1"), pod("c", node="n1")],
                      nodes=[node("n1")])
    model = model_of(cache)
    model.sync(T0)
    cache.pods.remove("team/a")
    cache.pods.put(pod("a", node="n1", uid="uid-a2"))
    model.sync(T0)
    got = model.snapshot(now=T0).snapshot
    assert [p.name for p in got.pods] == ["b", "c", "a"]
    assert [p.name for p in got.pods_on_node["n1"]] == ["b", "c", "a"]
    assert got == rebuilt(cache, T0).snapshot


def test_only_changed_pods_are_converted_again():
    cache = FakeCache(pods=[pod(f"p{i}", node="n1", gpus=1) for i in range(4)],
                      nodes=[node("n1")])
    model = model_of(cache)
    model.sync(T0)
    before = model.snapshot(now=T0).snapshot.pod_by_uid
    kept = dict(before)
    cache.pods.put(pod("p2", node="n1", gpus=2))
    model.sync(T0 + 1)
    after = model.snapshot(now=T0 + 1).snapshot
    assert [after.pod_by_uid[u] is kept[u] for u in sorted(kept)] == [True, True, False, True]
    assert after.free("n1").gpus == 8 - 5


def test_a_checkpoint_in_the_future_is_reconsidered_as_time_passes():
    ahead = pod("v", node="n1", annotations={ann.CHECKPOINT: "periodic",
                                              ann.LAST_CHECKPOINT: rfc3339(T0 + 120)})
    cache = FakeCache(pods=[ahead], nodes=[node("n1")])
    model = model_of(cache)
    model.sync(T0)
    early = model.snapshot(now=T0)
    assert early.problems["uid-v"] and early.snapshot.pod_by_uid["uid-v"].last_checkpoint is None
    for now in (T0 + 90, T0 + 200, T0 + 90, T0):  # within the skew, past it, then backwards
        model.sync(now)
        assert model.snapshot(now=now) == rebuilt(cache, now)
    model.sync(T0 + 200)
    assert model.snapshot(now=T0 + 200).snapshot.pod_by_uid["uid-v"].last_checkpoint == T0 + 120


def test_a_deleted_node_leaves_its_pods_which_still_hold_nothing_free():
    cache = FakeCache(pods=[pod("v", node="n1")], nodes=[node("n1"), node("n2")])
    model = model_of(cache)
    model.sync(T0)
    cache.nodes.remove("n1")
    model.sync(T0)
    got = model.snapshot(now=T0).snapshot
    assert [n.name for n in got.nodes] == ["n2"]
    assert "n1" not in got.free_by_node and got.pods_on_node["n1"][0].name == "v"
    assert got.free_gpus_index == [(8, "n2")]
    assert got == rebuilt(cache, T0).snapshot


def test_a_gang_loses_members_and_goes_with_its_last():
    cache = FakeCache(pods=[pod(f"m{i}", node="n1", gpus=2, labels=GANG) for i in range(3)],
                      nodes=[node("n1")])
    model = model_of(cache)
    model.sync(T0)
    assert model.snapshot(now=T0).snapshot.gangs["team/seed/llm"].members == (
        "uid-m0", "uid-m1", "uid-m2")
    cache.pods.remove("team/m1")
    model.sync(T0)
    assert model.snapshot(now=T0).snapshot.gangs["team/seed/llm"].members == ("uid-m0", "uid-m2")
    cache.pods.remove("team/m0")
    cache.pods.remove("team/m2")
    model.sync(T0)
    got = model.snapshot(now=T0).snapshot
    assert "team/seed/llm" not in got.gangs and got.gang_pods("team/seed/llm") == []


def test_the_view_of_a_pass_does_not_change_until_the_next_sync():
    cache = FakeCache(pods=[pod("pre", pending=True)], nodes=[node("n1")])
    model = model_of(cache)
    view = model.sync(T0)
    cache.pods.put(replace(cache.pods.get("team/pre"), node="n1", phase="Running"))
    cache.pods.put(pod("other", node="n1"))
    assert [p.name for p in view.pending] == ["pre"] and set(view.by_uid) == {"uid-pre"}
    view = model.sync(T0 + 1)
    assert view.pending == () and set(view.by_uid) == {"uid-pre", "uid-other"}


def test_a_finished_pod_leaves_the_snapshot_and_frees_its_node():
    cache = FakeCache(pods=[pod("v", node="n1")], nodes=[node("n1")])
    model = model_of(cache)
    model.sync(T0)
    cache.pods.put(replace(cache.pods.get("team/v"), phase="Succeeded"))
    view = model.sync(T0)
    got = model.snapshot(now=T0).snapshot
    assert got.pods == () and got.free("n1").gpus == 8 and view.by_uid == {}


# ------------------------------------------------------------------- the real Informer's log


class _Response:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, *_a, **_k):
        yield self.data

    def release_conn(self) -> None:
        pass


def _obj(name: str, rv: str) -> dict:
    return {"metadata": {"name": name, "resourceVersion": rv}}


def test_the_informer_logs_what_each_event_did_to_its_order():
    events = [("ADDED", "c", "3"), ("MODIFIED", "a", "4"), ("DELETED", "b", "5"),
              ("ADDED", "d", "6"), ("ADDED", "b", "7"), ("BOOKMARK", "", "8")]

    def list_fn(**kw):
        if kw.get("watch"):
            return _Response(b"".join(json.dumps({"type": t, "object": _obj(n, rv)}).encode()
                                      + b"\n" for t, n, rv in events))
        return _Response(json.dumps({"metadata": {"resourceVersion": "2"},
                                     "items": [_obj("a", "1"), _obj("b", "2")]}).encode())

    inf = Informer("things", list_fn, trim=lambda d: d["metadata"]["resourceVersion"],
                   key=lambda d: d["metadata"]["name"], changed=threading.Event())
    rv = inf._relist()
    first = inf.drain()
    assert first.relist == (("a", "1"), ("b", "2"))
    assert inf._watch(rv) == "8"
    changes = inf.drain()
    assert changes.relist is None
    assert changes.changed == (("c", "3", True), ("a", "4", False), ("d", "6", True),
                               ("b", "7", True))
    assert [k for k, _ in inf._items.items()] == ["a", "c", "d", "b"]
    assert inf.drain().changed == ()
    inf._relist()  # after a 410: everything again, in the list's order
    assert inf.drain().relist == (("a", "1"), ("b", "2"))


def test_a_status_only_change_keeps_the_converted_pod():
    cache = FakeCache(pods=[pod("v", node="n1")], nodes=[node("n1")])
    model = model_of(cache)
    model.sync(T0)
    before = model.snapshot(now=T0).snapshot.pod_by_uid["uid-v"]
    cache.pods.put(replace(cache.pods.get("team/v"), resource_version="2", nominated="n1"))
    view = model.sync(T0 + 1)
    assert view.by_uid["uid-v"].resource_version == "2"
    assert model.snapshot(now=T0 + 1).snapshot.pod_by_uid["uid-v"] is before
    cache.pods.put(replace(cache.pods.get("team/v"), labels={"app": "z"}))
    model.sync(T0 + 2)
    assert model.snapshot(now=T0 + 2).snapshot.pod_by_uid["uid-v"].labels == {"app": "z"}


def test_a_podgroup_arriving_or_changing_reconverts_the_pods_naming_it():
    from ckpt_preempt.policies.model.native_gangs import Disruption, NativeGroup
    from tests.controller.fakes import Store

    members = [replace(pod(f"m{i}", node="n1", gpus=4), pod_group="pg") for i in range(2)]
    cache = FakeCache(pods=[*members, pod("other", node="n2")], nodes=[node("n1"), node("n2")])
    groups = Store(lambda g: g.key)
    model = ClusterModel(pods=cache.pods, nodes=cache.nodes, pdbs=cache.pdbs, podgroups=groups,
                         scope=convert.Scope(), limits=ann.Limits())

    def check(now: float) -> dict:
        model.sync(now)
        got = model.snapshot(now=now).snapshot
        index = {g.key: g for g in groups.items()}
        want = convert.snapshot(now=now, nodes=cache.nodes.items(), pods=cache.pods.items(),
                                pdbs=(), scope=convert.Scope(), limits=ann.Limits(),
                                podgroups=index).snapshot
        assert got == want
        return {p.name: p.gang for p in got.pods}

    assert check(T0)["m0"] is not None  # unknown group: evicted whole
    groups.put(NativeGroup(namespace="team", name="pg", min_count=2, disruption=Disruption.SINGLE))
    assert check(T0 + 1)["m0"] is None  # Single: each bound member alone
    groups.put(NativeGroup(namespace="team", name="pg", min_count=2, disruption=Disruption.ALL))
    gangs = check(T0 + 2)
    assert gangs["m0"] == gangs["m1"] is not None and gangs["other"] is None
    groups.remove("team/pg")
    assert check(T0 + 3)["m1"] is not None
