"""API JSON → compact records → Snapshot, and the controller config file."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.controller.core import config
from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model import gangs
from ckpt_preempt.policies.model.model import (
    CheckpointMode,
    PodHold,
    RejectReason,
    Resources,
    UnknownCheckpoint,
)
from ckpt_preempt.policies.planner import bound, preemption
from tests.policies import test_fuzz as fuzz

NOW = 1_800_000_000.0


def pod_json(name="p", *, ns="team", gpus=None, node=None, annotations=None, labels=None,
             gates=(), priority=0, deleting=False, requests=True, unschedulable=False,
             policy=None, init_gpus=None, owners=None, priority_class=None) -> dict:
    res = {"requests": {"cpu": "500m", "memory": "1Gi",
                        **({"nvidia.com/gpu": str(gpus)} if gpus else {})}} if requests else {}
    spec = {"containers": [{"name": "c", "resources": res}], "priority": priority,
            "schedulingGates": [{"name": g} for g in gates]}
    if init_gpus:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": {
            "cpu": "2", "nvidia.com/gpu": str(init_gpus)}}}]
    if node:
        spec["nodeName"] = node
    if policy:
        spec["preemptionPolicy"] = policy
    if priority_class:
        spec["priorityClassName"] = priority_class
    meta = {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "7",
            "creationTimestamp": "2027-01-15T08:00:00Z", "labels": labels or {},
            "annotations": {"unrelated/big": "x" * 1000, **(annotations or {})}}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    if owners:
        meta["ownerReferences"] = owners
    status = {"phase": "Running" if node else "Pending"}
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable"}]
    return {"metadata": meta, "spec": spec, "status": status}


def node_json(name="n", *, gpus=8, topology=None, taints=None, labels=None) -> dict:
    alloc = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}
    meta = {"name": name, "labels": labels or {},
            "annotations": {records.TOPOLOGY_ANNOTATION: topology} if topology else {}}
    return {"metadata": meta, "spec": {"taints": taints or []},
            "status": {"allocatable": alloc}}


@pytest.mark.parametrize(("pod", "want"), [
    pytest.param(pod_json(gpus=4), Resources(cpu_milli=500, memory_mib=1024, gpus=4),
                 id="containers are summed"),
    pytest.param(pod_json(gpus=1, init_gpus=2), Resources(cpu_milli=2000, memory_mib=1024,
                                                          gpus=2), id="init containers: max"),
    pytest.param(pod_json(requests=False), None, id="no requests at all"),
])
def test_requests(pod, want):
    assert records.pod_info(pod).requests == want


def test_pod_info_keeps_only_what_planning_needs():
    p = records.pod_info(pod_json(annotations={"ckpt-preempt.io/checkpoint": "periodic"},
                                  unschedulable=True, policy="Never", gates=["x"]))
    assert p.annotations == {"ckpt-preempt.io/checkpoint": "periodic"}
    assert p.unschedulable and p.preemption_policy == "Never" and p.gates == ("x",)
    assert p.owner_uid is None


def test_pod_info_keeps_every_gang_conventions_annotations():
    ours = {c.name_key: "g" for c in gangs.CONVENTIONS} | {ann.MIN_RUNTIME: "1m"}
    p = records.pod_info(pod_json(annotations={**ours, "example.com/other": "x"}))
    assert p.annotations == ours


@pytest.mark.parametrize(("owners", "want"), [
    pytest.param([{"uid": "rs-1", "controller": True, "kind": "Job"}], "rs-1",
                 id="the controlling owner"),
    pytest.param([{"uid": "a", "kind": "ConfigMap"}, {"uid": "b", "controller": True}], "b",
                 id="the one with controller: true"),
    pytest.param([{"uid": "a", "controller": False}], None, id="no controller"),
    pytest.param([], None, id="no owners"),
])
def test_pod_info_owner_uid(owners, want):
    p = records.pod_info(pod_json(owners=owners))
    assert p.owner_uid == want
    pod, _ = convert.to_pod(p, NOW, ann.Limits(), True)
    assert pod.owner_uid == want
    assert pod.workload == (f"team/owner/{want}" if want else f"team/pod/{p.uid}")


def test_snapshot_turns_bad_input_into_problems_and_safe_choices():
    pods = [
        records.pod_info(pod_json("bad", node="n", gpus=8, annotations={
            "ckpt-preempt.io/last-checkpoint": "yesterday",
            "ckpt-preempt.io/checkpoint": "on-request"})),
        records.pod_info(pod_json("noreq", node="n", requests=False)),
        records.pod_info(pod_json("elsewhere", ns="other", node="n", gpus=1)),
    ]
    nodes = [records.node_info(node_json("n", topology="{not json"))]
    out = convert.snapshot(now=NOW, nodes=nodes, pods=pods, pdbs=[],
                           scope=convert.Scope(namespaces=frozenset({"team"})),
                           limits=ann.Limits())
    by = {p.name: p for p in out.snapshot.pods}
    assert by["bad"].checkpoint is CheckpointMode.NONE and by["bad"].last_checkpoint is None
    assert "ckpt-preempt.io/last-checkpoint" in out.problems["uid-bad"][0]
    assert by["noreq"].requests == Resources()
    assert "no resource requests" in out.problems["uid-noreq"][0]
    assert not by["elsewhere"].preemptible  # outside the scope: never a victim
    assert out.snapshot.nodes[0].topology is None and "n" in out.node_problems
    assert records.TOPOLOGY_ANNOTATION in out.node_problems["n"]


def test_snapshot_carries_fairness_counts_and_the_unknown_checkpoint_policy():
    pods = [records.pod_info(pod_json("a", node="n", gpus=1, owners=[
        {"uid": "job-a", "controller": True}]))]
    nodes = [records.node_info(node_json("n"))]
    lim = ann.Limits(unknown_checkpoint=UnknownCheckpoint(kind="assume", seconds=60.0))
    out = convert.snapshot(now=NOW, nodes=nodes, pods=pods, pdbs=[], scope=convert.Scope(),
                           limits=lim, recent_preemptions={"job-a": 2})
    assert out.snapshot.recent_preemptions == {"job-a": 2}
    assert out.snapshot.unknown_checkpoint_age == 60.0
    assert convert.snapshot(now=NOW, nodes=nodes, pods=pods, pdbs=[], scope=convert.Scope(),
                            limits=lim).snapshot.recent_preemptions == {}


def test_malformed_annotations_never_protect_through_the_controller_path():
    bad = {ann.PREEMPTIBLE: "nope", ann.MIN_RUNTIME: "forever",
           "scheduling.ai/gang-name": "-x", "scheduling.ai/gang-total": "many"}
    p = records.pod_info(pod_json("bad", node="n", gpus=1, annotations=bad))
    pod, problems = convert.to_pod(p, NOW, ann.Limits(), True)
    assert pod.preemptible and pod.min_runtime == 0.0 and pod.gang is None
    assert len(problems) == 3  # the total is not read without a valid name


@pytest.mark.parametrize(("cfg", "ns", "pc", "honoured"), [
    pytest.param({}, "team", "batch", False, id="default: nobody"),
    pytest.param({"optOutNamespaces": ["team"]}, "team", "", True, id="listed namespace"),
    pytest.param({"optOutPriorityClasses": ["batch"]}, "team", "batch", True,
                 id="listed priority class"),
    pytest.param({"optOutNamespaces": ["*"]}, "team", "", True, id="everyone"),
])
def test_opt_out_follows_the_config(cfg, ns, pc, honoured):
    p = records.pod_info(pod_json("p", ns=ns, node="n", priority_class=pc,
                                  annotations={ann.PREEMPTIBLE: "false"}))
    pod, problems = convert.to_pod(p, NOW, convert.limits(config.parse(cfg)), True)
    assert pod.preemptible is not honoured and bool(problems) is not honoured


def test_limits_and_planner_config_from_the_config():
    cfg = config.parse({"maxCheckpointSeconds": 30, "maxMinRuntimeSeconds": 90,
                        "optOutNamespaces": ["a"], "optOutPriorityClasses": ["b"],
                        "unknownCheckpoint": "assume:30m", "fairnessPenaltySeconds": 0,
                        "restartCostSeconds": 240, "drain": False})
    lim = convert.limits(cfg)
    assert (lim.max_checkpoint_seconds, lim.max_min_runtime) == (30.0, 90.0)
    assert (lim.opt_out_namespaces, lim.opt_out_priority_classes) == ({"a"}, {"b"})
    assert lim.unknown_checkpoint == UnknownCheckpoint(kind="assume", seconds=1800.0)
    pc = convert.planner_config(cfg)
    assert (pc.drain, pc.max_checkpoint_seconds, pc.fairness_penalty_seconds,
            pc.restart_seconds) == (False, 30.0, 0.0, 240.0)
    assert convert.planner_config(config.parse({"restartCostSeconds": 0})).restart_seconds == 0
    with pytest.raises(config.ConfigError, match="restartCostSeconds"):
        config.parse({"restartCostSeconds": -1})
    default = config.Config()
    assert convert.limits(default).unknown_checkpoint == ann.UNKNOWN_CHECKPOINT
    assert convert.planner_config(default).fairness_penalty_seconds == (
        preemption.FAIRNESS_PENALTY_SECONDS)
    assert default.fairness_window_seconds == preemption.FAIRNESS_WINDOW_SECONDS


def pdb_json(selector, allowed=1) -> dict:
    spec = {} if selector is ... else {"selector": selector}
    return {"metadata": {"name": "b", "namespace": "team"}, "spec": spec,
            "status": {"disruptionsAllowed": allowed}}


@pytest.mark.parametrize(("selector", "covered"), [
    pytest.param(..., [], id="null selector: nothing"),
    pytest.param({}, ["x", "y", "none"], id="empty selector: the whole namespace (policy/v1)"),
    pytest.param({"matchLabels": {"app": "x"}}, ["x"], id="labels"),
    pytest.param({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "y"]}]},
                 ["x", "y"], id="In"),
    pytest.param({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]},
                 ["y", "none"], id="NotIn covers a pod without the label"),
    pytest.param({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, ["x", "y"],
                 id="Exists"),
    pytest.param({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, ["none"],
                 id="DoesNotExist"),
    pytest.param({"matchLabels": {"app": "x"},
                  "matchExpressions": [{"key": "app", "operator": "In", "values": ["y"]}]}, [],
                 id="labels and expressions must all hold"),
])
def test_pdb_selectors(selector, covered):
    pods = [records.pod_info(pod_json(n, node="n", labels={"app": n} if n != "none" else {}))
            for n in ("x", "y", "none")]
    pods.append(records.pod_info(pod_json("x-elsewhere", ns="other", node="n",
                                          labels={"app": "x"})))
    out = convert.snapshot(now=NOW, nodes=[], pods=pods,
                           pdbs=[records.pdb_info(pdb_json(selector))], scope=convert.Scope(),
                           limits=ann.Limits())
    (b,) = out.snapshot.pdbs
    assert [p.name for p in out.snapshot.pods if b.covers(p)] == covered


def test_for_preemptor_closes_nodes_and_holds_pods_each_with_its_reason():
    nodes = {n["metadata"]["name"]: records.node_info(n) for n in [
        node_json("ok", labels={"pool": "a"}),
        node_json("wrong-pool", labels={"pool": "b"}),
        node_json("tainted", labels={"pool": "a"},
                  taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
        node_json("reservation", labels={"pool": "a"},
                  taints=[{"key": ann.RESERVED_TAINT, "value": "plan-1",
                           "effect": "NoSchedule"}]),
        node_json("held", labels={"pool": "a"}),
        node_json("far", labels={"pool": "a", "zone": "z2"}),
    ]}
    pre = pod_json("pre", gpus=8, priority=100)
    pre["spec"]["nodeSelector"] = {"pool": "a"}
    pre["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "NotIn", "values": ["z2"]}]}]}}}
    pods = [records.pod_info(pod_json(n, node="ok", gpus=1)) for n in ("busy", "blocked", "free")]
    pods.append(records.pod_info(pre))
    conv = convert.snapshot(now=NOW, nodes=nodes.values(), pods=pods, pdbs=[],
                            scope=convert.Scope(), limits=ann.Limits())
    snap = convert.for_preemptor(conv.snapshot, nodes, [records.pod_info(pre)],
                                 reserved_nodes=frozenset({"held"}),
                                 busy_pods=frozenset({"uid-busy"}),
                                 blocked_pods=frozenset({"uid-blocked"}))
    assert {n.name: n.closed for n in snap.nodes} == {
        "ok": None, "wrong-pool": RejectReason.NODE_SELECTOR, "far": RejectReason.NODE_AFFINITY,
        "tainted": RejectReason.NODE_TAINT, "reservation": RejectReason.NODE_RESERVED,
        "held": RejectReason.NODE_HELD}
    assert {p.name: p.held for p in snap.pods} == {
        "busy": PodHold.HELD_BY_PLAN, "blocked": PodHold.EVICTION_BLOCKED, "free": None,
        "pre": None}
    # and the planner says so, node by node
    plan = preemption.plan(snap, [snap.pod_by_uid["uid-pre"]])
    assert not plan.feasible
    why = {r.node: (r.reason, r.detail) for r in plan.rejections}
    assert why["far"][0] == RejectReason.NODE_AFFINITY
    assert why["held"][0] == RejectReason.NODE_HELD
    assert why["reservation"][0] == RejectReason.NODE_RESERVED
    assert why["ok"] == (RejectReason.NOT_ENOUGH_PREEMPTIBLE, "pre: 1 pod(s) "
                         "eviction-blocked-recently, 1 pod(s) held-by-another-plan")


def test_config_parses_strictly():
    cfg = config.parse({"namespaces": ["a"], "maxCheckpointSeconds": 30, "dryRun": True})
    assert cfg.namespaces == ("a",) and cfg.max_checkpoint_seconds == 30.0 and cfg.dry_run
    for bad in [{"nope": 1}, {"namespaces": "a"}, {"maxCheckpointSeconds": -1},
                {"dryRun": "yes"}, {"evictAttempts": True}, ["list"],
                {"unknownCheckpoint": "median"}, {"unknownCheckpoint": "assume:0"},
                {"optOutNamespaces": "team"}, {"fairnessPenaltySeconds": -1},
                {"fairnessWindowSeconds": 0}, {"fairnessWindowSeconds": 100_000}]:
        with pytest.raises(config.ConfigError):
            config.parse(bad)
    assert config.parse(None) == config.Config()


@pytest.mark.parametrize(("terms", "allowed"), [
    pytest.param([{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}],
                 ["h100"], id="In"),
    pytest.param([{"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["h100"]}]}],
                 ["a100", "none"], id="NotIn matches a missing label"),
    pytest.param([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]},
                  {"matchFields": [{"key": "metadata.name", "operator": "In",
                                    "values": ["h100"]}]}], ["h100", "none"], id="terms are ORed"),
    pytest.param([{"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["5"]}]}],
                 ["a100"], id="Gt"),
    pytest.param([{"matchExpressions": [{"key": "gpu", "operator": "Weird"}]}], [],
                 id="unknown operator: no node"),
])
def test_required_node_affinity(terms, allowed):
    nodes = {"h100": {"gpu": "h100", "rank": "1"}, "a100": {"gpu": "a100", "rank": "9"},
             "none": {}}
    pre = pod_json("pre")
    pre["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    info = records.pod_info(pre)
    got = [name for name, labels in nodes.items()
           if convert.node_allows(records.node_info(node_json(name, labels=labels)), [info])]
    assert got == allowed


@settings(max_examples=1000, deadline=None)
@given(labels=fuzz.METADATA, annotations=fuzz.METADATA,
       owners=st.lists(st.fixed_dictionaries({"uid": st.text(max_size=8),
                                              "controller": st.sampled_from([True, False, None])}),
                       max_size=2))
def test_fuzzed_pods_convert_without_crashing_and_without_immunity(labels, annotations, owners):
    """The controller's path (API JSON → PodInfo → Pod) under the same fuzz as the builder."""
    info = records.pod_info(pod_json("f", node="n", gpus=1, labels=labels,
                                     annotations=annotations, owners=owners))
    pod, problems = convert.to_pod(info, NOW, ann.Limits(), True)
    assert pod.preemptible and pod.min_runtime <= ann.Limits().max_min_runtime
    assert all(isinstance(p, str) for p in problems)
    assert pod.owner_uid is None or any(o["uid"] == pod.owner_uid for o in owners)


