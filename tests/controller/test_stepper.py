"""Every transition and failure path of a stored plan, one reconciler pass each, against a fake
cache and recording actions (tests/controller/fakes.py).

The world: nodes n1 and n2 (8 GPUs each); on n1 the victims v0 (on-request, drained) and v1
(periodic, not drained), 4 GPUs each; the mode (a) preemptor ``pre`` (8 GPUs, priority 1000,
pending). The stored plan p-1 frees n1 for ``pre`` by evicting v0 and v1: created at T0,
checkpoint deadline T0+60, evictBy T0+180, bindBy T0+480 (within the default caps).
Writes are written ``verb:target`` (plan writes ``verb:State``), Events ``Reason target`` with
a leading ``!`` for a Warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from ckpt_preempt.controller.writes.actions import Conflict, WriteFailed
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.lifecycle.plan_record import (
    Mode,
    PlannedPlacement,
    PlannedVictim,
    PlanRecord,
    State,
)
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.times import rfc3339
from tests.controller.fakes import T0, FakeCache, Rig, node, pdb, pod, reservation

CKPT = {ann.CHECKPOINT: "on-request", ann.CHECKPOINT_SECONDS: "60",
        ann.LAST_CHECKPOINT: rfc3339(T0 - 600)}
PERIODIC = {ann.CHECKPOINT: "periodic", ann.LAST_CHECKPOINT: rfc3339(T0 - 600)}
PLAN = "p-1"
Change = Callable[[FakeCache], None]


def plan(state: State = State.DRAINING, *, mode: Mode = Mode.NOMINATE, created: float = T0,
         deadline: float = T0 + 60, evict_by: float | None = None,
         bind_by: float | None = None, victims: tuple[tuple[str, bool], ...] = (
             ("v0", True), ("v1", False)), ns: str = "team", pre_ns: str = "team"
         ) -> PlanRecord:
    evict_by = deadline + 120 if evict_by is None else evict_by
    return PlanRecord(
        id=PLAN, state=state, mode=mode, created=created, deadline=deadline, evict_by=evict_by,
        bind_by=evict_by + 300 if bind_by is None else bind_by,
        placements=(PlannedPlacement(uid="uid-pre", namespace=pre_ns, name="pre", node="n1"),),
        victims=tuple(PlannedVictim(uid=f"uid-{name}", namespace=ns, name=name, node="n1",
                                    drain=drain, workload=f"pod:uid-{name}")
                      for name, drain in victims))


def world(record: PlanRecord, *changes: Change, extra=()) -> FakeCache:
    cache = FakeCache(
        nodes=[node("n1"), node("n2")],
        pods=[pod("pre", priority=1000, pending=True),
              pod("v0", node="n1", gpus=4, annotations=CKPT),
              pod("v1", node="n1", gpus=4, annotations=PERIODIC), *extra])
    cache.store_plan(record)
    for change in changes:
        change(cache)
    return cache


# ------------------------------------------------------------------------ world changes


def asked(*names: str) -> Change:
    def change(c: FakeCache) -> None:
        req = plan_record.DrainRequest(plan=PLAN, requested=T0, deadline=T0 + 60)
        for n in names:
            p = c.pod_by_uid(f"uid-{n}")
            c.change_pod(p.uid, annotations={**p.annotations,
                                             plan_record.DRAIN_ANNOTATION:
                                             plan_record.drain_to_annotation(req)})
    return change


def acked(name: str) -> Change:
    return lambda c: c.ack(f"uid-{name}", PLAN)


def gone(*names: str) -> Change:
    def change(c: FakeCache) -> None:
        for n in names:
            c.pods.remove(c.pod_by_uid(f"uid-{n}").key)
    return change


def terminating(*names: str) -> Change:
    def change(c: FakeCache) -> None:
        for n in names:
            c.change_pod(f"uid-{n}", deleting=True)
    return change


def bound(name: str, node_name: str) -> Change:
    return lambda c: c.bind(f"uid-{name}", node_name)


def changed(name: str, **fields) -> Change:
    return lambda c: c.change_pod(f"uid-{name}", **fields)


def replaced(name: str, **kw) -> Change:
    """The pod rebuilt from its API object with other fields (same uid)."""
    def change(c: FakeCache) -> None:
        old = c.pod_by_uid(f"uid-{name}")
        c.pods.remove(old.key)
        c.pods.put(pod(name, **kw))
    return change


def steered(c: FakeCache) -> None:
    """pre nominated on n1, tolerating p-1's reservation, which n1 carries."""
    p = c.pod_by_uid("uid-pre")
    c.change_pod(p.uid, nominated="n1", tolerations=(
        {"key": ann.RESERVED_TAINT, "operator": "Equal", "value": PLAN, "effect": "NoSchedule"},))
    n1 = c.nodes.get("n1")
    c.nodes.put(replace(n1, taints=(reservation(PLAN),)))


