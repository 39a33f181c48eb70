"""Kueue's classical preemption (v0.17.0): the candidate order criterion by criterion
(``common/ordering.go`` ``CandidatesOrdering``), the minimal set (``fillBackWorkloads``), whole
workloads, and the banded boost of ``ours-under-kueue``."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.baselines import kueue_classical as kq
from ckpt_preempt.policies.model.model import PodHold, Resources
from ckpt_preempt.policies.planner import cost
from tests.policies.builders import NOW, gang, gpu_node, make_pod, pending, snapshot

HOUR = 3600.0


def unsaved_work(pods, snap) -> float:
    """A boost by unsaved work, unbucketed (the simulator passes the controller's rule)."""
    return sum(p.gpu_share * cost.work_since_checkpoint(p, snap.now, snap.unknown_checkpoint_age)
               for p in pods)


def _order(pods, preemptor=None, boost=None) -> list[str]:
    """The candidates' pod names, in Kueue's order (a workload's pods joined by '+')."""
    snap = snapshot([gpu_node("n1", 8), gpu_node("n2", 8)], pods)
    got = kq.candidates(snap, [preemptor or pending("p", priority=100)], boost)
    return ["+".join(sorted(p.name for p in c.pods)) for c in got]


def _pod(name, *, priority=0, age=HOUR, **kw):
    return make_pod(name, node=kw.pop("node", "n1"), priority=priority, age=age, **kw)


ORDER_CASES = {
    "lower priority first": (
        [_pod("high", priority=50), _pod("low", priority=10)], ["low", "high"]),
    "equal priority: most recently admitted first": (
        [_pod("old", age=5 * HOUR), _pod("new", age=HOUR)], ["new", "old"]),
    "already evicted first, whatever its priority": (
        [_pod("low", priority=0), _pod("evicted", priority=50, terminating=True)],
        ["evicted", "low"]),
    "lower priority before more recently admitted": (
        [_pod("new", priority=50, age=60.0), _pod("old", priority=10, age=9 * HOUR)],
        ["old", "new"]),
    "equal priority and admission: the workload key breaks the tie": (
        [_pod("b"), _pod("a")], ["a", "b"]),
    "at or above the preemptor's priority: no candidate": (
        [_pod("equal", priority=100), _pod("above", priority=200), _pod("below", priority=99)],
        ["below"]),
    "not preemptible: no candidate": (
        [_pod("pinned", preemptible=False), _pod("free")], ["free"]),
    "a gang is one candidate, admitted when its last pod started": (
        [*gang("g", ["n1", "n2"], age=2 * HOUR), _pod("single", age=3 * HOUR)],
        ["g-0+g-1", "single"]),
}


@pytest.mark.parametrize(("pods", "want"), ORDER_CASES.values(), ids=ORDER_CASES.keys())
def test_candidates_ordering(pods, want):
    assert _order(pods) == want


def test_a_held_pod_protects_its_whole_workload():
    members = gang("g", ["n1", "n2"])
    members[1] = replace(members[1], held=PodHold.AT_PREEMPTION_BOUND)
    assert _order([*members, _pod("single")]) == ["single"]


BOOST_CASES = {
    "boost orders within a priority: least unsaved work first": (
        [_pod("stale", checkpoint_age=3 * HOUR), _pod("fresh", checkpoint_age=60.0)],
        ["fresh", "stale"]),
    "boost never crosses a priority": (
        [_pod("fresh-high", priority=50, checkpoint_age=0.0),
         _pod("stale-low", priority=10, checkpoint_age=9 * HOUR)],
        ["stale-low", "fresh-high"]),
    "boost is over the whole workload's GPUs": (
        [_pod("big", gpus=8, checkpoint_age=HOUR), _pod("small", gpus=1, checkpoint_age=2 * HOUR)],
        ["small", "big"]),
}


@pytest.mark.parametrize(("pods", "want"), BOOST_CASES.values(), ids=BOOST_CASES.keys())
def test_ours_under_kueue_boost(pods, want):
    assert _order(pods, boost=unsaved_work) == want


def test_without_the_boost_the_same_pods_go_most_recently_admitted_first():
    pods = [_pod("stale", age=HOUR, checkpoint_age=HOUR),
            _pod("fresh", age=2 * HOUR, checkpoint_age=60.0)]
    assert _order(pods) == ["stale", "fresh"]
    assert _order(pods, boost=unsaved_work) == ["fresh", "stale"]


def _victims(plan) -> set[str]:
    return {v.name for v in plan.victims}


def test_minimal_set_adds_back_an_earlier_candidate_no_longer_needed():
    # order: newest (2 GPUs) then older (6 GPUs); removing both fits the 6-GPU preemptor, and
    # with the older one gone the newest can come back
    pods = [_pod("newest", gpus=2, age=60.0), _pod("older", gpus=6, age=HOUR)]
    plan = kq.plan(snapshot([gpu_node("n1", 8)], pods), [pending("p", gpus=6)])
    assert plan.feasible and _victims(plan) == {"older"}


def test_minimal_set_adds_back_in_reverse_order_of_removal():
    # removed a, b, c (c made it fit); b is tried first and comes back, then a no longer fits
    pods = [_pod("a", gpus=2, age=60.0), _pod("b", gpus=2, age=120.0), _pod("c", gpus=4, age=HOUR)]
    plan = kq.plan(snapshot([gpu_node("n1", 8)], pods), [pending("p", gpus=6)])
    assert _victims(plan) == {"a", "c"}


def test_minimal_set_never_adds_back_the_last_removed():
    # the last one removed made it fit; it stays a victim even if an earlier one was bigger
    targets = kq.select(
        [_cand("x", 4), _cand("y", 4)], lambda free: free["n1"].gpus >= 4,
        {"n1": Resources(gpus=0)})
    assert [c.key for c in targets] == ["x"]


def _cand(key, gpus):
    return kq.Candidate(key=key, pods=(_pod(key, gpus=gpus),), evicted=False, other_queue=False,
                        priority=0, boost=0.0, admitted=NOW)


def test_a_candidate_on_another_node_removed_first_is_added_back():
    pods = [_pod("elsewhere", node="n2", gpus=1, age=60.0), _pod("here", node="n1", gpus=8)]
    plan = kq.plan(snapshot([gpu_node("n1", 8), gpu_node("n2", 2)], pods),
                   [pending("p", gpus=8)])
    assert _victims(plan) == {"here"} and plan.target_nodes == ("n1",)


def test_no_plan_when_every_candidate_together_is_not_enough():
    pods = [_pod("low", gpus=2), _pod("peer", gpus=6, priority=100)]
    plan = kq.plan(snapshot([gpu_node("n1", 8)], pods), [pending("p", gpus=4)])
    assert not plan.feasible and "1 lower-priority workload" in plan.reason


def test_a_preemptor_that_fits_preempts_nobody():
    plan = kq.plan(snapshot([gpu_node("n1", 8)], [_pod("low", gpus=2)]), [pending("p", gpus=4)])
    assert plan.feasible and not plan.victim_groups and plan.placements


def test_a_gang_preemptor_is_placed_whole():
    pods = [_pod("a", node="n1", gpus=8, age=60.0), _pod("b", node="n2", gpus=8, age=HOUR)]
    members = gang("pre", [None, None], gpus=8, priority=100)
    plan = kq.plan(snapshot([gpu_node("n1", 8), gpu_node("n2", 8)], pods), members)
    assert _victims(plan) == {"a", "b"} and len(plan.target_nodes) == 2


@st.composite
def clusters(draw):
    """2-3 nodes of 8 GPUs filled by single pods and 2-4-pod gangs of random priority, age and
    size, and a pending pod or gang of priority 100."""
    nodes = [gpu_node(f"n{i}", 8) for i in range(draw(st.integers(2, 3)))]
    free = {n.name: 8 for n in nodes}
    pods = []
    for k in range(draw(st.integers(1, 8))):
        size = draw(st.sampled_from([1, 1, 2, 4]))
        gpus = draw(st.sampled_from([1, 2, 4]))
        where = [n for n in free if free[n] >= gpus]
        if len(where) < 1:
            break
        picks = [draw(st.sampled_from(where)) for _ in range(size)]
        if any(sum(1 for q in picks if q == n) * gpus > free[n] for n in picks):
            continue
        prio, age = draw(st.sampled_from([0, 10, 100])), draw(st.floats(60.0, 9 * HOUR))
        if size == 1:
            pods.append(_pod(f"s{k}", node=picks[0], gpus=gpus, priority=prio, age=age))
        else:
            pods += gang(f"g{k}", picks, gpus=gpus, priority=prio, age=age)
        for n in picks:
            free[n] -= gpus
    want = draw(st.sampled_from([1, 2, 4, 8]))
    pre = ([pending("p", gpus=want)] if draw(st.booleans())
           else gang("pre", [None, None], gpus=want, priority=100))
    return snapshot(nodes, pods), pre


@settings(max_examples=150, deadline=None)
@given(clusters(), st.booleans())
def test_kueue_never_evicts_part_of_a_gang_and_its_set_is_minimal(case, boosted):
    snap, pre = case
    plan = kq.plan(snap, pre, boost=unsaved_work if boosted else None)
    taken = {v.uid for v in plan.victims}
    for g in plan.victim_groups:  # whole workloads: every running pod of a gang
        if g.gang is not None:
            assert {p.uid for p in snap.gang_pods(g.gang) if p.node} <= taken
    assert all(snap.pod_by_uid[u].priority < 100 for u in taken)
    if not plan.feasible:
        return
    free = {n.name: snap.free(n.name) for n in snap.nodes}
    for u in taken:
        p = snap.pod_by_uid[u]
        free[p.node] = free[p.node] + p.requests
    for pl in plan.placements:  # the preemptor fits where it is placed, victims gone
        pod = next(p for p in pre if p.uid == pl.pod_uid)
        assert pod.requests.fits_in(free[pl.node])
        free[pl.node] = free[pl.node] - pod.requests
    if len(pre) > 1:
        return
    # minimal, for one pod (its fit only grows with free room): none of the victims but the
    # last removed could stay, the others gone
    for g in plan.victim_groups[:-1]:
        back = _free_without(snap, taken - {v.uid for v in g.victims})
        assert kq.place(pre, snap, back) is None, g.reason


def _free_without(snap, uids):
    free = {n.name: snap.free(n.name) for n in snap.nodes}
    for u in uids:
        p = snap.pod_by_uid[u]
        free[p.node] = free[p.node] + p.requests
    return free
