"""The disruption model (policies/sim/disruptions.py): the schedule and when a pod stops in each
world, as properties over random pods and disruptions, and small cases by hand."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.sim import disruptions as dis
from ckpt_preempt.policies.sim.costs import DrainOutcome

GATE = dis.Gate(cap_seconds=600.0, ack_lag_seconds=0.0)
ON_TIME = DrainOutcome(saved=True, seconds=100.0, failed=False, overran=False)


def periodic(interval, origin=0.0):
    return lambda t: origin + ((t - origin) // interval) * interval if t > origin else origin


def pod(estimate=100.0, interval=3600.0, can_request=True):
    return dis.Pod(can_request=can_request, estimate=estimate,
                   last_checkpoint=periodic(interval))


def test_hand_computed_maintenance_drain():
    # Cordon at 4400, kubectl drain at 5000; last periodic checkpoint at 3600; checkpoint 100 s.
    d = dis.disruption(0, dis.MAINTENANCE, 0, 4400.0, dis.DisruptionParams())
    assert (d.eviction, d.hard_end) == (5000.0, math.inf)
    p = pod()
    none = dis.stop("no-gate", d, p, GATE, ON_TIME)
    assert (none.at, none.lost_seconds, none.requests) == (5000.0, 1400.0, 0)
    gate = dis.stop("gate", d, p, GATE, ON_TIME)
    assert (gate.at, gate.lost_seconds, gate.requests) == (5100.0, 100.0, 1)
    # the early checkpoint (4400-4500) is 600 s stale at the drain, more than a fresh one's
    # 100 s: the gate asks again
    warned = dis.stop("gate+warning", d, p, GATE, ON_TIME)
    assert (warned.at, warned.lost_seconds, warned.requests) == (5100.0, 100.0, 2)
    # a 60 s lead: still checkpointing at the drain, held until 5040, 40 s less drain time
    short = dis.disruption(0, dis.MAINTENANCE, 0, 4940.0,
                           dis.DisruptionParams(maintenance_lead_seconds=60.0))
    early = dis.stop("gate+warning", short, p, GATE, ON_TIME)
    assert (early.at, early.lost_seconds, early.requests) == (5040.0, 100.0, 1)


def test_spot_notices_which_world_helps():
    params = dis.DisruptionParams()
    short = dis.disruption(0, dis.SPOT_SHORT, 0, 5000.0, params)
    long_ = dis.disruption(1, dis.SPOT_LONG, 0, 5000.0, params)
    assert (short.eviction, short.hard_end) == (5030.0, 5030.0)
    assert (long_.eviction, long_.hard_end) == (5000.0, 5120.0)
    fast = DrainOutcome(saved=True, seconds=20.0, failed=False, overran=False)
    p = pod(estimate=20.0)
    # 30 s: no Eviction reaches the gate (the kubelet's shutdown kills at the notice's end)
    assert dis.stop("gate", short, p, GATE, fast) == dis.stop("no-gate", short, p, GATE, fast)
    assert dis.stop("gate+warning", short, p, GATE, fast).lost_seconds == 30.0
    assert dis.stop("no-gate", short, p, GATE, fast).lost_seconds == 1430.0
    # 120 s: the handler's Eviction comes with the notice; a 100 s checkpoint fits
    assert dis.stop("gate", long_, pod(), GATE, ON_TIME).lost_seconds == 100.0
    # a 150 s checkpoint does not fit the notice: lost, the pod dies with the node at 5120
    slow = DrainOutcome(saved=True, seconds=150.0, failed=False, overran=False)
    s = dis.stop("gate", long_, pod(estimate=150.0), GATE, slow)
    assert (s.at, s.lost_seconds) == (5120.0, 1520.0)


def test_cap_and_deadline_once():
    d = dis.disruption(0, dis.MAINTENANCE, 0, 4400.0, dis.DisruptionParams())
    never = DrainOutcome(saved=False, seconds=600.0, failed=True, overran=False)
    s = dis.stop("gate", d, pod(estimate=5000.0), GATE, never)
    assert s.at == 5600.0  # held to the admin cap, not the pod's 5000 s
    # the early request's deadline (4400 + 600) passed before the drain: no second hold
    w = dis.stop("gate+warning", d, pod(estimate=5000.0), GATE, never)
    assert w.at == 5000.0


def test_schedule_is_seeded_and_inside_the_window():
    params = dis.DisruptionParams(maintenance_per_node_day=2.0, spot_per_node_day=4.0)
    a = dis.schedule(seed=7, nodes=20, start=3600.0, end=86_400.0, params=params)
    assert a == dis.schedule(seed=7, nodes=20, start=3600.0, end=86_400.0, params=params)
    assert a != dis.schedule(seed=8, nodes=20, start=3600.0, end=86_400.0, params=params)
    assert {d.kind for d in a} == {dis.MAINTENANCE, dis.SPOT_SHORT, dis.SPOT_LONG}
    spot = dis.spot_nodes(7, 20, params.spot_share)
    for d in a:
        assert 3600.0 <= d.signal <= d.eviction < 86_400.0
        assert d.kind == dis.MAINTENANCE or d.node in spot
    assert [d.index for d in a] == list(range(len(a)))
    assert [d.signal for d in a] == sorted(d.signal for d in a)


worlds = st.sampled_from(dis.KINDS)
seconds = st.floats(min_value=0.0, max_value=3000.0, allow_nan=False)


@st.composite
def cases(draw, costs=True):
    kind = draw(worlds)
    params = dis.DisruptionParams(maintenance_lead_seconds=draw(seconds),
                                  autoscaler_lead_seconds=draw(seconds))
    d = dis.disruption(0, kind, 0, draw(st.floats(min_value=0.0, max_value=50_000.0)), params)
    estimate = draw(st.floats(min_value=1.0, max_value=1200.0))
    p = dis.Pod(can_request=draw(st.booleans()), estimate=estimate,
                last_checkpoint=periodic(draw(st.floats(min_value=60.0, max_value=20_000.0)),
                                         origin=-draw(st.floats(min_value=0.0, max_value=1e4))))
    gate = dis.Gate(cap_seconds=draw(st.floats(min_value=1.0, max_value=900.0)),
                    ack_lag_seconds=draw(st.floats(min_value=0.0, max_value=60.0)))
    deadline = min(estimate, gate.cap_seconds)
    if costs and draw(st.booleans()):
        if draw(st.booleans()):
            out = DrainOutcome(saved=False, seconds=deadline, failed=True, overran=False)
        else:
            took = estimate * 2
            out = DrainOutcome(saved=took <= deadline, seconds=min(took, deadline),
                               failed=False, overran=True)
    else:
        out = DrainOutcome(saved=True, seconds=estimate, failed=False, overran=False)
    return d, p, gate, out


@settings(max_examples=400, deadline=None)
@given(cases())
def test_stops_stay_in_bounds(case):
    d, p, gate, out = case
    plain = dis.stop("no-gate", d, p, gate, out)
    for world in dis.WORLDS:
        s = dis.stop(world, d, p, gate, out)
        assert s.at <= d.hard_end  # nobody outlives a reclaimed node
        assert s.saved <= s.at
        assert s.requests <= 2
        # the gate holds a pod at most its deadline (capped) past each request it sends
        assert s.at <= max(d.eviction, d.signal) + 2 * gate.cap_seconds + gate.ack_lag_seconds
        # the gate can lose more than no gate by at most the time it held the pod: the exact
        # case where it does (a fresh periodic checkpoint, a failed, overrun or cut checkpoint)
        if world == "gate":
            assert s.lost_seconds <= plain.lost_seconds + (s.at - plain.at) + 1e-6
        if not p.can_request:
            assert s == plain


@settings(max_examples=400, deadline=None)
@given(cases(costs=False))
def test_gate_never_loses_more_when_the_work_at_stake_exceeds_the_checkpoint(case):
    d, p, gate, out = case
    plain = dis.stop("no-gate", d, p, gate, out)
    held = dis.stop("gate", d, p, gate, out)
    warned = dis.stop("gate+warning", d, p, gate, out)
    fits = p.estimate <= gate.cap_seconds and d.eviction + p.estimate <= d.hard_end
    if fits and plain.lost_seconds >= p.estimate + gate.ack_lag_seconds:
        assert held.lost_seconds <= plain.lost_seconds + 1e-6
    # where an Eviction reaches the gate, the early warning never loses more than the gate
    if d.gated and fits and d.eviction - d.signal <= gate.cap_seconds:
        assert warned.lost_seconds <= held.lost_seconds + 1e-6
        assert warned.at <= held.at + 1e-6


def test_unknown_world_is_refused():
    d = dis.disruption(0, dis.MAINTENANCE, 0, 0.0, dis.DisruptionParams())
    with pytest.raises(ValueError):
        dis.stop("gate-ish", d, pod(), GATE, ON_TIME)