def no_node(name: str) -> Change:
    return lambda c: c.nodes.remove(name)


# ---------------------------------------------------------------------------------- helpers


def writes(calls) -> list[str]:
    return [f"{c.verb}:{c.args['state']}" if c.verb.endswith("_plan") and "state" in c.args
            else f"{c.verb}:{c.target}" for c in calls if c.ok and c.verb != "emit"]


def events(calls) -> list[str]:
    return [("!" if c.warning else "") + f"{c.reason} {c.target}"
            for c in calls if c.ok and c.verb == "emit"]


EVICT_BOTH = ["reserve:n1", "tolerate:team/pre", "nominate:team/pre", "evict:team/v0",
              "evict:team/v1"]
EVICTED = ["Evicted team/v0", "Evicted team/v1"]

TRANSITIONS = [
    pytest.param(plan(State.PLANNED), (), T0 + 1,
                 ["update_plan:Draining", "request_checkpoint:team/v0"],
                 ["CheckpointRequested team/v0"], State.DRAINING,
                 id="new plan stored -> Draining, drain requested of the drained victim only"),
    pytest.param(plan(), (asked("v0"),), T0 + 10, [], [], State.DRAINING,
                 id="Draining: asked, not acked: waits, writes nothing"),
    pytest.param(plan(), (), T0 + 10, ["request_checkpoint:team/v0"],
                 ["CheckpointRequested team/v0"], State.DRAINING,
                 id="Draining: a drain request missing is written"),
    pytest.param(plan(), (asked("v0"), acked("v0")), T0 + 10,
                 ["update_plan:Evicting", *EVICT_BOTH],
                 ["CheckpointCompleted team/v0", *EVICTED], State.EVICTING,
                 id="ack -> Evicting: reserve, nominate, then evict"),
    pytest.param(plan(), (asked("v0"),), T0 + 60, ["update_plan:Evicting", *EVICT_BOTH],
                 ["!CheckpointDeadlineExceeded team/v0", *EVICTED], State.EVICTING,
                 id="deadline -> Evicting with CheckpointDeadlineExceeded on the silent victim"),
    pytest.param(plan(), (), T0 + 61, ["update_plan:Evicting", *EVICT_BOTH],
                 ["!CheckpointDeadlineExceeded team/v0", *EVICTED], State.EVICTING,
                 id="deadline passed before the request was written: no late request"),
    pytest.param(plan(victims=(("v0", False), ("v1", False))), (), T0 + 1,
                 ["update_plan:Evicting", *EVICT_BOTH], EVICTED, State.EVICTING,
                 id="no victim drains: straight to Evicting"),
    pytest.param(plan(State.EVICTING), (steered,), T0 + 70, ["evict:team/v0", "evict:team/v1"],
                 EVICTED, State.EVICTING,
                 id="Evicting, already reserved and nominated: evicts only"),
    pytest.param(plan(State.EVICTING), (steered, terminating("v0", "v1")), T0 + 200, [], [],
                 State.EVICTING,
                 id="victims terminating past evictBy: no second eviction, the plan holds"),
    pytest.param(plan(State.EVICTING), (steered, terminating("v0")), T0 + 70,
                 ["evict:team/v1"], ["Evicted team/v1"], State.EVICTING,
                 id="one victim terminating: only the other is evicted"),
    pytest.param(plan(State.EVICTING), (steered, gone("v0", "v1")), T0 + 479, [], [],
                 State.EVICTING, id="victims gone, preemptor not bound yet: holds"),
    pytest.param(plan(State.EVICTING), (steered, gone("v0", "v1"), bound("pre", "n1")),
                 T0 + 300, ["update_plan:Done"], ["PreemptionDone team/pre"], State.DONE,
                 id="preemptor bound on the planned node -> Done"),
    pytest.param(plan(State.EVICTING), (steered, terminating("v0", "v1"), bound("pre", "n2")),
                 T0 + 300, ["update_plan:Done"], ["PreemptionDone team/pre"], State.DONE,
                 id="bound elsewhere after eviction -> Done, no Warning"),
    pytest.param(plan(State.EVICTING), (steered, gone("v0", "v1")), T0 + 480,
                 ["update_plan:Aborted", "clear_nomination:team/pre"],
                 ["!PreemptionAborted team/pre"], State.ABORTED,
                 id="not bound by bindBy -> Aborted, nomination cleared"),
    pytest.param(plan(State.EVICTING), (gone("v0", "v1"),), T0 + 300, ["nominate:team/pre"],
                 [], State.EVICTING, id="victims gone, preemptor not nominated: nominated"),
    pytest.param(plan(), (asked("v0"), gone("v1")), T0 + 10,
                 ["update_plan:Aborted", "withdraw_checkpoint:team/v0"],
                 ["!PreemptionAborted team/pre", "PreemptionAborted team/v0"], State.ABORTED,
                 id="victim gone before eviction -> Aborted, drain withdrawn"),
    pytest.param(plan(), (asked("v0"), terminating("v1")), T0 + 10,
                 ["update_plan:Aborted", "withdraw_checkpoint:team/v0"],
                 ["!PreemptionAborted team/pre", "PreemptionAborted team/v0"], State.ABORTED,
                 id="victim terminating by someone else before eviction -> Aborted"),
    pytest.param(plan(victims=(("v0", True), ("v1", True))), (asked("v0", "v1"),
                                                               terminating("pre")), T0 + 10,
                 ["update_plan:Aborted", "withdraw_checkpoint:team/v0",
                  "withdraw_checkpoint:team/v1"],
                 ["!PreemptionAborted team/pre", "PreemptionAborted team/v0",
                  "PreemptionAborted team/v1"], State.ABORTED,
                 id="preemptor deleted mid-drain -> Aborted, every drain withdrawn"),
    pytest.param(plan(victims=(("v0", True), ("v1", True))), (asked("v0", "v1"), gone("pre")),
                 T0 + 10, ["update_plan:Aborted", "withdraw_checkpoint:team/v0",
                           "withdraw_checkpoint:team/v1"],
                 ["PreemptionAborted team/v0", "PreemptionAborted team/v1"], State.ABORTED,
                 id="preemptor gone mid-drain -> Aborted, every drain withdrawn"),
    pytest.param(plan(), (asked("v0"), bound("pre", "n2")), T0 + 10,
                 ["update_plan:Aborted", "withdraw_checkpoint:team/v0"],
                 ["!PreemptionAborted team/pre", "PreemptionAborted team/v0",
                  "PreemptionAborted team/v1"], State.ABORTED,
                 id="preemptor scheduled elsewhere before eviction -> Aborted"),
    pytest.param(plan(State.DONE), (gone("v0", "v1"), bound("pre", "n1")), T0 + 300, [], [],
                 State.DONE, id="Done: nothing more"),
    pytest.param(plan(State.ABORTED), (asked("v0"),), T0 + 300,
                 ["withdraw_checkpoint:team/v0"], [], State.ABORTED,
                 id="Aborted earlier (a restart): a drain left behind is withdrawn"),
]


