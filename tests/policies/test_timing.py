"""When to preempt (policies.planner.timing): waiting for a victim's next periodic checkpoint or its
declared end, the annotations that declare them, and the promises that keep a lying or late
annotation harmless."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.baselines import kube_default
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.model import CheckpointMode, When
from ckpt_preempt.policies.planner import preemption, timing
from ckpt_preempt.policies.planner.preemption import PlannerConfig
from tests.policies.builders import NOW, gpu_node, make_pod, pending, snapshot

CAP = 600.0  # the drain cap these tests plan under
MARGIN = timing.MARGIN_SECONDS
T0 = "2026-12-02T09:00:00Z"
T0_S = 1796202000.0


def _plan(snap, *pre, **cfg):
    return preemption.plan(snap, list(pre), PlannerConfig(max_checkpoint_seconds=CAP, **cfg))


def _victim(name="victim", *, gpus=1, interval=None, end=None, **kw):
    pod = make_pod(name, node="node-a", priority=1, gpus=gpus, **kw)
    return replace(pod, checkpoint_interval=interval, expected_end=end)


def _one_node(victim, pre_gpus=1):
    snap = snapshot([gpu_node("node-a", max(victim.gpus, pre_gpus))], [victim])
    return snap, pending("hi", priority=10, gpus=pre_gpus)


# --- annotations ---------------------------------------------------------------------------


def _fields(annotations):
    return ann.parse_pod_fields(namespace="ns", labels={}, annotations=annotations, now=T0_S)


def test_checkpoint_interval_and_expected_end_are_parsed():
    f = _fields({ann.CHECKPOINT_INTERVAL: "15m", ann.EXPECTED_END: "2026-12-02T09:10:00Z"})
    assert f.checkpoint_interval == 900.0
    assert f.expected_end == T0_S + 600.0
    assert f.problems == ()


@pytest.mark.parametrize("value", ["", "0", "soon", "-5m", "1e3", "15 m", "9" * 400])
def test_a_bad_checkpoint_interval_is_ignored_with_a_problem(value):
    f = _fields({ann.CHECKPOINT_INTERVAL: value})
    assert f.checkpoint_interval is None
    assert [p.key for p in f.problems] == [ann.CHECKPOINT_INTERVAL]


@pytest.mark.parametrize("value", ["", "tomorrow", "2026-12-02T09:10:00", "1796202600"])
def test_a_bad_expected_end_is_ignored_with_a_problem(value):
    f = _fields({ann.EXPECTED_END: value})
    assert f.expected_end is None
    assert [p.key for p in f.problems] == [ann.EXPECTED_END]


def test_a_bad_checkpoint_annotation_also_drops_the_interval():
    f = _fields({ann.CHECKPOINT_INTERVAL: "15m", ann.LAST_CHECKPOINT: "yesterday"})
    assert f.checkpoint_malformed and f.checkpoint_interval is None


def test_active_deadline_gives_the_expected_end_and_the_earlier_end_wins():
    def end(annotations, deadline):
        pod, _ = ann.build_pod(uid="u", name="p", namespace="ns", labels={},
                               annotations=annotations, now=T0_S, start_time=T0_S - 100,
                               node="n", active_deadline_seconds=deadline)
        return pod.expected_end
    assert end({}, None) is None
    assert end({}, 400.0) == T0_S + 300.0
    assert end({ann.EXPECTED_END: "2026-12-02T09:01:00Z"}, 400.0) == T0_S + 60.0
    assert end({ann.EXPECTED_END: "2026-12-02T09:10:00Z"}, 400.0) == T0_S + 300.0


def test_checkpointed_after_reads_a_newer_valid_last_checkpoint_only():
    since = T0_S - 60
    assert ann.checkpointed_after({ann.LAST_CHECKPOINT: T0}, since, T0_S)
    assert not ann.checkpointed_after({ann.LAST_CHECKPOINT: T0}, T0_S, T0_S)
    assert not ann.checkpointed_after({ann.LAST_CHECKPOINT: "now"}, since, T0_S)
    assert not ann.checkpointed_after({}, since, T0_S)
    assert not ann.checkpointed_after({ann.LAST_CHECKPOINT: "2026-12-02T10:00:00Z"}, since,
                                      T0_S)  # in the future


# --- the decision --------------------------------------------------------------------------


def test_waits_for_a_periodic_checkpoint_due_within_the_cap():
    # checkpointed 13 min ago every 15 min: the next is due in 2 min
    snap, pre = _one_node(_victim(checkpoint_age=780.0, interval=900.0, age=7200.0))
    plan = _plan(snap, pre)
    t = plan.timing
    assert t.when is When.AFTER_CHECKPOINT
    assert t.deadline == pytest.approx(NOW + 120.0 + MARGIN)
    assert plan.drain_deadline == t.deadline
    assert [w.uid for w in t.waits] == ["uid-victim"]
    assert t.waits[0].expected == pytest.approx(NOW + 120.0)
    # now: 780 s lost; waiting: 60 s since the checkpoint + 180 s of preemptor wait
    assert t.now_gpu_seconds == pytest.approx(780.0)
    assert t.expected_gpu_seconds == pytest.approx(MARGIN + 180.0)
    assert t.delay_gpu_seconds == pytest.approx(180.0)
    assert plan.lost_gpu_seconds == pytest.approx(780.0)  # the charge if it never comes
    assert "timing: after-checkpoint" in plan.reason


def test_waits_for_a_declared_end_which_loses_nothing():
    snap, pre = _one_node(_victim(checkpoint_age=3000.0, end=NOW + 200.0, age=7200.0),
                          pre_gpus=1)
    t = _plan(snap, pre, restart_seconds=300.0).timing
    assert t.when is When.AFTER_END
    assert t.deadline == pytest.approx(NOW + 200.0 + MARGIN)
    assert t.expected_gpu_seconds == pytest.approx(t.delay_gpu_seconds)  # the wait only


def test_evicts_now_when_the_wait_costs_the_preemptor_more():
    # 1 GPU victim, 5 min unsaved, checkpoint due in 8 min; the preemptor has 8 GPUs
    snap, pre = _one_node(_victim(checkpoint_age=300.0, interval=780.0, age=7200.0), pre_gpus=8)
    t = _plan(snap, pre).timing
    assert t.when is When.NOW and t.waits == ()
    assert t.deadline == NOW
    assert "would cost more" in t.reason


@pytest.mark.parametrize(("why", "kw"), [
    ("due beyond the cap", dict(checkpoint_age=60.0, interval=900.0)),
    ("overdue: the report should have come", dict(checkpoint_age=1000.0, interval=900.0)),
    ("no interval declared", dict(checkpoint_age=880.0)),
    ("no checkpoint reported", dict(interval=900.0)),
    ("ended in the past", dict(checkpoint_age=3000.0, end=NOW - 2 * MARGIN)),
    ("ends beyond the cap", dict(checkpoint_age=3000.0, end=NOW + CAP)),
])
def test_nothing_usable_means_evict_now(why, kw):
    snap, pre = _one_node(_victim(age=7200.0, **kw))
    plan = _plan(snap, pre)
    assert plan.timing.when is When.NOW, why
    assert plan.drain_deadline == NOW


def test_timing_off_is_the_old_plan():
    snap, pre = _one_node(_victim(checkpoint_age=780.0, interval=900.0, age=7200.0))
    on, off = _plan(snap, pre), _plan(snap, pre, timing=False)
    assert off.timing is None and off.drain_deadline == NOW
    assert replace(on, timing=None, drain_deadline=NOW, reason=off.reason) == off


def test_a_drained_victim_is_not_waited_for_its_periodic_checkpoint():
    v = _victim(checkpoint_age=780.0, interval=900.0, age=7200.0,
                mode=CheckpointMode.ON_REQUEST, checkpoint_seconds=60.0)
    snap, pre = _one_node(v)
    plan = _plan(snap, pre)
    assert plan.victims[0].drain
    assert plan.timing.when is When.NOW and plan.drain_deadline == NOW + 60.0


def test_wait_then_evict_waits_for_ends_whatever_it_costs():
    snap, pre = _one_node(_victim(checkpoint_age=10.0, end=NOW + 500.0, age=7200.0),
                          pre_gpus=8)
    base = kube_default.plan(snap, [pre])
    out = timing.wait_for_ends(base, snap, [pre], max_wait=900.0, policy="wait-then-evict")
    assert out.policy == "wait-then-evict"
    assert out.timing.when is When.AFTER_END
    assert out.drain_deadline == pytest.approx(NOW + 500.0 + MARGIN)
    assert out.timing.expected_gpu_seconds > out.timing.now_gpu_seconds  # it waits anyway


# --- properties ----------------------------------------------------------------------------

_maybe_time = st.one_of(st.none(), st.floats(-2 * CAP, 2 * CAP))


@settings(max_examples=150, deadline=None)
@given(victims=st.lists(st.tuples(st.integers(1, 4), st.floats(0, 7200), _maybe_time,
                                  st.one_of(st.none(), st.floats(1, 3600)), st.booleans()),
                        min_size=1, max_size=4),
       pre_gpus=st.integers(1, 8), restart=st.sampled_from([0.0, 300.0]))
def test_timing_never_changes_the_victims_or_their_charge_and_stays_within_the_cap(
        victims, pre_gpus, restart):
    pods = []
    for k, (gpus, ckpt_age, end, interval, on_request) in enumerate(victims):
        p = make_pod(f"v{k}", node=f"n{k}", priority=1, gpus=gpus, age=7200.0,
                     checkpoint_age=ckpt_age, checkpoint_seconds=30.0,
                     mode=CheckpointMode.ON_REQUEST if on_request else CheckpointMode.PERIODIC)
        pods.append(replace(p, checkpoint_interval=interval,
                            expected_end=None if end is None else NOW + end))
    nodes = [gpu_node(f"n{k}", v[0]) for k, v in enumerate(victims)]
    snap = snapshot(nodes, pods)
    pre = pending("hi", priority=10, gpus=min(pre_gpus, max(v[0] for v in victims)))
    on = _plan(snap, pre, restart_seconds=restart)
    off = _plan(snap, pre, restart_seconds=restart, timing=False)
    assert on.victim_groups == off.victim_groups  # timing never picks other victims
    assert on.lost_gpu_seconds == off.lost_gpu_seconds  # nor changes what they are charged
    t = on.timing
    assert off.drain_deadline <= t.deadline <= NOW + CAP + 1e-6
    assert on.drain_deadline == t.deadline
    assert t.expected_gpu_seconds <= t.now_gpu_seconds + 1e-6  # waits only when it pays
    assert (t.when is When.NOW) == (not t.waits)
    victims_uids = {v.uid for v in on.victims}
    assert all(w.uid in victims_uids and w.expected + MARGIN <= t.deadline + 1e-6
               for w in t.waits)
