"""Fuzzing stored plan and drain bodies (hypothesis, 10,000 examples across this file).

(a) The parsers: ``plan_from_annotation`` / ``drain_from_annotation`` on arbitrary text, on
    JSON junk, and on valid bodies mutated (fields dropped, retyped, added, huge numbers,
    unicode, nested junk) raise only ``PlanFormatError`` / ``DrainFormatError``; whatever they
    accept writes back and reads again to the same record.
(b) The reconciler: random valid-shaped stored plans (any victims, placements, times, states)
    next to a random small world, several passes with the world moving in between. An oracle
    looks at every write before it lands (``RecordingActions.before_write``): a pod is evicted
    only while it is a victim of a stored Evicting plan that passes ``lifecycle.check`` for
    the world as it is then (live state rebuilt here from the cache, not by the controller),
    and only once the plan's nodes carry its reservation and, in mode (a), its preemptor is
    nominated; no pod is evicted twice; no drain request, nomination, pin, ungate, toleration
    or reservation is written for a plan that is not running or fails that check; drain
    requests are withdrawn and nominations cleared only for aborted plans.

Inputs that once broke the parsers are also pinned by regression tests at the end.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.lifecycle import lifecycle, plan_record
from ckpt_preempt.policies.lifecycle.plan_record import (
    DrainFormatError,
    DrainRequest,
    Mode,
    PlanFormatError,
    PlannedPlacement,
    PlannedVictim,
    PlanRecord,
    State,
)
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.times import rfc3339
from tests.controller.fakes import T0, Call, FakeCache, Rig, node, pod, reservation


def examples(n: int) -> settings:
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------------- valid records

# The schema's patterns (plan_record._ID, _NAME, _UID), built from alphabets (fast to draw).
_ALNUM = st.sampled_from("abcxyz0189")
IDS = st.builds(str.__add__, _ALNUM, st.text(alphabet="ab09-", max_size=20))
NAMES = _ALNUM | st.builds(lambda a, mid, b: a + mid + b, _ALNUM,
                           st.text(alphabet="az09-.", max_size=20), _ALNUM)
UIDS = st.text(alphabet="aZ09-", min_size=1, max_size=20)
WORKLOADS = st.text(max_size=40)  # any string up to plan_record.MAX_WORKLOAD_KEY
# Milliseconds within years 1970-2100: what the controller writes. Extreme years: see the end.
MILLIS = st.integers(0, 4_102_444_800_000)


@st.composite
def records(draw) -> PlanRecord:
    times = sorted(draw(st.lists(MILLIS, min_size=4, max_size=4)))
    uids = draw(st.lists(UIDS, min_size=1, max_size=8, unique=True))
    cut = draw(st.integers(1, len(uids)))
    return PlanRecord(
        id=draw(IDS), state=draw(st.sampled_from(State)), mode=draw(st.sampled_from(Mode)),
        created=times[0] / 1000, deadline=times[1] / 1000, evict_by=times[2] / 1000,
        bind_by=times[3] / 1000,
        placements=tuple(PlannedPlacement(uid=u, namespace=draw(NAMES), name=draw(NAMES),
                                          node=draw(NAMES)) for u in uids[:cut]),
        victims=tuple(PlannedVictim(uid=u, namespace=draw(NAMES), name=draw(NAMES),
                                    node=draw(NAMES), drain=draw(st.booleans()),
                                    workload=draw(WORKLOADS)) for u in uids[cut:]),
        lost_gpu_seconds=draw(st.floats(0, 1e12, allow_nan=False)),
        reason=draw(st.text(max_size=40)))


def _seed(state: State, mode: Mode, n: int) -> PlanRecord:
    return PlanRecord(
        id=f"{int(T0):x}-{n}a", state=state, mode=mode, created=T0, deadline=T0 + 60.5,
        evict_by=T0 + 180.25, bind_by=T0 + 480, lost_gpu_seconds=1234.567, reason="why",
        placements=tuple(PlannedPlacement(uid=f"uid-p{i}", namespace="team", name=f"big-{i}",
                                          node=f"n{i}") for i in range(1 + n % 2)),
        victims=tuple(PlannedVictim(uid=f"uid-v{i}", namespace="team", name=f"v-{i}",
                                    node="n1", drain=i % 2 == 0, workload=f"gang:team/x/{i}")
                      for i in range(n)))


# Valid bodies to mutate (drawing a whole record per example would dominate the run time).
SEEDS = st.sampled_from([_seed(s, m, n) for s in State for m in Mode for n in (0, 1, 3)])
drains = st.builds(
    lambda plan_id, a, b: DrainRequest(plan=plan_id, requested=min(a, b) / 1000,
                                       deadline=max(a, b) / 1000),
    IDS, MILLIS, MILLIS)

# ------------------------------------------------------------------------------ junk

# Fixed-offset zones, any year (an instant outside datetime's range is a format error).
ZONES = st.builds(lambda m: timezone(timedelta(minutes=m)), st.integers(-1439, 1439))
TIMES = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31),
                     timezones=st.none() | ZONES).map(lambda t: t.isoformat())
ODD_STRINGS = st.sampled_from([
    "", "T", "2027-01-15T08:00:00", "2027-01-15T08:00:00Z", "2027-01-15t08:00:00z",
    "2027-13-45T99:99:99Z", "2027-01-15T08:00:00+24:00", "2027-01-15T08:00:00.123456789Z",
    "２０２７-01-15T08:00:00Z", "2027-W03-5T08:00Z", "0001-01-01T00:00:00+00:00",
    "9999-12-31T23:59:59+00:00", "Draining", "Evicting", "nominate", "admit", "p-1\x00",
    "1e309", "-0", "\u202e", "\ud7ff", "NaN"])
# Integers stay below float's range: beyond it, see test_an_integer_beyond_float_range_... .
NUMBERS = (st.integers(-(10**400), 10**400) | st.floats() | st.sampled_from(
    [0, -1, 2, 2.0, 1e308, -1e308, 5e-324, 10**400, -(2**63), 2**64]))
SCALARS = st.none() | st.booleans() | NUMBERS | st.text(max_size=30) | TIMES | ODD_STRINGS
JUNK = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def _paths(value, path=()):
    """Every (container path, key) in a JSON tree."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield path, k
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield path, i
            yield from _paths(v, (*path, i))


