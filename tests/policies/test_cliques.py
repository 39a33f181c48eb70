"""Multi-node NVLink cliques (GB200/GB300 NVL72): an ``nvlink: required`` gang that spans
nodes is placed, and preempted for, inside one clique (``policies.model.cliques``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model import snapshot_io
from ckpt_preempt.policies.model.model import NvlinkNeed, RejectReason
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.model.topology import (
    ANNOTATION,
    CLIQUE_KEY,
    TopologyError,
    parse_node_topology,
    single_domain,
)
from ckpt_preempt.policies.planner import preemption
from tests.policies.builders import NOW, gpu_node, make_pod

CA = "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.1"
CB = "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.2"
REQUIRED = NvlinkNeed.REQUIRED


def tray(name: str, clique: str | None, gpus: int = 4):
    """A GB200 compute tray: 4 GPUs in one NVLink domain, in a rack's clique (or none)."""
    return replace(gpu_node(name, gpus, topology=single_domain(gpus)), clique=clique)


def gang(n: int, gpus: int = 4, nvlink: NvlinkNeed = REQUIRED, name: str = "train"):
    return [make_pod(f"{name}-{i}", gpus=gpus, priority=100, nvlink=nvlink,
                     gang=f"default/{name}") for i in range(n)]


def busy(node: str, hours: float, gpus: int = 4, name: str | None = None):
    """A low-priority pod on ``node`` that loses ``hours`` of work per GPU if evicted."""
    return make_pod(name or f"on-{node}", node=node, gpus=gpus, age=hours * 3600)


def plan(nodes, pods, preemptor):
    return preemption.plan(Snapshot(now=NOW, nodes=tuple(nodes), pods=tuple(pods)),
                           preemptor)


def clique_of(nodes):
    return {n.name: n.clique for n in nodes}


def test_a_gang_is_refused_across_two_cliques():
    nodes = [tray("a1", CA), tray("b1", CB)]
    members = gang(2)
    got = plan(nodes, [], members)
    assert not got.feasible
    assert RejectReason.NVLINK_NO_CLIQUE.value in got.reason
    # the same gang without the NVLink requirement spreads over both
    free = plan(nodes, [], gang(2, nvlink=NvlinkNeed.NONE))
    assert free.feasible and free.target_nodes == ("a1", "b1")


def test_the_clique_that_loses_least_is_chosen():
    nodes = [tray("a1", CA), tray("a2", CA), tray("b1", CB), tray("b2", CB)]
    # without cliques a1 + b1 (1 h + 2 h) would be cheapest; inside one clique B (5 h) is
    pods = [busy("a1", 1), busy("a2", 9), busy("b1", 2), busy("b2", 3)]
    got = plan(nodes, pods, gang(2))
    assert got.feasible
    assert got.target_nodes == ("b1", "b2")
    assert {v.node for v in got.victims} == {"b1", "b2"}
    assert got.lost_gpu_seconds == pytest.approx((2 + 3) * 3600 * 4)


def test_preemption_frees_room_in_one_clique_rather_than_using_two():
    # a1 and b1 are free: without cliques the gang would take them and evict nobody
    nodes = [tray("a1", CA), tray("a2", CA), tray("b1", CB), tray("b2", CB)]
    pods = [busy("a2", 8), busy("b2", 1)]
    got = plan(nodes, pods, gang(2))
    assert got.feasible
    assert got.target_nodes == ("b1", "b2")
    assert [v.name for v in got.victims] == ["on-b2"]
    flat = [replace(n, clique=None) for n in nodes]
    assert plan(flat, pods, gang(2)).target_nodes == ("a1", "b1")  # no cliques: as before


def test_a_free_clique_is_taken_without_preemption_tightest_first():
    nodes = [tray("a1", CA), tray("a2", CA), tray("a3", CA),
             tray("b1", CB), tray("b2", CB)]
    got = plan(nodes, [], gang(2))
    assert got.feasible and not got.victims
    assert got.target_nodes == ("b1", "b2")  # the smaller clique fits exactly


def test_running_members_fix_the_clique():
    # clique B is free, but the gang already runs in A: the rest must join it there
    nodes = [tray("a1", CA), tray("a2", CA), tray("a3", CA), tray("b1", CB), tray("b2", CB)]
    members = gang(3)
    running = replace(members[0], node="a1", start_time=NOW - 60)
    got = plan(nodes, [running, busy("a2", 5), busy("a3", 6)], members[1:])
    assert got.feasible
    assert got.target_nodes == ("a2", "a3")
    assert {v.node for v in got.victims} == {"a2", "a3"}


def test_a_running_member_outside_every_clique_leaves_no_clique():
    nodes = [tray("a1", CA), tray("a2", CA), tray("plain", None, 8)]
    members = gang(2)
    running = replace(members[0], node="plain", start_time=NOW - 60)
    got = plan(nodes, [running], members[1:])
    assert not got.feasible
    assert RejectReason.NVLINK_NO_CLIQUE.value in got.reason
    assert {r.node for r in got.rejections
            if r.reason is RejectReason.NVLINK_OTHER_CLIQUE} == {"a1", "a2", "plain"}


