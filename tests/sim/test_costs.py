"""The replay's costs beyond unsaved work, each on a tiny hand-built workload whose figures
follow from the arithmetic in the comments: each test fails if its cost were ignored."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import costs, engine, workload
from ckpt_preempt.policies.sim.trace import TraceNode

HOUR = 3600.0
MIN = 60.0
IDEAL = engine.SimConfig().without_costs()  # grace 30 s, drain cap 600 s


def nodes(n=1, gpus=1, model="G"):
    return [TraceNode(name=f"n{i}", cpu_milli=96000, memory_mib=10**6, gpus=gpus, model=model)
            for i in range(n)]


def low(i, arrival=0.0, *, gpus=1, mode=CheckpointMode.NONE, interval=None, ckpt=None,
        duration=20 * HOUR, **kw):
    return workload.Job(
        id=i, name=f"low{i}", arrival=arrival, duration=duration, priority=0, qos="BE",
        members=(workload.Member(name=f"low{i}-0", cpu_milli=1000, memory_mib=1024, gpus=gpus),),
        checkpoint=mode, interval=interval, checkpoint_seconds=ckpt, **kw)


def high(i, arrival, *, gpus=1, duration=600.0):
    return workload.Job(
        id=i, name=f"high{i}", arrival=arrival, duration=duration, priority=1000, qos="LS",
        members=(workload.Member(name=f"high{i}-0", cpu_milli=1000, memory_mib=1024, gpus=gpus),),
        checkpoint=CheckpointMode.NONE, interval=None, checkpoint_seconds=None)


def wl(*jobs, gpus=1, window=6 * HOUR, warmup=0.0):
    return workload.Workload(jobs=tuple(jobs), compress=1.0, offered_load=1.0, extra_pods=0,
                             window=window, capacity_gpus=gpus,
                             params=workload.WorkloadParams(), warmup=warmup)


def run(w, config, policy="checkpoint-aware", n=None):
    return engine.Simulation(w, n or nodes(gpus=w.capacity_gpus), policy, config).run()


def evicted_twice(**kw):
    """One GPU: a job that never checkpoints, evicted at 1 h and again at 2 h by 10-minute
    high-priority pods."""
    return wl(low(0, **kw), high(1, HOUR), high(2, 2 * HOUR))


# -- restore time ------------------------------------------------------------------------

def test_each_eviction_costs_the_restore_time_and_delays_the_job():
    ideal = run(evicted_twice(), IDEAL)
    real = run(evicted_twice(), replace(IDEAL, restore_seconds=300.0))
    # first eviction: 1 h of work + 30 s grace. It restarts when the first pod is done (1 h 10 m
    # 30 s); without a restore it trains from then, with one from 5 min later; the second
    # eviction releases at 2 h 30 s.
    first, restart_2 = HOUR + 30, HOUR + 630
    assert ideal.lost_work_gpu_hours == pytest.approx((first + 2 * HOUR + 30 - restart_2) / HOUR)
    assert real.lost_work_gpu_hours == pytest.approx(
        (first + 2 * HOUR + 30 - restart_2 - 300) / HOUR)
    assert (ideal.restart_gpu_hours, real.restart_gpu_hours) == (0.0, pytest.approx(600 / HOUR))
    assert real.lost_gpu_hours == pytest.approx(real.lost_work_gpu_hours + 600 / HOUR)
    assert len(real.eviction_losses) == 2
    assert sum(real.eviction_losses) == pytest.approx(real.lost_gpu_hours)


def test_a_jobs_own_restore_time_overrides_the_default():
    r = run(evicted_twice(restore_seconds=120.0), replace(IDEAL, restore_seconds=300.0))
    assert r.restart_gpu_hours == pytest.approx(2 * 120 / HOUR)


def test_restore_is_charged_on_every_gpu_of_the_victim():
    w = wl(low(0, gpus=4), high(1, HOUR, gpus=4), gpus=4)
    r = run(w, replace(IDEAL, restore_seconds=300.0))
    assert r.restart_gpu_hours == pytest.approx(4 * 300 / HOUR)


def test_each_evicted_job_also_pays_the_fixed_per_job_restore_term():
    # 4-GPU victim, once: 4 × 300 s per-GPU term plus 500 GPU-s for the job
    w = wl(low(0, gpus=4), high(1, HOUR, gpus=4), gpus=4)
    r = run(w, replace(IDEAL, restore_seconds=300.0, restore_job_gpu_seconds=500.0))
    assert r.restart_gpu_hours == pytest.approx((4 * 300 + 500) / HOUR)
    # two evictions of a 1-GPU job: the fixed term twice
    r = run(evicted_twice(), replace(IDEAL, restore_seconds=0.0, restore_job_gpu_seconds=500.0))
    assert r.restart_gpu_hours == pytest.approx(2 * 500 / HOUR)


def test_the_planners_restart_charge_follows_both_restore_terms():
    cfg = replace(IDEAL, restore_seconds=300.0, restore_job_gpu_seconds=600.0)
    # per GPU and once per workload, as the controller's two knobs say them
    assert cfg.planner_restart == (300.0, 600.0)
    assert replace(cfg, planner_restart_seconds=0.0).planner_restart == (0.0, 0.0)


# -- what the planner is shown -----------------------------------------------------------

def two_periodic_jobs():
    """Two GPUs: X checkpoints hourly, Y every 45 min. A pod arrives at 1 h 20 s: X saved 20 s
    ago, Y 920 s ago, so X is the cheap victim, if the planner knows X's last checkpoint."""
    x = low(0, mode=CheckpointMode.PERIODIC, interval=60 * MIN)
    y = low(1, mode=CheckpointMode.PERIODIC, interval=45 * MIN)
    return wl(x, y, high(2, HOUR + 20), gpus=2)