@pytest.mark.parametrize(("record", "changes", "at", "want_writes", "want_events", "want"),
                         TRANSITIONS)
def test_one_pass_of_a_stored_plan(record, changes, at, want_writes, want_events, want):
    rig = Rig(world(record, *changes))
    calls = rig.tick(at)
    assert writes(calls) == want_writes
    assert events(calls) == want_events
    assert rig.state(PLAN) is want


def test_a_pass_nominates_before_it_evicts_and_reserves_before_both():
    rig = Rig(world(plan(), asked("v0"), acked("v0")))
    rig.tick(T0 + 10)
    verbs = rig.actions.verbs()
    assert verbs.index("reserve") < verbs.index("tolerate") < verbs.index("nominate") \
        < verbs.index("evict")
    assert rig.cache.nodes.get("n1").taints == (reservation(PLAN),)
    assert rig.cache.pod_by_uid("uid-pre").nominated == "n1"


def test_the_drain_request_is_written_once_even_when_the_cache_lags():
    cache = world(plan(State.PLANNED))
    rig = Rig(cache)
    rig.tick(T0 + 1)
    lagging = cache.pod_by_uid("uid-v0")
    cache.change_pod("uid-v0", annotations=CKPT)  # the watch has not delivered the write yet
    for t in (T0 + 2, T0 + 3):
        rig.tick(t)
    cache.pods.put(lagging)
    rig.tick(T0 + 4)
    assert len(rig.actions.of("request_checkpoint")) == 1
    assert rig.actions.event_reasons().count("CheckpointRequested") == 1


