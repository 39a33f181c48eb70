"""Properties of the Kueue priority-boost rule (policies/kueue/boost.py): the band is never
crossed, silence is worth exactly the planner's unknownCheckpoint assumption and no more, a lie
about a checkpoint gains at most what the planner charges it, and the boost is monotone."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from ckpt_preempt.policies.kueue import boost
from ckpt_preempt.policies.kueue.boost import BoostRule, Workload, decide
from ckpt_preempt.policies.model.model import CheckpointMode, Pod, Resources

NOW = 1_000_000.0
DAY = 86_400.0

rules = st.builds(BoostRule, first_bucket_gpu_seconds=st.floats(1.0, 1e5),
                  max_boost=st.integers(0, 20), dead_band=st.floats(0.0, 0.9))
priorities = st.integers(-(2**31), 2**31 - 1)
annotations = st.none() | st.integers(-50, 50).map(str) | st.sampled_from(["", "x", "+3"])
# None: start-time; a number: assume (or a cluster-median result)
unknown_ages = st.none() | st.floats(1.0, 10 * DAY)


@st.composite
def pods(draw, *, reporting=None):
    age = draw(st.floats(0.0, 10 * DAY))
    reports = draw(st.booleans()) if reporting is None else reporting
    return Pod(uid=draw(st.uuids()).hex, name="p", namespace="a", node="n",
               requests=Resources(gpus=draw(st.integers(0, 8)),
                                  gpu_milli=draw(st.sampled_from([0, 142, 285, 428, 1000]))),
               start_time=NOW - age, checkpoint=CheckpointMode.PERIODIC,
               last_checkpoint=NOW - draw(st.floats(0.0, 20 * DAY)) if reports else None)


def b(pods_, *, annotation=None, priority=0, in_use=(0,), age=None, rule=boost.DEFAULT_RULE) -> int:
    return decide(Workload(namespace="a", name="w", priority=priority, annotation=annotation),
                  pods_, now=NOW, priorities_in_use=in_use, unknown_age=age, rule=rule).boost


@given(priority=priorities, in_use=st.lists(priorities, max_size=6), annotation=annotations,
       ps=st.lists(pods(), max_size=4), age=unknown_ages, rule=rules, admitted=st.booleans())
def test_the_band_is_never_crossed(priority, in_use, annotation, ps, age, rule, admitted):
    d = decide(Workload(namespace="a", name="w", priority=priority, annotation=annotation,
                        admitted=admitted), ps, now=NOW, priorities_in_use=in_use,
               unknown_age=age, rule=rule)
    assert 0 <= d.boost <= rule.max_boost
    assert all(not priority < p <= priority + d.boost
               for p in (*in_use, boost.DEFAULT_PRIORITY))
    assert boost.INT32_MIN <= d.boost <= boost.INT32_MAX
    assert admitted or d.boost == 0
    assert d.write == (boost.effective_boost(annotation) != d.boost
                       or (annotation is not None and boost.parse_boost(annotation) is None))


@given(p=pods(reporting=True), age=unknown_ages, annotation=annotations, rule=rules)
def test_silence_is_worth_exactly_a_report_at_the_assumed_time(p, age, annotation, rule):
    silent = replace(p, last_checkpoint=None)
    assumed = replace(p, last_checkpoint=p.start_time if age is None else NOW - age)
    assert b([silent], annotation=annotation, age=age, rule=rule) \
        == b([assumed], annotation=annotation, age=age, rule=rule)


@given(p=pods(reporting=True), age=unknown_ages, annotation=annotations, rule=rules)
def test_a_reporter_at_least_as_old_as_the_assumption_never_gains_by_going_silent(
        p, age, annotation, rule):
    assumed_time = p.start_time if age is None else NOW - age
    if p.last_checkpoint > assumed_time:  # fresher than the assumption: silence may gain
        p = replace(p, last_checkpoint=assumed_time - (p.last_checkpoint - assumed_time))
    silent = replace(p, last_checkpoint=None)
    assert b([silent], annotation=annotation, age=age, rule=rule) \
        <= b([p], annotation=annotation, age=age, rule=rule)


@given(p=pods(), claimed=st.none() | st.floats(-1e12, NOW + 1e6), malformed=st.booleans(),
       age=unknown_ages, annotation=annotations, rule=rules)
def test_a_lie_gains_at_most_the_boost_of_never_having_saved(
        p, claimed, malformed, age, annotation, rule):
    """Whatever a pod claims (any time, before its start, in the future, malformed), its boost
    is at most that of the same pod with nothing saved since its start: the planner charges the
    same lie the same (policies.planner.cost.work_since_checkpoint clamps to the start)."""
    liar = replace(p, last_checkpoint=None if malformed else claimed,
                   checkpoint_malformed=malformed)
    never_saved = replace(p, last_checkpoint=p.start_time)
    assert b([liar], annotation=annotation, age=age, rule=rule) \
        <= b([never_saved], annotation=annotation, age=age, rule=rule)


@given(p=pods(reporting=True), older=st.floats(0.0, 10 * DAY), annotation=annotations,
       rule=rules, in_use=st.lists(st.integers(-100, 100), max_size=4))
def test_monotone_in_unsaved_work(p, older, annotation, rule, in_use):
    earlier = replace(p, last_checkpoint=p.last_checkpoint - older)
    assert b([p], annotation=annotation, rule=rule, in_use=in_use) \
        <= b([earlier], annotation=annotation, rule=rule, in_use=in_use)


@given(ps=st.lists(pods(), min_size=1, max_size=4), annotation=annotations, rule=rules,
       age=unknown_ages)
def test_a_written_boost_reproduces_itself(ps, annotation, rule, age):
    """Writing the decision and deciding again on the same work writes nothing (no flapping
    without a change of input)."""
    first = decide(Workload(namespace="a", name="w", annotation=annotation), ps, now=NOW,
                   priorities_in_use=(0,), unknown_age=age, rule=rule)
    again = decide(Workload(namespace="a", name="w", annotation=first.value), ps, now=NOW,
                   priorities_in_use=(0,), unknown_age=age, rule=rule)
    assert (again.boost, again.write) == (first.boost, False)
