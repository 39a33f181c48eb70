"""The harsher world's knobs: silent checkpointers, reports minutes late, and liars.

Each knob changes only what the planner is shown: the charge stays the engine's truth, the
workload stays the same jobs, and the baselines that never read checkpoints do not move.
"""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import engine, planner_view, protocols, scenarios, workload
from ckpt_preempt.policies.sim.trace import TraceNode, TracePod

HOUR = 3600.0
MIN = 60.0
IDEAL = engine.SimConfig().without_costs()
SEED = workload.WorkloadParams().seed  # the seed a hand-built workload's params carry


def nodes(n=1, gpus=2):
    return [TraceNode(name=f"n{i}", cpu_milli=96000, memory_mib=10**6, gpus=gpus, model="G")
            for i in range(n)]


def periodic(i, interval):
    return workload.Job(
        id=i, name=f"low{i}", arrival=0.0, duration=20 * HOUR, priority=0, qos="BE",
        members=(workload.Member(name=f"low{i}-0", cpu_milli=1000, memory_mib=1024, gpus=1),),
        checkpoint=CheckpointMode.PERIODIC, interval=interval, checkpoint_seconds=None)


def high(i, arrival):
    return workload.Job(
        id=i, name=f"high{i}", arrival=arrival, duration=600.0, priority=1000, qos="LS",
        members=(workload.Member(name=f"high{i}-0", cpu_milli=1000, memory_mib=1024, gpus=1),),
        checkpoint=CheckpointMode.NONE, interval=None, checkpoint_seconds=None)


def wl(*jobs):
    return workload.Workload(jobs=tuple(jobs), compress=1.0, offered_load=1.0, extra_pods=0,
                             window=6 * HOUR, capacity_gpus=2, params=workload.WorkloadParams())


def run(w, config, policy="checkpoint-aware"):
    return engine.Simulation(w, nodes(), policy, config).run()


# -- lying -------------------------------------------------------------------------------

def _ids(share, most):
    """An honest job id and a lying one whose lie on the 45-min checkpoint exceeds 15 min."""
    honest = next(i for i in range(100) if not planner_view.lies(seed=SEED, job_id=i,
                                                                   share=share))
    liar = next(i for i in range(100) if planner_view.lie_seconds(
        seed=SEED, job_id=i, checkpoint=45 * MIN, share=share, most=most) > 16 * MIN)
    return honest, liar


def test_a_lie_misleads_the_planner_but_the_charge_is_the_truth():
    # Two GPUs: X checkpoints hourly, Y every 45 min; a pod arrives at 1 h 20 s. X saved 20 s
    # ago, Y 920 s ago. Y lies: it claims its 45-min checkpoint more than 16 min later, so it
    # looks fresher than X; the planner takes Y, and Y loses its true 920 s.
    cfg = replace(IDEAL, lie_share=0.5, lie_minutes=60.0)
    x, y = _ids(cfg.lie_share, cfg.lie_minutes * MIN)
    w = wl(periodic(x, 60 * MIN), periodic(y, 45 * MIN), high(200, HOUR + 20))
    honest = run(w, IDEAL)
    lied = run(w, cfg)
    assert honest.lost_work_gpu_hours == pytest.approx((20 + 30) / HOUR)
    assert lied.lost_work_gpu_hours == pytest.approx((920 + 30) / HOUR)
    # nobody lies by default, and the cost-blind baseline never listens
    assert run(w, replace(IDEAL, lie_share=0.0, lie_minutes=60.0)) == honest
    assert run(w, cfg, "cost-aware").lost_gpu_hours == run(w, IDEAL, "cost-aware").lost_gpu_hours


@settings(max_examples=200, deadline=None)
@given(t=st.floats(0, 20 * HOUR), lag=st.floats(0, 30 * MIN), share=st.floats(0, 1),
       most=st.floats(0, 120), interval=st.sampled_from([None, 900.0, 3600.0]),
       job=st.integers(0, 50))
def test_a_lie_only_moves_the_claim_later_within_its_bound_and_never_past_now(
        t, lag, share, most, interval, job):
    cfg = replace(IDEAL, report_lag_seconds=lag)
    liar_cfg = replace(cfg, lie_share=share, lie_minutes=most)
    j = replace(periodic(job, interval), checkpoint=CheckpointMode.PERIODIC)
    honest_js, lying_js = engine.JobState(j), engine.JobState(j)
    honest = engine.Simulation(wl(j), nodes(), "checkpoint-aware", cfg)._published(honest_js, t)
    lying = engine.Simulation(wl(j), nodes(), "checkpoint-aware", liar_cfg)
    claim = lying._published(lying_js, t)
    assert honest <= claim <= t
    assert claim <= honest + most * MIN + 1e-6
    if not planner_view.lies(seed=SEED, job_id=job, share=share):
        assert claim == honest
    assert lying._published(lying_js, t) == claim  # re-read, the claim is the same


