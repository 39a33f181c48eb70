"""``kueue-boost``'s controller side (controller/kueue/): pods to Workloads within a namespace,
scope, discovery, dry-run, bad input, and the write kind ``Actions.set_priority_boost``."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.kube import records
from ckpt_preempt.controller.kueue import booster, workloads
from ckpt_preempt.controller.kueue.booster import Booster, BoostSettings
from ckpt_preempt.controller.writes import actions as actions_mod
from ckpt_preempt.controller.writes.actions import Actions, Conflict, WriteGuard
from ckpt_preempt.policies.kueue import boost
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.model import UnknownCheckpoint
from ckpt_preempt.policies.model.times import rfc3339
from tests.controller.test_convert import pod_json

T0 = 1_800_000_000.0  # the pods' creationTimestamp
NOW = T0 + 10 * 3600.0
JOB_UID = "job-uid-1"
VERSION = "v1beta2"


@dataclass
class RecordingWriter:
    """A recording fake of our own write interface (``BoostWriter``)."""

    calls: list[tuple] = field(default_factory=list)
    conflict: bool = False

    def set_priority_boost(self, namespace, name, value, *, version, rv) -> bool:
        self.calls.append((namespace, name, value, version, rv))
        if self.conflict:
            raise Conflict(f"workload {namespace}/{name} changed")
        return True


def workload_json(name="w", *, ns="a", priority=0, boost_value=None, owners=(JOB_UID,),
                  admitted=True, evicted=False, rv="11") -> dict:
    meta = {"name": name, "namespace": ns, "resourceVersion": rv,
            "ownerReferences": [{"uid": u, "kind": "Job", "name": "j", "controller": True}
                                for u in owners]}
    if boost_value is not None:
        meta["annotations"] = {boost.ANNOTATION: boost_value}
    conditions = [{"type": "Admitted", "status": "True" if admitted else "False"}]
    if evicted:
        conditions.append({"type": "Evicted", "status": "True"})
    return {"metadata": meta, "spec": {"priority": priority},
            "status": {"conditions": conditions}}


def trainer(name, *, ns="a", gpus=8, saved_hours_ago=None, owner=JOB_UID, workload=None,
            node="n1"):
    notes = {}
    if saved_hours_ago is not None:
        notes[ann.CHECKPOINT] = "periodic"
        notes[ann.LAST_CHECKPOINT] = rfc3339(NOW - saved_hours_ago * 3600)
    if workload is not None:
        notes[workloads.WORKLOAD_ANNOTATION] = workload
    return records.pod_info(pod_json(name, ns=ns, gpus=gpus, node=node, annotations=notes,
                                     owners=[{"uid": owner, "controller": True}]))


def run(b: Booster, wls, pods, classes=(0, 1000), version=VERSION):
    return b.run_pass(now=NOW, version=version, workloads=[workloads.workload_info(w)
                                                           for w in wls],
                      pods=pods, class_values=classes)


def settings(**kw) -> BoostSettings:
    return BoostSettings(gate_on=True, **kw)


def test_a_workload_gets_the_boost_of_its_own_pods_unsaved_work():
    writer = RecordingWriter()
    out = run(Booster(writer, settings()), [workload_json()],
              [trainer("t0", saved_hours_ago=2), trainer("t1", saved_hours_ago=2)])
    # 2 pods × 8 GPUs × 2 h = 32 GPU-h = 115200 GPU-s: bucket 1 + log2(128) = 8
    assert [o.decision.boost for o in out] == [8]
    assert writer.calls == [("a", "w", "8", VERSION, "11")]


def test_pods_of_another_namespace_never_move_a_boost():
    """Same owner uid, Kueue's workload annotation naming A's Workload, lots of unsaved
    work, reporters that would move a cluster-median: none of it reaches namespace a."""
    s = settings(limits=ann.Limits(unknown_checkpoint=UnknownCheckpoint(kind="cluster-median")))
    a_pods = [trainer("t0"), trainer("t1", saved_hours_ago=1)]
    intruders = [trainer(f"x{i}", ns="b", saved_hours_ago=h, workload="w", gpus=8)
                 for i, h in enumerate((0.01, 0.02, 0.03, 9.0))]
    alone = run(Booster(RecordingWriter(), s), [workload_json()], a_pods)
    writer = RecordingWriter()
    crowded = run(Booster(writer, s), [workload_json()], a_pods + intruders)
    assert [o.decision for o in crowded] == [o.decision for o in alone]
    assert [c[:2] for c in writer.calls] == [("a", "w")]


def test_workloads_outside_the_configured_namespaces_are_never_written():
    writer = RecordingWriter()
    out = run(Booster(writer, settings(namespaces=frozenset({"a"}))),
              [workload_json(), workload_json(ns="b")],
              [trainer("t0"), trainer("u0", ns="b")])
    assert [o.key for o in out] == ["a/w"]
    assert [c[:2] for c in writer.calls] == [("a", "w")]


def test_a_workload_whose_boost_would_not_change_is_not_patched():
    writer = RecordingWriter()
    b = Booster(writer, settings())
    pods = [trainer("t0", saved_hours_ago=2), trainer("t1", saved_hours_ago=2)]
    out = run(b, [workload_json(boost_value="8")], pods)
    assert out[0].decision.boost == 8 and not out[0].written and writer.calls == []
    # inside the dead band below 8 (a fresher report on one pod): still not patched
    pods[1] = trainer("t1", saved_hours_ago=1.2)
    assert run(b, [workload_json(boost_value="8")], pods)[0].decision.boost == 8
    assert writer.calls == []
    # no pods and nothing written: nothing to remove
    assert run(b, [workload_json()], [])[0].written is False and writer.calls == []


def test_a_write_the_watch_has_not_seen_is_not_sent_again_and_a_conflict_is_decided_again():
    writer = RecordingWriter()
    b = Booster(writer, settings())
    for _ in range(3):
        run(b, [workload_json()], [trainer("t0", saved_hours_ago=5)])
    assert len(writer.calls) == 1
    writer = RecordingWriter(conflict=True)
    b = Booster(writer, settings())
    out = run(b, [workload_json()], [trainer("t0", saved_hours_ago=5)])
    assert not out[0].written
    run(b, [workload_json()], [trainer("t0", saved_hours_ago=5)])
    assert len(writer.calls) == 2  # a conflict is tried again, on fresh state


def test_pending_or_evicted_workloads_lose_their_boost_at_once():
    writer = RecordingWriter()
    run(Booster(writer, settings()), [workload_json("p", boost_value="5", admitted=False),
                                      workload_json("e", boost_value="5", evicted=True,
                                                    owners=("other",))],
        [trainer("t0")])
    assert sorted(writer.calls) == [("a", "e", None, VERSION, "11"),
                                    ("a", "p", None, VERSION, "11")]


def test_plain_pods_and_the_workload_annotation_map_pods_within_the_namespace():
    plain = records.pod_info(pod_json("solo", ns="a", gpus=4, node="n1"))
    wls = [workload_json("ws", owners=("uid-solo",)), workload_json("wa", owners=()),
           workload_json("wj")]
    named = trainer("t0", workload="wa", owner="job-x")
    by = booster.pods_by_workload([workloads.workload_info(w) for w in wls],
                                  [plain, named, trainer("t1")])
    assert {k: [p.name for p in v] for k, v in by.items()} == {
        "a/ws": ["solo"], "a/wa": ["t0"], "a/wj": ["t1"]}


def test_the_band_follows_the_priority_classes_in_use():
    writer = RecordingWriter()
    out = run(Booster(writer, settings()), [workload_json(priority=100)],
              [trainer("t0", saved_hours_ago=9)], classes=(0, 100, 103, None))
    assert out[0].decision.cap == 2 and writer.calls[0][2] == "2"


def test_without_kueue_a_pass_does_nothing():
    writer = RecordingWriter()
    assert run(Booster(writer, settings()), [workload_json()], [trainer("t0")],
               version=None) == []
    assert writer.calls == []


def test_bad_workloads_and_pods_are_skipped_with_one_log_line_each(caplog):
    bad_wl = workload_json("bad")
    bad_wl["spec"]["priority"] = "high"
    trim = booster.safe_pod_info(records.pod_info)
    bad_pod = trim({"metadata": {"name": "broken", "namespace": "a"}, "spec": 3})
    assert isinstance(bad_pod, booster.BadPod)
    writer = RecordingWriter()
    b = Booster(writer, settings())
    caplog.set_level(logging.WARNING, logger="ckpt_preempt.kueue")
    for _ in range(3):
        out = run(b, [bad_wl, workload_json()], [bad_pod, None, trainer("t0")])
    assert [o.key for o in out] == ["a/w"]
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 2 and any("a/bad" in m for m in skipped) \
        and any("a/broken" in m for m in skipped)


@pytest.mark.parametrize("raw", [
    {}, {"metadata": None}, {"metadata": {"name": "x"}},
    {"metadata": {"name": "x", "namespace": "a", "ownerReferences": "no"}, "spec": [],
     "status": {"conditions": [None, 3]}},
    {"metadata": {"name": "x", "namespace": "a", "annotations": {boost.ANNOTATION: 5}},
     "spec": {"priority": True}},
])
def test_the_workload_trim_never_raises(raw):
    w = workloads.workload_info(raw)
    assert isinstance(w, workloads.WorkloadInfo)


def test_gate_off_or_dry_run_means_no_writes():
    assert BoostSettings(gate_on=True).writes
    assert not BoostSettings(gate_on=False).writes
    assert not BoostSettings(gate_on=True, dry_run=True).writes


# ------------------------------------------------------------ the write kind and dry-run
@pytest.fixture
def sent(monkeypatch):
    """Every request the client would send (none reaches a server)."""
    calls: list[tuple] = []

    def patch(self, group, version, namespace, plural, name, body, **kw):
        calls.append((group, version, namespace, plural, name, body, kw.get("_content_type")))

    monkeypatch.setattr(client.CustomObjectsApi, "patch_namespaced_custom_object", patch)
    monkeypatch.setattr(client.ApiClient, "call_api",
                        lambda *a, **kw: calls.append(("call_api", a)))
    return calls


def test_set_priority_boost_merge_patches_only_the_annotation_at_its_version(sent):
    acts = Actions(client.ApiClient(client.Configuration()), plan_namespace="x")
    assert acts.set_priority_boost("a", "w", "3", version=VERSION, rv="11") is True
    assert acts.set_priority_boost("a", "w", None, version=VERSION, rv="12") is True
    assert sent == [
        ("kueue.x-k8s.io", VERSION, "a", "workloads", "w",
         {"metadata": {"resourceVersion": "11", "annotations": {boost.ANNOTATION: "3"}}},
         actions_mod.MERGE),
        ("kueue.x-k8s.io", VERSION, "a", "workloads", "w",
         {"metadata": {"resourceVersion": "12", "annotations": {boost.ANNOTATION: None}}},
         actions_mod.MERGE)]


def test_dry_run_writes_nothing_through_the_one_write_path(sent, caplog):
    acts = Actions(client.ApiClient(client.Configuration()), plan_namespace="x",
                   guard=WriteGuard(dry_run=True))
    b = Booster(acts, BoostSettings(gate_on=True, dry_run=True))
    caplog.set_level(logging.INFO, logger="ckpt_preempt.audit")
    out = run(b, [workload_json()], [trainer("t0", saved_hours_ago=3)])
    assert out[0].decision.write and not out[0].written
    assert sent == []
    assert any("dry-run: skipped priority-boost" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("status", "outcome"), [(404, False), (409, Conflict)])
def test_gone_is_not_written_and_changed_is_a_conflict(monkeypatch, status, outcome):
    def patch(self, *a, **kw):
        raise ApiException(status=status, reason="x")

    monkeypatch.setattr(client.CustomObjectsApi, "patch_namespaced_custom_object", patch)
    acts = Actions(client.ApiClient(client.Configuration()), plan_namespace="x")
    if outcome is Conflict:
        with pytest.raises(Conflict):
            acts.set_priority_boost("a", "w", "1", version=VERSION, rv="1")
    else:
        assert acts.set_priority_boost("a", "w", "1", version=VERSION, rv="1") is False


# ------------------------------------------------------------------------------- discovery
class _Resources:
    def __init__(self, names):
        self.resources = [type("R", (), {"name": n})() for n in names]


def fake_objects(served: dict[str, list[str]], *, list_status=None):
    class Objects:
        def __init__(self, api):
            pass

        def get_api_resources(self, group, version, **kw):
            if version not in served:
                raise ApiException(status=404, reason="Not Found")
            return _Resources(served[version])

        def list_cluster_custom_object(self, group, version, plural, **kw):
            if list_status:
                raise ApiException(status=list_status, reason="Forbidden")
            return type("Resp", (), {"release_conn": lambda self: None})()
    return Objects


@pytest.mark.parametrize(("served", "list_status", "want"), [
    pytest.param({}, None, None, id="Kueue not installed"),
    pytest.param({"v1beta2": ["localqueues"]}, None, None, id="group served, no workloads"),
    pytest.param({"v1beta2": ["workloads"], "v1beta1": ["workloads"]}, None, "v1beta2",
                 id="v1beta2 preferred"),
    pytest.param({"v1beta1": ["workloads"]}, None, "v1beta1", id="v1beta1 only"),
    pytest.param({"v1beta2": ["workloads"]}, 403, None, id="not listable: as absent"),
])
def test_discovery_of_the_workload_crd(monkeypatch, served, list_status, want):
    monkeypatch.setattr(workloads.client, "CustomObjectsApi",
                        fake_objects(served, list_status=list_status))
    assert workloads.served_version(object(), "workloads") == want


def test_crd_absent_the_informer_does_nothing_and_says_so_once(monkeypatch, caplog):
    monkeypatch.setattr(workloads.client, "CustomObjectsApi", fake_objects({}))
    asked = threading.Event()
    count = 0

    def discover(api, plural, *, report):
        nonlocal count
        count += 1
        if count >= 4:
            asked.set()
        return workloads.served_version(api, plural, report=report)

    caplog.set_level(logging.INFO, logger="ckpt_preempt.kueue")
    inf = workloads.KueueInformer(object(), "workloads", workloads.workload_info,
                                  threading.Event(), discover=discover, discover_seconds=0.01)
    inf.start()
    try:
        assert asked.wait(10)
    finally:
        inf.stop()
    assert inf.synced.is_set() and inf.version is None and inf.items() == []
    said = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
    assert len(said) == 1 and "workloads.kueue.x-k8s.io" in said[0]


class FixedInformer:
    """An informer's reading side over fixed items."""

    def __init__(self, items, version=None) -> None:
        self._items, self.version = items, version
        self.synced = threading.Event()
        self.synced.set()
        self.started = self.stopped = False

    def start(self):
        self.started = True

    def stop(self):
        self.stopped = True

    def items(self):
        return list(self._items)


def test_the_loop_runs_a_pass_on_a_change_and_stops_its_informers():
    writer = RecordingWriter()
    changed, stop = threading.Event(), threading.Event()
    inf = dict(workloads=FixedInformer([workloads.workload_info(workload_json())], VERSION),
               classes=FixedInformer([]), priority_classes=FixedInformer([0, 1000]),
               pods=FixedInformer([trainer("t0", saved_hours_ago=5)]))
    loop = booster.BoostLoop(Booster(writer, settings()), changed=changed, clock=lambda: NOW,
                             **inf)
    changed.set()
    t = threading.Thread(target=loop.run, args=(stop,))
    t.start()
    for _ in range(200):
        if writer.calls:
            break
        threading.Event().wait(0.01)
    stop.set()
    changed.set()
    t.join(5)
    assert writer.calls == [("a", "w", "8", VERSION, "11")]  # 40 GPU-h
    assert all(i.started and i.stopped for i in inf.values())