def _at(value, path):
    for k in path:
        value = value[k]
    return value


def mutate(data: st.DataObject, body: dict) -> dict:
    """1-4 of: drop a field, retype it, add an unknown one, duplicate a list entry."""
    body = json.loads(json.dumps(body))
    for _ in range(data.draw(st.integers(1, 4))):
        spots = list(_paths(body))
        if not spots:
            break
        path, key = data.draw(st.sampled_from(spots))
        container = _at(body, path)
        op = data.draw(st.sampled_from(["drop", "retype", "retype", "add", "dup"]))
        if op == "drop":
            del container[key]
        elif op == "retype":
            container[key] = data.draw(JUNK)
        elif op == "add" and isinstance(container, dict):
            container[data.draw(st.text(max_size=8))] = data.draw(JUNK)
        elif op == "dup" and isinstance(container, list):
            container.append(container[key])
    return body


def dumps(data: st.DataObject, value) -> str:
    return json.dumps(value, allow_nan=True, ensure_ascii=data.draw(st.booleans()))


# ---------------------------------------------------------------------- (a) the parsers


def assert_round_trips(r: PlanRecord) -> None:
    """What the parser accepted is written back unchanged and reads as the same record."""
    text = plan_record.plan_to_annotation(r)
    again = plan_record.plan_from_annotation(text)
    assert plan_record.plan_to_annotation(again) == text
    assert replace(again, created=r.created, deadline=r.deadline, evict_by=r.evict_by,
                   bind_by=r.bind_by, lost_gpu_seconds=r.lost_gpu_seconds) == r
    for a, b in ((again.created, r.created), (again.deadline, r.deadline),
                 (again.evict_by, r.evict_by), (again.bind_by, r.bind_by)):
        assert abs(a - b) <= 0.001 + 1e-6
    assert math.isclose(again.lost_gpu_seconds, r.lost_gpu_seconds, rel_tol=1e-12,
                        abs_tol=0.0005 + 1e-9)