def test_terminating_victims_are_evicted_once_and_the_preemptor_is_not_planned_again():
    """A real kubelet keeps victims Terminating for their grace period: several passes meanwhile
    evict nothing more, plan nothing new (another victim is there to take: w0 on n2)."""
    extra = [pod("w0", node="n2", gpus=8, annotations=PERIODIC)]
    rig = Rig(world(plan(), asked("v0"), acked("v0"), extra=extra))
    rig.tick(T0 + 10)
    for t in range(20, 470, 30):
        rig.tick(T0 + t)
    assert [c.target for c in rig.actions.of("evict")] == ["team/v0", "team/v1"]
    assert rig.actions.of("create_plan") == []
    assert rig.state(PLAN) is State.EVICTING
    assert rig.cache.nodes.get("n1").taints == (reservation(PLAN),)


# ------------------------------------------------------------ a plan that fails live checks

INVALID = [
    pytest.param(plan, (replaced("v1", ns="elsewhere", node="n1", gpus=4),),
                 {"ns": "elsewhere"}, "outside the controller's scope",
                 id="victim outside the scope"),
    pytest.param(plan, (changed("v1", priority=1000),), {}, "not of lower priority",
                 id="victim priority raised to the preemptor's"),
    pytest.param(plan, (changed("v1", node="n2"),), {}, "is not on n1",
                 id="victim moved to another node"),
    pytest.param(plan, (replaced("v1", node="n1", gpus=4, started=T0 - 600,
                                 annotations={**PERIODIC, ann.MIN_RUNTIME: "30m"}),), {},
                 "may not be evicted now", id="victim within its min-runtime"),
    pytest.param(plan, (no_node("n1"),), {}, "node n1 does not exist", id="node deleted"),
    pytest.param(plan, (), {"deadline": T0 + 10 * 365 * 86400},
                 "checkpoint deadline beyond the configured cap", id="deadline beyond cap"),
    pytest.param(plan, (), {"evict_by": T0 + 60 + 86400},
                 "eviction deadline beyond the configured cap", id="evictBy beyond cap"),
    pytest.param(plan, (), {"bind_by": T0 + 180 + 86400},
                 "bind deadline beyond the configured cap", id="bindBy beyond cap"),
    pytest.param(plan, (), {"created": T0 + 86400, "deadline": T0 + 86460},
                 "created in the future", id="created in the future"),
    pytest.param(plan, (replaced("pre", ns="elsewhere", priority=1000, pending=True),),
                 {"pre_ns": "elsewhere"}, "preemptor elsewhere/pre is outside",
                 id="preemptor outside the scope"),
]