def test_a_late_report_misleads_the_planner_but_the_charge_is_the_truth():
    on_time = run(two_periodic_jobs(), IDEAL)
    late = run(two_periodic_jobs(), replace(IDEAL, report_lag_seconds=60.0))
    assert on_time.lost_work_gpu_hours == pytest.approx((20 + 30) / HOUR)
    # X's 1 h checkpoint is published at 1 h 1 min: the planner still sees 40 min, so Y goes
    assert late.lost_work_gpu_hours == pytest.approx((920 + 30) / HOUR)


@settings(max_examples=200, deadline=None)
@given(t=st.floats(0, 20 * HOUR), lag=st.floats(0, 600), jitter=st.floats(0, 900),
       restore=st.floats(0, 900), interval=st.sampled_from([None, 900.0, 3600.0]))
def test_a_published_checkpoint_is_never_in_the_future_and_errs_within_the_jitter(
        t, lag, jitter, restore, interval):
    cfg = replace(IDEAL, report_lag_seconds=lag, report_jitter_seconds=jitter)
    job = low(0, mode=CheckpointMode.PERIODIC, interval=interval)
    sim = engine.Simulation(wl(job), nodes(), "checkpoint-aware", cfg)
    js = engine.JobState(job)
    js.start, js.origin = 0.0, min(restore, t)
    shown = sim._published(js, t)
    truth = js.last_checkpoint(t - lag) if js.last_checkpoint(t - lag) <= t else js.start
    assert shown <= t
    assert abs(shown - truth) <= jitter + 1e-6
    assert sim._published(js, t) == shown  # a published time does not change when re-read


def test_jittered_reports_differ_from_the_truth_in_both_directions_but_never_ahead():
    cfg = replace(IDEAL, report_jitter_seconds=300.0)
    job = low(0, mode=CheckpointMode.PERIODIC, interval=900.0)
    sim = engine.Simulation(wl(job), nodes(), "checkpoint-aware", cfg)
    js = engine.JobState(job)
    errors = [sim._published(js, t) - js.last_checkpoint(t) for t in range(1000, 40000, 900)]
    assert min(errors) < -10 and max(errors) > 10
    assert all(abs(e) <= 300 for e in errors)