def test_the_starvation_bound_from_the_config_holds_pods_with_its_reason():
    cfg = config.parse({"maxPreemptionsPerWindow": 2, "preemptionBoundWindowSeconds": 7200,
                        "planHistorySeconds": 7200})
    limit = convert.preemption_bound(cfg)
    assert (limit.max_preemptions, limit.window_seconds) == (2, 7200.0)
    assert not convert.preemption_bound(config.parse({"maxPreemptionsPerWindow": 0})).on
    nodes = {"n": records.node_info(node_json("n"))}
    pods = [records.pod_info(pod_json(n, node="n", gpus=4)) for n in ("hit", "fresh")]
    pre = pod_json("pre", gpus=8, priority=100)
    pods.append(records.pod_info(pre))
    conv = convert.snapshot(now=NOW, nodes=nodes.values(), pods=pods, pdbs=[],
                            scope=convert.Scope(), limits=ann.Limits(),
                            preemption_history={"team/pod/uid-hit": 2, "team/pod/uid-fresh": 1})
    bounded = bound.pods_at_bound(conv.snapshot, limit)
    assert bounded == {"uid-hit"}
    snap = convert.for_preemptor(conv.snapshot, nodes, [records.pod_info(pre)],
                                 reserved_nodes=frozenset(), busy_pods=frozenset(),
                                 bounded_pods=bounded)
    assert {p.name: p.held for p in snap.pods} == {
        "hit": PodHold.AT_PREEMPTION_BOUND, "fresh": None, "pre": None}
    plan = preemption.plan(snap, [snap.pod_by_uid["uid-pre"]])
    assert not plan.feasible and str(RejectReason.VICTIMS_AT_BOUND) in plan.reason


@pytest.mark.parametrize("bad", [
    {"maxPreemptionsPerWindow": -1}, {"maxPreemptionsPerWindow": 1.5},
    {"maxPreemptionsPerWindow": True}, {"maxPreemptionsPerWindow": "4"},
    {"preemptionBoundWindowSeconds": 0}, {"preemptionBoundWindowSeconds": -1},
    {"preemptionBoundWindowSeconds": float("inf")},
    {"preemptionBoundWindowSeconds": 100_000},  # more than the plans kept
])
def test_bad_bound_values_are_one_line_errors(bad):
    with pytest.raises(config.ConfigError) as e:
        config.parse(bad)
    assert "\n" not in str(e.value) and next(iter(bad)) in str(e.value)