def assert_drain_round_trips(d: DrainRequest) -> None:
    """Written back (times to the millisecond) and read again: the same request."""
    text = plan_record.drain_to_annotation(d)
    again = plan_record.drain_from_annotation(text)
    assert plan_record.drain_to_annotation(again) == text
    assert again.plan == d.plan
    assert abs(again.requested - d.requested) <= 0.001 + 1e-6
    assert abs(again.deadline - d.deadline) <= 0.001 + 1e-6


def parse_plan(text: str) -> PlanRecord | None:
    try:
        return plan_record.plan_from_annotation(text)
    except PlanFormatError:
        return None


def parse_drain(text: str) -> DrainRequest | None:
    try:
        return plan_record.drain_from_annotation(text)
    except DrainFormatError:
        return None


@examples(1000)
@given(records())
def test_valid_plans_round_trip(r):
    text = plan_record.plan_to_annotation(r)
    parsed = plan_record.plan_from_annotation(text)
    assert plan_record.plan_to_annotation(parsed) == text
    assert_round_trips(parsed)
    assert parsed.id == r.id and parsed.placements == r.placements and parsed.victims == r.victims


@examples(2000)
@given(st.text() | st.text(alphabet='{}[]":,0123456789.eE+-truefalsn \\u'))
def test_plan_parser_on_arbitrary_text(text):
    r = parse_plan(text)
    if r is not None:  # pragma: no cover (random text is never a whole valid plan)
        assert_round_trips(r)


@examples(1000)
@given(st.data(), JUNK)
def test_plan_parser_on_json_junk(data, junk):
    r = parse_plan(dumps(data, junk))
    if r is not None:  # pragma: no cover
        assert_round_trips(r)


@examples(2000)
@given(st.data(), SEEDS)
def test_plan_parser_on_mutated_valid_bodies(data, r):
    body = json.loads(plan_record.plan_to_annotation(r))
    parsed = parse_plan(dumps(data, mutate(data, body)))
    event("accepted" if parsed is not None else "rejected")
    if parsed is not None:
        assert_round_trips(parsed)


@examples(1000)
@given(drains)
def test_valid_drain_requests_round_trip(d):
    text = plan_record.drain_to_annotation(d)
    again = plan_record.drain_from_annotation(text)
    assert again == d
    assert plan_record.drain_requested({plan_record.DRAIN_ANNOTATION: text}, d.plan)


@examples(1000)
@given(st.data(), st.text() | JUNK)
def test_drain_parser_on_arbitrary_text_and_junk(data, value):
    text = value if isinstance(value, str) and data.draw(st.booleans()) else dumps(data, value)
    d = parse_drain(text)
    if d is not None:
        assert_drain_round_trips(d)
    assert plan_record.drain_requested({plan_record.DRAIN_ANNOTATION: text}, "p-1") in (True, False)


@examples(1000)
@given(st.data(), drains)
def test_drain_parser_on_mutated_valid_bodies(data, d):
    text = dumps(data, mutate(data, json.loads(plan_record.drain_to_annotation(d))))
    parsed = parse_drain(text)
    event("accepted" if parsed is not None else "rejected")
    if parsed is not None:
        assert_drain_round_trips(parsed)
    asked = plan_record.drain_requested({plan_record.DRAIN_ANNOTATION: text}, d.plan)
    assert asked is (parsed is not None and parsed.plan == d.plan)


# ----------------------------------------------------------------- (b) the reconciler

ROSTER = ("pre-a", "pre-b", "v0", "v1", "v2", "v3", "v4")
NODE_NAMES = ("n1", "n2", "n3", "n4")  # n4 never exists
PLAN_IDS = ("p-1", "p-2", "p-3")
CFG = {"namespaces": ("team",)}  # nobody may opt out (the default)
NAMESPACES = st.sampled_from(("team", "team", "elsewhere"))


def _drain_body(plan_id: str) -> str:
    return plan_record.drain_to_annotation(DrainRequest(plan=plan_id, requested=T0 - 10,
                                                      deadline=T0 + 50))


POD_ANNOTATIONS = st.fixed_dictionaries({}, optional={
    ann.CHECKPOINT: st.sampled_from(["on-request", "periodic", "bogus"]),
    ann.CHECKPOINT_SECONDS: st.sampled_from(["60", "20m", "x"]),
    ann.LAST_CHECKPOINT: st.sampled_from([rfc3339(T0 - 300), rfc3339(T0 - 7200), "today"]),
    ann.MIN_RUNTIME: st.sampled_from(["0", "30m", "2h", "junk"]),
    ann.PREEMPTIBLE: st.sampled_from(["false", "true", "nah"]),
    plan_record.DRAIN_ANNOTATION: st.sampled_from(PLAN_IDS).map(_drain_body)
    | JUNK.map(json.dumps),
    plan_record.DONE_ANNOTATION: st.sampled_from((*PLAN_IDS, "p-9")),
})


