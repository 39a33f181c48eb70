"""API JSON → compact records → Snapshot, and the controller config file."""

from __future__ import annotations

import pytest

from controller import config, convert
from policies import annotations as ann
from policies.model import CheckpointMode, Resources

NOW = 1_800_000_000.0


def pod_json(name="p", *, ns="team", gpus=None, node=None, annotations=None, labels=None,
             gates=(), priority=0, deleting=False, requests=True, unschedulable=False,
             policy=None, init_gpus=None) -> dict:
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
    meta = {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "7",
            "creationTimestamp": "2027-01-15T08:00:00Z", "labels": labels or {},
            "annotations": {"unrelated/big": "x" * 1000, **(annotations or {})}}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    status = {"phase": "Running" if node else "Pending"}
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable"}]
    return {"metadata": meta, "spec": spec, "status": status}


def node_json(name="n", *, gpus=8, topology=None, taints=None, labels=None) -> dict:
    alloc = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}
    meta = {"name": name, "labels": labels or {},
            "annotations": {convert.TOPOLOGY_ANNOTATION: topology} if topology else {}}
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
    assert convert.pod_info(pod).requests == want


def test_pod_info_keeps_only_what_planning_needs():
    p = convert.pod_info(pod_json(annotations={"ckpt-preempt.io/checkpoint": "periodic"},
                                  unschedulable=True, policy="Never", gates=["x"]))
    assert p.annotations == {"ckpt-preempt.io/checkpoint": "periodic"}
    assert p.unschedulable and p.preemption_policy == "Never" and p.gates == ("x",)


def test_snapshot_turns_bad_input_into_problems_and_safe_choices():
    pods = [
        convert.pod_info(pod_json("bad", node="n", gpus=8, annotations={
            "ckpt-preempt.io/last-checkpoint": "yesterday",
            "ckpt-preempt.io/checkpoint": "on-request"})),
        convert.pod_info(pod_json("noreq", node="n", requests=False)),
        convert.pod_info(pod_json("elsewhere", ns="other", node="n", gpus=1)),
    ]
    nodes = [convert.node_info(node_json("n", topology="{not json"))]
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


def test_for_preemptor_hides_nodes_it_cannot_use():
    nodes = {n["metadata"]["name"]: convert.node_info(n) for n in [
        node_json("ok", labels={"pool": "a"}),
        node_json("wrong-pool", labels={"pool": "b"}),
        node_json("tainted", labels={"pool": "a"},
                  taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
        node_json("reserved", labels={"pool": "a"}),
    ]}
    conv = convert.snapshot(now=NOW, nodes=nodes.values(), pods=[], pdbs=[],
                            scope=convert.Scope(), limits=ann.Limits())
    pre = pod_json("pre", gpus=8)
    pre["spec"]["nodeSelector"] = {"pool": "a"}
    snap = convert.for_preemptor(conv.snapshot, nodes, [convert.pod_info(pre)],
                                 reserved_nodes=frozenset({"reserved"}), busy_pods=frozenset())
    usable = [n.name for n in snap.nodes if not n.unschedulable]
    assert usable == ["ok"]


def test_config_parses_strictly():
    cfg = config.parse({"namespaces": ["a"], "maxCheckpointSeconds": 30, "dryRun": True})
    assert cfg.namespaces == ("a",) and cfg.max_checkpoint_seconds == 30.0 and cfg.dry_run
    for bad in [{"nope": 1}, {"namespaces": "a"}, {"maxCheckpointSeconds": -1},
                {"dryRun": "yes"}, {"evictAttempts": True}, ["list"]]:
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
    info = convert.pod_info(pre)
    got = [name for name, labels in nodes.items()
           if convert.node_allows(convert.node_info(node_json(name, labels=labels)), [info])]
    assert got == allowed
