"""policies.disruption.disruption_signals: which pods are asked when their node shows a disruption
signal."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_preempt.policies.disruption import disruption_signals as ds
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.lifecycle.plan_record import (
    DONE_ANNOTATION,
    DRAIN_ANNOTATION,
    DrainRequest,
    drain_from_annotation,
    drain_to_annotation,
)

NOW = 1_800_000_000.0
CAP = 600.0
WINDOW = 600.0
LIMITS = ds.Limits(max_checkpoint_seconds=CAP, window_seconds=WINDOW)
SIGNALS = tuple(ds.parse_signal(s) for s in ds.DEFAULT_SIGNALS)
KARPENTER = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def node(name: str = "n1", *taints: dict, cordoned: bool = False) -> ds.NodeView:
    return ds.NodeView(name=name, unschedulable=cordoned, taints=tuple(taints))


def pod(name: str = "p1", node_name: str | None = "n1", annotations=None, **kw) -> ds.PodView:
    fields = {"uid": f"u-{name}", "namespace": "team-a", "name": name, "node": node_name,
              "priority_class": "", "annotations": annotations or {}, "checkpoints": True,
              "checkpoint_seconds": 90.0, **kw}
    return ds.PodView(**fields)


def step(memory, nodes, pods, now=NOW, limits=LIMITS) -> ds.Outcome:
    return ds.step(memory, nodes, pods, now, SIGNALS, limits)


def carrying(p: ds.PodView, request: DrainRequest, ack: str | None = None) -> ds.PodView:
    ann = {DRAIN_ANNOTATION: drain_to_annotation(request),
           **({DONE_ANNOTATION: ack} if ack is not None else {})}
    return ds.PodView(**{**p.__dict__, "annotations": ann})


def test_every_default_signal_is_recognised_and_cordon_counts_before_its_taint():
    for text in ds.DEFAULT_SIGNALS:
        s = ds.parse_signal(text)
        taint = {"key": s.key, "effect": s.effect or "NoExecute", "value": "x"}
        assert ds.signals_on(node("n", taint), SIGNALS) == (text,)
    assert ds.signals_on(node("n", cordoned=True), SIGNALS) == (ds.DEFAULT_SIGNALS[0],)
    # the soft autoscaler candidate mark and unrelated taints are no signal
    soft = {"key": "DeletionCandidateOfClusterAutoscaler", "effect": "PreferNoSchedule"}
    assert ds.signals_on(node("n", soft, {"key": "gpu", "effect": "NoSchedule"}), SIGNALS) == ()
    # an effect named in the signal must match
    assert ds.signals_on(node("n", {**KARPENTER, "effect": "NoExecute"}), SIGNALS) == ()


@pytest.mark.parametrize("text", ["", ":NoSchedule", "a b", "k:Sometimes", " k"])
def test_bad_signal_text_is_refused(text):
    with pytest.raises(ValueError):
        ds.parse_signal(text)


def test_a_tainted_node_asks_its_checkpointing_pods_with_a_disruption_id_and_capped_deadline():
    pods = [pod("a"), pod("b", checkpoint_seconds=5000.0), pod("c", checkpoints=False),
            pod("d", node_name="n2"), pod("e", namespace="skip"), pod("f", held=True)]
    out = step(ds.Memory(), [node("n1", KARPENTER), node("n2")], pods,
               limits=ds.Limits(max_checkpoint_seconds=CAP, window_seconds=WINDOW,
                                excluded_namespaces=frozenset({"skip"})))
    assert [a.pod.name for a in out.asks] == ["a", "b"]
    (rnd,) = out.started
    assert rnd.id.startswith("disruption/")
    assert rnd.signals == ("karpenter.sh/disrupted:NoSchedule",)
    a, b = out.asks
    assert a.request == DrainRequest(plan=rnd.id, requested=NOW, deadline=NOW + 90)
    assert b.request.deadline == NOW + CAP  # capped by the admin
    # the agent reads it, and its ack is recognised exactly as a plan's
    assert drain_from_annotation(drain_to_annotation(a.request)) == a.request
    ann = {DRAIN_ANNOTATION: drain_to_annotation(a.request), DONE_ANNOTATION: rnd.id}
    assert plan_record.drain_requested(ann, rnd.id) and plan_record.acked(ann, rnd.id)


def test_flapping_within_the_window_is_not_asked_again_but_later_it_is():
    p = pod("a")
    out = step(ds.Memory(), [node("n1", KARPENTER)], [p])
    rnd = out.started[0]
    acked = carrying(p, out.asks[0].request, ack=rnd.id)
    off = step(out.memory, [node("n1")], [acked], now=NOW + 10)
    assert off.asks == () and off.memory.current == frozenset()
    on = step(off.memory, [node("n1", KARPENTER)], [acked], now=NOW + 20)
    assert on.asks == () and on.suppressed == ("n1",)
    later = step(on.memory, [node("n1", KARPENTER)], [acked], now=NOW + WINDOW + 1)
    assert [a.pod.name for a in later.asks] == ["a"] and later.started[0].id != rnd.id


def test_a_standing_unacked_request_of_any_origin_is_never_replaced():
    plan = DrainRequest(plan="plan-7", requested=NOW - 5, deadline=NOW + 100)
    gate = DrainRequest(plan="disruption/abc", requested=NOW - 5, deadline=NOW + 100)
    pods = [carrying(pod("a"), plan), carrying(pod("b"), gate),
            carrying(pod("c"), plan, ack="plan-7"),  # acked a plan: a new disruption asks
            carrying(pod("d"), gate, ack="disruption/abc"),  # acked a disruption just now
            pod("e", annotations={DRAIN_ANNOTATION: "{not json"})]  # malformed: as none
    out = step(ds.Memory(), [node("n1", cordoned=True)], pods)
    assert [a.pod.name for a in out.asks] == ["c", "e"]


def test_within_a_round_a_pod_is_asked_once_and_a_missed_one_later():
    a, b = pod("a"), pod("b")
    first = step(ds.Memory(), [node("n1", KARPENTER)], [a])
    asked = carrying(a, first.asks[0].request)
    again = step(first.memory, [node("n1", KARPENTER)], [asked, b], now=NOW + 5000)
    assert [x.pod.name for x in again.asks] == ["b"] and again.started == ()
    assert again.asks[0].round == first.started[0]


# ------------------------------------------------------------------------------- properties

taints = st.sampled_from([(), (KARPENTER,), ({"key": "other", "effect": "NoSchedule"},)])
events = st.lists(st.tuples(st.floats(0, 3000), taints, st.booleans()), min_size=1,
                  max_size=25)


@given(events, st.floats(1, 2000))
def test_rounds_start_at_most_once_per_window_per_node(evs, window):
    limits = ds.Limits(max_checkpoint_seconds=CAP, window_seconds=window)
    memory, starts, now = ds.Memory(), [], NOW
    for dt, ts, cordoned in evs:
        now += dt
        out = ds.step(memory, [node("n1", *ts, cordoned=cordoned)], [], now, SIGNALS, limits)
        memory = out.memory
        starts += [r.started for r in out.started]
    assert all(b - a >= window for a, b in itertools.pairwise(starts))


@given(events)
def test_a_pod_is_asked_at_most_once_per_round_and_never_over_an_unacked_request(evs):
    """The pod keeps whatever was written to it (as the API would), and acks at random."""
    memory, now, p = ds.Memory(), NOW, pod("a")
    asked_rounds = []
    for i, (dt, ts, cordoned) in enumerate(evs):
        now += dt
        before = drain_from_annotation(p.annotations[DRAIN_ANNOTATION]) \
            if DRAIN_ANNOTATION in p.annotations else None
        out = ds.step(memory, [node("n1", *ts, cordoned=cordoned)], [p], now, SIGNALS, LIMITS)
        memory = out.memory
        for a in out.asks:
            assert before is None or plan_record.acked(p.annotations, before.plan)
            assert a.round.id not in asked_rounds
            assert now < a.request.deadline <= now + CAP
            asked_rounds.append(a.round.id)
            p = carrying(p, a.request, ack=a.round.id if i % 2 else None)


@given(st.text(max_size=40), st.one_of(st.none(), st.floats(allow_nan=True)))
def test_bad_annotations_never_make_a_pod_immune_or_crash(raw, seconds):
    p = pod("a", annotations={DRAIN_ANNOTATION: raw}, checkpoint_seconds=seconds)
    out = step(ds.Memory(), [node("n1", KARPENTER)], [p])
    try:
        standing = drain_from_annotation(raw)
    except ValueError:
        standing = None
    if standing is None:
        assert len(out.asks) == 1 or (seconds is not None and seconds == 0)
    for a in out.asks:
        assert NOW <= a.request.deadline <= NOW + CAP


def test_forget_keeps_what_still_limits():
    out = step(ds.Memory(), [node("n1", KARPENTER), node("n2", cordoned=True)], [])
    off = step(out.memory, [node("n1"), node("n2")], [], now=NOW + 1)
    kept = ds.forget(off.memory, NOW + 10, WINDOW, ["n1"])
    assert set(kept.rounds) == {"n1"}
    assert ds.forget(off.memory, NOW + WINDOW + 1, WINDOW, ["n1", "n2"]).rounds == {}
