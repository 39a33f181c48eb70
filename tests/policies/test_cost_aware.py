"""cost-aware: the planner's search and gang handling with every checkpoint fact removed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from ckpt_preempt.policies.baselines import cost_aware
from ckpt_preempt.policies.model.model import CheckpointMode, UnknownCheckpoint
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import preemption
from tests.policies.builders import gpu_node, make_pod, pending, snapshot
from tests.policies.test_properties import cases

AWARE = preemption.PlannerConfig(drain=False)


def _two_nodes(old_ckpt=None, **old):
    """An old pod that may have checkpointed, and a younger one that never did."""
    a = make_pod("old", node="a", age=2 * 3600.0, checkpoint_age=old_ckpt, **old)
    b = make_pod("young", node="b", age=3600.0)
    return snapshot([gpu_node("a", 1), gpu_node("b", 1)], [a, b])


def test_ignores_a_fresh_checkpoint_the_checkpoint_aware_planner_uses():
    snap = _two_nodes(old_ckpt=60.0, mode=CheckpointMode.PERIODIC)
    aware = preemption.plan(snap, [pending("hi")], AWARE)
    blind = cost_aware.plan(snap, [pending("hi")])
    assert [v.name for v in aware.victims] == ["old"]
    assert [v.name for v in blind.victims] == ["young"]
    assert blind.policy == cost_aware.POLICY
    assert blind.lost_gpu_seconds == pytest.approx(3600.0)


def test_never_drains_an_on_request_pod():
    snap = _two_nodes(mode=CheckpointMode.ON_REQUEST, checkpoint_seconds=30.0)
    drain = preemption.plan(snap, [pending("hi")], preemption.PlannerConfig(drain=True))
    blind = cost_aware.plan(snap, [pending("hi")], preemption.PlannerConfig(drain=True))
    assert [(v.name, v.drain) for v in drain.victims] == [("old", True)]
    assert [(v.name, v.drain) for v in blind.victims] == [("young", False)]
    assert blind.drain_deadline == snap.now


def test_charges_an_unreported_checkpoint_from_the_start_whatever_the_policy():
    snap = replace(_two_nodes(), unknown_checkpoint=UnknownCheckpoint(kind="assume",
                                                                      seconds=60.0))
    blind = cost_aware.plan(snap, [pending("hi")])
    assert [v.name for v in blind.victims] == ["young"]
    assert blind.lost_gpu_seconds == pytest.approx(3600.0)


def _nobody_checkpoints(snap: Snapshot) -> Snapshot:
    pods = tuple(replace(p, checkpoint=CheckpointMode.NONE, last_checkpoint=None,
                         checkpoint_seconds=None, checkpoint_malformed=False)
                 for p in snap.pods)
    return Snapshot(now=snap.now, nodes=snap.nodes, pods=pods, pdbs=snap.pdbs,
                    recent_preemptions=snap.recent_preemptions)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(sizes=(1, 1, 2, 3)))
def test_equals_checkpoint_aware_where_nobody_checkpoints(case):
    snap = _nobody_checkpoints(case.snap)
    ours = cost_aware.plan(snap, case.preemptor, AWARE)
    theirs = preemption.plan(snap, case.preemptor, AWARE)
    assert ours == replace(theirs, policy=cost_aware.POLICY)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(sizes=(1, 1, 2, 3)))
def test_never_splits_a_gang_and_charges_gpus_times_age(case):
    plan = cost_aware.plan(case.snap, case.preemptor)
    victims = {v.uid for v in plan.victims}
    for v in plan.victims:
        p = case.snap.pod_by_uid[v.uid]
        assert not v.drain
        assert v.lost_gpu_seconds == pytest.approx(p.gpus * (case.snap.now - p.start_time))
        if p.gang is not None:
            assert {q.uid for q in case.snap.gang_pods(p.gang) if q.node} <= victims
