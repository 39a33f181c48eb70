"""The realistic world (policies/sim/worlds.py) and the checkpoint schedule under it
(policies/sim/checkpoint_schedule.py): the optimistic world is the engine's own, the real
schedule never counts a checkpoint that was not durable or that failed, and a realistic replay
charges the truth while the planner sees the declaration."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import engine, sigterm, waits, workload, worlds
from ckpt_preempt.policies.sim.checkpoint_schedule import Schedule, schedule_for
from ckpt_preempt.policies.sim.costs import restore_factor

times = st.floats(0, 1e6, allow_nan=False)


def test_the_optimistic_world_is_the_engines_defaults():
    assert worlds.config(worlds.OPTIMISTIC) == engine.SimConfig()
    assert worlds.params(worlds.OPTIMISTIC) == workload.WorkloadParams()
    real = worlds.config(worlds.REALISTIC)
    assert real.sigterm_save == sigterm.DEFAULT_GRACE and real.declared_end_share < 1
    assert real.periodic_save_seconds and real.checkpoint_failure_share > 0
    assert worlds.params(worlds.REALISTIC).share_silent > 0
    with pytest.raises(ValueError, match="unknown world 'kind'"):
        worlds.config("kind")


@settings(max_examples=300, deadline=None)
@given(st.floats(1, 1e4), times, times)
def test_an_exact_schedule_is_the_engines_formula(interval, origin, t):
    s = Schedule(interval=interval)
    expected = origin if t <= origin else origin + ((t - origin) // interval) * interval
    assert s.exact and s.last(origin, t) == expected


@settings(max_examples=300, deadline=None)
@given(st.floats(10, 1e4), st.floats(0, 600), st.sampled_from([0.0, 0.1, 0.5]),
       st.integers(0, 10**6), times, st.floats(0, 1e5))
def test_the_last_checkpoint_was_durable_and_did_not_fail(interval, save, fail, key, origin,
                                                          later):
    s = Schedule(interval=interval, save_seconds=save, failure_share=fail, key=key)
    t = origin + later
    last = s.last(origin, t)
    assert origin <= last <= t
    if last > origin:
        k = round((last - origin) / interval)
        assert last + save <= t + 1e-6 and not s.failed(origin, k)
    assert s.last(origin, t + interval) >= last  # never goes back
    step, durable = s.next_durable(origin, t)
    assert durable > t and durable == step + save
    # seen as the last once durable (a millisecond on: the exact formula's float rounding, as
    # policies/sim/hindsight.py allows for)
    assert s.last(origin, durable + 1e-3) >= step - 1e-6


def test_drift_moves_the_real_interval_and_nothing_else_moves_without_it():
    kw = dict(seed=3, job_id=7, save=False, failure_share=0.0)
    assert schedule_for(600.0, 60.0, drift=0.0, **kw) == Schedule(interval=600.0, key=(
        3 * 1_000_003 + 7))
    drifted = schedule_for(600.0, 60.0, drift=0.2, **kw).interval
    assert drifted != 600.0 and 480.0 <= drifted <= 720.0
    assert schedule_for(None, 60.0, drift=0.2, **kw) is None


def test_restore_factor_spreads_log_uniformly_within_its_bounds():
    factors = [restore_factor(seed=1, job_id=j, spread=3.0) for j in range(2000)]
    assert all(1 / 3 <= f <= 3 for f in factors)
    below = sum(f < 1 for f in factors) / len(factors)
    assert 0.45 < below < 0.55  # log-uniform: as many below 1 as above
    assert restore_factor(seed=1, job_id=5, spread=1.0) == 1.0


def _job(**kw):
    base = dict(id=1, name="j", arrival=0.0, duration=10 * 3600.0, priority=0, qos="BE",
                members=(workload.Member(name="m", cpu_milli=1, memory_mib=1, gpus=1),),
                checkpoint=CheckpointMode.PERIODIC, interval=1800.0, checkpoint_seconds=120.0)
    return workload.Job(**{**base, **kw})


def test_a_stop_while_a_checkpoint_is_written_keeps_the_one_before():
    js = engine.JobState(_job())
    js.origin = 0.0
    assert js.last_checkpoint(1850.0) == 1800.0  # exact world: durable at once
    js.schedule = schedule_for(1800.0, 120.0, seed=1, job_id=1, drift=0.0, save=True,
                               failure_share=0.0)
    assert js.last_checkpoint(1850.0) == 0.0  # 1800's save ends at 1920
    assert js.last_checkpoint(1920.0) == 1800.0
    assert waits.next_checkpoint(js, 1850.0) == (1800.0, 1920.0)


def test_a_realistic_replay_charges_a_failed_checkpoint_but_plans_on_the_declaration():
    # one GPU; a periodic job whose every checkpoint fails, then a preemptor after 2 h: the
    # planner still sees the declared interval, and the victim loses everything since its start
    low = _job(interval=600.0, checkpoint_seconds=30.0)
    high = _job(id=2, name="h", arrival=2 * 3600.0, duration=600.0, priority=1000, qos="LS",
                checkpoint=CheckpointMode.NONE, interval=None, checkpoint_seconds=None)
    w = workload.Workload(jobs=(low, high), compress=1.0, offered_load=1.0, extra_pods=0,
                          window=4 * 3600.0, capacity_gpus=1, params=workload.WorkloadParams())
    from ckpt_preempt.policies.sim.trace import TraceNode
    node = [TraceNode(name="n0", cpu_milli=1000, memory_mib=1000, gpus=1, model="G")]
    ideal = engine.SimConfig().without_costs()
    exact = engine.Simulation(w, node, "checkpoint-aware", ideal).run()
    failing = engine.Simulation(w, node, "checkpoint-aware", engine.SimConfig(
        **{**ideal.__dict__, "checkpoint_failure_share": 1.0})).run()
    assert exact.preemptions == failing.preemptions == 1
    assert exact.lost_work_gpu_hours < 0.2  # at most one interval and the grace lost
    assert failing.lost_work_gpu_hours == pytest.approx((2 * 3600 + 30) / 3600)


def test_a_world_can_be_put_on_any_configuration_and_taken_off_again():
    real = worlds.config(worlds.REALISTIC, engine.SimConfig(grace_seconds=60.0))
    back = worlds.config(worlds.OPTIMISTIC, real)
    assert back == engine.SimConfig(grace_seconds=60.0)
    silent = worlds.params(worlds.REALISTIC, workload.WorkloadParams(seed=7))
    assert worlds.params(worlds.OPTIMISTIC, silent) == workload.WorkloadParams(seed=7)
