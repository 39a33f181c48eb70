"""The starvation bound in the simulator: it holds for every policy on every protocol, and a job
that reports its checkpoints pays for it at most the bound's allowance over its silent twin."""

from __future__ import annotations

import bisect
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import incentive
from ckpt_preempt.controller.app import trace_files
from ckpt_preempt.policies.sim import engine, planners, protocols, twins

HOUR = twins.HOUR
BLIND = ("kube-default", "kube-workload", "cost-aware")  # never read a checkpoint report


def _most_in_a_window(times, window):
    """The most of ``times`` in any half-open window (t - window, t]."""
    times = sorted(times)
    return max((k + 1 - bisect.bisect_right(times, t - window) for k, t in enumerate(times)),
               default=0)


def _run(w, nodes, policy, cfg):
    sim = engine.Simulation(w, nodes, policy, cfg)
    result = sim.run()
    return sim, result


def test_the_bound_alone_caps_the_frequent_checkpointer():
    # the engine test's scene: six high-priority pods, the job checkpointing every 15 min was
    # hit all six times without a guard; with only the bound (4) it is hit 4 times, the other 2
    jobs = [twins.low_job(0, 15, reports=True), twins.low_job(1, 240, reports=True)]
    jobs += [twins.high_job(2 + k, HOUR + k * 1500.0, 600.0) for k in range(6)]
    w = twins.world(jobs, hours=6)
    for policy in ("checkpoint-aware", "checkpoint-aware-drain"):
        cfg = engine.SimConfig(fairness_penalty_seconds=0.0, max_preemptions_per_window=4)
        _, r = _run(w, twins.nodes(), policy, cfg)
        assert r.preemptions == 6 and r.preemptions_per_workload == {2: 1, 4: 1}, policy
        assert r.max_preemptions_per_workload == 4 and r.p99_preemptions_per_workload == 4.0


def test_a_preemptor_waits_while_every_victim_is_at_the_bound():
    # both jobs are hit once within an hour; the next preemptor waits until the first of those
    # preemptions leaves the 24 h window, as every policy must make it
    arrivals = [(HOUR + k * 600.0, 300.0) for k in range(6)]
    for policy in planners.POLICIES:
        sim, r = _run(twins.twin_world(15, arrivals, hours=4), twins.nodes(), policy,
                      engine.SimConfig(max_preemptions_per_window=1))
        first = sorted(t for times in sim.preempted.values() for t in times)
        assert first[:2] == [HOUR, HOUR + 600.0], policy
        assert first[2] > HOUR + 24 * HOUR, policy
        assert r.plans_failed > 0 and r.preemptor_wait_p95_s > 20 * HOUR, policy


@pytest.fixture(scope="module")
def traces():
    return {w: trace_files.load(w) for w in ("openb",)}


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(protocol=st.sampled_from(protocols.PROTOCOLS), policy=st.sampled_from(planners.POLICIES),
       seed=st.integers(1, 50), most=st.integers(1, 3),
       window=st.sampled_from([6 * HOUR, 24 * HOUR]))
def test_the_bound_holds_on_every_protocol_for_every_policy(traces, protocol, policy, seed,
                                                            most, window):
    pods, nodes = traces["openb"]
    w, used = protocols.build(workload="openb", protocol=protocol, seed=seed, pods=pods,
                              nodes=nodes, scale=0.02, utilisation=1.2)
    cfg = engine.SimConfig(max_preemptions_per_window=most, preemption_bound_window_seconds=window)
    sim, r = _run(w, used, policy, cfg)
    assert r.plans_invalid == 0
    for times in sim.preempted.values():
        assert _most_in_a_window(times, window) <= most


@st.composite
def twin_worlds(draw):
    interval = draw(st.sampled_from([5, 15, 30, 60, 120]))
    arrivals = sorted(draw(st.lists(
        st.tuples(st.floats(0.2 * HOUR, 47 * HOUR), st.floats(60.0, 2 * HOUR)),
        min_size=1, max_size=16)))
    return interval, arrivals


