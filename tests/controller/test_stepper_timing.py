"""A stored plan that waits for a victim's next periodic checkpoint or its end
(policies.planner.timing),
one reconciler pass at a time, in the world of tests/controller/test_stepper.py: v0 drained on
request, v1 periodic; here the plan (created T0, deadline T0+60) also waits for v1."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.lifecycle.plan_record import State
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.times import rfc3339
from tests.controller.fakes import T0, Rig
from tests.controller.test_stepper import (
    EVICT_BOTH,
    EVICTED,
    PERIODIC,
    PLAN,
    acked,
    asked,
    changed,
    events,
    gone,
    plan,
    world,
    writes,
)


def waiting_for(wait: str, victims=(("v0", True), ("v1", False))):
    r = plan(victims=victims)
    return replace(r, victims=tuple(replace(v, wait=wait) if v.name == "v1" else v
                                    for v in r.victims))


def checkpointed(name: str, at: float):
    return changed(name, annotations={**PERIODIC, ann.LAST_CHECKPOINT: rfc3339(at)})


EVICT_V0 = ["reserve:n1", "tolerate:team/pre", "nominate:team/pre", "evict:team/v0"]

CASES = [
    pytest.param(waiting_for("checkpoint"), (asked("v0"), acked("v0")), T0 + 10, [],
                 ["CheckpointCompleted team/v0"], State.DRAINING,
                 id="v0 acked, v1's checkpoint not yet reported: the plan waits"),
    pytest.param(waiting_for("checkpoint"), (asked("v0"), acked("v0"), checkpointed("v1", T0 - 5)),
                 T0 + 10, [], ["CheckpointCompleted team/v0"], State.DRAINING,
                 id="a checkpoint older than the plan is no ack"),
    pytest.param(waiting_for("checkpoint"), (asked("v0"), acked("v0"), checkpointed("v1", T0 + 5)),
                 T0 + 10, ["update_plan:Evicting", *EVICT_BOTH],
                 ["CheckpointCompleted team/v0", "CheckpointCompleted team/v1", *EVICTED],
                 State.EVICTING, id="v1 reports a checkpoint newer than the plan: evict both"),
    pytest.param(waiting_for("checkpoint"), (asked("v0"), acked("v0")), T0 + 60,
                 ["update_plan:Evicting", *EVICT_BOTH],
                 ["CheckpointCompleted team/v0", "!CheckpointDeadlineExceeded team/v1",
                  *EVICTED], State.EVICTING,
                 id="the predicted checkpoint did not come: evicted at the deadline"),
    pytest.param(waiting_for("end"), (asked("v0"), acked("v0"), gone("v1")), T0 + 10,
                 ["update_plan:Evicting", *EVICT_V0],
                 ["CheckpointCompleted team/v0", "Evicted team/v0"], State.EVICTING,
                 id="v1 ended by itself: no abort, and only v0 is evicted"),
    pytest.param(waiting_for("end", victims=(("v0", False), ("v1", False))), (gone("v1"),),
                 T0 + 10, ["update_plan:Evicting", *EVICT_V0], ["Evicted team/v0"],
                 State.EVICTING, id="no drain, v1 ended: straight on to evict v0 only"),
    pytest.param(waiting_for("end", victims=(("v1", False),)), (gone("v1"),), T0 + 10,
                 ["update_plan:Evicting", "nominate:team/pre"], [], State.EVICTING,
                 id="the only victim ended: nothing evicted, the preemptor nominated"),
    pytest.param(waiting_for("end", victims=(("v1", False),)), (), T0 + 10, [], [],
                 State.DRAINING, id="waiting for an end that has not come: nothing written"),
]


@pytest.mark.parametrize(("record", "changes", "at", "want_writes", "want_events", "want"),
                         CASES)
def test_a_pass_of_a_plan_that_waits(record, changes, at, want_writes, want_events, want):
    rig = Rig(world(record, *changes))
    calls = rig.tick(at)
    assert writes(calls) == want_writes
    assert events(calls) == want_events
    assert rig.state(PLAN) is want


def test_a_victim_that_is_not_waited_for_still_aborts_when_it_goes():
    rig = Rig(world(plan(), asked("v0"), gone("v1")))
    rig.tick(T0 + 10)
    assert rig.state(PLAN) is State.ABORTED


def test_wait_round_trips_and_plans_without_it_store_as_before():
    r = waiting_for("end")
    assert plan_record.plan_from_annotation(plan_record.plan_to_annotation(r)) == r
    plain = plan()
    assert '"wait"' not in plan_record.plan_to_annotation(plain)
    assert plan_record.plan_from_annotation(plan_record.plan_to_annotation(plain)) == plain


@pytest.mark.parametrize("bad", ['"later"', "true", '""', "1"])
def test_a_stored_wait_outside_the_schema_is_refused(bad):
    raw = plan_record.plan_to_annotation(waiting_for("end")).replace('"wait":"end"',
                                                                    f'"wait":{bad}')
    with pytest.raises(plan_record.PlanFormatError):
        plan_record.plan_from_annotation(raw)


def test_the_reconciler_stores_a_plan_that_waits_and_evicts_after_the_checkpoint():
    """v1 checkpoints every 11 min and last did 10 min ago: the plan waits for it (its 4 GPUs'
    10 unsaved minutes outweigh the preemptor's 2-minute wait), then evicts once it reports."""
    from tests.controller.fakes import FakeCache, node, pod
    from tests.controller.test_reconcile import OLD, only_plan
    from tests.controller.test_stepper import CKPT

    interval = {**PERIODIC, ann.CHECKPOINT_INTERVAL: "11m"}
    cache = FakeCache(nodes=[node("n1"), node("n2")], pods=[
        pod("v0", node="n1", gpus=4, annotations=CKPT),
        pod("v1", node="n1", gpus=4, annotations=interval),
        pod("w0", node="n2", gpus=8, annotations=OLD),
        pod("pre", priority=1000, pending=True)])
    rig = Rig(cache)
    rig.tick(T0)
    r = only_plan(rig)
    assert r.deadline == pytest.approx(T0 + 60 + 60)  # due at T0+60, plus the report margin
    assert {v.name: (v.drain, v.wait) for v in r.victims} == {
        "v0": (True, ""), "v1": (False, "checkpoint")}
    cache.ack("uid-v0", r.id)
    rig.tick(T0 + 30)
    assert rig.state(r.id) is State.DRAINING and not rig.actions.of("evict")
    cache.change_pod("uid-v1", annotations={**interval, ann.LAST_CHECKPOINT: rfc3339(T0 + 61)})
    rig.tick(T0 + 70)
    assert rig.state(r.id) is State.EVICTING
    assert sorted(c.target for c in rig.actions.of("evict")) == ["team/v0", "team/v1"]