@st.composite
def worlds(draw) -> FakeCache:
    nodes = []
    for n in NODE_NAMES[:3]:
        if n == "n1" or draw(st.booleans()):
            taints = [reservation(draw(st.sampled_from((*PLAN_IDS, "p-9"))))] \
                if draw(st.integers(0, 3)) == 0 else []
            nodes.append(node(n, taints=taints))
    pods = []
    for name in ROSTER:
        if draw(st.integers(0, 9)) == 0:
            continue  # this one does not exist
        pending = name.startswith("pre") and draw(st.integers(0, 3)) > 0
        pods.append(pod(
            name, ns=draw(NAMESPACES), priority=draw(st.sampled_from(
                (10, 1000, 2000, 2000) if name.startswith("pre") else (10, 10, 500, 1000, 2000))),
            node=None if pending else draw(st.sampled_from([*(n.name for n in nodes)] * 3
                                                           + ["n4"])), pending=pending,
            gpus=draw(st.sampled_from((1, 2, 4, 8))),
            started=T0 - draw(st.sampled_from((60, 1800, 7200))),
            annotations=draw(POD_ANNOTATIONS), deleting=draw(st.integers(0, 7)) == 0,
            nominated=draw(st.sampled_from((None, None, "n1", "n2"))) if pending else None,
            tolerations=[reservation(draw(st.sampled_from(PLAN_IDS)))] if pending
            and draw(st.booleans()) else []))
    return FakeCache(nodes=nodes, pods=pods)


@st.composite
def stored_plans(draw, cache: FakeCache) -> list[PlanRecord]:
    """Up to three plans. Half of them are drawn to be valid for the world as it starts (pods
    in scope, victims on their nodes and of lower priority, times within the caps), so that
    the passes get to act on them while the world changes; the rest are anything."""
    out = []
    for plan_id in PLAN_IDS[:draw(st.integers(0, 3))]:
        nodes = sorted(n.name for n in cache.nodes.items())
        team = [p for p in cache.pods.items() if p.namespace == "team" and not p.deleting]
        pending = [p for p in team if p.node is None]
        sane = bool(pending) and draw(st.booleans())
        if sane:
            placed = draw(st.lists(st.sampled_from(pending), min_size=1, max_size=2,
                                   unique_by=lambda p: p.uid))
            floor = min(p.priority for p in placed)
            lower = [p.uid for p in team if p.node in nodes and p.priority < floor]
            uids = [p.uid for p in placed] + draw(st.lists(
                st.sampled_from(lower), min_size=1, max_size=3, unique=True)
                if lower else st.just([]))
            cut = len(placed)
        else:
            uids = draw(st.lists(st.sampled_from([f"uid-{n}" for n in (*ROSTER, "ghost")]),
                                 min_size=1, max_size=5, unique=True))
            cut = draw(st.integers(1, min(2, len(uids))))

        def where(uid: str, sane: bool = sane) -> str:
            p = cache.pod_by_uid(uid)
            real = p.node if p is not None and p.node else None
            return real if real and (sane or draw(st.integers(0, 4))) else draw(
                st.sampled_from(NODE_NAMES))

        def name(uid: str) -> str:
            return uid.removeprefix("uid-")

        created = T0 + draw(st.sampled_from((-100, 0) if sane else
                                            (-4000, -600, -100, 0, 100, 1000)))
        deadline = created + draw(st.sampled_from((0, 60, 601) if sane else
                                                  (0, 60, 600, 601, 602, 10**6)))
        evict_by = deadline + draw(st.sampled_from((0, 120, 121) if sane else
                                                   (0, 120, 121, 122, 10**6)))
        bind_by = evict_by + draw(st.sampled_from((0, 300, 301) if sane else
                                                  (0, 300, 301, 302, 10**7)))
        states = (State.PLANNED, State.DRAINING, State.EVICTING) if sane else tuple(State)
        out.append(PlanRecord(
            id=plan_id, state=draw(st.sampled_from(states)), mode=draw(st.sampled_from(Mode)),
            created=created, deadline=deadline, evict_by=evict_by, bind_by=bind_by,
            placements=tuple(PlannedPlacement(uid=u, namespace=draw(NAMESPACES), name=name(u),
                                              node=draw(st.sampled_from(
                                                  nodes if sane else NODE_NAMES)))
                             for u in uids[:cut]),
            victims=tuple(PlannedVictim(uid=u, namespace=draw(NAMESPACES), name=name(u),
                                        node=where(u), drain=draw(st.booleans()))
                          for u in uids[cut:])))
    return out


