"""The simulator honours a plan's timing (policies.planner.timing): the preemptor's node stays
reserved
while the plan waits, victims stop at their checkpoint, their end or the deadline, and the wait
is charged as delay; and the wait-then-evict baseline."""

import math
from dataclasses import replace

import pytest

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.planner import timing
from ckpt_preempt.policies.sim import engine, planners, workload
from tests.sim.test_engine import job, nodes

HOUR = 3600.0
ARRIVAL = HOUR + 720.0  # the high-priority pod: 12 min after the victim's 1 h checkpoint
IDEAL = engine.SimConfig().without_costs()  # exact reports, no restore: times are exact


def _world(victim: workload.Job) -> workload.Workload:
    high = job(1, ARRIVAL, 1, priority=1000, qos="LS", duration=600.0)
    return workload.Workload(jobs=(victim, high), compress=1.0, offered_load=1.0,
                             extra_pods=0, window=3 * HOUR, capacity_gpus=1,
                             params=workload.WorkloadParams())


def _run(victim, policy, cfg=IDEAL):
    return engine.Simulation(_world(victim), nodes(1, gpus=1), policy, cfg).run()


def _periodic(interval_min=15):
    return replace(job(0, 0.0, 1, duration=20 * HOUR), checkpoint=CheckpointMode.PERIODIC,
                   interval=interval_min * 60.0)


def test_the_plan_waits_for_the_next_checkpoint_and_charges_the_wait_as_delay():
    # checkpoints every 15 min: at 1h, next at 1h15, 3 min after the high pod arrives
    timed = _run(_periodic(), planners.TIMING_POLICY)
    plain = _run(_periodic(), planners.DRAIN_POLICY)
    assert (timed.preemptions, timed.victims) == (1, 1)
    assert timed.lost_work_gpu_hours == pytest.approx(0.0, abs=1e-9)  # evicted at its checkpoint
    assert timed.delay_gpu_hours == pytest.approx((180.0 - IDEAL.grace_seconds) / HOUR)
    assert timed.preemptor_wait_p50_s == pytest.approx(180.0)
    # without timing: the 12 min since the checkpoint, plus the grace period
    assert plain.lost_work_gpu_hours == pytest.approx((720.0 + IDEAL.grace_seconds) / HOUR)
    assert plain.delay_gpu_hours == 0.0


def test_a_checkpoint_beyond_the_cap_is_not_waited_for():
    timed = _run(_periodic(interval_min=60), planners.TIMING_POLICY)
    plain = _run(_periodic(interval_min=60), planners.DRAIN_POLICY)
    assert timed.lost_gpu_hours == plain.lost_gpu_hours
    assert timed.delay_gpu_hours == plain.delay_gpu_hours == 0.0


@pytest.mark.parametrize("policy", [planners.TIMING_POLICY, planners.WAIT_THEN_EVICT])
def test_a_victim_that_ends_while_the_plan_waits_is_not_evicted(policy):
    ending = job(0, 0.0, 1, duration=ARRIVAL + 200.0)  # never checkpoints; ends in 200 s
    r = _run(ending, policy)
    assert (r.preemptions, r.victims, r.lost_work_gpu_hours) == (1, 0, 0.0)
    assert r.restart_gpu_hours == 0.0
    assert r.delay_gpu_hours == pytest.approx((200.0 - IDEAL.grace_seconds) / HOUR)
    assert r.lost_gpu_hours == pytest.approx(r.delay_gpu_hours)  # the total counts the wait
    assert r.preemptor_wait_p50_s == pytest.approx(200.0)


def test_without_declared_ends_the_same_victim_is_evicted_at_once():
    ending = job(0, 0.0, 1, duration=ARRIVAL + 200.0)
    r = _run(ending, planners.TIMING_POLICY, replace(IDEAL, declared_end_share=0.0))
    assert (r.victims, r.delay_gpu_hours) == (1, 0.0)
    assert r.lost_work_gpu_hours == pytest.approx((ARRIVAL + IDEAL.grace_seconds) / HOUR)


def test_wait_then_evict_waits_past_our_cap_where_ours_evicts():
    ending = job(0, 0.0, 1, duration=ARRIVAL + 800.0)  # beyond the 600 s cap, within 15 min
    ours = _run(ending, planners.TIMING_POLICY)
    theirs = _run(ending, planners.WAIT_THEN_EVICT)
    assert (ours.victims, theirs.victims) == (1, 0)
    assert theirs.delay_gpu_hours == pytest.approx((800.0 - IDEAL.grace_seconds) / HOUR)


