"""The exhaustive oracle against hand-computed optima, and the planner against the oracle."""

from __future__ import annotations

import pytest

from ckpt_preempt.policies.baselines import oracle
from ckpt_preempt.policies.model.model import CheckpointMode, NvlinkNeed, RejectReason
from ckpt_preempt.policies.planner import preemption
from ckpt_preempt.policies.planner.preemption import PlannerConfig
from tests.policies.builders import gang, gpu_node, make_pod, pending, snapshot, split_domains


def _lone_preemptor(gpus=1, **kw):
    return [pending("hi", gpus=gpus, **kw)]


def _case_cheapest_of_two():
    return snapshot([gpu_node("n", 2)], [make_pod("a", node="n", age=100.0),
                                          make_pod("b", node="n", age=200.0)]), _lone_preemptor()


def _case_two_small_beat_one_big():
    pods = [make_pod("big", node="n", gpus=2, age=500.0),  # 1000 GPU-s
            make_pod("b", node="n", age=300.0), make_pod("c", node="n", age=400.0)]
    return snapshot([gpu_node("n", 4)], pods), _lone_preemptor(gpus=2)


def _case_across_nodes():
    pods = [make_pod("a", node="node-a", age=3600.0), make_pod("b", node="node-b", age=60.0)]
    return snapshot([gpu_node("node-a", 1), gpu_node("node-b", 1)], pods), _lone_preemptor()


def _case_gang_unit():
    pods = gang("g", ["node-a", "node-b"], checkpoint_age=100.0)
    pods.append(make_pod("lone", node="node-c", age=250.0))
    nodes = [gpu_node("node-a", 1), gpu_node("node-b", 1), gpu_node("node-c", 1)]
    return snapshot(nodes, pods), _lone_preemptor()


def _case_drained():
    pods = [make_pod("ask", node="n", age=9000.0, mode=CheckpointMode.ON_REQUEST,
                     checkpoint_seconds=30.0),
            make_pod("fresh", node="n", age=9000.0, checkpoint_age=60.0)]
    return snapshot([gpu_node("n", 2)], pods), _lone_preemptor()


def _case_nvlink_island():
    pods = [make_pod(f"v{i}", node="n", age=100.0 * (i + 1)) for i in range(4)]
    return snapshot([split_domains("n", 4, 4)], pods), _lone_preemptor(
        gpus=4, nvlink=NvlinkNeed.REQUIRED
    )


def _case_fits():
    return snapshot([gpu_node("n", 2)], [make_pod("a", node="n")]), _lone_preemptor()


def _case_gang_preemptor_two_nodes():
    pods = [make_pod("a", node="node-a", gpus=2, age=100.0),
            make_pod("b", node="node-b", gpus=2, age=50.0),
            make_pod("c", node="node-c", gpus=2, age=400.0)]
    nodes = [gpu_node(f"node-{x}", 2) for x in "abc"]
    return snapshot(nodes, pods), gang("new", [None, None], gpus=2, priority=100)


CASES = [
    pytest.param(_case_cheapest_of_two, 100.0, {"uid-a"}, id="cheapest of two pods"),
    pytest.param(_case_two_small_beat_one_big, 700.0, {"uid-b", "uid-c"},
                 id="two small victims beat one big"),
    pytest.param(_case_across_nodes, 60.0, {"uid-b"}, id="cheapest node"),
    pytest.param(_case_gang_unit, 200.0, {"default/seed/g"}, id="a gang unit costs its whole loss"),
    pytest.param(_case_drained, 30.0, {"uid-ask"}, id="a drained victim costs its checkpoint"),
    pytest.param(_case_nvlink_island, 600.0, {"uid-v0", "uid-v1", "uid-v2"},
                 id="NVLink: one busy GPU left still guarantees a whole island"),
    pytest.param(_case_fits, 0.0, set(), id="fits without preemption"),
    pytest.param(_case_gang_preemptor_two_nodes, 300.0, {"uid-a", "uid-b"},
                 id="gang preemptor on the two cheapest nodes"),
]


@pytest.mark.parametrize(("build", "optimum", "units"), CASES)
def test_oracle_finds_the_hand_computed_optimum(build, optimum, units):
    snap, preemptor = build()
    got = oracle.solve(snap, preemptor)
    assert got.feasible
    assert got.lost_gpu_seconds == pytest.approx(optimum)
    assert set(got.unit_ids) == units


