"""GPU health: what each default rule makes of a reading, how GPUs add up to a node, and what
the planner does with it (failing closes a node, healthy beats degraded at equal cost)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_preempt.policies.model import snapshot_io
from ckpt_preempt.policies.model.health import (
    DEFAULT_RULES,
    XID_NAMES,
    GpuKey,
    Health,
    Reading,
    Rule,
    judge,
    turned_worse,
    unknown,
)
from ckpt_preempt.policies.model.model import RejectReason
from ckpt_preempt.policies.planner import preemption
from tests.policies.builders import gpu_node, make_pod, pending, snapshot

RULES = {r.name: r for r in DEFAULT_RULES}
HOUR = 3600.0
G0 = GpuKey("n1", "0")


def _state(rule: str, value: float) -> Health:
    return judge(DEFAULT_RULES, {"n1": 1}, {rule: {G0: value}}).state("n1")


@pytest.mark.parametrize(("rule", "value", "want"), [
    ("xid-critical", 79, Health.FAILING),
    ("xid-critical", 48, Health.FAILING),
    ("xid-critical", 13, Health.HEALTHY),  # a graphics engine exception: the app's problem
    ("xid-critical", 0, Health.HEALTHY),
    ("xid-memory", 63, Health.DEGRADED),
    ("xid-memory", 79, Health.HEALTHY),  # the other XID rule's code
    ("row-remap-failure", 1, Health.FAILING),
    ("row-remap-failure", 0, Health.HEALTHY),
    ("ecc-dbe", 2, Health.FAILING),
    ("nvlink-crc-flit-errors", 0.5, Health.DEGRADED),
    ("nvlink-crc-flit-error-rate", 100.0, Health.FAILING),  # DCGM: >= 100/s fails
    ("nvlink-crc-flit-error-rate", 99.9, Health.HEALTHY),
    ("pcie-replay-rate", 8.0, Health.HEALTHY),  # DCGM: more than 8 a minute warns
    ("pcie-replay-rate", 8.5, Health.DEGRADED),
    ("power-violation", 0.5, Health.HEALTHY),
    ("power-violation", 0.9, Health.DEGRADED),
    ("thermal-violation", 0.01, Health.DEGRADED),
])
def test_default_rules(rule, value, want):
    assert _state(rule, value) is want


def test_every_critical_xid_is_named_and_no_code_is_in_two_rules():
    xid_rules = [r for r in DEFAULT_RULES if r.codes]
    codes = [c for r in xid_rules for c in r.codes]
    assert len(codes) == len(set(codes)) == 8
    assert set(codes) == set(XID_NAMES)
    assert all(r.source for r in DEFAULT_RULES)


def test_reasons_name_the_gpu_the_xid_and_the_state_worst_first():
    g3 = GpuKey("n1", "3")
    report = judge(DEFAULT_RULES, {"n1": 8}, {"xid-critical": {g3: 79},
                                             "nvlink-crc-data-errors": {G0: 2.0}})
    node = report.node("n1")
    assert node.state is Health.FAILING
    assert node.reasons == ("gpu 3: XID 79 (GPU has fallen off the bus): failing",
                            "gpu 0: NVLink CRC data error rate 2/s > 0/s: degraded")
    assert [g.state for g in node.gpus] == [Health.DEGRADED, Health.FAILING]
    assert node.reporting == 8


def test_missing_data_is_unknown_and_says_why():
    report = judge(DEFAULT_RULES, {"n1": 8, "n3": 0}, {})
    assert report.state("n1") is Health.HEALTHY  # reports, nothing fires
    assert report.node("n1").reasons == ("8 GPU(s) report, no rule fires",)
    assert report.state("n3") is Health.UNKNOWN
    assert report.state("n2") is Health.UNKNOWN
    assert "no GPU of this node reports" in report.node("n2").reasons[0]
    down = unknown("prometheus: connection refused")
    assert not down.source_up and down.state("n1") is Health.UNKNOWN
    assert down.node("n1").reasons == ("no health data: prometheus: connection refused",)


def test_a_rule_is_degraded_or_failing_and_codes_read_values():
    with pytest.raises(ValueError, match="degraded or failing"):
        Rule(name="x", metric="m", verdict=Health.HEALTHY, what="", source="")
    with pytest.raises(ValueError, match="latest value"):
        Rule(name="x", metric="m", verdict=Health.FAILING, what="", source="",
             reading=Reading.RATE, codes=frozenset({79}))


def test_turned_worse_fires_once_on_the_edge():
    assert turned_worse(Health.HEALTHY, Health.DEGRADED)
    assert turned_worse(Health.UNKNOWN, Health.FAILING)
    assert not turned_worse(Health.DEGRADED, Health.FAILING)
    assert not turned_worse(Health.DEGRADED, Health.DEGRADED)
    assert not turned_worse(Health.HEALTHY, Health.UNKNOWN)


# -- invariants ------------------------------------------------------------------------------------
_keys = st.builds(GpuKey, st.sampled_from(["n1", "n2", "n3"]), st.sampled_from(["0", "1", "2"]))
_values = st.one_of(st.sampled_from([0, 13, 48, 63, 79, 92, 95, 100.0, 8.5]),
                    st.floats(min_value=0, max_value=1e4, allow_nan=False))
_readings = st.dictionaries(st.sampled_from(sorted(RULES)),
                            st.dictionaries(_keys, _values, max_size=5), max_size=6)


_reporting = st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), st.integers(0, 8))


@given(reporting=_reporting, readings=_readings)
def test_failing_only_from_a_reading_that_fires_a_failing_rule(reporting, readings):
    report = judge(DEFAULT_RULES, reporting, readings)
    for name in ("n1", "n2", "n3"):
        fired = [RULES[r] for r, got in readings.items() for k, v in got.items()
                 if k.node == name and RULES[r].fires(v)]
        state = report.state(name)
        assert (state is Health.FAILING) == any(r.verdict is Health.FAILING for r in fired)
        if not fired:  # no data: unknown, never failing; data and nothing fires: healthy
            assert state is (Health.HEALTHY if reporting.get(name, 0) else Health.UNKNOWN)


@given(reporting=_reporting, readings=_readings, key=_keys,
       rule=st.sampled_from([r for r in DEFAULT_RULES if r.verdict is Health.FAILING]))
def test_adding_a_failing_sample_never_makes_a_node_healthier(reporting, readings, key, rule):
    before = judge(DEFAULT_RULES, reporting, readings)
    value = min(rule.codes) if rule.codes else rule.threshold + 1.0
    worse = {**readings, rule.name: {**readings.get(rule.name, {}), key: value}}
    after = judge(DEFAULT_RULES, reporting, worse)
    assert after.state(key.node) is Health.FAILING
    for name in {"n1", "n2", "n3"}:
        assert after.state(name).rank >= before.state(name).rank


# -- what the planner does with it -----------------------------------------------------------------
def _plan(snap, *preemptors):
    return preemption.plan(snap, list(preemptors), preemption.PlannerConfig())


def test_a_failing_node_is_never_planned_onto_even_when_it_loses_least():
    cheap = replace(gpu_node("cheap", 1), health=Health.FAILING)
    snap = snapshot([cheap, gpu_node("dear", 1)], [
        make_pod("fresh", node="cheap", priority=1, age=10 * HOUR, checkpoint_age=60.0),
        make_pod("stale", node="dear", priority=1, age=2 * HOUR)])
    plan = _plan(snap, pending("hi"))
    assert plan.target_nodes == ("dear",)
    assert ("cheap", RejectReason.GPU_FAILING) in {(r.node, r.reason) for r in plan.rejections}
    alone = snapshot([cheap], snap.pods[:1])
    assert _plan(alone, pending("hi")).reason.endswith(
        "; 1 node(s) closed because their GPUs are failing")
    healthy = snapshot([replace(cheap, health=Health.HEALTHY), gpu_node("dear", 1)], snap.pods)
    assert _plan(healthy, pending("hi")).target_nodes == ("cheap",)  # health made the change


@pytest.mark.parametrize("other", [Health.HEALTHY, Health.UNKNOWN])
def test_at_equal_cost_healthier_gpus_win(other):
    nodes = [replace(gpu_node("a-degraded", 1), health=Health.DEGRADED),
             replace(gpu_node("b", 1), health=other)]
    pods = [make_pod(f"v-{n.name}", node=n.name, priority=1, age=HOUR) for n in nodes]
    assert _plan(snapshot(nodes, pods), pending("hi")).target_nodes == ("b",)
    free = snapshot(nodes, [])  # no preemption needed: the same preference
    assert _plan(free, pending("hi")).target_nodes == ("b",)
    # without health the name decides: the degraded node, first by name
    same = [replace(n, health=Health.UNKNOWN) for n in nodes]
    assert _plan(snapshot(same, pods), pending("hi")).target_nodes == ("a-degraded",)


def test_lost_work_still_beats_health():
    nodes = [replace(gpu_node("degraded", 1), health=Health.DEGRADED),
             replace(gpu_node("healthy", 1), health=Health.HEALTHY)]
    pods = [make_pod("fresh", node="degraded", priority=1, age=HOUR, checkpoint_age=60.0),
            make_pod("stale", node="healthy", priority=1, age=HOUR)]
    assert _plan(snapshot(nodes, pods), pending("hi")).target_nodes == ("degraded",)


@pytest.mark.parametrize("state", list(Health))
def test_snapshot_documents_carry_health(state):
    node = replace(gpu_node("n1", 4), health=state)
    doc = {"now": 0, "nodes": [snapshot_io.node_to_dict(node)],
           "pods": [{"name": "p", "gpus": 1}], "preemptor": "p"}
    snap, _, problems = snapshot_io.from_dict(doc)
    assert snap.nodes == (node,) and problems == []


def test_a_bad_health_value_is_one_clear_error():
    doc = {"now": 0, "nodes": [{"name": "n1", "health": "sick"}], "pods": [{"name": "p"}],
           "preemptor": "p"}
    with pytest.raises(snapshot_io.SnapshotError, match="health must be one of healthy"):
        snapshot_io.from_dict(doc)
