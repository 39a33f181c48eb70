"""The plan lifecycle as a pure function, its live re-validation, and strict parsing."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.lifecycle import lifecycle, plan_record
from ckpt_preempt.policies.lifecycle.lifecycle import Observed, PreemptorObs, StepKind, VictimObs
from ckpt_preempt.policies.lifecycle.plan_record import (
    Mode,
    PlannedPlacement,
    PlannedVictim,
    PlanRecord,
    State,
)

T0 = 1_800_000_000.0


def victim(i: int, *, drain_: bool = True) -> PlannedVictim:
    return PlannedVictim(uid=f"v{i}", namespace="ns", name=f"victim-{i}", node="n1",
                         drain=drain_)


TWO_VICTIMS = (victim(0), victim(1, drain_=False))


def make_plan(state: State = State.DRAINING, *, victims=TWO_VICTIMS,
              mode: Mode = Mode.NOMINATE, deadline: float = T0 + 60) -> PlanRecord:
    return PlanRecord(
        id="p-1", state=state, mode=mode, created=T0, deadline=deadline, evict_by=deadline + 120,
        bind_by=deadline + 420,
        placements=(PlannedPlacement(uid="pre", namespace="ns", name="big", node="n1"),),
        victims=tuple(victims), lost_gpu_seconds=100.0,
    )


def seen(uid: str, *, terminating=False, acked=False, asked=False) -> VictimObs:
    return VictimObs(uid=uid, node="n1", terminating=terminating, acked=acked,
                     drain_requested=asked)


def obs(victims=None, *, preemptor: PreemptorObs | None = None,
        gone_preemptor: bool = False) -> Observed:
    if victims is None:
        victims = [seen("v0"), seen("v1")]
    pre = {} if gone_preemptor else {
        "pre": preemptor or PreemptorObs(uid="pre", node=None, steered=False)}
    return Observed(victims={v.uid: v for v in victims}, preemptors=pre)


STEERED = PreemptorObs(uid="pre", node=None, steered=True)
GANG = (PlannedVictim(uid="g0", namespace="ns", name="g-0", node="n1", drain=False, gang="g"),
        PlannedVictim(uid="g1", namespace="ns", name="g-1", node="n1", drain=False, gang="g"),
        PlannedVictim(uid="v2", namespace="ns", name="solo", node="n1", drain=False))

CASES = [
    pytest.param(make_plan(State.PLANNED), obs(), T0, StepKind.TRANSITION, State.DRAINING, (),
                 id="Planned: persisted plan moves to Draining"),
    pytest.param(make_plan(State.PLANNED), obs(gone_preemptor=True), T0, StepKind.TRANSITION,
                 State.ABORTED, (), id="Planned: preemptor gone aborts"),
    pytest.param(make_plan(), obs(), T0, StepKind.REQUEST_CHECKPOINT, None, ("v0",),
                 id="Draining: only on-request victims are asked"),
    pytest.param(make_plan(), obs([seen("v0", asked=True), seen("v1")]), T0, StepKind.WAIT,
                 None, (), id="Draining: asked but not acked waits"),
    pytest.param(make_plan(), obs([seen("v0", asked=True, acked=True), seen("v1")]), T0,
                 StepKind.TRANSITION, State.EVICTING, (), id="Draining: all acked -> Evicting"),
    pytest.param(make_plan(), obs([seen("v0", asked=True), seen("v1")]), T0 + 60,
                 StepKind.TRANSITION, State.EVICTING, (), id="Draining: deadline -> Evicting"),
    pytest.param(make_plan(), obs([seen("v0")]), T0, StepKind.TRANSITION, State.ABORTED, (),
                 id="Draining: a victim went away aborts for a re-plan"),
    pytest.param(make_plan(), obs([seen("v0"), seen("v1", terminating=True)]), T0,
                 StepKind.TRANSITION, State.ABORTED, (),
                 id="Draining: a victim terminating by someone else aborts"),
    pytest.param(make_plan(), obs(preemptor=PreemptorObs(uid="pre", node="n2", steered=False)),
                 T0, StepKind.TRANSITION, State.ABORTED, (),
                 id="Draining: preemptor scheduled elsewhere aborts"),
    pytest.param(make_plan(State.EVICTING), obs([seen("v0", acked=True), seen("v1")]), T0 + 1,
                 StepKind.STEER, None, (), id="Evicting (a): nominates before evicting"),
    pytest.param(make_plan(State.EVICTING), obs([seen("v0", acked=True), seen("v1")],
                 preemptor=STEERED), T0 + 1,
                 StepKind.EVICT, None, ("v0", "v1"), id="Evicting: evicts every live victim"),
    pytest.param(make_plan(State.EVICTING), obs(preemptor=PreemptorObs(
                 uid="pre", node="n1", steered=True)), T0 + 1, StepKind.TRANSITION, State.ABORTED,
                 (), id="Evicting: bound before any eviction aborts (not needed)"),
    pytest.param(make_plan(State.EVICTING), obs([seen("v0", terminating=True), seen("v1")],
                 preemptor=PreemptorObs(uid="pre", node="n1", steered=True)), T0 + 1,
                 StepKind.EVICT, None, ("v1",),
                 id="Evicting: once one victim is evicted the rest follow"),
    pytest.param(make_plan(State.EVICTING, mode=Mode.ADMIT), obs(), T0 + 1,
                 StepKind.EVICT, None, ("v0", "v1"), id="Evicting (b): gates stay until evicted"),
    pytest.param(make_plan(State.EVICTING), obs(preemptor=PreemptorObs(
                 uid="pre", node=None, steered=False, reserved=False)), T0 + 1,
                 StepKind.RESERVE, None, (), id="Evicting: the node is reserved first"),
    pytest.param(make_plan(State.EVICTING, mode=Mode.ADMIT), obs(preemptor=PreemptorObs(
                 uid="pre", node=None, steered=False, reserved=False)), T0 + 1,
                 StepKind.RESERVE, None, (), id="Evicting: gated gangs reserve too"),
    pytest.param(make_plan(State.EVICTING, victims=()), obs([], preemptor=PreemptorObs(
                 uid="pre", node=None, steered=False, reserved=False)), T0 + 1,
                 StepKind.STEER, None, (), id="Evicting: nothing to evict needs no reservation"),
    pytest.param(make_plan(State.EVICTING), obs([seen("v0", terminating=True), seen("v1")],
                 preemptor=STEERED), T0 + 1, StepKind.EVICT, None, ("v1",),
                 id="Evicting: a terminating victim is not evicted again"),
    pytest.param(make_plan(State.EVICTING), obs([]), T0 + 1, StepKind.STEER, None, (),
                 id="Evicting: all gone -> steer"),
    pytest.param(make_plan(State.EVICTING), obs([], preemptor=STEERED), T0 + 1,
                 StepKind.WAIT, None, (), id="Evicting: steered but not bound holds the plan"),
    pytest.param(make_plan(State.EVICTING), obs([seen("v0", terminating=True)],
                 preemptor=STEERED), T0 + 1, StepKind.WAIT, None, (),
                 id="Evicting: victims still terminating hold the plan (no new eviction)"),
    pytest.param(make_plan(State.EVICTING), obs([], preemptor=STEERED), T0 + 481,
                 StepKind.TRANSITION, State.ABORTED, (),
                 id="Evicting: not bound by bindBy aborts"),
    pytest.param(make_plan(State.EVICTING),
                 obs([], preemptor=PreemptorObs(uid="pre", node="n7", steered=True)), T0 + 1,
                 StepKind.TRANSITION, State.DONE, (),
                 id="Evicting: bound elsewhere after the evictions is Done, not Aborted"),
    pytest.param(make_plan(State.EVICTING),
                 obs([], preemptor=PreemptorObs(uid="pre", node="n1", steered=True)), T0 + 1,
                 StepKind.TRANSITION, State.DONE, (), id="Evicting: bound on its node -> Done"),
    pytest.param(make_plan(State.EVICTING), obs([seen("v1")]), T0 + 181,
                 StepKind.TRANSITION, State.ABORTED, (),
                 id="Evicting: still blocked at evictBy aborts (PDB)"),
    pytest.param(make_plan(State.EVICTING, victims=GANG), obs(
                 [seen("g0", terminating=True), seen("g1"), seen("v2")], gone_preemptor=True),
                 T0 + 1, StepKind.EVICT, None, ("g1",),
                 id="Evicting: preemptor gone after part of a gang went: the rest of it follows"),
    pytest.param(make_plan(State.EVICTING, victims=GANG), obs(
                 [seen("g0", terminating=True), seen("g1"), seen("v2")], gone_preemptor=True),
                 T0 + 181, StepKind.TRANSITION, State.ABORTED, (),
                 id="Evicting: ... but not past evictBy"),
    pytest.param(make_plan(State.EVICTING, victims=GANG), obs(
                 [seen("g0"), seen("g1"), seen("v2", terminating=True)], gone_preemptor=True),
                 T0 + 1, StepKind.TRANSITION, State.ABORTED, (),
                 id="Evicting: preemptor gone, no gang broken: abort, evict nothing more"),
    pytest.param(make_plan(State.DONE), obs(gone_preemptor=True), T0, StepKind.NONE, None, (),
                 id="Done is terminal"),
    pytest.param(make_plan(victims=(victim(1, drain_=False),)), obs([seen("v1")]), T0,
                 StepKind.TRANSITION, State.EVICTING, (),
                 id="Draining: no on-request victim goes straight to Evicting"),
]


@pytest.mark.parametrize(("record", "observed", "now", "kind", "to_state", "victims"), CASES)
def test_next_step(record, observed, now, kind, to_state, victims):
    step = lifecycle.next_step(record, observed, now)
    assert step.kind is kind, step
    assert step.to_state == to_state
    assert step.victims == victims
    assert (step.cause is not None) == (to_state is State.ABORTED)


# ------------------------------------------------------------------ properties over random runs

victim_lists = st.lists(st.booleans(), min_size=0, max_size=5).map(
    lambda flags: tuple(victim(i, drain_=f) for i, f in enumerate(flags)))


@st.composite
def worlds(draw):
    """A random persisted plan and a random world: extra pods, gone or recreated victims."""
    victims = draw(victim_lists)
    record = make_plan(draw(st.sampled_from(list(State))), victims=victims)
    observed_victims = {}
    for v in victims:
        fate = draw(st.sampled_from(["alive", "gone", "terminating", "recreated"]))
        if fate == "gone":
            continue
        observed_victims[v.uid] = VictimObs(
            uid=v.uid if fate != "recreated" else v.uid + "-new", node="n1",
            terminating=fate == "terminating", acked=draw(st.booleans()),
            drain_requested=draw(st.booleans()))
    # pods that are not in the plan, observed anyway (must never be evicted)
    for i in range(draw(st.integers(0, 3))):
        observed_victims[f"stranger{i}"] = VictimObs(uid=f"stranger{i}", node="n1",
                                                     terminating=False, acked=True,
                                                     drain_requested=True)
    pre = draw(st.sampled_from([None, PreemptorObs(uid="pre", node=None, steered=False),
                                PreemptorObs(uid="pre", node="n2", steered=False),
                                PreemptorObs(uid="pre", node=None, steered=True)]))
    preemptors = {} if pre is None else {"pre": pre}
    now = T0 + draw(st.floats(min_value=-10, max_value=400, allow_nan=False))
    return record, Observed(victims=observed_victims, preemptors=preemptors), now


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_evicts_only_live_planned_victims(world):
    record, observed, now = world
    step = lifecycle.next_step(record, observed, now)
    if step.kind is StepKind.EVICT:
        assert record.state is State.EVICTING
        planned = {v.uid for v in record.victims}
        for uid in step.victims:
            assert uid in planned
            seen_ = observed.victims[uid]
            assert seen_.uid == uid and not seen_.terminating


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_preemptor_gone_aborts(world):
    record, observed, now = world
    observed = Observed(victims=observed.victims, preemptors={})
    step = lifecycle.next_step(record, observed, now)
    if record.state.terminal:
        assert step.kind is StepKind.NONE
    else:
        assert step.kind is StepKind.TRANSITION and step.to_state is State.ABORTED
        assert step.cause is lifecycle.AbortCause.PREEMPTOR_GONE


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_an_abort_always_names_its_cause_and_nothing_else_does(world):
    record, observed, now = world
    step = lifecycle.next_step(record, observed, now)
    aborts = step.kind is StepKind.TRANSITION and step.to_state is State.ABORTED
    assert (step.cause is not None) == aborts, step


@settings(max_examples=200, deadline=None)
@given(victim_lists, st.data())
def test_a_simulated_run_never_evicts_twice(victims, data):
    """Drive the machine, with a world that obeys the steps (and random acks), to the end."""
    record = make_plan(State.PLANNED, victims=victims)
    alive = {v.uid: seen(v.uid) for v in victims}
    evicted: list[str] = []
    pre = PreemptorObs(uid="pre", node=None, steered=False, reserved=False)
    now = T0
    for _ in range(60):
        step = lifecycle.next_step(record, Observed(victims=alive, preemptors={"pre": pre}), now)
        if step.kind is StepKind.NONE:
            break
        if step.kind is StepKind.EVICT:
            assert pre.steered and pre.reserved  # nominated and reserved before any eviction
        if step.kind is StepKind.TRANSITION:
            record = record.with_state(step.to_state, step.reason)
        elif step.kind is StepKind.REQUEST_CHECKPOINT:
            for uid in step.victims:
                alive[uid] = replace(alive[uid], drain_requested=True,
                                     acked=data.draw(st.booleans()))
        elif step.kind is StepKind.EVICT:
            for uid in step.victims:
                assert uid not in evicted
                evicted.append(uid)
                if data.draw(st.booleans()):
                    del alive[uid]
                else:
                    alive[uid] = replace(alive[uid], terminating=True)
        elif step.kind is StepKind.STEER:
            pre = replace(pre, steered=True)
        elif step.kind is StepKind.RESERVE:
            assert not evicted
            pre = replace(pre, reserved=True)
        elif step.kind is StepKind.WAIT:
            if record.state is State.EVICTING:  # the kubelet finishes, the scheduler binds
                alive = {u: o for u, o in alive.items() if not o.terminating}
                if not alive:
                    pre = replace(pre, node="n1")
            else:
                now = step.wait_until
    assert record.state is State.DONE
    assert sorted(evicted) == sorted(v.uid for v in victims)


# -------------------------------------------------------------------------------- annotations


def test_plan_annotation_round_trips():
    record = make_plan(mode=Mode.ADMIT)
    assert plan_record.plan_from_annotation(plan_record.plan_to_annotation(record)) == record


def test_victims_workload_sizes_round_trip_and_older_records_lack_them():
    record = make_plan()
    sized = replace(record, victims=tuple(replace(v, workload_gpus=2.5) for v in record.victims))
    assert plan_record.plan_from_annotation(plan_record.plan_to_annotation(sized)) == sized
    raw = plan_record.plan_to_annotation(record)
    assert "workloadGpus" not in raw
    assert all(v.workload_gpus is None for v in plan_record.plan_from_annotation(raw).victims)


def _victim(**changes) -> dict:
    return {"uid": "v", "namespace": "ns", "name": "x", "node": "n", "drain": True,
            "workload": "", "gang": "", **changes}


def _mutated(**changes) -> str:
    d = json.loads(plan_record.plan_to_annotation(make_plan()))
    for k, v in changes.items():
        if v is ...:
            del d[k]
        else:
            d[k] = v
    return json.dumps(d)


@pytest.mark.parametrize("raw", [
    pytest.param("", id="empty"),
    pytest.param("{not json", id="not JSON"),
    pytest.param("[]", id="not an object"),
    pytest.param(_mutated(state="Running"), id="unknown state"),
    pytest.param(_mutated(v=plan_record.SCHEMA + 1), id="future schema"),
    pytest.param(_mutated(v=1), id="the old pod-annotation schema"),
    pytest.param(_mutated(bindBy=...), id="bindBy missing"),
    pytest.param(_mutated(victims=...), id="victims missing"),
    pytest.param(_mutated(extra=1), id="unknown field"),
    pytest.param(_mutated(victims=[{"uid": "x"}]), id="victim lacks fields"),
    pytest.param(_mutated(victims=[{"uid": "a b", "namespace": "ns", "name": "x", "node": "n",
                                    "drain": True, "workload": "", "gang": ""}]),
                 id="bad uid"),
    pytest.param(_mutated(victims=[{"uid": "v", "namespace": "ns", "name": "x", "node": "n",
                                    "drain": True, "workload": 7, "gang": ""}]),
                 id="workload not a string"),
    pytest.param(_mutated(victims=[{"uid": "v", "namespace": "ns", "name": "x", "node": "n",
                                    "drain": "yes", "workload": "", "gang": ""}]),
                 id="drain not a bool"),
    pytest.param(_mutated(victims=[{"uid": "pre", "namespace": "ns", "name": "x", "node": "n",
                                    "drain": True, "workload": "", "gang": ""}]),
                 id="preemptor is its own victim"),
    pytest.param(_mutated(deadline="yesterday"), id="bad time"),
    pytest.param(_mutated(deadline="2020-01-01T00:00:00"), id="time without zone"),
    pytest.param(_mutated(deadline="2020-01-01T00:00:00Z"), id="deadline before created"),
    pytest.param(_mutated(placements=[]), id="no placements"),
    pytest.param(_mutated(lostGpuSeconds=-1), id="negative cost"),
    pytest.param(_mutated(lostGpuSeconds=True), id="cost is a bool"),
    pytest.param(_mutated(victims=[_victim(workloadGpus=-1)]), id="negative workload size"),
    pytest.param(_mutated(victims=[_victim(workloadGpus="8")]), id="workload size a string"),
    pytest.param(_mutated(victims=[_victim(workloadGpus=True)]), id="workload size a bool"),
    pytest.param(_mutated(victims=[_victim(workloadGpus=None)]), id="workload size null"),
    pytest.param(_mutated(victims=[_victim(workloadGpus=10**400)]),
                 id="workload size beyond float range"),
    pytest.param(_mutated(victims=[_victim(workloadGpus=float("nan"))]),
                 id="workload size NaN"),
])
def test_malformed_plan_is_rejected(raw):
    with pytest.raises(plan_record.PlanFormatError):
        plan_record.plan_from_annotation(raw)


def test_drain_annotation_round_trips_and_is_strict():
    d = plan_record.DrainRequest(plan="p-1", requested=T0, deadline=T0 + 30)
    raw = plan_record.drain_to_annotation(d)
    assert plan_record.drain_from_annotation(raw) == d
    assert plan_record.drain_requested({plan_record.DRAIN_ANNOTATION: raw}, "p-1")
    assert not plan_record.drain_requested({plan_record.DRAIN_ANNOTATION: raw}, "p-2")
    assert not plan_record.drain_requested({plan_record.DRAIN_ANNOTATION: "garbage"}, "p-1")
    for bad in ['{"plan":"p"}', '{"plan":"P!","requested":"x","deadline":"y"}', "1"]:
        with pytest.raises(plan_record.DrainFormatError):
            plan_record.drain_from_annotation(bad)


def test_ack_must_name_this_plan():
    assert plan_record.acked({plan_record.DONE_ANNOTATION: "p-1"}, "p-1")
    assert not plan_record.acked({plan_record.DONE_ANNOTATION: "p-0"}, "p-1")
    assert not plan_record.acked({}, "p-1")