def live_state(cache: FakeCache, r: PlanRecord, now: float) -> lifecycle.LiveState:
    """The planned pods as the API server shows them now, judged by the config's rules
    (scope: namespace "team"; nobody may opt out; min-runtime capped) from the annotations."""
    limits = ann.Limits()
    pods = {}
    for uid in [p.uid for p in r.placements] + [v.uid for v in r.victims]:
        p = cache.pod_by_uid(uid)
        if p is None:
            continue
        f = ann.parse_pod_fields(namespace=p.namespace, labels=p.labels,
                                 annotations=p.annotations, now=now, limits=limits,
                                 priority_class=p.priority_class)
        start = p.start_time if p.start_time is not None else p.created
        pods[uid] = lifecycle.LivePod(
            uid=uid, in_scope=p.namespace in CFG["namespaces"], priority=p.priority,
            bound=p.node, terminating=p.deleting,
            evictable=f.preemptible and now - start >= f.min_runtime)
    return lifecycle.LiveState(pods=pods, nodes=frozenset(n.name for n in cache.nodes.items()))


class Oracle:
    """Looks at every write just before it lands."""

    GUARDED: ClassVar = {"request_checkpoint", "nominate", "pin", "ungate", "tolerate", "reserve"}

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.caps = rig.reconciler.stepper.caps
        self.evicted: Counter[str] = Counter()
        self.checked = Counter()

    def why_not(self, r: PlanRecord | None) -> str | None:
        if r is None:
            return "no such stored plan"
        if r.state.terminal:
            return f"plan is {r.state}"
        now = self.rig.clock.now
        return lifecycle.check(r, live_state(self.rig.cache, r, now), self.caps, now)

    def __call__(self, call: Call) -> None:
        cache = self.rig.cache
        if call.verb == "evict":
            uid = call.args["uid"]
            r = cache.plan(call.plan) if call.plan else None
            assert self.evicted[uid] == 0, f"{call.target} evicted twice"
            assert r is not None and uid in r.victim_uids, f"{call.target}: not a victim"
            assert r.state is State.EVICTING, f"{call.target}: plan {r.id} is {r.state}"
            assert self.why_not(r) is None, f"{call.target}: {self.why_not(r)}"
            p = cache.pod_by_uid(uid)
            assert p is not None and not p.deleting
            for pl in r.placements:  # reserved first, and in mode (a) nominated first
                n = cache.nodes.get(pl.node)
                assert reservation(r.id) in n.taints, f"{call.target}: {pl.node} not reserved"
                pre = cache.pod_by_uid(pl.uid)
                assert r.mode is Mode.ADMIT or pre.node or pre.nominated == pl.node, \
                    f"{call.target}: preemptor not nominated on {pl.node}"
            self.evicted[uid] += 1
        elif call.verb in self.GUARDED:
            r = cache.plan(call.plan)
            assert self.why_not(r) is None, f"{call.verb} {call.target}: {self.why_not(r)}"
        elif call.verb in ("withdraw_checkpoint", "clear_nomination"):  # cleanup after aborts
            r = cache.plan(call.plan)
            assert r is not None and r.state is State.ABORTED, f"{call.verb} {call.target}"
        elif call.verb == "create_plan":
            r = call.args["record"]
            assert self.why_not(r) is None, f"new plan {r.id}: {self.why_not(r)}"
        self.checked[call.verb] += 1


STEPS = st.lists(st.tuples(st.sampled_from((1, 30, 61, 200, 700)),
                           st.sampled_from(("none", "ack", "kubelet", "bind", "delete",
                                            "priority", "min-runtime"))), min_size=2, max_size=5)