@pytest.mark.parametrize(("build", "optimum", "units"), CASES)
def test_planner_matches_the_oracle_on_simple_cases(build, optimum, units):
    snap, preemptor = build()
    got = preemption.plan(snap, preemptor)
    assert got.feasible
    assert got.lost_gpu_seconds == pytest.approx(optimum)
    assert {g.gang or g.victims[0].uid for g in got.victim_groups} == units


def test_gang_first_member_on_its_second_cheapest_node_when_that_is_cheaper_overall():
    # Member by member, the first takes the cheapest node (A, 4000) and the second then needs
    # a gang victim (4800) whose eviction alone places both: 8800. Trying the first member on
    # its next-cheapest node finds the optimum, 4800.
    pods = [make_pod("lone", node="A", gpus=4, age=1000.0)]
    pods += gang("g", ["B", "C"], gpus=4, checkpoint_age=600.0)
    snap = snapshot([gpu_node(n, 4) for n in "ABC"], pods)
    members = gang("new", [None, None], gpus=4, priority=100)
    best = oracle.solve(snap, members)
    assert best.lost_gpu_seconds == pytest.approx(4800.0)
    greedy = preemption.plan(snap, members, PlannerConfig(gang_first_member_alternatives=0,
                                                          joint_seeds=0))
    assert greedy.lost_gpu_seconds == pytest.approx(8800.0)
    # evicting the spread gang g first (policies.planner.gang_joint) finds it as well
    joint = preemption.plan(snap, members, PlannerConfig(gang_first_member_alternatives=0))
    assert joint.lost_gpu_seconds == pytest.approx(4800.0)
    got = preemption.plan(snap, members)
    assert got.lost_gpu_seconds == pytest.approx(4800.0)
    assert {v.name for v in got.victims} == {"g-0", "g-1"}
    assert sorted(p.node for p in got.placements) == ["B", "C"]
    # the explanation says why the first member's cheapest node was passed over
    passed = [r for r in got.rejections if r.node == "A" and "rest of the gang" in r.detail]
    assert [r.reason for r in passed] == [RejectReason.COSTLIER]


def test_gang_members_share_a_node_freed_by_one_victim():
    # Two 2-GPU members. Alone, each is cheapest on node A (a 2-GPU pod, 2 x 1000 = 2000): the
    # member-by-member plan evicts it, then the 4-GPU pod on A too (4 x 600 = 2400), 4400 in
    # all. Placing both members together evicts only the 4-GPU pod and the 2-GPU one stays.
    pods = [make_pod("small", node="A", gpus=2, age=1000.0),
            make_pod("wide", node="A", gpus=4, age=600.0),
            make_pod("busy", node="A", gpus=2, age=5000.0)]
    snap = snapshot([gpu_node("A", 8)], pods)
    members = gang("new", [None, None], gpus=2, priority=100)
    best = oracle.solve(snap, members)
    got = preemption.plan(snap, members)
    assert best.lost_gpu_seconds == pytest.approx(2400.0)
    assert got.lost_gpu_seconds == pytest.approx(2400.0)
    assert [v.name for v in got.victims] == ["wide"]
    assert [p.node for p in got.placements] == ["A", "A"]


@pytest.mark.parametrize(
    ("pods", "preemptor"),
    [
        pytest.param([make_pod("h", node="n", priority=100)], _lone_preemptor(),
                     id="only equal-priority pods"),
        pytest.param([make_pod("o", node="n", preemptible=False)], _lone_preemptor(),
                     id="only opted-out pods"),
        pytest.param([make_pod("o", node="n")], _lone_preemptor(gpus=2), id="node too small"),
    ],
)
def test_oracle_and_planner_agree_on_infeasible(pods, preemptor):
    snap = snapshot([gpu_node("n", 1)], pods)
    assert not oracle.solve(snap, preemptor).feasible
    assert not preemption.plan(snap, preemptor).feasible


def test_oracle_gives_up_past_its_limit():
    pods = [make_pod(f"p{i}", node=f"n{i}", age=float(i + 1)) for i in range(12)]
    snap = snapshot([gpu_node(f"n{i}", 1) for i in range(12)], pods)
    with pytest.raises(oracle.OracleLimit):
        oracle.solve(snap, _lone_preemptor(gpus=2), max_sets=50)