@given(seed=st.integers(0, 10**6), job=st.integers(0, 10**6), ckpt=st.floats(-1e6, 1e6),
       jitter=st.floats(0, 3600))
def test_report_error_is_seeded_and_bounded(seed, job, ckpt, jitter):
    e = costs.report_error(seed=seed, job_id=job, checkpoint=ckpt, jitter=jitter)
    assert abs(e) <= jitter
    assert e == costs.report_error(seed=seed, job_id=job, checkpoint=ckpt, jitter=jitter)


# -- drains ------------------------------------------------------------------------------

def drained_victim():
    """One GPU: an on-request job (60 s checkpoint, periodic every hour) and a pod at 50 min."""
    victim = low(0, mode=CheckpointMode.ON_REQUEST, interval=60 * MIN, ckpt=60.0)
    return wl(victim, high(1, 50 * MIN))


def test_a_failed_drain_loses_everything_since_the_last_periodic_checkpoint():
    ok = run(drained_victim(), IDEAL, "checkpoint-aware-drain")
    failed = run(drained_victim(), replace(IDEAL, drain_failure_share=1.0),
                 "checkpoint-aware-drain")
    assert (ok.drains_failed, ok.lost_work_gpu_hours) == (0, pytest.approx(60 / HOUR))
    # no checkpoint: 50 min of work and the 60 s the preemptor waited for the deadline
    assert failed.drains_failed == 1
    assert failed.lost_work_gpu_hours == pytest.approx((50 * MIN + 60) / HOUR)


def test_an_overrun_past_the_deadline_loses_as_a_failure_and_one_in_time_costs_its_length():
    late = run(drained_victim(), replace(IDEAL, drain_overrun_share=1.0,
                                         drain_overrun_factor=2.0), "checkpoint-aware-drain")
    assert (late.drains_overrun, late.drains_failed) == (1, 0)
    assert late.lost_work_gpu_hours == pytest.approx((50 * MIN + 60) / HOUR)
    out = costs.drain_outcome(seed=1, job_id=0, nth=0, estimate=60.0, deadline=150.0,
                              failure_share=0.0, overrun_share=1.0, overrun_factor=2.0)
    assert (out.saved, out.overran, out.seconds) == (True, True, 120.0)


def test_drain_outcomes_are_seeded_and_near_their_shares():
    draws = [costs.drain_outcome(seed=7, job_id=j, nth=0, estimate=60.0, deadline=60.0,
                                 failure_share=0.1, overrun_share=0.2, overrun_factor=2.0)
             for j in range(4000)]
    again = costs.drain_outcome(seed=7, job_id=3, nth=0, estimate=60.0, deadline=60.0,
                                failure_share=0.1, overrun_share=0.2, overrun_factor=2.0)
    assert again == draws[3]
    assert 0.08 < sum(d.failed for d in draws) / 4000 < 0.12
    assert 0.17 < sum(d.overran for d in draws) / 4000 < 0.23
    assert not any(d.saved for d in draws if d.failed or d.overran)  # 120 s > 60 s deadline


def test_draining_delays_the_preemptor_beyond_a_plain_kill():
    drained = run(drained_victim(), IDEAL, "checkpoint-aware-drain")
    killed = run(drained_victim(), IDEAL, "checkpoint-aware")
    assert drained.delay_gpu_hours == pytest.approx((60 - 30) / HOUR)
    assert killed.delay_gpu_hours == 0.0
    # the delay is part of what the drain costs: the total counts it
    assert drained.lost_gpu_hours == pytest.approx(drained.lost_work_gpu_hours + (60 - 30) / HOUR)


# -- warm-up and pre-filled jobs ---------------------------------------------------------

