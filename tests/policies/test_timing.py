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
from ckpt_preempt.policies.model.model import CheckpointMode, PodHold, RejectReason, When
from ckpt_preempt.policies.planner import preemption, timing
from ckpt_preempt.policies.planner.preemption import PlannerConfig
from ckpt_preempt.policies.sim import planners
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


# --- victims chosen knowing their ends ------------------------------------------------------


def _two_victims(*, end_in=200.0, queued=0.0):
    """node-a: a victim with 3000 s unsaved that ends in ``end_in`` s; node-b: one with 1000 s
    unsaved and no declared end. One 1-GPU preemptor."""
    ending = replace(make_pod("ending", node="node-a", priority=1, checkpoint_age=3000.0,
                              age=7200.0), expected_end=NOW + end_in)
    other = make_pod("other", node="node-b", priority=1, checkpoint_age=1000.0, age=7200.0)
    snap = replace(snapshot([gpu_node("node-a", 1), gpu_node("node-b", 1)], [ending, other]),
                   queued_gpus=queued)
    return snap, pending("hi", priority=10, gpus=1)


def test_a_victim_about_to_end_is_chosen_and_waited_for():
    snap, pre = _two_victims()
    plan = _plan(snap, pre)
    assert [v.name for v in plan.victims] == ["ending"]
    t = plan.timing
    assert t.when is When.AFTER_END
    assert t.expected_gpu_seconds == pytest.approx(200.0 + MARGIN)  # the preemptor's wait only
    assert plan.lost_gpu_seconds == pytest.approx(3000.0)  # the charge if it does not end
    assert "declares an end within the cap" in plan.victim_groups[0].reason
    # knowing ends off: the victim that loses less now, evicted at once
    off = _plan(snap, pre, end_aware=False)
    assert [v.name for v in off.victims] == ["other"]
    assert off.timing.when is When.NOW and off.timing.expected_gpu_seconds == 1000.0


def test_the_simulators_ablation_switch_reaches_the_shipped_policy():
    snap, pre = _two_victims()
    on = planners.planner_for(planners.TIMING_POLICY, CAP)
    off = planners.planner_for(planners.TIMING_POLICY, CAP, end_aware=False)
    assert [v.name for v in on(snap, [pre], 1).victims] == ["ending"]
    assert [v.name for v in off(snap, [pre], 1).victims] == ["other"]


def test_the_wait_is_charged_at_the_preemptors_gpus():
    # an 8-GPU preemptor waiting 260 s costs 2080 GPU-s: more than evicting the 1000 s victim
    ending = replace(make_pod("ending", node="node-a", priority=1, gpus=8,
                              checkpoint_age=3000.0, age=7200.0), expected_end=NOW + 200.0)
    other = make_pod("other", node="node-b", priority=1, gpus=8, checkpoint_age=125.0,
                     age=7200.0)
    snap = snapshot([gpu_node("node-a", 8), gpu_node("node-b", 8)], [ending, other])
    plan = _plan(snap, pending("hi", priority=10, gpus=8))
    assert [v.name for v in plan.victims] == ["other"]  # 8 x 125 = 1000 < 8 x 260


def test_ends_beyond_the_cap_or_past_are_not_discounted():
    for end_in in (CAP, -2 * MARGIN):
        snap, pre = _two_victims(end_in=end_in)
        assert [v.name for v in _plan(snap, pre).victims] == ["other"], end_in


def test_a_queue_that_would_take_every_end_turns_the_discount_off():
    # one ending GPU within the cap, and 1 GPU queued besides the preemptor: that end is
    # another queued pod's anyway
    snap, pre = _two_victims(queued=1.0)
    assert [v.name for v in _plan(snap, pre).victims] == ["other"]
    # with a second ending GPU (3000 s unsaved, ending in 300 s) there is enough for both, and
    # the discount picks the end nearest
    spare = replace(make_pod("spare", node="node-c", priority=1, checkpoint_age=3000.0,
                             age=7200.0), expected_end=NOW + 300.0)
    more = replace(snap, nodes=(*snap.nodes, gpu_node("node-c", 1)), pods=(*snap.pods, spare))
    assert [v.name for v in _plan(more, pre).victims] == ["ending"]


