"""The extender's filter for members of an ``nvlink: required`` gang on a cluster with NVLink
cliques: the clique its bound or nominated members use, any clique for the first member."""

from __future__ import annotations

import json

from ckpt_preempt.controller import convert
from ckpt_preempt.controller.extender_model import build_view
from ckpt_preempt.controller.extender_verbs import filter_nodes
from ckpt_preempt.policies.model import RejectReason
from ckpt_preempt.policies.topology import CLIQUE_KEY, SCHEMA
from tests.controller.test_extender import pod_json

CA = "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.1"
CB = "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.2"
GANG = {"scheduling.ai/gang-name": "train", "scheduling.ai/gang-total": "3"}
NVLINK = {"ckpt-preempt.io/nvlink": "required"}
NODES = {"a1": CA, "a2": CA, "b1": CB, "b2": CB, "plain": None}


def node(name: str, clique: str | None) -> dict:
    report = {"schema": SCHEMA, "gpu_count": 4, "nvlink_domains": [[0, 1, 2, 3]],
              CLIQUE_KEY: clique}
    return {"metadata": {"name": name,
                         "annotations": {convert.TOPOLOGY_ANNOTATION: json.dumps(report)}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "4"}}}


def member(name: str, *, node=None, nominated=None, labels=GANG, annotations=NVLINK) -> dict:
    doc = pod_json(name, gpus=4, node=node, labels=labels, annotations=annotations)
    if nominated:
        doc["status"]["nominatedNodeName"] = nominated
    return doc


def run(pods: list[dict], pod: dict, nodes=NODES) -> dict:
    view = build_view([convert.node_info(node(n, c)) for n, c in nodes.items()],
                      [convert.pod_info(p) for p in pods])
    return filter_nodes(view, {"Pod": pod, "NodeNames": list(nodes)})


def test_a_member_goes_to_the_clique_its_bound_member_uses():
    got = run([member("m0", node="b1")], member("m1"))
    assert got["NodeNames"] == ["b2"]
    assert "0 free" in got["FailedNodes"]["b1"]  # m0 holds its GPUs: preemption may help
    assert set(got["FailedAndUnresolvableNodes"]) == {"a1", "a2", "plain"}
    assert CB in got["FailedAndUnresolvableNodes"]["a1"]
    assert RejectReason.NVLINK_OTHER_CLIQUE.value in got["FailedAndUnresolvableNodes"]["a1"]


def test_a_nominated_member_fixes_the_clique_too():
    got = run([member("m0", nominated="a2")], member("m1"))
    assert got["NodeNames"] == ["a1", "a2"]


def test_the_first_member_may_use_any_clique_but_no_node_outside_one():
    got = run([], member("m0"))
    assert got["NodeNames"] == ["a1", "a2", "b1", "b2"]
    assert set(got["FailedAndUnresolvableNodes"]) == {"plain"}


def test_members_in_two_cliques_leave_no_node():
    got = run([member("m0", node="a1"), member("m1", node="b1")], member("m2"))
    assert got["NodeNames"] == []
    assert all(RejectReason.NVLINK_NO_CLIQUE.value in why
               for why in got["FailedAndUnresolvableNodes"].values())


def test_without_the_rule_every_node_stays():
    # no NVLink asked, no gang, or no clique anywhere: the clique rule does not apply
    assert run([member("m0", node="b1")], member("m1", annotations={}))["NodeNames"] \
        == list(NODES)
    assert run([], member("solo", labels={}))["NodeNames"] == list(NODES)
    flat = dict.fromkeys(NODES)
    # only the within-node rule: b1's GPUs are m0's
    assert run([member("m0", node="b1")], member("m1"), flat)["NodeNames"] \
        == ["a1", "a2", "b2", "plain"]


def test_convert_reads_the_clique_from_the_hwprobe_report():
    assert convert.to_node(convert.node_info(node("a1", CA)))[0].clique == CA
    assert convert.to_node(convert.node_info(node("plain", None)))[0].clique is None
    bad = node("bad", "rack one")  # malformed: the whole report is ignored, with a warning
    got, problem = convert.to_node(convert.node_info(bad))
    assert got.clique is None and got.topology is None and CLIQUE_KEY in problem