@settings(max_examples=25, deadline=None)
@given(twin_worlds(), st.sampled_from(planners.POLICIES))
def test_reporting_costs_a_job_at_most_the_bound_over_its_silent_twin(world, policy):
    interval, arrivals = world
    cfg = engine.SimConfig(max_preemptions_per_window=2, preemption_bound_window_seconds=12 * HOUR)
    sim, _ = _run(twins.twin_world(interval, arrivals), twins.nodes(), policy, cfg)
    reporter = sim.preempted.get(0, [])
    twin = sim.preempted.get(1, [])
    # in every window of the bound, the reporter is hit at most the bound's allowance more
    # often than its twin, however the preemptors fall; the lifetime gap is at most that
    # allowance per window the run spans
    for t in [*reporter, *twin]:
        def since(ts, t=t):
            return sum(t - cfg.preemption_bound_window_seconds < x <= t for x in ts)
        assert since(reporter) - since(twin) <= cfg.max_preemptions_per_window
    assert _most_in_a_window(reporter, cfg.preemption_bound_window_seconds) <= 2
    if policy in BLIND:
        # a policy that reads no report treats the twins alike whether the first reports or
        # not: reporting changes nothing for it
        silent, _ = _run(twins.twin_world(interval, arrivals, reports=(False, False)),
                         twins.nodes(), policy, cfg)
        assert (len(reporter), len(twin)) == (len(silent.preempted.get(0, [])),
                                               len(silent.preempted.get(1, [])))


def test_a_drawn_two_job_world_is_seeded_and_within_its_ranges():
    for seed in range(1, 60):
        interval, arrivals = twins.draw_world(seed)
        assert (interval, arrivals) == twins.draw_world(seed)
        assert interval in twins.INTERVALS_MIN
        assert 1 <= len(arrivals) <= twins.MOST_ARRIVALS and arrivals == sorted(arrivals)
        assert all(0.2 * HOUR <= at <= (twins.WORLD_HOURS - 1) * HOUR and 60 <= dur <= 2 * HOUR
                   for at, dur in arrivals)
    assert twins.draw_world(1) != twins.draw_world(2)


def test_under_report_parity_the_reporter_is_never_hit_more_than_its_silent_twin():
    # the first 200 worlds of bench.incentive, each replayed with either twin reporting: loss
    # alone hits the reporter more than its twin in nearly all of them; the searches that read
    # reports, with parity (policies.planner.parity), in none. Not a property of every world:
    # a twin evicted and not yet restarted is no alternative, so three preemptors arriving at
    # once can take the reporter twice (hypothesis found one); measured here, not assumed
    worlds = list(range(1, 201))
    seeing = (planners.TIMING_POLICY, planners.GREEDY_POLICY)
    on = incentive.measure(worlds, seeing)
    off = incentive.measure(worlds, seeing, replace(incentive.CONFIG, report_parity=False))
    for policy in seeing:
        assert on[policy]["worlds_hit_more_than_twin"] == 0, policy
        assert on[policy]["extra_hits_mean"] <= 0, policy
        assert off[policy]["worlds_hit_more_than_twin"] >= 180, policy


@pytest.mark.parametrize("replan", [True, False])
def test_a_preemptor_held_back_by_the_bound_is_planned_again_when_the_bound_releases(replan):
    # one 1-GPU node, one low job (bound: 1 preemption per 2 h); the first preemptor takes it
    # at 1 h, the second comes at 1.5 h and finds it at the bound. Nothing else happens until
    # the low job ends at 500 h: only the release at 3 h (+1 s) can wake the second preemptor
    jobs = [twins.low_job(0, 30, reports=True), twins.high_job(1, HOUR, 600.0),
            twins.high_job(2, 1.5 * HOUR, 600.0)]
    cfg = engine.SimConfig(max_preemptions_per_window=1, preemption_bound_window_seconds=2 * HOUR,
                           replan_at_bound_release=replan)
    sim, r = _run(twins.world(jobs, hours=6.0), twins.nodes(gpus=1), "checkpoint-aware", cfg)
    if replan:
        assert sim.preempted[0] == [HOUR, pytest.approx(3 * HOUR + 1.0)]
        assert r.preemptor_wait_p95_s < 2 * HOUR
    else:  # the gap the option closes: it waits for the low job to end
        assert sim.preempted[0] == [HOUR] and r.preemptor_wait_p95_s > 400 * HOUR
