"""kube-workload: DefaultPreemption with KEP-5710 workload-aware preemption."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.baselines import kube_default, kube_workload
from ckpt_preempt.policies.baselines.kube_default import KubeDefaultConfig
from ckpt_preempt.policies.model.snapshot import Snapshot
from tests.policies.builders import gang, gpu_node, make_pod, pdb, pending, snapshot
from tests.policies.test_properties import cases

EXAMPLES = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _victim_uids(plan) -> set[str]:
    return {v.uid for v in plan.victims}


@EXAMPLES
@given(case=cases(sizes=(1, 1, 2, 3)), seed=st.integers(0, 2**16))
def test_never_splits_a_gang(case, seed):
    plan = kube_workload.plan(case.snap, case.preemptor, KubeDefaultConfig(seed=seed))
    victims = _victim_uids(plan)
    assert plan.policy == kube_workload.POLICY
    for uid in victims:
        p = case.snap.pod_by_uid[uid]
        assert p.node is not None and not p.terminating and p.held is None
        assert p.priority < min(q.priority for q in case.preemptor)
        if p.gang is not None:
            running = {q.uid for q in case.snap.gang_pods(p.gang) if q.node is not None}
            assert running <= victims, p.gang
    for g in plan.victim_groups:
        assert len({v.uid for v in g.victims}) == len(g.victims)
        assert {case.snap.pod_by_uid[v.uid].gang for v in g.victims} == {g.gang}


@EXAMPLES
@given(case=cases(sizes=(1, 1, 2, 3)), seed=st.integers(0, 2**16))
def test_a_feasible_plan_fits_on_open_nodes(case, seed):
    plan = kube_workload.plan(case.snap, case.preemptor, KubeDefaultConfig(seed=seed))
    if not plan.feasible:
        return
    snap = case.snap
    free = {n.name: snap.free(n.name) for n in snap.nodes}
    for uid in _victim_uids(plan):
        p = snap.pod_by_uid[uid]
        free[p.node] = free[p.node] + p.requests
    by_uid = {p.uid: p for p in case.preemptor}
    assert {pl.pod_uid for pl in plan.placements} == set(by_uid)
    for pl in plan.placements:
        assert snap.node_by_name[pl.node].closed is None
        free[pl.node] = free[pl.node] - by_uid[pl.pod_uid].requests
        assert by_uid[pl.pod_uid].requests.gpus >= 0
    assert all(f.gpus >= 0 and f.cpu_milli >= 0 and f.memory_mib >= 0 for f in free.values())


def _without_gangs(snap: Snapshot) -> Snapshot:
    return Snapshot(now=snap.now, nodes=snap.nodes,
                    pods=tuple(replace(p, gang=None) for p in snap.pods), pdbs=snap.pdbs,
                    recent_preemptions=snap.recent_preemptions,
                    unknown_checkpoint=snap.unknown_checkpoint)


@EXAMPLES
@given(case=cases(sizes=(1, 1, 2, 3)), seed=st.integers(0, 2**16))
def test_equals_kube_default_without_gangs(case, seed):
    snap = _without_gangs(case.snap)
    preemptor = [replace(p, gang=None) for p in case.preemptor]
    cfg = KubeDefaultConfig(seed=seed)
    ours, theirs = kube_workload.plan(snap, preemptor, cfg), kube_default.plan(snap, preemptor, cfg)
    assert replace(ours, policy=kube_default.POLICY) == theirs


def test_a_gangs_members_elsewhere_count_against_the_node():
    """kube-default takes the younger gang member (and breaks the gang); kube-workload counts
    the gang's other member as a victim too, so the single pod's node has fewer victims."""
    members = gang("train", ["node-a", "node-b"], age=600.0)
    single = make_pod("old", node="node-c", age=7200.0)
    snap = snapshot([gpu_node(n, 1) for n in ("node-a", "node-b", "node-c")], [*members, single])
    for seed in range(6):
        cfg = KubeDefaultConfig(seed=seed)
        theirs = kube_default.plan(snap, [pending("hi")], cfg)
        assert theirs.target_nodes[0] in {"node-a", "node-b"}
        ours = kube_workload.plan(snap, [pending("hi")], cfg)
        assert ours.target_nodes == ("node-c",)
        assert _victim_uids(ours) == {single.uid}


def test_a_pod_preempting_a_gang_member_takes_the_whole_gang():
    members = gang("train", ["node-a", "node-b"], age=600.0)
    snap = snapshot([gpu_node("node-a", 1), gpu_node("node-b", 1)], members)
    plan = kube_workload.plan(snap, [pending("hi")])
    assert _victim_uids(plan) == {p.uid for p in members}
    (group,) = plan.victim_groups
    assert group.gang == "default/seed/train"
    assert group.lost_gpu_seconds == pytest.approx(2 * 600.0)


def test_a_pending_gang_preempts_as_a_whole_across_nodes():
    nodes = [gpu_node("a", 2), gpu_node("b", 2)]
    pods = [make_pod(node=n, priority=1) for n in ("a", "a", "b", "b")]
    new = gang("new", [None, None], gpus=2, priority=100)
    plan = kube_workload.plan(snapshot(nodes, pods), new)
    assert plan.feasible
    assert sorted(pl.node for pl in plan.placements) == ["a", "b"]
    assert _victim_uids(plan) == {p.uid for p in pods}


def test_a_pending_gang_that_cannot_fit_preempts_nothing():
    nodes = [gpu_node("a", 2), gpu_node("b", 2)]
    pods = [make_pod(node="a", priority=1, gpus=2), make_pod(node="b", priority=500, gpus=2)]
    new = gang("new", [None, None], gpus=2, priority=100)
    plan = kube_workload.plan(snapshot(nodes, pods), new)
    assert not plan.feasible and plan.victims == ()


def test_a_pending_gang_that_fits_preempts_nothing():
    nodes = [gpu_node("a", 2), gpu_node("b", 2)]
    plan = kube_workload.plan(snapshot(nodes, [make_pod(node="a", priority=1)]),
                              gang("new", [None, None], priority=100))
    assert plan.feasible and plan.victims == () and len(plan.placements) == 2


def test_at_one_priority_a_group_is_reprieved_before_a_single_pod():
    """Only one of the two may stay; the group is the more important although it is younger."""
    member = gang("old", ["a", "closed"], age=60.0)
    single = make_pod("single", node="a", age=7200.0)
    nodes = [gpu_node("a", 2), gpu_node("closed", 1, unschedulable=True)]
    plan = kube_workload.plan(snapshot(nodes, [*member, single]),
                              gang("new", [None], priority=100))
    assert _victim_uids(plan) == {single.uid}


def test_a_pdb_violating_victim_is_reprieved_first():
    guarded = make_pod("guarded", node="a", age=60.0, labels={"app": "a"})
    other = make_pod("other", node="a", age=7200.0)
    snap = snapshot([gpu_node("a", 2)], [guarded, other], [pdb("guard", {"app": "a"}, 0)])
    plan = kube_workload.plan(snap, gang("new", [None], priority=100))
    assert _victim_uids(plan) == {other.uid}
    assert plan.pdb_violations == 0


def test_a_gang_with_a_higher_priority_member_is_no_victim():
    members = gang("mixed", ["a", "b"])
    members[1] = replace(members[1], priority=500)
    snap = snapshot([gpu_node("a", 1), gpu_node("b", 1), gpu_node("c", 1)],
                    [*members, make_pod(node="c", age=60.0)])
    plan = kube_workload.plan(snap, [pending("hi")])
    assert plan.target_nodes == ("c",)
