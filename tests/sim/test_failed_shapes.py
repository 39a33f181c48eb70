"""The simulator skips asking a policy again what it just failed to plan (``failed_shapes`` in
policies/sim/planner_view.py): a speed-up only, so every result must be the same as when each
pending preemptor is planned afresh, and the skip must actually happen."""

from dataclasses import asdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_preempt.controller.app import trace_files
from ckpt_preempt.policies.sim import experiment, planners, workload
from ckpt_preempt.policies.sim.engine import Simulation
from ckpt_preempt.policies.sim.planner_view import PlannerView
from tests.sim.test_engine import HOUR, nodes, pod

EVERY_POLICY = tuple(dict.fromkeys((*planners.POLICIES, *planners.KNOWN)))


def _run(w, used, policy, config, *, memo: bool, monkeypatch) -> tuple[dict, int]:
    """The policy's result and how often the policy itself was asked."""
    with monkeypatch.context() as m:
        if not memo:
            m.setattr(PlannerView, "_repeats", lambda self, plan, job: False)
        sim = Simulation(w, used, policy, config)
        asked = 0
        plan_fn = sim.plan_fn

        def counted(*args):
            nonlocal asked
            asked += 1
            return plan_fn(*args)

        sim.plan_fn = counted
        return asdict(sim.run()), asked


def _crowded(seed: int, gang_share: float) -> tuple[workload.Workload, list]:
    """Long low-priority jobs fill four nodes; a burst of high-priority ones waits for room,
    several of the same shape at once."""
    pods = [pod(f"be{i}", "BE", 1 + i % 2, i, 40 * HOUR) for i in range(30)]
    pods += [pod(f"ls{i}", "LS", 2 + 2 * (i % 3), 4 * HOUR + i * 30, 20 * HOUR)
             for i in range(24)]
    params = workload.WorkloadParams(seed=seed, scale=1.0, load=0.9, window_hours=12,
                                     gang_share=gang_share, gang_sizes=(2, 4))
    used = nodes()
    return workload.generate(pods, used, params), used


@pytest.mark.parametrize("policy", EVERY_POLICY)
def test_every_policy_gives_the_same_result_with_fewer_asks(policy, monkeypatch):
    w, used = _crowded(seed=5, gang_share=0.5)
    config = experiment.Cell().config
    fresh, asked_fresh = _run(w, used, policy, config, memo=False, monkeypatch=monkeypatch)
    memo, asked_memo = _run(w, used, policy, config, memo=True, monkeypatch=monkeypatch)
    assert memo == fresh
    assert fresh["plans"] == memo["plans"] and fresh["plans_failed"] == memo["plans_failed"]
    assert asked_memo < asked_fresh, "no ask was skipped: the test shows nothing"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(1, 10_000), gang_share=st.sampled_from((0.0, 0.5, 1.0)),
       policy=st.sampled_from(EVERY_POLICY))
def test_skipping_never_changes_a_result(seed, gang_share, policy):
    w, used = _crowded(seed, gang_share)
    config = experiment.Cell().config
    with pytest.MonkeyPatch.context() as m:
        fresh, _ = _run(w, used, policy, config, memo=False, monkeypatch=m)
        memo, _ = _run(w, used, policy, config, memo=True, monkeypatch=m)
    assert memo == fresh


def test_a_bundled_replay_week_is_unchanged():
    """One seed of the openb replay protocol, where pending preemptors pile up, under the
    policy whose skips are the narrowest (seeded ties: one-pod preemptors no node can take)."""
    pods, trace_nodes = trace_files.load("openb")
    cell = experiment.Cell(workload="openb", protocol="replay")
    w, used = experiment.build(cell, 3, pods, trace_nodes)
    with pytest.MonkeyPatch.context() as m:
        fresh, asked_fresh = _run(w, used, "kube-default", cell.config, memo=False,
                                  monkeypatch=m)
        memo, asked_memo = _run(w, used, "kube-default", cell.config, memo=True, monkeypatch=m)
    assert memo == fresh
    assert asked_memo < asked_fresh / 2
