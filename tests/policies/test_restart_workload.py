"""A restart's fixed part, charged once per evicted workload (``restart_workload_gpu_seconds``,
the controller's ``restartCostGpuSecondsPerWorkload``): with it, two small victims can cost more
than one larger one, and a gang pays it once, not per member."""

from __future__ import annotations

import pytest

from ckpt_preempt.policies.baselines import oracle
from ckpt_preempt.policies.planner import preemption
from ckpt_preempt.policies.planner.preemption import PlannerConfig
from tests.policies.builders import gang, gpu_node, make_pod, pending, snapshot

FIXED = 200.0  # GPU-seconds per evicted workload


def _cluster(*, small_as_gang: bool = False):
    # node x: one 2-GPU victim, 150 s of work (300 GPU-s); node y: two 1-GPU victims, 100 s
    # each (200 GPU-s in all), as two pods or as one gang of two
    big = make_pod("big", node="x", priority=1, gpus=2, age=150.0)
    if small_as_gang:
        small = gang("pair", ["y", "y"], priority=1, age=100.0)
    else:
        small = [make_pod(f"small-{i}", node="y", priority=1, age=100.0) for i in range(2)]
    return snapshot([gpu_node("x", 2), gpu_node("y", 2)], [big, *small])


def _plan(snap, fixed: float):
    cfg = PlannerConfig(drain=False, timing=False, restart_workload_gpu_seconds=fixed)
    return preemption.plan(snap, [pending("hi", priority=10, gpus=2)], cfg), cfg


def test_without_the_term_two_small_victims_are_cheaper():
    got, _ = _plan(_cluster(), 0.0)
    assert {p.node for p in got.placements} == {"y"}
    assert got.lost_gpu_seconds == pytest.approx(200.0)


def test_with_the_term_each_evicted_workload_pays_it_and_the_one_larger_victim_wins():
    got, cfg = _plan(_cluster(), FIXED)
    assert {p.node for p in got.placements} == {"x"}
    assert [v.name for v in got.victims] == ["big"]
    assert got.lost_gpu_seconds == pytest.approx(300.0 + FIXED)  # the plan's charge counts it
    best = oracle.solve(_cluster(), [pending("hi", priority=10, gpus=2)], cfg)
    assert best.lost_gpu_seconds == pytest.approx(got.lost_gpu_seconds)


def test_a_gang_pays_the_term_once_not_per_member():
    got, _ = _plan(_cluster(small_as_gang=True), FIXED)
    assert {p.node for p in got.placements} == {"y"}
    assert got.lost_gpu_seconds == pytest.approx(200.0 + FIXED)