@given(seed=st.integers(0, 10**6), job=st.integers(0, 10**6), low=st.floats(0, 1),
       high_=st.floats(0, 1))
def test_the_liars_at_a_share_are_among_the_liars_at_any_larger_share(seed, job, low, high_):
    low, high_ = sorted((low, high_))
    if planner_view.lies(seed=seed, job_id=job, share=low):
        assert planner_view.lies(seed=seed, job_id=job, share=high_)
    assert not planner_view.lies(seed=seed, job_id=job, share=0.0)


def test_lie_shares_are_near_their_share_and_without_costs_turns_lying_off():
    liars = sum(planner_view.lies(seed=1, job_id=i, share=0.3) for i in range(4000))
    assert 0.27 < liars / 4000 < 0.33
    assert replace(engine.SimConfig(), lie_share=0.3).without_costs().lie_share == 0.0


# -- report lag of minutes ---------------------------------------------------------------

def test_a_report_twenty_minutes_late_picks_the_job_whose_old_save_shows():
    # X checkpoints every 15 min, Y every 40 min; a pod arrives at 62 min. Truly X saved 2 min
    # ago and Y 22 min ago. 20 min late, the planner sees X's 30-min save (32 min old) and
    # Y's 40-min one (22 min old), takes Y, and Y loses its true 22 min.
    w = wl(periodic(0, 15 * MIN), periodic(1, 40 * MIN), high(2, 62 * MIN))
    on_time = run(w, replace(IDEAL, report_lag_seconds=0.5 * MIN))
    late = run(w, replace(IDEAL, report_lag_seconds=20 * MIN))
    assert on_time.lost_work_gpu_hours == pytest.approx((2 * MIN + 30) / HOUR)
    assert late.lost_work_gpu_hours == pytest.approx((22 * MIN + 30) / HOUR)


# -- silent checkpointers ----------------------------------------------------------------

def _training_jobs(share):
    items = scenarios.training_trace(3, scenarios.TrainingParams(jobs=400))
    arrivals = [workload.Arrival(pod=p, at=p.creation, duration=p.lifetime) for p in items]
    return scenarios.jobs_from(arrivals, workload.WorkloadParams(seed=3, share_silent=share))


def _without_reports(jobs):
    return [replace(j, reports=True) for j in jobs]


def test_the_training_scenario_honours_the_silent_share_and_changes_nothing_else():
    none, quarter, half = (_training_jobs(s) for s in (0.0, 0.25, 0.5))
    assert all(j.reports for j in none)
    assert _without_reports(quarter) == _without_reports(half) == none
    silent = [{j.id for j in jobs if not j.reports} for jobs in (quarter, half)]
    assert silent[0] < silent[1]  # the silent at 0.25 stay silent at 0.5
    checkpointing = [j for j in none if j.interval is not None]
    assert all(j.interval is not None for j in half if not j.reports)
    assert 0.4 < len(silent[1]) / len(checkpointing) < 0.6


def _openb_pods():
    pods = [TracePod(name=f"be{i}", cpu_milli=1000, memory_mib=1024, gpus=1, gpu_milli=1000,
                     qos="BE", creation=i * 60.0, deletion=i * 60.0 + 4 * HOUR)
            for i in range(300)]
    pods += [TracePod(name=f"ls{i}", cpu_milli=1000, memory_mib=1024, gpus=2, gpu_milli=2000,
                      qos="LS", creation=HOUR + i * 300.0, deletion=2 * HOUR + i * 300.0)
             for i in range(30)]
    return pods


def _openb(share, seed=2):
    params = workload.WorkloadParams(seed=seed, scale=1.0, load=1.3, window_hours=6,
                                     share_silent=share)
    return protocols.build(workload="openb", protocol="stress", seed=seed, pods=_openb_pods(),
                           nodes=nodes(4, gpus=8), scale=1.0, params=params)


def test_the_openb_silent_share_changes_who_reports_and_nothing_else():
    (none, _), (half, _) = _openb(0.0), _openb(0.5)
    assert _without_reports(half.jobs) == list(none.jobs)
    assert any(not j.reports for j in half.jobs)


@pytest.mark.parametrize("policy", ["kube-default", "kube-workload", "cost-aware"])
def test_baselines_that_never_read_checkpoints_are_unmoved_by_every_knob(policy):
    (w0, used), (w_silent, _) = _openb(0.0), _openb(0.5)
    base = engine.SimConfig()
    ref = engine.Simulation(w0, used, policy, base).run()
    harsh = [
        (w_silent, base),
        (w0, replace(base, report_lag_seconds=20 * MIN)),
        (w0, replace(base, lie_share=0.3)),
    ]
    assert ref.preemptions > 0
    for w, cfg in harsh:
        got = engine.Simulation(w, used, policy, cfg).run()
        assert (got.lost_gpu_hours, got.preemptions, got.victims, got.eviction_losses) == (
            ref.lost_gpu_hours, ref.preemptions, ref.victims, ref.eviction_losses)