def test_a_report_later_than_the_margin_means_eviction_at_the_deadline():
    # reports arrive 120 s after the checkpoint, more than the planner's 60 s margin: the plan
    # expects the 1h15 checkpoint seen by 1h16, does not see it, and evicts then; the victim
    # loses what it ran since its (unreported) checkpoint, the preemptor the whole wait
    cfg = replace(IDEAL, report_lag_seconds=120.0)
    r = _run(_periodic(), planners.TIMING_POLICY, cfg)
    deadline = HOUR + 900.0 + timing.MARGIN_SECONDS - ARRIVAL  # seconds after the plan
    assert r.preemptor_wait_p50_s == pytest.approx(deadline)
    assert r.delay_gpu_hours == pytest.approx((deadline - cfg.grace_seconds) / HOUR)
    assert r.lost_work_gpu_hours == pytest.approx(timing.MARGIN_SECONDS / HOUR)


def test_a_seeded_share_of_jobs_declares_its_end_each_off_by_at_most_the_error():
    from ckpt_preempt.policies.sim import planner_view

    ids = range(2000)
    half = [planner_view.declares_end(seed=7, job_id=i, share=0.5) for i in ids]
    assert 0.45 < sum(half) / len(half) < 0.55
    assert half == [planner_view.declares_end(seed=7, job_id=i, share=0.5) for i in ids]
    assert all(planner_view.declares_end(seed=7, job_id=i, share=1.0) for i in ids)
    assert not any(planner_view.declares_end(seed=7, job_id=i, share=0.0) for i in ids)
    errors = [planner_view.end_error(seed=7, job_id=i, origin=0.0, most=0.25) for i in ids]
    assert all(-0.25 <= e <= 0.25 for e in errors) and min(errors) < -0.2 < 0.2 < max(errors)
    assert planner_view.end_error(seed=7, job_id=1, origin=0.0, most=0.0) == 0.0
    # a new run (origin) draws a new error
    assert planner_view.end_error(seed=7, job_id=1, origin=0.0, most=0.25) != \
        planner_view.end_error(seed=7, job_id=1, origin=HOUR, most=0.25)


@pytest.mark.parametrize("error", [0.0, 0.5])
def test_the_planner_sees_the_declared_end_the_knobs_give(error):
    ending = job(0, 0.0, 1, duration=ARRIVAL + 200.0)
    cfg = replace(IDEAL, declared_end_error=error)
    sim = engine.Simulation(_world(ending), nodes(1, gpus=1), planners.TIMING_POLICY, cfg)
    js = engine.JobState(ending)
    js.origin, js.start = 100.0, 100.0
    declared = sim._model(js, 0, "node-0", 200.0).expected_end
    true_end = js.origin + js.remaining
    assert abs(declared - true_end) <= error * js.remaining
    assert (declared == true_end) == (error == 0.0)
    silent = engine.Simulation(_world(ending), nodes(1, gpus=1), planners.TIMING_POLICY,
                               replace(cfg, declared_end_share=0.0))
    assert silent._model(js, 0, "node-0", 200.0).expected_end is None


def test_ends_from_progress_are_off_by_a_share_of_the_time_left_and_declared_again_rarely():
    """SimConfig.declared_end_from_progress: the checkpoint agent's estimate, whose error is
    the run's misjudged rate times the time left, so it closes in on the true end; the pods
    show a new end only once it moved by the agent's threshold."""
    from ckpt_preempt.policies.model.annotations import END_REDECLARE_MIN_SECONDS

    long_run = job(0, 0.0, 1, duration=10 * HOUR)
    cfg = replace(IDEAL, declared_end_error=0.5, declared_end_from_progress=True)
    sim = engine.Simulation(_world(long_run), nodes(1, gpus=1), planners.TIMING_POLICY, cfg)
    js = engine.JobState(long_run)
    js.origin, js.start = 0.0, 0.0
    true_end = js.origin + js.remaining
    declared = sim._model(js, 0, "node-0", 0.0).expected_end
    assert declared != true_end  # the seeded error: off by up to half the run at its start
    for left in (4 * HOUR, HOUR, 600.0, 120.0):
        t = true_end - left
        estimate = sim._progress_end(js, t, declared)
        assert abs(estimate - true_end) <= 0.5 * left + 1e-6 or estimate == declared
        if estimate != declared:
            assert abs(estimate - declared) > END_REDECLARE_MIN_SECONDS
            declared = estimate
    # minutes from its end the declaration is within the error of what is left
    assert abs(declared - true_end) <= 0.5 * 600.0 + END_REDECLARE_MIN_SECONDS
    # an estimate that moved by less than the threshold leaves the declaration as it is
    estimate = sim._progress_end(js, true_end - 120.0, -math.inf)  # nothing shown yet
    near = estimate + END_REDECLARE_MIN_SECONDS / 2
    assert sim._progress_end(js, true_end - 120.0, near) == near
