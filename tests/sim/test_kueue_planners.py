"""The simulator's Kueue planners: ``kueue-classical`` is Kueue's order, ``ours-under-kueue`` the
same with the priority-boost our controller writes (``policies.kueue.boost``): buckets of unsaved
work, never reaching the next priority in use."""

from __future__ import annotations

import pytest

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import planners
from tests.policies.builders import gpu_node, make_pod, pending, snapshot

HOUR = 3600.0


def _victim(policy: str, pods) -> str:
    plan = planners.planner_for(policy, 600.0)(
        snapshot([gpu_node("n1", 2)], pods), [pending("p", priority=1000)], 1)
    assert plan.feasible
    return "+".join(sorted(v.name for v in plan.victims))


def _pod(name, *, age, checkpoint_age, priority=0):
    return make_pod(name, node="n1", age=age, checkpoint_age=checkpoint_age, priority=priority,
                    mode=CheckpointMode.PERIODIC)


CASES = {
    # both 1 GPU on a full 2-GPU node: one must go
    "classical: the most recently admitted goes, whatever it has not saved": (
        planners.KUEUE_POLICY, [_pod("new-stale", age=HOUR, checkpoint_age=HOUR),
                                _pod("old-fresh", age=9 * HOUR, checkpoint_age=60.0)],
        "new-stale"),
    "ours: the one with less unsaved work goes (a lower bucket)": (
        planners.OURS_UNDER_KUEUE, [_pod("new-stale", age=HOUR, checkpoint_age=HOUR),
                                    _pod("old-fresh", age=9 * HOUR, checkpoint_age=60.0)],
        "old-fresh"),
    "ours: within one bucket, Kueue's order again (most recently admitted)": (
        planners.OURS_UNDER_KUEUE, [_pod("new", age=HOUR, checkpoint_age=1000.0),
                                    _pod("old", age=9 * HOUR, checkpoint_age=1100.0)],
        "new"),
    "ours: the boost never crosses a priority in use": (
        planners.OURS_UNDER_KUEUE, [_pod("p0-stale", age=99 * HOUR, checkpoint_age=99 * HOUR),
                                    _pod("p10-fresh", age=HOUR, checkpoint_age=0.0, priority=10)],
        "p0-stale"),
}


@pytest.mark.parametrize(("policy", "pods", "want"), CASES.values(), ids=CASES.keys())
def test_which_one_goes(policy, pods, want):
    assert _victim(policy, pods) == want


def test_the_rows_plan_as_the_policy_they_replay():
    pods = [_pod("a", age=HOUR, checkpoint_age=HOUR), _pod("b", age=2 * HOUR, checkpoint_age=0.0)]
    for row, (policy, _) in planners.WORLD_ROWS.items():
        if policy != planners.OURS_UNDER_KUEUE:
            assert _victim(row, pods) == _victim(policy, pods)
