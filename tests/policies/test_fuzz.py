"""Fuzz: whatever a tenant writes into pod annotations and labels (any text, whitespace, control
characters, JSON fragments, huge numbers), parsing never crashes, a malformed value never makes
a pod cheaper than the key's absence would and never protects it, and no plan ever takes an
ineligible victim. Examples per test are set below; with the controller path's in
tests/controller/test_convert.py they are over 10,000."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model import snapshot_io
from ckpt_preempt.policies.model.gangs import CONVENTIONS
from ckpt_preempt.policies.model.model import Node, Resources, UnknownCheckpoint
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import cost, preemption

NOW = 1_796_202_000.0
NAMESPACE = "ns"
OUR_KEYS = [ann.CHECKPOINT, ann.LAST_CHECKPOINT, ann.CHECKPOINT_SECONDS, ann.MIN_RUNTIME,
            ann.PREEMPTIBLE, ann.NVLINK, ann.CHECKPOINT_INTERVAL, ann.EXPECTED_END]
GANG_KEYS = [c.name_key for c in CONVENTIONS] + [c.total_key for c in CONVENTIONS if c.total_key]
KEYS = OUR_KEYS + GANG_KEYS + [ann.PREFIX + "unknown", "example.com/other"]
WHITESPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2028\u2029\u3000\ufeff"
VALUES = st.one_of(
    st.text(max_size=24),  # any code point but surrogates: control characters included
    st.text(alphabet=WHITESPACE, max_size=4),
    st.sampled_from([
        "true", "false", " FALSE ", "True\n", "on-request", "periodic", "none", "required",
        "preferred", "90", "90s", "15m", "1h30m", "0", "-1", "1e3", "nan", "inf", "-inf", "٣٠",
        "１０m", "2026-12-02T08:00:00Z", "2026-12-02T09:00:59+00:00", "2099-01-01T00:00:00Z",
        "2026-12-02T08:00:00", "job", "job-1", "-job", "job/1", "8", "08", "0x10", "1\x1f",
        '{"a": 1}', "[1, 2]", "null", "{", '"true"', "1e309", "-0", "NaN", "Infinity",
    ]),
    st.integers(min_value=10**15, max_value=10**400).map(str),
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
)
METADATA = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=7)
POLICIES = (UnknownCheckpoint(), UnknownCheckpoint(kind="cluster-median"),
            UnknownCheckpoint(kind="assume", seconds=600.0))
NOBODY = ann.Limits()  # the default: nobody may opt out
ANYONE = ann.Limits(opt_out_namespaces=frozenset({ann.ANY}))


def _build(labels, annotations, limits, *, age=3 * 3600.0, gpus=2, **kw):
    return ann.build_pod(uid="u", name="p", namespace=NAMESPACE, labels=labels,
                         annotations=annotations, now=NOW, limits=limits,
                         requests=Resources(gpus=gpus), node="n", start_time=NOW - age, **kw)


def _costs(pod):
    """What evicting the pod costs under every unknown-checkpoint policy, drained or not."""
    return [cost.lost_gpu_seconds(pod, NOW, drain=drain, max_checkpoint_seconds=600.0,
                                  unknown_age=age)[0]
            for age in (None, 60.0, 1800.0) for drain in (False, True)]


@settings(max_examples=6000, deadline=None)
@given(labels=METADATA, annotations=METADATA, anyone=st.booleans(),
       age=st.sampled_from([60.0, 3600.0, 10 * 3600.0]))
def test_malformed_metadata_is_never_cheaper_nor_protective(labels, annotations, anyone, age):
    limits = ANYONE if anyone else NOBODY
    pod, problems = _build(labels, annotations, limits, age=age)
    assert all(isinstance(str(p), str) for p in problems)
    assert 0.0 <= pod.min_runtime <= limits.max_min_runtime
    if not anyone:  # only the admin grants protection: nothing written opts a pod out
        assert pod.preemptible
    full = pod.gpus * age
    assert all(0.0 <= c <= full + 1e-6 for c in _costs(pod))
    keys = {p.key for p in problems}
    assert pod.checkpoint_interval is None or (
        0 < pod.checkpoint_interval < float("inf") and ann.CHECKPOINT_INTERVAL not in keys)
    assert pod.expected_end is None or ann.EXPECTED_END not in keys
    for key in {p.key for p in problems}:
        where = labels if key in labels else annotations
        if key not in where:
            continue  # a problem about an opt-out that is not allowed, with a valid value
        rest = {k: v for k, v in where.items() if k != key}
        absent, _ = (_build(rest, annotations, limits, age=age) if where is labels
                     else _build(labels, rest, limits, age=age))
        # no cheaper than without the key, under every policy...
        assert all(b >= a - 1e-6 for b, a in zip(_costs(pod), _costs(absent), strict=True))
        # ...and no more protected
        assert pod.preemptible >= absent.preemptible
        assert pod.min_runtime <= absent.min_runtime


@settings(max_examples=2000, deadline=None)
@given(doc=st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), VALUES),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(
                                ["now", "nodes", "pods", "pdbs", "preemptor", "name", "node",
                                 "gpus", "priority", "labels", "annotations", "namespace",
                                 "start_time", "recent_preemptions", "preemption_history",
                                 "match_labels", "match_expressions", "disruptions_allowed",
                                 "owner_uid"]),
                                inner, max_size=5)),
    max_leaves=12))
@example(doc={"now": 10**20})  # once an OverflowError, found by CI
@example(doc={"now": float("nan")})
@example(doc={"now": 0, "pods": [{"start_time": -(10**18)}]})
def test_snapshot_documents_fail_only_with_a_snapshot_error(doc):
    with contextlib.suppress(snapshot_io.SnapshotError):
        snapshot_io.from_dict(doc)


@st.composite
def fuzzed_clusters(draw):
    nodes, pods = [], []
    for i in range(draw(st.integers(1, 3))):
        nodes.append(Node(name=f"n{i}", allocatable=Resources(cpu_milli=64_000,
                                                              memory_mib=1 << 20, gpus=4)))
        for k in range(draw(st.integers(0, 4))):
            meta = draw(METADATA)
            labels = {key: v for key, v in meta.items() if key in GANG_KEYS}
            if draw(st.booleans()):  # a few shared gang names, so gangs form across pods
                labels[CONVENTIONS[0].name_key] = draw(st.sampled_from(["g1", "g2"]))
            pod, _ = ann.build_pod(
                uid=f"p{i}-{k}", name=f"p{i}-{k}", namespace=NAMESPACE, labels=labels,
                annotations={key: v for key, v in meta.items() if key not in GANG_KEYS},
                now=NOW, limits=NOBODY,
                priority=draw(st.sampled_from([0, 10, 50])), requests=Resources(gpus=1),
                node=f"n{i}", start_time=NOW - draw(st.sampled_from([30.0, 3600.0])),
                in_scope=draw(st.integers(0, 5)) > 0,
            )
            pods.append(pod)
    pre, _ = ann.build_pod(uid="pre", name="pre", namespace=NAMESPACE, labels={},
                           annotations=draw(METADATA), now=NOW, priority=20,
                           requests=Resources(gpus=draw(st.integers(1, 4))))
    snap = Snapshot(now=NOW, nodes=tuple(nodes), pods=tuple(pods),
                    unknown_checkpoint=draw(st.sampled_from(POLICIES)))
    return snap, pre


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=fuzzed_clusters())
def test_plans_on_fuzzed_metadata_never_take_an_ineligible_victim(case):
    snap, pre = case
    plan = preemption.plan(snap, [pre])
    victims = {v.uid for v in plan.victims}
    for uid in victims:
        pod = snap.pod_by_uid[uid]
        assert pod.preemptible and pod.priority < pre.priority
        assert cost.ineligibility(pod, pre.priority, NOW) is None
        if pod.gang is not None:  # the whole gang goes, and every member was eligible
            for m in snap.gang_pods(pod.gang):
                if m.node is not None:
                    assert m.uid in victims
    if plan.feasible:
        assert [p.pod_uid for p in plan.placements] == ["pre"]
