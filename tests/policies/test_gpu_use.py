"""GPUs in use (hwprobe's gpu-use report): parsing, tying it to the snapshot's pods, and the
NVLink judgement it makes exact, checked against a brute-force adversary."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model import gpu_use
from ckpt_preempt.policies.model.gpu_use import GpuUse, GpuUseError, attach, parse_gpu_use
from ckpt_preempt.policies.model.model import NvlinkNeed
from ckpt_preempt.policies.model.topology import NodeTopology
from ckpt_preempt.policies.planner import preemption
from ckpt_preempt.policies.planner.preemption import PlannerConfig
from tests.policies.builders import NOW, gang, make_pod, pending, snapshot, split_domains

HOUR = 3600.0
OBSERVED = "1970-01-12T13:46:00Z"  # NOW - 40 s


def value(pods, *, observed=OBSERVED, count=8, schema=gpu_use.SCHEMA):
    return json.dumps({"schema": schema, "observed": observed, "gpu_count": count,
                       "pods": [{"namespace": "default", "name": n, "gpus": g} for n, g in pods]})


def test_observed_is_forty_seconds_before_now():
    assert parse_gpu_use(value([])).observed == NOW - 40


@pytest.mark.parametrize(("raw", "message"), [
    ("{", "not JSON"),
    ("[]", "not a JSON object"),
    (value([], schema="hwprobe/v1"), "schema is 'hwprobe/v1'"),
    (value([], observed="yesterday"), "observed must be an RFC 3339 time"),
    (value([], observed="2026-12-03T12:00:00"), "must carry a time zone"),
    (value([], count=-1), "gpu_count must be a non-negative integer"),
    (value([("a", [8])]), "GPU index 8 outside 0..7"),
    (value([("a", [True])]), "GPU index True outside"),
    (value([("a", [])]), "gpus must be a non-empty list"),
    (value([("a", [1, 1])]), "a GPU index appears twice"),
    (json.dumps({"schema": gpu_use.SCHEMA, "observed": OBSERVED, "gpu_count": 1,
                 "pods": [{"name": "x", "gpus": [0]}]}), "needs a namespace and a name"),
])
def test_bad_reports_name_what_is_wrong(raw, message):
    with pytest.raises(GpuUseError, match=message):
        parse_gpu_use(raw)


NODE = split_domains("n", 4, 4)


def bound(name, gpus, *, age=HOUR, priority=1):
    return make_pod(name, node="n", gpus=gpus, age=age, priority=priority)


def test_attach_sorts_pods_into_known_unknown_and_orphans():
    pods = [bound("known", 2), bound("unlisted", 1), bound("new", 1, age=30), bound("cpu", 0)]
    report = parse_gpu_use(value([("known", [0, 1]), ("gone", [4, 7])]))
    use, why = attach(report, NODE.topology, pods, NOW)
    assert why is None
    assert use.known == (("uid-known", frozenset({0, 1})),)
    assert use.unknown == 2  # bound since the report, wherever the device plugin put them
    assert use.orphans == frozenset({4, 7})
    assert use.held == sum(p.gpus for p in pods)


@pytest.mark.parametrize(("pod", "message"), [
    (bound("a", 1, age=30), "report predates pod default/a"),
    (bound("a", 1, age=40 + 59), "report predates pod default/a"),
    (bound("a", 2), "report gives pod default/a 1 GPUs, it requests 2"),
])
def test_an_entry_that_may_not_be_this_pod_sets_the_report_aside(pod, message):
    use, why = attach(parse_gpu_use(value([("a", [0])])), NODE.topology, [pod], NOW)
    assert use is None and message in why


@pytest.mark.parametrize(("raw", "topology", "message"), [
    (value([], observed="1970-01-12T13:30:00Z"), NODE.topology, "s old (more than 900 s)"),
    (value([], observed="1970-01-12T14:00:00Z"), NODE.topology, "in the future"),
    (value([], count=4), NODE.topology, "report has 4 GPUs, topology has 8"),
    (value([]), None, "report has 8 GPUs, no topology"),
    (value([("a", [0, 1]), ("b", [1])]), NODE.topology, "GPU 1 is in more than one pod"),
])
def test_unusable_reports_are_ignored(raw, topology, message):
    use, why = attach(parse_gpu_use(raw), topology, [], NOW)
    assert use is None and message in why


def with_use(node, pods, report_pods):
    use, why = attach(parse_gpu_use(value(report_pods, count=node.topology.gpu_count)),
                      node.topology, pods, NOW)
    assert why is None
    return replace(node, gpu_use=use)


def plan(node, pods, need):
    return preemption.plan(snapshot([node], pods),
                           [pending("hi", gpus=need, nvlink=NvlinkNeed.REQUIRED)],
                           PlannerConfig())


def test_a_free_domain_is_used_without_evicting():
    # 4+4 islands, four 1-GPU pods: with their GPUs unknown, three must go (the worst case);
    # reported all on the first island, the second is free now.
    pods = [bound(f"v{i}", 1, age=HOUR * (i + 1)) for i in range(4)]
    assert len(plan(NODE, pods, 4).victims) == 3
    got = plan(with_use(NODE, pods, [(f"v{i}", [i]) for i in range(4)]), pods, 4)
    assert got.feasible and got.victims == () and got.reason == "fits without preemption"


def test_one_whole_pod_frees_a_domain():
    # two 4-GPU pods, one per island: evicting either frees a whole island. Unknown, both go.
    pods = [bound("a", 4, age=HOUR), bound("b", 4, age=2 * HOUR)]
    assert sorted(v.name for v in plan(NODE, pods, 4).victims) == ["a", "b"]
    got = plan(with_use(NODE, pods, [("a", [0, 1, 2, 3]), ("b", [4, 5, 6, 7])]), pods, 4)
    assert [v.name for v in got.victims] == ["a"]


def test_straddling_pods_keep_the_worst_case_where_it_is_exact():
    # the same two pods, each across both islands: one eviction leaves 2+2 free
    pods = [bound("a", 4, age=HOUR), bound("b", 4, age=2 * HOUR)]
    node = with_use(NODE, pods, [("a", [0, 1, 4, 5]), ("b", [2, 3, 6, 7])])
    assert sorted(v.name for v in plan(node, pods, 4).victims) == ["a", "b"]


def test_pods_bound_since_the_report_count_as_anywhere():
    pods = [bound(f"v{i}", 1, age=HOUR * (i + 1)) for i in range(4)]
    node = with_use(NODE, pods, [("v0", [0]), ("v1", [1])])  # v2, v3 bound since
    assert node.gpu_use.unknown == 2
    # v2 and v3 may sit on the second island: both islands may be blocked, as in the worst case
    assert len(plan(node, pods, 4).victims) == 3


def test_orphans_are_never_free():
    # GPUs 4..7 held by pods the snapshot no longer has: only the first island can host
    pods = [bound(f"v{i}", 1, age=HOUR * (i + 1)) for i in range(4)]
    node = with_use(NODE, pods, [(f"v{i}", [i]) for i in range(4)] + [("gone", [4, 5, 6, 7])])
    assert len(plan(node, pods, 4).victims) == 4


# --- the brute-force adversary ------------------------------------------------------------


def surely_fits(domains, known, unknown_sizes, orphans, placed, need, evicted_known,
                evicted_unknown) -> bool:
    """After evicting these pods, does every placement of the kept unknown pods' and the
    placed GPUs leave ``need`` free GPUs in one domain?"""
    busy = set(orphans)
    for i, gpus in enumerate(known):
        if i not in evicted_known:
            busy |= gpus
    free = sorted(set().union(*domains) - busy)
    kept = sum(s for j, s in enumerate(unknown_sizes) if j not in evicted_unknown) + placed
    for taken in itertools.combinations(free, min(kept, len(free))):
        left = set(free) - set(taken)
        if not any(len(left & d) >= need for d in domains):
            return False
    return True


@st.composite
def nodes(draw):
    count = draw(st.integers(2, 7))
    order = draw(st.permutations(range(count)))
    cuts = sorted(draw(st.sets(st.integers(1, count - 1), max_size=3)))
    domains = [frozenset(order[a:b]) for a, b in zip([0, *cuts], [*cuts, count], strict=True)]
    owner = draw(st.lists(st.integers(-2, 3), min_size=count, max_size=count))
    known = [frozenset(g for g in range(count) if owner[g] == k) for k in range(4)]
    known = [k for k in known if k]
    orphans = frozenset(g for g in range(count) if owner[g] == -2)
    free = count - sum(map(len, known)) - len(orphans)
    unknown_sizes = draw(st.lists(st.integers(1, 2), max_size=3))
    unknown_sizes = [s for s in unknown_sizes][: max(0, free)]
    while sum(unknown_sizes) > free:
        unknown_sizes.pop()
    placed = draw(st.integers(0, max(0, free - sum(unknown_sizes))))
    need = draw(st.integers(2, count))
    return domains, known, unknown_sizes, orphans, placed, need


@settings(max_examples=300, deadline=None)
@given(nodes())
def test_the_threshold_holds_whatever_is_evicted(case):
    domains, known, unknown_sizes, orphans, placed, need = case
    count = sum(map(len, domains))
    topo = NodeTopology(gpu_count=count, domains=tuple(domains))
    use = GpuUse(known=tuple((f"p{i}", g) for i, g in enumerate(known)),
                 unknown=sum(unknown_sizes), orphans=orphans)
    f = gpu_use.free_gpus_needed(topo, use, need, placed)
    free_now = count - use.held - placed
    for k in range(len(known) + 1):
        for ek in itertools.combinations(range(len(known)), k):
            for u in range(len(unknown_sizes) + 1):
                for eu in itertools.combinations(range(len(unknown_sizes)), u):
                    freed = sum(len(known[i]) for i in ek) + sum(unknown_sizes[j] for j in eu)
                    if free_now + freed >= f:
                        assert surely_fits(domains, known, unknown_sizes, orphans, placed,
                                           need, set(ek), set(eu)), (f, ek, eu)
    if not orphans and not placed:  # never more than the worst case asks
        worst = next((w for w in range(need, count + 1) if topo.nvlink_fits(w, need)),
                     count + 1)
        assert f <= worst


@settings(max_examples=150, deadline=None)
@given(nodes(), st.lists(st.floats(0.5, 9.5), min_size=7, max_size=7))
def test_the_planner_never_places_an_nvlink_pod_on_gpus_in_use(case, hours):
    domains, known, unknown_sizes, orphans, _, need = case
    count = sum(map(len, domains))
    node = replace(split_domains("n", count), topology=NodeTopology(
        gpu_count=count, domains=tuple(domains)))
    pods = [bound(f"k{i}", len(g), age=hours[i] * HOUR) for i, g in enumerate(known)]
    pods += [bound(f"u{j}", s, age=hours[4 + j] * HOUR) for j, s in enumerate(unknown_sizes)]
    report = [(f"k{i}", sorted(g)) for i, g in enumerate(known)]
    report += [(f"gone{i}", [g]) for i, g in enumerate(sorted(orphans))]
    node = with_use(node, pods, report)
    got = plan(node, pods, need)
    if not got.feasible:
        return
    victims = {v.name for v in got.victims}
    assert surely_fits(domains, known, unknown_sizes, orphans, 0, need,
                       {i for i in range(len(known)) if f"k{i}" in victims},
                       {j for j in range(len(unknown_sizes)) if f"u{j}" in victims})


def test_a_gang_member_counts_the_gpus_earlier_members_took_on_the_node():
    # an idle 4+4 node: one 4-GPU NVLink member fits surely; after it, where the device plugin
    # put its GPUs is not known, so a second member may not surely find a whole island
    node = with_use(NODE, [], [])
    members = gang("g", [None, None], gpus=4, priority=100, nvlink=NvlinkNeed.REQUIRED)
    alone = preemption.plan(snapshot([node], []), members, PlannerConfig())
    assert not alone.feasible
    two = preemption.plan(snapshot([node, replace(node, name="m")], []), members,
                          PlannerConfig())
    assert sorted(p.node for p in two.placements) == ["m", "n"]


_NAMES = st.text(alphabet="abcdefghij-", min_size=1, max_size=8).filter(lambda s: s[0] != "-")


@given(count=st.integers(1, 16), data=st.data(),
       observed=st.integers(1_600_000_000, 2_000_000_000))
def test_the_report_hwprobe_writes_is_the_report_the_planner_reads(count, data, observed):
    """One format, one home: format_gpu_use(report_body(...)) parses back to the same pods,
    GPU count and time (whole seconds), whatever the order the pods came in."""
    gpus = data.draw(st.permutations(range(count)))
    cuts = sorted(data.draw(st.sets(st.integers(1, count), max_size=count)))
    groups = [g for g in (gpus[a:b] for a, b in zip([0, *cuts], [*cuts, count], strict=True))
              if g]
    names = data.draw(st.lists(st.tuples(_NAMES, _NAMES), min_size=len(groups),
                               max_size=len(groups), unique=True))
    pods = [(ns, name, list(g)) for (ns, name), g in zip(names, groups, strict=True)]
    text = gpu_use.format_gpu_use(gpu_use.report_body(count, reversed(pods)), observed)
    report = parse_gpu_use(text)
    assert report.gpu_count == count and report.observed == observed
    assert sorted(report.pods) == sorted((ns, n, frozenset(g)) for ns, n, g in pods)