def test_evictions_before_the_warm_up_happen_but_are_not_counted():
    prior = replace(IDEAL, charge_prior_work=True)
    full = run(evicted_twice(), prior)
    warm = run(replace(evicted_twice(), warmup=1.5 * HOUR), prior)
    assert (full.preemptions, warm.preemptions) == (2, 1)
    assert full.eviction_losses[1:] == warm.eviction_losses  # the second one, unchanged
    assert warm.lost_gpu_hours == pytest.approx(full.eviction_losses[1])
    # by default only the work done after the warm-up is charged: the second eviction (plan at
    # 2 h, released 30 s later) lost work since the restart at 1 h 10 min 30 s, all after 1.5 h
    # counts from 1.5 h: 30 min 30 s charged, 20 min 30 s prior
    inside = run(replace(evicted_twice(), warmup=1.5 * HOUR), IDEAL)
    assert inside.lost_gpu_hours == pytest.approx((30 * MIN + 30) / HOUR)
    assert inside.prior_work_gpu_hours == pytest.approx((19 * MIN + 30) / HOUR)
    assert warm.preemptions_per_workload == {1: 1}


def test_a_prefilled_job_keeps_its_checkpoint_phase():
    # it ran 40 min before the replay and checkpoints every 30 min: at -10 min, then 20 min.
    # Evicted at 15 min (released 30 s later) it loses 25 min 30 s, not 15 min 30 s; 10 min of
    # them were done before the replay began, charged only when prior work is.
    job = low(0, mode=CheckpointMode.PERIODIC, interval=30 * MIN, done_before=40 * MIN)
    r = run(wl(job, high(1, 15 * MIN)), replace(IDEAL, charge_prior_work=True))
    assert r.lost_work_gpu_hours == pytest.approx((25 * MIN + 30) / HOUR)
    inside = run(wl(job, high(1, 15 * MIN)), IDEAL)
    assert inside.lost_work_gpu_hours == pytest.approx((15 * MIN + 30) / HOUR)
    assert inside.prior_work_gpu_hours == pytest.approx(10 * MIN / HOUR)
    assert inside.lost_gpu_hours_with_prior == pytest.approx(r.lost_gpu_hours)


# -- invariants over random small workloads ----------------------------------------------

@st.composite
def small_workloads(draw):
    n_low = draw(st.integers(1, 6))
    jobs = []
    for i in range(n_low):
        mode = draw(st.sampled_from(list(CheckpointMode)))
        jobs.append(low(
            i, draw(st.floats(0, HOUR)), gpus=draw(st.integers(1, 2)), mode=mode,
            interval=None if mode is CheckpointMode.NONE else draw(st.sampled_from([600., 1800.])),
            ckpt=draw(st.floats(10, 300)), duration=draw(st.floats(600, 5 * HOUR)),
            done_before=draw(st.sampled_from([0.0, 0.0, 1000.0]))))
    for k in range(draw(st.integers(1, 4))):
        jobs.append(high(n_low + k, draw(st.floats(0, 3 * HOUR)), gpus=draw(st.integers(1, 2)),
                         duration=draw(st.floats(60, HOUR))))
    jobs.sort(key=lambda j: j.arrival)
    jobs = [replace(j, id=i) for i, j in enumerate(jobs)]
    return wl(*jobs, gpus=4, window=4 * HOUR, warmup=draw(st.sampled_from([0.0, 1800.0])))


@settings(max_examples=60, deadline=None)
@given(w=small_workloads(), policy=st.sampled_from(["kube-default", "checkpoint-aware",
                                                     "checkpoint-aware-drain"]),
       failure=st.sampled_from([0.0, 0.5]), restore=st.sampled_from([0.0, 300.0]))
def test_the_charge_adds_up_and_is_never_negative(w, policy, failure, restore):
    cfg = replace(engine.SimConfig(), drain_failure_share=failure, restore_seconds=restore,
                  restore_job_gpu_seconds=restore)
    r = run(w, cfg, policy, nodes(2, gpus=2))
    assert r.lost_gpu_hours == pytest.approx(
        r.lost_work_gpu_hours + r.restart_gpu_hours + r.delay_gpu_hours)
    assert r.lost_gpu_hours_with_prior == pytest.approx(
        r.lost_gpu_hours + r.prior_work_gpu_hours)
    assert min(r.lost_work_gpu_hours, r.restart_gpu_hours, r.delay_gpu_hours,
               r.prior_work_gpu_hours) >= 0
    assert all(x >= 0 for x in r.eviction_losses)
    assert sum(r.eviction_losses) + r.delay_gpu_hours == pytest.approx(r.lost_gpu_hours)
    if w.warmup == 0 and all(j.done_before == 0 for j in w.jobs):
        assert r.prior_work_gpu_hours == 0
    assert len(r.eviction_losses) == sum(n * k for n, k in r.preemptions_per_workload.items())
    assert r.drains_failed <= len(r.eviction_losses)
    if restore == 0:
        assert r.restart_gpu_hours == 0
    if policy != "checkpoint-aware-drain":
        assert r.delay_gpu_hours == 0 and r.drains_failed == r.drains_overrun == 0


