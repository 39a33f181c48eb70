"""The simulator's named policies: greedy-checkpoint, the greedy-cover baseline."""

import pytest

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import planners
from tests.policies.builders import gpu_node, make_pod, pending, snapshot

HOUR = 3600.0


def _plan(name, snap, pods, restart=0.0):
    return planners.planner_for(name, 600.0, 0.0, restart)(snap, pods, 1)


def _two_gpu_choice():
    """One 4-GPU node, full: a (1 GPU, saved 10 min ago), b (2 GPUs, 6 min ago, 12 GPU-min)
    and c (1 GPU, 20 min ago). A 2-GPU preemptor: b alone loses 12 GPU-min; cheapest first
    takes a (10) and then b (12): 22 GPU-min for 3 GPUs."""
    pods = [
        make_pod("a", node="n", gpus=1, checkpoint_age=600.0, mode=CheckpointMode.PERIODIC),
        make_pod("b", node="n", gpus=2, checkpoint_age=360.0, mode=CheckpointMode.PERIODIC),
        make_pod("c", node="n", gpus=1, checkpoint_age=1200.0, mode=CheckpointMode.PERIODIC),
    ]
    return snapshot([gpu_node("n", 4)], pods), [pending("hi", gpus=2)]


def test_greedy_checkpoint_takes_the_cheapest_victims_first_where_the_search_finds_less():
    snap, pre = _two_gpu_choice()
    exact = _plan(planners.DRAIN_POLICY, snap, pre)
    greedy = _plan(planners.GREEDY_POLICY, snap, pre)
    assert sorted(v.name for v in exact.victims) == ["b"]
    assert exact.lost_gpu_seconds == pytest.approx(720.0)
    assert greedy.policy == planners.GREEDY_POLICY and greedy.feasible
    assert sorted(v.name for v in greedy.victims) == ["a", "b"]
    assert greedy.lost_gpu_seconds == pytest.approx(600.0 + 720.0)


def test_greedy_checkpoint_weighs_checkpoints_and_restarts_like_ours():
    # where one victim suffices, greedy and exact agree: the freshest checkpoint goes, and the
    # restart charge is added per evicted GPU
    pods = [
        make_pod("stale", node="n1", gpus=1, age=10 * HOUR, checkpoint_age=3 * HOUR,
                 mode=CheckpointMode.PERIODIC),
        make_pod("fresh", node="n2", gpus=1, age=10 * HOUR, checkpoint_age=120.0,
                 mode=CheckpointMode.PERIODIC),
    ]
    snap = snapshot([gpu_node("n1", 1), gpu_node("n2", 1)], pods)
    greedy = _plan(planners.GREEDY_POLICY, snap, [pending("hi")], restart=300.0)
    assert [v.name for v in greedy.victims] == ["fresh"]
    assert greedy.lost_gpu_seconds == pytest.approx(120.0 + 300.0)


def test_greedy_checkpoint_is_a_named_baseline():
    assert planners.GREEDY_POLICY in planners.BASELINES
    assert planners.GREEDY_POLICY in planners.POLICIES
    assert planners.DRAIN_POLICY not in planners.BASELINES
    with pytest.raises(ValueError, match="greedy-checkpoint"):
        planners.planner_for("greedy", 600.0)


def test_named_policies_keep_their_order_and_refuse_unknown_or_empty_lists_in_one_line():
    assert planners.named(" checkpoint-aware, kube-default ,") == ("checkpoint-aware",
                                                                   "kube-default")
    for text in ("kube-default,no-such", " , "):
        with pytest.raises(ValueError) as e:
            planners.named(text)
        assert "\n" not in str(e.value) and "known: kube-default" in str(e.value)