@examples(1000)
@given(st.data(), worlds(), STEPS)
def test_the_reconciler_acts_only_on_valid_stored_plans(data, cache, steps):
    for r in data.draw(stored_plans(cache)):
        cache.store_plan(r)
    rig = Rig(cache, **CFG)
    oracle = Oracle(rig)
    rig.actions.before_write = oracle
    rig.actions.block(*data.draw(st.sets(st.sampled_from([f"uid-{n}" for n in ROSTER]),
                                         max_size=2)))
    now = T0
    for dt, change in steps:
        now += dt
        rig.tick(now)
        if not cache.pods.items():
            continue
        who = data.draw(st.sampled_from(cache.pods.items()))
        if change == "ack":
            cache.ack(who.uid, data.draw(st.sampled_from(PLAN_IDS)))
        elif change == "kubelet":
            cache.finish_terminating()
        elif change == "bind" and who.node is None:
            cache.bind(who.uid, data.draw(st.sampled_from(NODE_NAMES)))
        elif change == "delete":
            cache.pods.remove(who.key)
        elif change == "priority":
            cache.change_pod(who.uid, priority=data.draw(st.sampled_from((10, 1000, 3000))))
        elif change == "min-runtime":
            cache.change_pod(who.uid, annotations={**who.annotations, ann.MIN_RUNTIME: "1h"})
    assert max(oracle.evicted.values(), default=0) <= 1
    for verb in sorted(oracle.checked):  # --hypothesis-show-statistics: what was exercised
        event(f"wrote {verb}")


# ------------------------------------------------- inputs that broke the parsers, one each

HUGE = "9" * 5000  # more digits than Python's int-from-text limit (4300)


@pytest.mark.parametrize("parse", [parse_plan, parse_drain], ids=["plan", "drain"])
def test_a_huge_integer_is_a_format_error(parse):
    assert parse('{"v":' + HUGE + "}") is None


def test_drain_requested_is_false_for_a_huge_integer():
    raw = '{"plan":"p-1","requested":' + HUGE + ',"deadline":1}'
    assert plan_record.drain_requested({plan_record.DRAIN_ANNOTATION: raw}, "p-1") is False


def test_an_integer_beyond_float_range_is_a_format_error():
    body = json.loads(plan_record.plan_to_annotation(_seed(State.DRAINING, Mode.NOMINATE, 1)))
    body["lostGpuSeconds"] = 10**400
    assert parse_plan(json.dumps(body)) is None


EDGE_TIMES = [("created", "0001-01-01T00:30:00+01:00"), ("bindBy", "9999-12-31T23:59:59-01:00")]


@pytest.mark.parametrize(("key", "value"), EDGE_TIMES, ids=["year 1 +01:00", "year 9999 -01:00"])
def test_a_time_that_cannot_be_written_back_is_rejected(key, value):
    body = json.loads(plan_record.plan_to_annotation(_seed(State.DRAINING, Mode.NOMINATE, 1)))
    if key == "created":
        body.update(created=value, deadline=value, evictBy=value, bindBy=value)
    else:
        body[key] = value
    r = parse_plan(json.dumps(body))
    assert r is None or plan_record.plan_from_annotation(plan_record.plan_to_annotation(r)) == r


@pytest.mark.parametrize("key", ["id", "uid", "node", "namespace"])
def test_a_trailing_newline_is_not_part_of_a_valid_name(key):
    body = json.loads(plan_record.plan_to_annotation(_seed(State.DRAINING, Mode.NOMINATE, 1)))
    if key == "id":
        body["id"] += "\n"
    else:
        body["victims"][0][key] += "\n"
    assert parse_plan(json.dumps(body)) is None


@pytest.mark.parametrize("when", [
    "1697-01-01T00:00:00.001001+00:00",  # found by CI's fuzzing: far from 1970, float ms rounding
    "1697-01-01T00:00:00.000999+00:00", "2262-04-11T23:47:16.854999Z", "1970-01-01T00:00:00.0005Z",
])
def test_times_far_from_1970_round_trip_to_the_millisecond(when):
    body = json.dumps({"plan": "a", "requested": when, "deadline": when})
    assert_drain_round_trips(plan_record.drain_from_annotation(body))