# -- GPU models (gpu_spec) ---------------------------------------------------------------

def two_models():
    return [TraceNode(name="a", cpu_milli=96000, memory_mib=10**6, gpus=1, model="A"),
            TraceNode(name="b", cpu_milli=96000, memory_mib=10**6, gpus=1, model="B")]


def with_spec(job, spec):
    return replace(job, members=tuple(replace(m, gpu_spec=spec) for m in job.members))


@pytest.mark.parametrize("policy", ["kube-default", "checkpoint-aware"])
def test_a_preemptor_that_names_a_gpu_model_evicts_only_on_that_model(policy):
    # the old job runs on node a (model A) from 0, a young one on node b from 50 min; at 1 h a
    # pod arrives: any model lets the planner take the young one, model A forces the old one
    jobs = [low(0, 0.0), low(1, 50 * MIN)]
    anywhere = run(wl(*jobs, high(2, HOUR), gpus=2), IDEAL, policy, two_models())
    on_a = run(wl(*jobs, with_spec(high(2, HOUR), "A"), gpus=2), IDEAL, policy, two_models())
    assert anywhere.lost_work_gpu_hours == pytest.approx((10 * MIN + 30) / HOUR)
    assert on_a.lost_work_gpu_hours == pytest.approx((HOUR + 30) / HOUR)
    assert on_a.plans_invalid == 0


def test_the_engine_places_a_pod_only_on_a_named_model():
    # node a is free, node b runs a low job: a pod that must run on model B preempts
    jobs = [with_spec(low(0, 0.0), "B"), high(1, HOUR)]
    free_a = run(wl(*jobs, gpus=2), IDEAL, "checkpoint-aware", two_models())
    only_b = run(wl(jobs[0], with_spec(jobs[1], "B|C"), gpus=2), IDEAL, "checkpoint-aware",
                 two_models())
    assert (free_a.preemptions, only_b.preemptions) == (0, 1)


def test_gpu_spec_names_models_separated_by_bars():
    from ckpt_preempt.policies.model.model import RejectReason
    from ckpt_preempt.policies.sim.devices import Capacity

    sim = engine.Simulation(wl(low(0)), two_models(), "checkpoint-aware", IDEAL)
    cap: Capacity = sim.cap
    assert (cap.allowed(""), cap.allowed("B|C"), cap.allowed("C")) == (
        None, frozenset({1}), frozenset())
    member = workload.Member(name="m", cpu_milli=1, memory_mib=1, gpus=1, gpu_spec="B")
    closed = [n.excluded for n in cap.exclusions([member])]
    assert closed == [RejectReason.NODE_SELECTOR, None]


# -- secondary figures -------------------------------------------------------------------

def test_low_priority_completion_counts_the_time_an_eviction_costs():
    # a 1-hour job evicted at 30 min (released 30 s later) restarts from scratch when the
    # 10-minute preemptor is done, at 40 min 30 s, and finishes 1 h later; the preemptor waited
    # the 30 s grace period
    r = run(wl(low(0, duration=HOUR), high(1, 30 * MIN, duration=10 * MIN)), IDEAL)
    assert r.low_jobs_completed == 1
    assert r.low_completion_p50_s == pytest.approx(40 * MIN + 30 + HOUR)
    assert r.preemptor_wait_p95_s == pytest.approx(30)
