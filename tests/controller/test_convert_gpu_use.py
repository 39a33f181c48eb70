"""hwprobe's gpu-use annotation through the controller's conversion: a good report reaches the
planner's Node, a bad or stale one is a node problem and leaves the worst case."""

from __future__ import annotations

import json

from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model import gpu_use
from tests.controller.test_convert import NOW, node_json, pod_json

TOPOLOGY = json.dumps({"schema": "hwprobe/v1", "gpu_count": 8, "verified": True,
                       "nvlink_domains": [[0, 1, 2, 3], [4, 5, 6, 7]]})


def report(pods, observed="2027-01-15T07:59:00Z"):
    return json.dumps({"schema": gpu_use.SCHEMA, "observed": observed, "gpu_count": 8,
                       "pods": [{"namespace": "team", "name": n, "gpus": g} for n, g in pods]})


def convert_node(value):
    node = node_json("n", topology=TOPOLOGY)
    if value is not None:
        node["metadata"]["annotations"][gpu_use.ANNOTATION] = value
    pods = []
    for name in ("a", "b"):
        p = pod_json(name, node="n", gpus=4)
        p["status"]["startTime"] = "2027-01-15T07:00:00Z"
        pods.append(records.pod_info(p))
    out = convert.snapshot(now=NOW, nodes=[records.node_info(node)], pods=pods, pdbs=[],
                           scope=convert.Scope(), limits=ann.Limits())
    return out.snapshot.nodes[0], out.node_problems


def test_a_report_reaches_the_planners_node():
    node, problems = convert_node(report([("a", [0, 1, 2, 3]), ("b", [4, 5, 6, 7])]))
    assert problems == {}
    assert node.gpu_use.known == (("uid-a", frozenset({0, 1, 2, 3})),
                                  ("uid-b", frozenset({4, 5, 6, 7})))
    assert node.gpu_use.unknown == 0 and node.gpu_use.orphans == frozenset()


def test_no_annotation_no_problem():
    node, problems = convert_node(None)
    assert node.gpu_use is None and problems == {}


def test_bad_and_stale_reports_are_node_problems_and_change_nothing():
    for value, says in [("{", "not JSON"),
                        (report([], observed="2027-01-15T07:00:00Z"), "s old"),
                        (report([("a", [0, 1])]), "gives pod team/a 2 GPUs, it requests 4")]:
        node, problems = convert_node(value)
        assert node.gpu_use is None
        assert problems["n"].startswith(f"{gpu_use.ANNOTATION}: ") and says in problems["n"]
