"""Whole reconciler passes (``Reconciler.tick``) over a fake cache with recording actions: new
plans, multi-pass convergence, leadership lost mid-pass, dry-run, unreadable or legacy plans,
reservations, plan history, and not re-planning while victims terminate.

World as in test_stepper.py: nodes n1, n2; victims v0 (on-request) and v1 (periodic) on n1,
4 GPUs each; the 8-GPU mode (a) preemptor ``pre``; here also w0 (8 GPUs, periodic, an older
checkpoint: costlier) on n2, so a plan for ``pre`` takes n1.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from ckpt_preempt.controller.kube.watch import StoredPlan
from ckpt_preempt.controller.planning import plans, reconcile
from ckpt_preempt.controller.writes.actions import NotLeader
from ckpt_preempt.policies.lifecycle import lifecycle, plan_record
from ckpt_preempt.policies.lifecycle.plan_record import Mode, State
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.times import rfc3339
from tests.controller.fakes import T0, FakeCache, Rig, node, pod, reservation
from tests.controller.test_stepper import (
    CKPT,
    PERIODIC,
    PLAN,
    asked,
    bound,
    plan,
    steered,
    world,
)

OLD = {ann.CHECKPOINT: "periodic", ann.LAST_CHECKPOINT: rfc3339(T0 - 3 * 3600)}


def cluster(*extra, pre=True, **pre_kw) -> FakeCache:
    pods = [pod("v0", node="n1", gpus=4, annotations=CKPT),
            pod("v1", node="n1", gpus=4, annotations=PERIODIC),
            pod("w0", node="n2", gpus=8, annotations=OLD), *extra]
    if pre:
        pods.append(pod("pre", priority=1000, pending=True, **pre_kw))
    return FakeCache(nodes=[node("n1"), node("n2")], pods=pods)


def only_plan(rig: Rig) -> plan_record.PlanRecord:
    (obj,) = rig.cache.plans.items()
    return plan_record.plan_from_annotation(obj.raw)


# ------------------------------------------------------------------------------- new plans


def test_a_new_plan_is_stored_then_draining_and_the_drain_is_requested():
    rig = Rig(cluster())
    calls = rig.tick(T0)
    writes = [c for c in calls if c.ok and c.verb != "emit"]
    assert [c.verb for c in writes] == ["create_plan", "update_plan", "request_checkpoint"]
    assert writes[0].args["state"] is State.PLANNED
    assert writes[1].args["state"] is State.DRAINING
    assert writes[2].target == "team/v0"
    r = only_plan(rig)
    assert r.state is State.DRAINING and r.mode is Mode.NOMINATE
    assert {v.uid for v in r.victims} == {"uid-v0", "uid-v1"}
    assert r.nodes == {"n1"}
    assert lifecycle.check(r, rig.reconciler.stepper.live(r, _world(rig)),
                           rig.reconciler.stepper.caps, T0) is None
    assert rig.actions.event_reasons("team/pre") == ["PreemptionPlanned"]


def _world(rig: Rig):
    from ckpt_preempt.controller.planning.advance import World
    pods = rig.cache.pods.items()
    return World(by_uid={p.uid: p for p in pods}, nodes={n.name: n for n in
                                                          rig.cache.nodes.items()},
                 pdbs=tuple(rig.cache.pdbs.items()), now=rig.clock.now)


def test_a_whole_preemption_converges_over_passes_with_one_eviction_per_victim():
    rig = Rig(cluster())
    rig.tick(T0)
    r = only_plan(rig)
    rig.cache.ack("uid-v0", r.id)  # the agent
    rig.tick(T0 + 5)
    assert rig.state(r.id) is State.EVICTING
    assert rig.cache.pod_by_uid("uid-v0").deleting and rig.cache.pod_by_uid("uid-v1").deleting
    for t in (10, 20, 30):  # the kubelet takes its time
        rig.tick(T0 + t)
    assert rig.state(r.id) is State.EVICTING
    rig.cache.finish_terminating()
    rig.cache.bind("uid-pre", "n1")  # the scheduler
    rig.tick(T0 + 40)
    assert rig.state(r.id) is State.DONE
    rig.tick(T0 + 41)
    assert rig.cache.nodes.get("n1").taints == ()
    assert sorted(c.target for c in rig.actions.of("evict")) == ["team/v0", "team/v1"]
    assert [c.args["state"] for c in rig.actions.of("update_plan")] == [
        State.DRAINING, State.EVICTING, State.DONE]
    assert rig.actions.warnings() == []
    assert len(rig.actions.of("create_plan")) == 1


def test_a_gated_preemptor_is_reserved_evicted_for_then_pinned_and_ungated():
    """Mode (b): nothing is steered before the victims are gone; then pin before ungate."""
    rig = Rig(cluster(pre=False))
    rig.cache.pods.put(pod("pre", priority=1000, gates=(reconcile.ADMISSION_GATE,)))
    rig.tick(T0)
    r = only_plan(rig)
    assert r.mode is Mode.ADMIT
    rig.cache.ack("uid-v0", r.id)
    rig.tick(T0 + 5)
    assert rig.actions.verbs()[-4:] == ["reserve", "tolerate", "evict", "evict"]
    assert rig.actions.of("pin") == []
    rig.cache.finish_terminating()
    rig.tick(T0 + 10)
    assert rig.actions.verbs()[-2:] == ["pin", "ungate"]
    live = rig.cache.pod_by_uid("uid-pre")
    assert reconcile.ADMISSION_GATE not in live.gates
    assert live.required_terms[0]["matchFields"][0]["values"] == ["n1"]
    rig.cache.bind("uid-pre", "n1")
    rig.tick(T0 + 15)
    assert rig.state(r.id) is State.DONE
    assert rig.actions.event_reasons("team/pre")[-2:] == ["GangAdmitted", "PreemptionDone"]


def test_an_opted_out_pod_is_never_chosen_where_the_admin_allows_opt_out():
    rig = Rig(cluster(), opt_out_namespaces=("team",))
    rig.cache.change_pod("uid-v1", annotations={**PERIODIC, ann.PREEMPTIBLE: "false"})
    rig.tick(T0)
    assert "uid-v1" not in only_plan(rig).victim_uids


def test_a_preemptor_waits_while_victims_of_its_aborted_plan_terminate():
    """Like kube-scheduler: no new plan (here it would take w0 on n2) until they are gone."""
    rig = Rig(world(plan(State.ABORTED, victims=(("v0", False),)), extra=[
        pod("w0", node="n2", gpus=8, annotations=OLD)]))
    rig.cache.change_pod("uid-v0", deleting=True)
    for t in (0, 10, 20):
        rig.tick(T0 + t)
    assert rig.actions.of("create_plan") == []
    rig.cache.finish_terminating()
    rig.tick(T0 + 30)
    assert len(rig.actions.of("create_plan")) == 1


# ------------------------------------------------------------------------------ leadership


def _scenario(name: str) -> tuple[Rig, float]:
    """A world whose next pass writes `name` (and more after it)."""
    if name in ("create_plan",):
        return Rig(cluster()), T0
    if name == "request_checkpoint":
        return Rig(world(plan(State.PLANNED))), T0 + 1
    if name == "withdraw_checkpoint":
        return Rig(world(plan(), asked("v0"), lambda c: c.change_pod("uid-v1", deleting=True))), \
            T0 + 10
    if name == "clear_nomination":
        rig = Rig(world(plan(State.EVICTING), steered))
        rig.cache.finish_terminating()
        for v in ("v0", "v1"):
            rig.cache.pods.remove(f"team/{v}")
        return rig, T0 + 480
    if name in ("unreserve", "delete_plan"):
        rig = Rig(world(plan(State.DONE), steered))
        # delete_plan: past the plan history (4000 s when it was an hour's)
        return rig, T0 + (rig.cfg.plan_history_seconds + 400 if name == "delete_plan" else 300)
    if name in ("pin", "ungate"):
        rig = Rig(world(plan(State.EVICTING, mode=Mode.ADMIT), steered))
        rig.cache.change_pod("uid-pre", gates=(reconcile.ADMISSION_GATE,), nominated=None)
        for v in ("v0", "v1"):
            rig.cache.pods.remove(f"team/{v}")
        return rig, T0 + 300
    return Rig(world(plan(), asked("v0"), lambda c: c.ack("uid-v0", PLAN))), T0 + 10


VERBS = ["update_plan", "emit", "reserve", "tolerate", "nominate", "evict", "create_plan",
         "request_checkpoint", "withdraw_checkpoint", "clear_nomination", "unreserve",
         "delete_plan", "pin", "ungate"]


@pytest.mark.parametrize("verb", VERBS)
def test_leadership_lost_at_any_write_stops_the_pass_there(verb):
    rig, at = _scenario(verb)
    rig.actions.lose_leadership_on(verb)
    with pytest.raises(NotLeader):
        rig.tick(at)
    refused = next(i for i, c in enumerate(rig.actions.calls) if c.outcome == "not-leader")
    assert rig.actions.calls[refused].verb == verb
    assert rig.actions.calls[refused + 1:] == []


# --------------------------------------------------------------------------------- dry-run


def test_dry_run_over_a_stored_draining_plan_writes_nothing_but_events():
    cache = world(plan(), asked("v0"), extra=[
        pod("w0", node="n2", gpus=8, annotations=OLD),
        pod("pre2", priority=1000, pending=True)])
    cache.nodes.put(node("n3", taints=[reservation("gone-plan")]))
    cache.store_plan(replace(plan(State.DONE), id="p-0", created=T0 - 7200))
    before = (dict(cache.pods.objects), dict(cache.nodes.objects), dict(cache.plans.objects))
    rig = Rig(cache, dry_run=True)
    for t in (10, 61, 200, 500, 4000):
        rig.tick(T0 + t)
    assert [c for c in rig.actions.calls if c.ok and c.verb != "emit"] == []
    assert (cache.pods.objects, cache.nodes.objects, cache.plans.objects) == before
    reasons = rig.actions.event_reasons()
    assert reasons.count("PreemptionPlanned") == 2  # pre's stored plan, pre2's would-be plan
    assert all("(dry run)" in c.message for c in rig.actions.events
               if c.reason == "PreemptionPlanned")


# ------------------------------------------------------------- unreadable and legacy plans


def _bodies() -> list:
    good = plan_record.plan_to_annotation(plan())
    return [
        pytest.param("ckpt-plan-p-1", "{not json", id="not JSON"),
        pytest.param("ckpt-plan-p-1", None, id="no plan data"),
        pytest.param("ckpt-plan-other", good, id="stored under another plan's name"),
        pytest.param("ckpt-plan-p-1", good.replace('"v":2', '"v":1'), id="old schema"),
        pytest.param("ckpt-plan-p-1", good.replace('"state":"Draining"', '"state":"Evict"'),
                     id="unknown state"),
        pytest.param("ckpt-plan-p-1", good.replace('"victims":[', '"victims":[7,'),
                     id="victims junk"),
    ]


@pytest.mark.parametrize(("name", "raw"), _bodies())
def test_an_unreadable_stored_plan_is_never_acted_on(name, raw, caplog):
    cache = world(plan(), lambda c: c.change_pod("uid-v0", annotations={
        **CKPT, plan_record.DONE_ANNOTATION: PLAN}))
    cache.plans.objects.clear()
    cache.plans.put(StoredPlan(name=name, resource_version="5", raw=raw))
    cache.change_pod("uid-pre", unschedulable=False)  # not a preemptor of its own
    rig = Rig(cache)
    with caplog.at_level(logging.WARNING, logger="ckpt_preempt.reconcile"):
        for t in (10, 11, 200, 4000):
            rig.tick(T0 + t)
    assert rig.actions.calls == []
    assert cache.plans.get(name).raw == raw
    assert any("is unreadable" in m for m in caplog.messages)


def test_a_plan_body_with_a_huge_integer_is_unreadable_not_a_crash():
    good = plan_record.plan_to_annotation(plan())
    cache = world(plan())
    cache.plans.put(StoredPlan(name="ckpt-plan-p-1", resource_version="5",
                               raw=good.replace('"lostGpuSeconds":0.0',
                                                '"lostGpuSeconds":' + "9" * 5000)))
    rig = Rig(cache)
    rig.tick(T0 + 10)  # must not raise
    assert rig.actions.calls == []


def test_the_legacy_plan_annotation_gets_one_warning_and_nothing_is_evicted_for_it():
    legacy = plan_record.plan_to_annotation(replace(plan(State.EVICTING), id="forged"))
    cache = cluster(pre=False)
    cache.pods.put(pod("forger", node="n2", gpus=0, annotations={
        plan_record.PLAN_ANNOTATION: legacy}))
    cache.pods.put(pod("outsider", ns="elsewhere", node="n2", gpus=0, annotations={
        plan_record.PLAN_ANNOTATION: legacy}))
    rig = Rig(cache)
    for t in (0, 10, 200):
        rig.tick(T0 + t)
    assert [(c.reason, c.target, c.warning) for c in rig.actions.calls] == [
        ("InvalidAnnotation", "team/forger", True)]


# ----------------------------------------------------------------- reservations, history


@pytest.mark.parametrize(("state", "at", "lifted"), [
    pytest.param(State.DONE, T0 + 300, True, id="Done: lifted"),
    pytest.param(State.ABORTED, T0 + 300, True, id="Aborted: lifted"),
    pytest.param(State.EVICTING, T0 + 300, False, id="Evicting: kept"),
    pytest.param(State.EVICTING, T0 + 480 + reconcile.RESERVATION_GRACE_SECONDS + 1, True,
                 id="Evicting past bindBy and the grace: lifted"),
])
def test_a_reservation_is_lifted_once_its_plan_is_over(state, at, lifted):
    rig = Rig(world(plan(state), steered))
    rig.tick(at)
    assert [c.target for c in rig.actions.of("unreserve")] == (["n1"] if lifted else [])
    assert (rig.cache.nodes.get("n1").taints == ()) is lifted


def test_a_reservation_of_an_unknown_plan_is_lifted_after_a_while_other_taints_stay():
    other = {"key": "gpu", "value": "broken", "effect": "NoSchedule"}
    cache = cluster(pre=False)
    cache.nodes.put(node("n3", taints=[other, reservation("nowhere")]))
    rig = Rig(cache)
    wait = reconcile.UNKNOWN_RESERVATION_SECONDS
    rig.tick(T0)
    rig.tick(T0 + wait - 1)
    assert rig.actions.of("unreserve") == []
    rig.tick(T0 + wait)
    assert [c.target for c in rig.actions.of("unreserve")] == ["n3"]
    assert cache.nodes.get("n3").taints == (other,)


@pytest.mark.parametrize("state", [State.DONE, State.ABORTED])
def test_finished_plans_are_deleted_after_the_history_window(state):
    rig = Rig(world(plan(state), bound("pre", "n1")))
    rv = rig.cache.plans.get("ckpt-plan-p-1").resource_version
    history = rig.cfg.plan_history_seconds
    rig.tick(T0 + history - 1)
    assert rig.actions.of("delete_plan") == []
    rig.tick(T0 + history + reconcile.PRUNE_SECONDS + 1)
    assert [(c.target, c.args["rv"]) for c in rig.actions.of("delete_plan")] == [(PLAN, rv)]
    assert rig.cache.plans.items() == []


# ------------------------------------------------------------------------ the fake itself


def test_the_fake_has_the_interface_of_the_real_actions():
    import inspect

    from ckpt_preempt.controller.writes.actions import Actions
    from tests.controller.fakes import RecordingActions

    public = {n for n, f in vars(Actions).items() if callable(f) and not n.startswith("_")}
    assert public <= set(dir(RecordingActions))
    for name in public:
        real = inspect.signature(getattr(Actions, name))
        fake = inspect.signature(getattr(RecordingActions, name))
        assert [(p.name, p.kind, p.default) for p in real.parameters.values()] == \
            [(p.name, p.kind, p.default) for p in fake.parameters.values()], name


def test_in_dry_run_the_real_actions_and_the_fake_write_only_events():
    """The same calls on the real ``Actions`` (API client stubbed) and on the fake: the real
    one sends no write to the API server, the fake records none; both send the Event."""
    from unittest import mock

    from kubernetes import client

    from ckpt_preempt.controller.writes.actions import Actions, WriteGuard
    from tests.controller.fakes import RecordingActions

    real = Actions(client.ApiClient(), plan_namespace="ckpt-preempt",
                   guard=WriteGuard(dry_run=True))
    real.core, real.events = mock.MagicMock(), mock.MagicMock()
    real.core.read_node.return_value.spec.taints = []
    real.core.api_client.sanitize_for_serialization.return_value = {
        "metadata": {"resourceVersion": "1"}, "spec": {"schedulingGates": [
            {"name": reconcile.ADMISSION_GATE}]}}
    fake = RecordingActions(dry_run=True)
    gated = pod("pre", priority=1000, gates=(reconcile.ADMISSION_GATE,))
    victim = pod("v0", node="n1", annotations={plan_record.DRAIN_ANNOTATION: (
        plan_record.drain_to_annotation(plan_record.DrainRequest(plan="p-1", requested=T0,
                                                             deadline=T0 + 60)))})
    req = plan_record.DrainRequest(plan="p-2", requested=T0, deadline=T0 + 60)
    for a in (real, fake):
        a.create_plan(plan())
        a.update_plan(plan(), "3")
        a.delete_plan("p-1", "3")
        assert a.request_checkpoint(victim, req) is False
        a.withdraw_checkpoint(victim, "p-1")
        assert a.evict(victim, "p-1") is False
        a.nominate(gated, "n1", "p-1")
        a.pin(gated, "n1", "p-1")
        a.ungate(gated, "p-1")
        a.tolerate(gated, "p-1")
        a.reserve("n1", "p-1")
        a.unreserve("n1", "p-1")
        a.emit(victim, "Test", "hello")
    sent = {c[0].split(".")[0].removesuffix("()") for c in real.core.mock_calls}
    assert sent <= {"read_node", "read_namespaced_pod", "api_client"}
    assert [c[0] for c in real.events.mock_calls] == ["create_namespaced_event"]
    assert [c.verb for c in fake.calls if c.ok] == ["emit"]


def test_a_stored_plan_with_times_before_year_one_is_unreadable_and_the_preemptor_replanned():
    body = json.loads(plan_record.plan_to_annotation(plan()))
    body.update(created="0001-01-01T00:30:00+01:00", deadline="0001-01-01T00:30:00+01:00",
                evictBy="0001-01-01T00:30:00+01:00", bindBy="0001-01-01T00:30:00+01:00")
    cache = cluster()
    cache.plans.put(StoredPlan(name="ckpt-plan-p-1", resource_version="5",
                               raw=json.dumps(body)))
    rig = Rig(cache)
    rig.tick(T0)
    assert len(rig.actions.of("create_plan")) == 1


def test_a_stored_plan_with_a_number_beyond_float_range_does_not_stop_the_loop():
    body = json.loads(plan_record.plan_to_annotation(replace(plan(), id="p-9")))
    body["lostGpuSeconds"] = 10**400
    cache = cluster()
    cache.plans.put(StoredPlan(name="ckpt-plan-p-9", resource_version="5",
                               raw=json.dumps(body)))
    rig = Rig(cache)
    rig.tick(T0)
    assert len(rig.actions.of("create_plan")) == 1


@pytest.mark.parametrize(("most", "victims"), [
    pytest.param(0, {"uid-v0", "uid-v1"}, id="bound off: the cheap pair again"),
    pytest.param(2, {"uid-v0", "uid-v1"}, id="once of two allowed: the cheap pair again"),
    pytest.param(1, {"uid-w0"}, id="at the bound: the costlier pod instead"),
])
def test_the_starvation_bound_counts_the_stored_plans(most, victims):
    # v0 and v1 were preempted by a plan that finished ten minutes ago; with a bound of one
    # preemption per window they are no victims now, and the plan takes w0 on n2
    cache = cluster()
    done = replace(plan(State.DONE, created=T0 - 600), id="ckpt-plan-old")
    done = replace(done, victims=tuple(replace(v, workload=v.uid) for v in done.victims))
    cache.store_plan(done)
    rig = Rig(cache, max_preemptions_per_window=most)
    rig.tick(T0)
    new = [plan_record.plan_from_annotation(o.raw) for o in rig.cache.plans.items()]
    (made,) = [r for r in new if r.id != "ckpt-plan-old"]
    assert {v.uid for v in made.victims} == victims


@pytest.mark.parametrize(("recorded", "victims"), [
    pytest.param(8.0, {"uid-w0"}, id="as large as when preempted: held, the costlier pod instead"),
    pytest.param(None, {"uid-w0"}, id="size not recorded (an older plan): held"),
    pytest.param(1.0, {"uid-v0", "uid-v1"}, id="grown since: its history is not theirs"),
])
def test_pods_attached_to_a_preempted_workload_take_no_more_protection_than_it_earned(
        recorded, victims):
    # The tenant's Job (uid-job) was preempted once ten minutes ago, holding `recorded` GPUs
    # then. v0 and v1 (8 GPUs) now name it as their controlling owner. With the bound at one
    # preemption they are held only if the Job held as much when it was preempted.
    cache = FakeCache(nodes=[node("n1"), node("n2")], pods=[
        pod("v0", node="n1", gpus=4, annotations=CKPT, owner="uid-job"),
        pod("v1", node="n1", gpus=4, annotations=PERIODIC, owner="uid-job"),
        pod("w0", node="n2", gpus=8, annotations=OLD),
        pod("pre", priority=1000, pending=True)])
    done = replace(plan(State.DONE, created=T0 - 600), id="ckpt-plan-old")
    done = replace(done, victims=(replace(done.victims[0], uid="uid-gone", name="gone",
                                          workload="uid-job", workload_gpus=recorded),))
    cache.store_plan(done)
    rig = Rig(cache, max_preemptions_per_window=1)
    rig.tick(T0)
    new = [plan_record.plan_from_annotation(o.raw) for o in rig.cache.plans.items()]
    (made,) = [r for r in new if r.id != "ckpt-plan-old"]
    assert {v.uid for v in made.victims} == victims
    # the new plan records what each victim's workload holds, for the next cycles
    assert {v.uid: v.workload_gpus for v in made.victims} == {uid: 8.0 for uid in victims}


def test_the_size_a_workload_is_attributed_by_is_the_most_it_held_at_a_counted_preemption():
    base = plan(State.DONE, created=T0 - 600)
    v = base.victims[0]

    def stored(pid, state, created, *victims):
        return replace(base, id=pid, state=state, created=created, victims=victims)

    records = [
        stored("a", State.DONE, T0 - 600, replace(v, workload="job", workload_gpus=2.0)),
        stored("b", State.EVICTING, T0 - 300, replace(v, workload="job", workload_gpus=6.0)),
        # neither counts: aborted (nothing evicted), or before the window
        stored("c", State.ABORTED, T0 - 200, replace(v, workload="job", workload_gpus=50.0)),
        stored("d", State.DONE, T0 - 7200, replace(v, workload="job", workload_gpus=40.0)),
        # a plan stored before sizes were: that workload's counts stand as they are
        stored("e", State.DONE, T0 - 100, replace(v, workload="old", workload_gpus=4.0),
               replace(v, uid="uid-x", workload="old", workload_gpus=None)),
        stored("f", State.DONE, T0 - 100, replace(v, workload="", workload_gpus=1.0)),
    ]
    # stored before keys were namespaced: each bare key is read inside its victim's namespace
    job, old, own = (f"{v.namespace}/owner/job", f"{v.namespace}/owner/old",
                     f"{v.namespace}/pod/{v.uid}")
    assert plans.preempted_gpus(records, since=T0 - 3600) == {job: 6.0, own: 1.0}
    assert plans.recent_preemptions(records, since=T0 - 3600) == {job: 2, old: 1, own: 1}
    # the same plans stored with today's keys count the same
    today = [replace(r, victims=tuple(replace(x, workload=plans._workload(x)) for x in r.victims))
             for r in records]
    assert plans.recent_preemptions(today, since=T0 - 3600) == {job: 2, old: 1, own: 1}
    # a victim of another namespace never counts for this one's workload, whatever it recorded
    other = replace(v, namespace="elsewhere", workload=job)
    assert plans.recent_preemptions([stored("g", State.DONE, T0 - 50, other)],
                                    since=T0 - 3600) == {f"elsewhere/owner/{job}": 1}

