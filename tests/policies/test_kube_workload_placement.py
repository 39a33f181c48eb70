"""kube-workload places a pending PodGroup as kube-scheduler's default profile does
(policies.baselines.kube_placement), and orders victims as MoreImportantVictim does."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.baselines import kube_placement, kube_workload
from ckpt_preempt.policies.baselines.kube_default import KubeDefaultConfig
from ckpt_preempt.policies.model.model import Resources
from tests.policies.builders import gang, gpu_node, make_pod, snapshot
from tests.policies.test_properties import cases

EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_least_allocated_matches_hand_computed_scores():
    # cpu (4000-3000)*100//4000 = 25, memory (10000-5000)*100//10000 = 50, mean 37 (floor)
    assert kube_placement.least_allocated((3000, 5000), (4000, 10000)) == 37
    assert kube_placement.least_allocated((5000, 0), (4000, 10000)) == 50  # over: 0, mean 50
    assert kube_placement.least_allocated((1, 1), (0, 0)) == 0  # nothing allocatable


def test_balanced_allocation_matches_hand_computed_scores():
    # without the pod: 0.5 / 0.5, score 100; with it: 0.75 / 0.5, std 0.125, score 87;
    # the plugin: 50 + (50 + 87 - 100) // 2 = 68
    pod = Resources(cpu_milli=1000, memory_mib=0)
    assert kube_placement.balanced_allocation(pod, (2000, 5000), (4000, 10000)) == 68
    assert kube_placement.balanced_allocation(Resources(), (2000, 5000), (4000, 10000)) == 0


def test_a_missing_request_counts_the_schedulers_defaults():
    assert kube_placement.non_zero(Resources(gpus=1)) == (
        kube_placement.DEFAULT_MILLI_CPU_REQUEST, kube_placement.DEFAULT_MEMORY_REQUEST_MIB)
    assert kube_placement.non_zero(Resources(cpu_milli=5, memory_mib=7)) == (5, 7)


def test_an_emptied_gpu_node_is_chosen_by_cpu_and_memory_left_not_at_random():
    """Two full 8-GPU nodes of low-priority pods; "busy" also runs a peer pod (no GPU) that
    cannot be preempted and takes half its CPU. With the low pods removed both nodes have 8
    GPUs free, a tie on GPUs; kube-scheduler scores cpu and memory, so the member goes to
    "idle" whatever the random source, and only idle's pod is preempted. (The best fit on GPUs
    with random ties took either.)"""
    nodes = [gpu_node("busy", 8, cpu=16_000, mem=65_536), gpu_node("idle", 8, cpu=16_000,
                                                                     mem=65_536)]
    low = [make_pod("low-busy", node="busy", gpus=8, priority=1),
           make_pod("low-idle", node="idle", gpus=8, priority=1)]
    peer = make_pod("peer", node="busy", gpus=0, cpu=8000, priority=100)
    new = gang("new", [None], gpus=8, priority=100)
    for seed in range(16):
        plan = kube_workload.plan(snapshot(nodes, [*low, peer]), new, KubeDefaultConfig(seed=seed))
        assert plan.target_nodes == ("idle",), seed
        assert {v.name for v in plan.victims} == {"low-idle"}, seed


def test_at_one_priority_the_larger_group_is_reprieved_first():
    """Room for one of two groups to stay: MoreImportantVictim keeps the larger one, although
    the smaller started earlier (the start time only breaks ties of equal size)."""
    big = gang("big", ["a", "a", "a"], age=60.0, cpu=100, mem=100)
    small = gang("small", ["a", "a"], age=7200.0, cpu=100, mem=100)
    plan = kube_workload.plan(snapshot([gpu_node("a", 6)], [*big, *small]),
                              gang("new", [None], gpus=2, priority=100))
    assert {v.name for v in plan.victims} == {p.name for p in small}


def test_equal_scores_go_to_the_go_heap_root_not_always_the_first():
    assert kube_placement.heap_root([5, 5, 5]) == 0
    assert kube_placement.heap_root([1, 5, 5]) == 1  # the first of the top scores here
    assert kube_placement.heap_root([5, 1, 9, 9]) == 3  # but the heap's layout decides


def test_the_walk_starts_at_the_offset_among_equal_nodes():
    nodes = [gpu_node(n, 1) for n in ("a", "b", "c")]
    load = kube_placement.ClusterLoad(snapshot(nodes, []))
    pod = make_pod("p", gpus=1)
    assert [load.select_host(pod, ["a", "b", "c"], k) for k in range(3)] == [
        ("a", 3), ("b", 3), ("c", 3)]  # below 100 nodes every node is walked


def test_a_large_cluster_walks_only_until_enough_nodes_fit():
    """Above 100 nodes kube-scheduler stops at numFeasibleNodesToFind fitting nodes: 200 equal
    nodes, 100 to find (50 - 200/125 = 49 % is 98, below the floor of 100), so the best node
    past the first 100 is never seen."""
    assert [kube_placement.feasible_nodes_to_find(n) for n in (99, 100, 200, 1000, 6000)] == [
        99, 100, 100, 420, 300]
    names = [f"n{i:03d}" for i in range(200)]
    nodes = [gpu_node(n, 1, cpu=4000) for n in names[:150]] + [gpu_node(n, 1, cpu=64_000)
                                                               for n in names[150:]]
    load = kube_placement.ClusterLoad(snapshot(nodes, []))
    pod = make_pod("p", gpus=1, cpu=2000)
    assert load.select_host(pod, names, 0) == ("n000", 100)
    assert load.select_host(pod, names, 120)[0] in names[150:]  # the roomier ones are walked


def test_members_are_placed_in_queue_order_by_name():
    members = gang("new", [None, None, None], priority=100)
    shuffled = [members[2], members[0], members[1]]
    assert [p.name for p in kube_placement.member_order(shuffled)] == [p.name for p in members]


@EXAMPLES
@given(case=cases(sizes=(2, 3)), seed=st.integers(0, 2**16))
def test_a_victim_unit_shares_a_node_with_a_member(case, seed):
    """A unit with no pod where a member lands always fits back where it ran, so it is
    reprieved: every victim unit has a pod on a member's node."""
    plan = kube_workload.plan(case.snap, case.preemptor, KubeDefaultConfig(seed=seed))
    targets = {pl.node for pl in plan.placements}
    for g in plan.victim_groups:
        assert {v.node for v in g.victims} & targets, g


@EXAMPLES
@given(case=cases(sizes=(2, 3)), seed=st.integers(0, 2**16))
def test_each_member_lands_on_a_top_scoring_node(case, seed):
    """Replaying the plan's placements on the emptied cluster, each member's node is one it
    fits on with the top score, the earlier members assumed."""
    plan = kube_workload.plan(case.snap, case.preemptor, KubeDefaultConfig(seed=seed))
    if not plan.feasible or not plan.victims:
        return
    priority = min(p.priority for p in case.preemptor)
    load = kube_placement.ClusterLoad(case.snap)
    for p in case.snap.pods:
        if p.node is not None and kube_workload.potential_victim(
                kube_workload.unit_pods(case.snap, p), priority):
            load.remove(p.requests, p.node)
    by_uid = {p.uid: p for p in case.preemptor}
    open_nodes = [n.name for n in case.snap.nodes if n.closed is None]
    for pl in plan.placements:
        pod = by_uid[pl.pod_uid]
        fits = [n for n in open_nodes if load.fits(pod.requests, n)]
        assert pl.node in fits
        assert load.score(pod.requests, pl.node) == max(load.score(pod.requests, n)
                                                        for n in fits)
        load.add(pod.requests, pl.node)