def _only_cleanup(calls) -> bool:
    """Writes for p-1 are its abort and the cleanup after it (a re-plan may write its own)."""
    return all(w.split(":")[0] in ("update_plan", "withdraw_checkpoint", "clear_nomination")
               for w in writes(c for c in calls if c.plan == PLAN))


@pytest.mark.parametrize("state", [State.PLANNED, State.DRAINING, State.EVICTING])
@pytest.mark.parametrize(("make", "changes", "kw", "why"), INVALID)
def test_a_plan_failing_live_checks_is_aborted_with_a_warning_and_nothing_else(
        make, changes, kw, why, state):
    setup = (steered,) if state is State.EVICTING else (asked("v0"),) * (state is State.DRAINING)
    rig = Rig(world(make(state, **kw), *setup, *changes))
    calls = rig.tick(T0 + 70)
    assert writes(calls)[0] == "update_plan:Aborted"
    assert _only_cleanup(calls)
    assert rig.state(PLAN) is State.ABORTED
    assert why in rig.cache.plan(PLAN).reason
    warned = [c for c in calls if c.ok and c.warning]
    assert [c.reason for c in warned] == ["PreemptionAborted"]
    assert why in warned[0].message
    later = rig.tick(T0 + 80)  # next pass: only the reservation is lifted for this plan
    assert set(writes(c for c in later if c.plan == PLAN)) <= {"unreserve:n1"}


def test_a_victim_the_admin_lets_opt_out_aborts_the_plan():
    """``preemptible: "false"`` honoured in an opt-out namespace: the plan may not evict it."""
    record = plan(State.DRAINING)
    rig = Rig(world(record, asked("v0"),
                    changed("v1", annotations={**PERIODIC, ann.PREEMPTIBLE: "false"})),
              opt_out_namespaces=("team",))
    calls = rig.tick(T0 + 70)
    assert writes(calls)[:1] == ["update_plan:Aborted"]
    assert "may not be evicted now" in rig.cache.plan(PLAN).reason
    assert not rig.actions.of("evict")


def test_an_opt_out_the_admin_does_not_allow_is_ignored():
    record = plan(State.DRAINING)
    rig = Rig(world(record, asked("v0"), acked("v0"),
                    changed("v1", annotations={**PERIODIC, ann.PREEMPTIBLE: "false"})))
    rig.tick(T0 + 10)
    assert [c.target for c in rig.actions.of("evict")] == ["team/v0", "team/v1"]


# ------------------------------------------------------------------------- gangs and PDBs

GANG = {"scheduling.ai/gang-name": "train", "scheduling.ai/gang-total": "2", "app": "train"}


@pytest.mark.parametrize(("allowed", "evicted"), [
    pytest.param(1, [], id="PDB allows 1 of 2 gang members: aborted, none evicted"),
    pytest.param(0, [], id="PDB allows none: aborted, none evicted"),
    pytest.param(2, ["team/v0", "team/v1"], id="PDB allows the whole gang: both evicted"),
])
def test_a_gang_is_never_half_evicted_under_a_pdb(allowed, evicted):
    cache = world(plan(State.EVICTING), steered,
                  changed("v0", labels=GANG), changed("v1", labels=GANG))
    cache.pdbs.put(pdb("train", match={"app": "train"}, allowed=allowed))
    rig = Rig(cache)
    calls = rig.tick(T0 + 70)
    assert [c.target for c in rig.actions.of("evict")] == evicted
    if not evicted:
        assert rig.state(PLAN) is State.ABORTED
        assert "PodDisruptionBudget team/train" in rig.cache.plan(PLAN).reason
        assert [c.reason for c in calls if c.ok and c.warning] == ["PreemptionAborted"]


# --------------------------------------------------------------------- blocked evictions