def test_the_charge_is_off_when_no_pod_below_the_preemptor_ends_within_the_cap():
    # off (None) also turns the cache key into the one plans without ends and warm() use
    def rate(snap, priority=10):
        return timing.end_rate(snap, [pending("hi", priority=priority, gpus=2)], priority,
                               margin=MARGIN, max_wait=CAP)

    snap, _ = _two_victims()
    assert rate(snap) == 2.0
    assert rate(snap, priority=1) is None  # the ending pod does not rank below the preemptor
    for end_in in (CAP, -2 * MARGIN, None):
        later = _two_victims(end_in=end_in)[0] if end_in is not None else replace(
            snap, pods=tuple(replace(p, expected_end=None) for p in snap.pods))
        assert rate(later) is None, end_in
    pending_end = replace(pending("queued", priority=1), expected_end=NOW + 100.0)
    assert rate(replace(snap, pods=(*snap.pods, pending_end))) == 2.0  # not running: no end


def test_views_share_the_declared_ends_of_the_snapshot_they_restrict():
    snap, _ = _two_victims()
    assert [p.name for p in snap.declared_ends] == ["ending"]
    view = snap.restricted(held={snap.declared_ends[0].uid: PodHold.HELD_BY_PLAN},
                           closed={"node-b": RejectReason.NODE_HELD})
    assert view.declared_ends is snap.declared_ends
    assert snap.with_nodes(snap.nodes[:1], []).declared_ends is snap.declared_ends


def test_a_declared_end_costs_the_preemptor_at_most_the_cap_and_is_charged_in_full():
    # a pod that declares an end is chosen (it made itself cheap) and waited for at most the
    # cap; should it not end, the plan's charge for it is its full loss (the controller evicts
    # whatever still runs at the deadline), and no other pod was made a victim for it
    snap, pre = _two_victims(end_in=100.0)
    plan = _plan(snap, pre)
    assert [v.name for v in plan.victims] == ["ending"]
    assert plan.drain_deadline <= NOW + CAP
    assert plan.victims[0].lost_gpu_seconds == pytest.approx(3000.0)


@settings(max_examples=100, deadline=None)
@given(ends=st.lists(st.one_of(st.none(), st.floats(-2 * CAP, 2 * CAP)), min_size=2,
                     max_size=4),
       ages=st.lists(st.floats(0, 7200), min_size=4, max_size=4),
       queued=st.sampled_from([0.0, 1.0, 8.0]))
def test_declaring_an_end_never_spares_the_pod_that_declares_it(ends, ages, queued):
    """A pod chosen when it declares no end is still chosen when it declares one: an end only
    ever lowers its own charge."""
    pods = [make_pod(f"v{k}", node=f"n{k}", priority=1, age=7200.0, checkpoint_age=ages[k])
            for k in range(len(ends))]
    nodes = [gpu_node(f"n{k}", 1) for k in range(len(ends))]
    pre = pending("hi", priority=10, gpus=1)
    base = replace(snapshot(nodes, pods), queued_gpus=queued)
    chosen = {v.uid for v in _plan(base, pre).victims}
    declared = [replace(p, expected_end=None if e is None else NOW + e)
                for p, e in zip(pods, ends, strict=True)]
    for k, p in enumerate(declared):
        if pods[k].uid in chosen and p.expected_end is not None:
            only = replace(base, pods=tuple(declared[k] if j == k else q
                                            for j, q in enumerate(pods)))
            assert pods[k].uid in {v.uid for v in _plan(only, pre).victims}


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
    on = _plan(snap, pre, restart_seconds=restart, end_aware=False)
    off = _plan(snap, pre, restart_seconds=restart, timing=False)
    assert on.victim_groups == off.victim_groups  # deciding when never picks other victims
    assert on.lost_gpu_seconds == off.lost_gpu_seconds  # nor changes what they are charged
    t = on.timing
    assert off.drain_deadline <= t.deadline <= NOW + CAP + 1e-6
    assert on.drain_deadline == t.deadline
    assert t.expected_gpu_seconds <= t.now_gpu_seconds + 1e-6  # waits only when it pays
    assert (t.when is When.NOW) == (not t.waits)
    victims_uids = {v.uid for v in on.victims}
    assert all(w.uid in victims_uids and w.expected + MARGIN <= t.deadline + 1e-6
               for w in t.waits)


@settings(max_examples=100, deadline=None)
@given(asks=st.lists(st.tuples(st.sampled_from([1, 5, 10]), st.sampled_from([0.0, 0.5, 1.0, 8.0])),
                     max_size=8))
def test_queued_gpus_adds_up_the_other_asks_at_each_priority_or_above(asks):
    want = [sum(g for j, (other, g) in enumerate(asks) if j != i and other >= prio)
            for i, (prio, _) in enumerate(asks)]
    assert timing.queued_gpus(asks) == pytest.approx(want)
