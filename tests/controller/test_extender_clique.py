"""The extender's filter for members of an ``nvlink: required`` gang on a cluster with NVLink
cliques: the clique its bound or nominated members use; for the first member, the one clique
the planner ranks first for the whole gang (``policies.model.cliques.rank``)."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_preempt.controller.extender.extender_cliques import clique_rule
from ckpt_preempt.controller.extender.extender_model import build_view
from ckpt_preempt.controller.extender.extender_verbs import (
    PreemptSettings,
    filter_nodes,
    pending_pod,
    preempt,
)
from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.policies.model import cliques
from ckpt_preempt.policies.model.annotations import Limits
from ckpt_preempt.policies.model.model import RejectReason
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.model.topology import CLIQUE_KEY, SCHEMA
from tests.controller.test_extender import pod_json

CA = "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.1"
CB = "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.2"
CC = "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.3"
GANG = {"scheduling.ai/gang-name": "train", "scheduling.ai/gang-total": "3"}
PAIR = {"scheduling.ai/gang-name": "train", "scheduling.ai/gang-total": "2"}
NVLINK = {"ckpt-preempt.io/nvlink": "required"}
NOW = time.time()
NODES = {"a1": CA, "a2": CA, "b1": CB, "b2": CB, "plain": None}


def node(name: str, clique: str | None, *, cordoned: bool = False, taints=()) -> dict:
    report = {"schema": SCHEMA, "gpu_count": 4, "nvlink_domains": [[0, 1, 2, 3]],
              CLIQUE_KEY: clique}
    return {"metadata": {"name": name,
                         "annotations": {records.TOPOLOGY_ANNOTATION: json.dumps(report)}},
            "spec": {"unschedulable": cordoned, "taints": list(taints)},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "4"}}}


def racks(**trays: int) -> dict[str, str | None]:
    """``racks(a=1, b=2)``: trays a1, b1, b2 in cliques CA, CB (CC for c), and ``plain``."""
    ids = {"a": CA, "b": CB, "c": CC}
    return {**{f"{r}{i}": ids[r] for r, n in trays.items() for i in range(1, n + 1)},
            "plain": None}


def member(name: str, *, node=None, nominated=None, labels=GANG, annotations=NVLINK) -> dict:
    doc = pod_json(name, gpus=4, node=node, labels=labels, annotations=annotations)
    if nominated:
        doc["status"]["nominatedNodeName"] = nominated
    return doc


def busy(on: str) -> dict:
    """A pod of no gang holding all four GPUs of tray ``on``."""
    return pod_json(f"busy-{on}", gpus=4, node=on)


def view_of(pods: list[dict], nodes=NODES, cordoned=(), tainted=()):
    taint = {"key": "dedicated", "value": "other", "effect": "NoSchedule"}
    return build_view([records.node_info(node(n, c, cordoned=n in cordoned,
                                              taints=[taint] if n in tainted else []))
                       for n, c in nodes.items()], [records.pod_info(p) for p in pods])


def run(pods: list[dict], pod: dict, nodes=NODES, cordoned=(), tainted=()) -> dict:
    return filter_nodes(view_of(pods, nodes, cordoned, tainted),
                        {"Pod": pod, "NodeNames": list(nodes)})


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


@pytest.mark.parametrize("nodes, pods", [
    (racks(a=1, b=2), []),  # A's one tray cannot hold the pair
    (racks(a=2, b=2), [busy("a2")]),  # A could, only by preemption; B needs none
], ids=["a-too-small", "a-needs-preemption"])
def test_the_first_member_goes_only_to_the_clique_that_holds_the_whole_gang(nodes, pods):
    got = run(pods, member("m0", labels=PAIR), nodes)
    assert got["NodeNames"] == ["b1", "b2"]
    assert got["FailedNodes"] == {}
    ruled_out = got["FailedAndUnresolvableNodes"]
    assert set(ruled_out) == set(nodes) - {"b1", "b2"}
    assert all(RejectReason.NVLINK_OTHER_CLIQUE.value in why and CB in why
               and "8 GPUs" in why for why in ruled_out.values())


@pytest.mark.parametrize("nodes, pods, chosen", [
    (racks(a=3, b=2), [], "b"),  # both fit free: the tighter (8 free GPUs against 12)
    (racks(a=3, b=3), [busy("a3")], "a"),  # tighter by free GPUs, not by size
    (racks(a=2, b=2), [], "a"),  # a tie: by name
    # neither fits free: fewest free first (the most to preempt, the larger clique kept)
    (racks(a=2, b=3), [busy("a1"), busy("a2"), busy("b1"), busy("b2")], "a"),
])
def test_the_first_member_takes_the_tightest_clique_then_by_name(nodes, pods, chosen):
    got = run(pods, member("m0", labels=PAIR), nodes)
    assert set(got["NodeNames"]) | set(got["FailedNodes"]) == {n for n in nodes
                                                               if n.startswith(chosen)}


def test_a_second_member_gets_the_same_clique_before_the_first_ones_binding_is_seen():
    nodes = racks(a=1, b=2, c=3)
    first = run([], member("m0", labels=PAIR), nodes)
    second = run([member("m0", labels=PAIR)], member("m1", labels=PAIR), nodes)
    assert first == second
    assert first["NodeNames"] == ["b1", "b2"]


def test_pending_members_and_unseen_ones_count_toward_the_gang():
    # a gang of 3 (12 GPUs): B's 8 are too few, whether the others are pending or unseen
    nodes = racks(a=1, b=2, c=3)
    for pods in ([], [member("m1")], [member("m1"), member("m2")]):
        assert run(pods, member("m0"), nodes)["NodeNames"] == ["c1", "c2", "c3"]
    # no declared size: the members seen are the gang (one tray's worth, then three)
    named = {"scheduling.ai/gang-name": "train"}
    assert run([], member("m0", labels=named), nodes)["NodeNames"] == ["a1"]
    two_more = [member("m1", labels=named), member("m2", labels=named)]
    assert run(two_more, member("m0", labels=named), nodes)["NodeNames"] == ["c1", "c2", "c3"]


def test_no_clique_large_enough_rules_out_every_node():
    got = run([], member("m0"))  # a gang of 3 (12 GPUs), cliques of 8
    assert got["NodeNames"] == [] and got["FailedNodes"] == {}
    assert set(got["FailedAndUnresolvableNodes"]) == set(NODES)
    for why in got["FailedAndUnresolvableNodes"].values():
        assert why == (f"{RejectReason.NVLINK_NO_CLIQUE.value} (the gang needs 12 GPUs, the "
                       "largest clique has 8 on nodes it may use)")


@pytest.mark.parametrize("closed", [{"cordoned": {"b2"}}, {"tainted": {"b2"}}],
                         ids=["cordoned", "tainted"])
def test_trays_the_member_may_not_use_do_not_count(closed):
    # B's two trays would hold the pair without preemption, but b2 is closed to it: A
    got = run([busy("a1")], member("m0", labels=PAIR), racks(a=2, b=2), **closed)
    assert got["NodeNames"] == ["a2"]
    assert set(got["FailedNodes"]) == {"a1"}
    assert set(got["FailedAndUnresolvableNodes"]) == {"b1", "b2", "plain"}


def test_a_clique_that_holds_the_gang_only_by_preemption_stays_resolvable():
    # A cannot hold the pair at all; B can once b1's pod is gone
    got = run([busy("b1")], member("m0", labels=PAIR), racks(a=1, b=2))
    assert got["NodeNames"] == ["b2"]
    assert "0 free" in got["FailedNodes"]["b1"]  # kube-scheduler may preempt there
    assert set(got["FailedAndUnresolvableNodes"]) == {"a1", "plain"}


def test_preempt_drops_candidates_outside_the_gangs_clique():
    # kube-scheduler offers every node its own filters failed (no GPU free): a1 too
    nodes = racks(a=1, b=2)
    pods = [busy("a1"), busy("b1"), busy("b2")]
    pod = member("m0", labels=PAIR)
    pod["spec"]["priority"] = 1000
    args = {"Pod": pod,
            "NodeNameToMetaVictims": {n: {"Pods": [{"UID": f"uid-busy-{n}"}]}
                                      for n in ("a1", "b1", "b2")}}
    out, dropped = preempt(view_of(pods, nodes), args, PreemptSettings())
    assert set(out["NodeNameToMetaVictims"]) == {"b1", "b2"}
    assert RejectReason.NVLINK_OTHER_CLIQUE.value in dropped["a1"]


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
    assert convert.to_node(records.node_info(node("a1", CA)))[0].clique == CA
    assert convert.to_node(records.node_info(node("plain", None)))[0].clique is None
    bad = node("bad", "rack one")  # malformed: the whole report is ignored, with a warning
    got, problem = convert.to_node(records.node_info(bad))
    assert got.clique is None and got.topology is None and CLIQUE_KEY in problem


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=st.lists(st.lists(st.tuples(st.sampled_from((0, 2, 4)), st.booleans()),
                                min_size=1, max_size=4), min_size=1, max_size=3),
       size=st.integers(2, 4), gpus=st.sampled_from((1, 2, 4)))
def test_the_first_members_clique_is_the_planners_and_holds_the_gang(layout, size, gpus):
    """Random cliques of trays (some busy, some cordoned) and gangs: the first member's clique
    is the one the planner ranks first for the whole gang (``gang_cliques``), its open trays
    have GPUs enough for it, and a second member that sees the first one pending (binding not
    yet seen) gets the same."""
    ids = (CA, CB, CC)
    nodes, pods, cordoned = {}, [], set()
    for c, trays in enumerate(layout):
        for t, (used, closed) in enumerate(trays):
            name = f"{'abc'[c]}{t + 1}"
            nodes[name] = ids[c]
            if used:
                pods.append(pod_json(f"busy-{name}", gpus=used, node=name))
            if closed:
                cordoned.add(name)
    labels = {**GANG, "scheduling.ai/gang-total": str(size)}
    gang = [pod_json(f"m{i}", gpus=gpus, labels=labels, annotations=NVLINK)
            for i in range(size)]
    view = view_of(pods, nodes, cordoned)
    first = clique_rule(view, pending_pod({"Pod": gang[0]}))
    second = clique_rule(view_of([*pods, gang[0]], nodes, cordoned),
                         pending_pod({"Pod": gang[1]}))
    assert first == second
    planned = [convert.to_pod(records.pod_info(p), NOW, Limits(), True)[0]
               for p in [*gang, *pods]]
    members = planned[:size]
    snapshot = Snapshot(now=NOW, nodes=tuple(nv.node for nv in view.nodes.values()),
                        pods=tuple(planned))
    ranked = cliques.gang_cliques(snapshot, members, {})
    assert first.cliques == frozenset(ranked[:1])
    for chosen in first.cliques:
        room = sum(nv.node.allocatable.gpus for nv in view.nodes.values()
                   if nv.node.clique == chosen and not nv.info.unschedulable)
        assert room >= size * gpus