def test_a_blocked_eviction_warns_once_aborts_at_evict_by_and_the_victim_is_skipped():
    extra = [pod("w0", node="n2", gpus=8, annotations=PERIODIC)]
    rig = Rig(world(plan(State.EVICTING, victims=(("v0", False),)), steered, extra=extra))
    rig.actions.block("uid-v0")
    for t in (70, 100, 150):
        rig.tick(T0 + t)
    assert [c.outcome for c in rig.actions.calls if c.verb == "evict"] == ["Blocked"] * 3
    assert rig.actions.event_reasons().count("EvictionBlocked") == 1
    assert rig.state(PLAN) is State.EVICTING
    rig.tick(T0 + 180)  # evictBy
    assert rig.state(PLAN) is State.ABORTED
    created = rig.actions.of("create_plan")
    assert [c.args["victims"] for c in created] == [("uid-w0",)]
    assert created[0].args["nodes"] == ("n2",)


# ------------------------------------------------------------------ conflicts and API errors


@pytest.mark.parametrize(("record", "changes", "error"), [
    pytest.param(plan(), (asked("v0"), acked("v0")), lambda: Conflict("changed"),
                 id="Conflict on Draining -> Evicting"),
    pytest.param(plan(State.PLANNED), (), lambda: Conflict("changed"),
                 id="Conflict on Planned -> Draining"),
    pytest.param(plan(), (asked("v0"), acked("v0")),
                 lambda: WriteFailed("update-plan: 500", status=500),
                 id="500 on Draining -> Evicting"),
])
def test_a_failed_plan_update_does_nothing_else_that_pass_and_resumes_next(record, changes,
                                                                          error):
    rig = Rig(world(record, *changes))
    rig.actions.fail("update_plan", error, times=1)
    calls = rig.tick(T0 + 10)
    failed = next(i for i, c in enumerate(calls) if c.verb == "update_plan")
    assert not calls[failed].ok
    assert [c for c in calls[failed + 1:] if c.ok] == []
    assert rig.state(PLAN) is record.state
    rig.tick(T0 + 11)
    assert rig.state(PLAN) is not record.state
    assert rig.actions.event_reasons().count("CheckpointCompleted") <= 1


def test_an_update_guarded_by_a_stale_resource_version_is_a_conflict():
    """Someone else (another replica) rewrote the plan since the cache showed it."""
    cache = world(plan(), asked("v0"), acked("v0"))
    rig = Rig(cache)
    stale = cache.plans.get("ckpt-plan-" + PLAN)
    cache.store_plan(plan(State.ABORTED))  # the newer version, unseen by the pass
    newer = cache.plans.get("ckpt-plan-" + PLAN)
    cache.plans.put(stale)
    rig.actions.before_write = lambda call: cache.plans.put(newer)
    calls = rig.tick(T0 + 10)
    assert [c.outcome for c in calls if c.verb == "update_plan"] == ["Conflict"]
    assert writes(calls) == []


def test_an_api_error_on_an_eviction_ends_the_plans_pass_and_the_next_pass_retries_it():
    rig = Rig(world(plan(State.EVICTING), steered))
    rig.actions.fail("evict", lambda: WriteFailed("evict: 403 Forbidden", status=403),
                     target="team/v0", times=1)
    first = rig.tick(T0 + 70)
    assert [c.outcome for c in first if c.verb == "evict"] == ["WriteFailed"]
    rig.tick(T0 + 75)
    assert [c.target for c in rig.actions.of("evict")] == ["team/v0", "team/v1"]
    assert rig.state(PLAN) is State.EVICTING


def test_one_plan_failing_does_not_stop_the_others():
    cache = world(plan(), asked("v0"), acked("v0"), extra=[
        pod("pre2", priority=1000, pending=True), pod("w0", node="n2", gpus=8,
                                                      annotations=PERIODIC)])
    cache.store_plan(replace(
        plan(State.PLANNED), id="p-2", created=T0 + 1,
        placements=(PlannedPlacement(uid="uid-pre2", namespace="team", name="pre2", node="n2"),),
        victims=(PlannedVictim(uid="uid-w0", namespace="team", name="w0", node="n2",
                               drain=False),)))
    rig = Rig(cache)
    rig.actions.fail("update_plan", lambda: WriteFailed("update-plan: 500", status=500),
                     target=PLAN)
    rig.tick(T0 + 10)
    assert rig.state(PLAN) is State.DRAINING
    assert rig.state("p-2") is State.EVICTING
    assert [c.target for c in rig.actions.of("evict")] == ["team/w0"]