def test_nodes_without_a_clique_are_not_used_when_some_have_one():
    nodes = [tray("plain1", None), tray("plain2", None), tray("a1", CA), tray("a2", CA)]
    got = plan(nodes, [busy("a2", 1)], gang(2))
    assert got.feasible and got.target_nodes == ("a1", "a2")


def test_a_single_multi_gpu_pod_stays_within_one_node_anywhere():
    nodes = [tray("plain", None, 8), tray("a1", CA)]
    pod = make_pod("solo", gpus=8, priority=100, nvlink=REQUIRED)
    got = plan(nodes, [], [pod])
    assert got.feasible and got.target_nodes == ("plain",)


def test_a_gang_of_one_is_not_bound_to_a_clique():
    nodes = [tray("plain", None), tray("a1", CA)]
    got = plan(nodes, [busy("a1", 1)], gang(1))
    assert got.feasible and got.target_nodes == ("plain",) and not got.victims


def test_no_clique_has_gpus_enough():
    nodes = [tray("a1", CA), tray("b1", CB), tray("b2", CB)]
    got = plan(nodes, [], gang(3))
    assert not got.feasible
    assert RejectReason.NVLINK_NO_CLIQUE.value in got.reason


def _report(**extra) -> str:
    doc = {"schema": "hwprobe/v1", "gpu_count": 4, "nvlink_domains": [[0, 1, 2, 3]],
           "verified": None, **extra}
    return json.dumps(doc)


def test_the_clique_is_read_from_the_topology_report():
    assert parse_node_topology(_report(**{CLIQUE_KEY: CA})).clique == CA
    assert parse_node_topology(_report(**{CLIQUE_KEY: None})).clique is None
    assert parse_node_topology(_report()).clique is None


@pytest.mark.parametrize("bad", ["", "rack-1", 7, ["a.1"], "x" * 40 + ".1", "abc.1.2"])
def test_a_malformed_clique_is_refused(bad):
    with pytest.raises(TopologyError, match=CLIQUE_KEY):
        parse_node_topology(_report(**{CLIQUE_KEY: bad}))


# ----------------------------------------------------------------------------- property

CLIQUES = (CA, CB, None)


@st.composite
def clusters(draw):
    nodes = []
    for i in range(draw(st.integers(2, 6))):
        nodes.append(tray(f"n{i}", draw(st.sampled_from(CLIQUES)), draw(st.sampled_from([4, 8]))))
    pods = []
    for node in nodes:
        left = node.allocatable.gpus
        while left and draw(st.booleans()):
            g = draw(st.integers(1, left))
            left -= g
            pods.append(make_pod(node=node.name, gpus=g, age=draw(st.integers(1, 40)) * 900,
                                 priority=draw(st.sampled_from([0, 200]))))
    size = draw(st.integers(2, 4))
    members = [make_pod(f"m{i}", gpus=draw(st.integers(1, 4)), priority=100,
                        nvlink=REQUIRED if i == 0 or draw(st.booleans()) else NvlinkNeed.NONE,
                        gang="default/g") for i in range(size)]
    running = draw(st.integers(0, size - 1))
    for i in range(running):  # some members already run, on a node where they fit
        room = [n for n in nodes
                if n.allocatable.gpus - sum(p.gpus for p in pods if p.node == n.name)
                >= members[i].gpus]
        if room:
            host = draw(st.sampled_from(room))
            pods.append(replace(members[i], node=host.name, start_time=NOW - 600))
    pending = [m for m in members if all(p.uid != m.uid for p in pods)]
    return nodes, pods, pending


@given(clusters())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_feasible_plan_for_an_nvlink_gang_uses_one_clique(case):
    nodes, pods, pending = case
    if not pending:
        return
    got = plan(nodes, pods, pending)
    if not got.feasible:
        return
    of = clique_of(nodes)
    used = {of[p.node] for p in pods if p.gang == "default/g"}
    used |= {of[p.node] for p in got.placements}
    hosts = {p.node for p in pods if p.gang == "default/g"} | set(got.target_nodes)
    if any(c is not None for c in of.values()):
        assert len(used) == 1 and None not in used, (used, got)
    else:
        assert hosts  # no clique anywhere: placed as before, on any nodes


def test_a_snapshot_file_carries_the_clique_in_its_topology_annotation():
    node = {"name": "a1", "gpus": 4, "annotations": {ANNOTATION: _report(**{CLIQUE_KEY: CA})}}
    snap, _, problems = snapshot_io.from_dict({
        "now": NOW, "nodes": [node, {"name": "plain", "gpus": 4}],
        "pods": [{"name": "p", "gpus": 1}], "preemptor": "p"})
    assert not problems
    assert [n.clique for n in snap.nodes] == [CA, None]


def test_the_reason_names_a_few_cliques_and_counts_the_rest():
    # six racks of two trays, one tray of each held by a pod the gang may not preempt
    nodes = [tray(f"r{i}-{t}", f"6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.{i}")
             for i in range(6) for t in range(2)]
    pods = [make_pod(f"keep{i}", node=f"r{i}-0", gpus=4, priority=1000) for i in range(6)]
    got = plan(nodes, pods, gang(2))
    assert not got.feasible
    assert got.reason.count("fits nowhere") == 3 and "3 more clique(s) alike" in got.reason