def test_a_drain_annotation_with_a_huge_integer_does_not_stall_the_plan():
    """Read as no request of this plan: the deadline still moves the plan on."""
    huge = '{"plan":"p-1","requested":' + "9" * 5000 + ',"deadline":1}'
    rig = Rig(world(plan(), changed("v0", annotations={**CKPT,
                                                        plan_record.DRAIN_ANNOTATION: huge})))
    rig.tick(T0 + 60)
    assert rig.state(PLAN) is State.EVICTING


# ------------------------------------------------------------------ a cache that lags behind


def test_a_victim_is_evicted_once_even_when_the_cache_has_not_seen_the_eviction():
    cache = world(plan(State.EVICTING), steered)
    rig = Rig(cache)
    before = {u: cache.pod_by_uid(u) for u in ("uid-v0", "uid-v1")}
    rig.tick(T0 + 70)
    cache.pods.put(*before.values())  # the watch has not delivered the deletions yet
    for t in (71, 72, 100):
        rig.tick(T0 + t)
    assert [c.target for c in rig.actions.of("evict")] == ["team/v0", "team/v1"]


# ------------------------------------------------- which victims re-plans leave out, and why

@pytest.mark.parametrize(("record", "changes"), [
    pytest.param(plan(State.EVICTING), (gone("pre"),), id="preemptor gone while Evicting"),
    pytest.param(plan(State.EVICTING, deadline=T0 + 10**6), (steered,),
                 id="deadline beyond cap found while Evicting"),
])
def test_victims_never_refused_are_not_left_out_of_re_plans(record, changes):
    """blockedVictimSeconds is for a victim still refused at evictBy (a PDB). An Evicting plan
    aborted for another reason before its evictions went out holds nobody back: the next
    preemptor may take the same cheap victims (v0 and v1 on n1, not w0 on n2)."""
    rig = Rig(world(record, *changes, extra=[
        pod("pre2", priority=1000, pending=True),
        pod("w0", node="n2", gpus=8, annotations={ann.CHECKPOINT: "periodic",
                                                 ann.LAST_CHECKPOINT: rfc3339(T0 - 10800)})]))
    rig.tick(T0 + 70)
    assert rig.state(PLAN) is State.ABORTED
    assert [c for c in rig.actions.of("evict") if c.plan == PLAN] == []
    assert any(set(c.args["victims"]) == {"uid-v0", "uid-v1"}
               for c in rig.actions.of("create_plan"))


@pytest.mark.parametrize(("record", "changes", "at", "cause"), [
    pytest.param(plan(State.EVICTING), (steered, gone("v0", "v1")), T0 + 480, "bind-timeout",
                 id="not bound by bindBy"),
    pytest.param(plan(), (asked("v0"), gone("v1")), T0 + 10, "victim-gone",
                 id="victim gone before eviction"),
    pytest.param(plan(), (asked("v0"), bound("pre", "n2")), T0 + 10,
                 "preemptor-placed-elsewhere", id="preemptor scheduled elsewhere"),
    pytest.param(plan(victims=(("v0", True), ("v1", True))), (asked("v0", "v1"), gone("pre")),
                 T0 + 10, "preemptor-gone", id="preemptor gone"),
])
def test_an_abort_is_counted_by_its_cause(record, changes, at, cause):
    rig = Rig(world(record, *changes))
    rig.tick(at)
    assert rig.state(PLAN) is State.ABORTED
    count = rig.metrics.registry.get_sample_value
    assert count("ckpt_preempt_plan_aborts_total", {"cause": cause}) == 1
    assert count("ckpt_preempt_plans_total", {"outcome": "aborted"}) == 1
