"""Elastic shrink (policies.planner.shrink): an elastic gang gives up only members above its
minimum."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.model import Resources
from ckpt_preempt.policies.planner import cover, preemption, shrink, units
from tests.policies.builders import gang, gpu_node, pdb, pending, snapshot

R = shrink.RENDEZVOUS_SECONDS
DAY = 86_400.0


def elastic(name, nodes, minimum, *, gpus=8, **kw):
    """A gang whose every member declares ``minimum``; an hour of unsaved work each."""
    return [dataclasses.replace(p, gang_minimum=minimum) for p in gang(name, nodes, gpus=gpus,
                                                                        **kw)]


def _plan(pods, nodes, pre, pdbs=(), **cfg):
    return preemption.plan(snapshot(nodes, [*pods, *pre], pdbs), pre,
                           preemption.PlannerConfig(**cfg))


def test_an_elastic_gang_gives_up_one_member_and_pays_only_the_rendezvous():
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    job = elastic("job", ["n0", "n1", "n2"], minimum=2)
    plan = _plan(job, nodes, [pending("p", gpus=8)])
    assert plan.feasible
    (group,) = plan.victim_groups
    assert group.shrink
    assert [v.node for v in group.victims] == [plan.placements[0].node]
    assert group.lost_gpu_seconds == pytest.approx(R * 24)  # the gang's 24 GPUs re-form


def test_with_shrink_off_the_elastic_gang_goes_whole():
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    job = elastic("job", ["n0", "n1", "n2"], minimum=2)
    plan = _plan(job, nodes, [pending("p", gpus=8)], shrink=False)
    (group,) = plan.victim_groups
    assert not group.shrink and len(group.victims) == 3


def test_a_gang_with_a_member_declaring_no_minimum_is_not_elastic():
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    job = elastic("job", ["n0", "n1", "n2"], minimum=2)
    job[2] = dataclasses.replace(job[2], gang_minimum=None)
    plan = _plan(job, nodes, [pending("p", gpus=8)])
    (group,) = plan.victim_groups
    assert not group.shrink and len(group.victims) == 3


def test_only_the_members_the_node_needs_leave():
    # two members on n0 (4 GPUs each), the preemptor needs 4: one leaves, not both
    nodes = [gpu_node("n0"), gpu_node("n1", 4)]
    job = elastic("job", ["n0", "n0", "n1"], minimum=1, gpus=4)
    plan = _plan(job, nodes, [pending("p", gpus=4)])
    (group,) = plan.victim_groups
    assert group.shrink and len(group.victims) == 1
    assert group.lost_gpu_seconds == pytest.approx(R * 12)


def test_a_shrink_never_goes_below_the_minimum_within_one_plan():
    # a two-member preemptor needs two whole nodes; the gang may lose only one member, so
    # it goes whole (never half a gang, never fewer than its minimum)
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    job = elastic("job", ["n0", "n1", "n2"], minimum=2)
    pre = gang("pre", [None, None], gpus=8, priority=100)
    plan = _plan(job, nodes, pre)
    (group,) = plan.victim_groups
    assert not group.shrink and len(group.victims) == 3


def test_a_pdb_that_forbids_the_leaving_members_forbids_the_shrink():
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    job = elastic("job", ["n0", "n1", "n2"], minimum=2, labels={"app": "job"})
    plan = _plan(job, nodes, [pending("p", gpus=8)], pdbs=[pdb("b", {"app": "job"}, 0)])
    assert not plan.feasible


def test_the_cover_takes_at_most_one_unit_of_a_gang():
    nodes = [gpu_node("n0", 16)]
    job = elastic("job", ["n0", "n0", "n0", "n0"], minimum=1, gpus=4)
    snap = snapshot(nodes, job)
    b = units.UnitBuilder(snap, 100, drain=False, max_checkpoint_seconds=600,
                          rendezvous_seconds=R)
    here = b.units_on("n0")
    assert sorted(len(u.pods) for u in here) == [1, 2, 3, 4]  # 3 shrinks and the whole gang
    best = cover.min_cover(here, "n0", Resources(gpus=8), snap.pdbs)
    assert best is not None and len(best.unit_ids) == 1 and best.victims == 2


_gangs = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 4), st.integers(1, 8)),
                  min_size=1, max_size=3)  # (members, minimum or 0 = not elastic, GPUs each)


@settings(max_examples=60, deadline=None)
@given(gangs=_gangs, need=st.integers(1, 16), singles=st.lists(st.integers(1, 8), max_size=3))
def test_every_plan_keeps_gangs_whole_or_at_their_minimum_and_shrink_never_costs_more(
        gangs, need, singles):
    nodes = [gpu_node(f"n{i}", 16) for i in range(3)]
    free = {n.name: 16 for n in nodes}
    pods = []
    for g, (size, minimum, gpus) in enumerate(gangs):
        where = []
        for k in range(size):
            node = max(free, key=lambda n, k=k: (free[n], n))
            if free[node] < gpus:
                break
            free[node] -= gpus
            where.append(node)
        members = gang(f"g{g}", where, gpus=gpus) if where else []
        pods += [dataclasses.replace(p, gang_minimum=minimum or None) for p in members]
    for s, gpus in enumerate(singles):
        node = max(free, key=lambda n: (free[n], n))
        if free[node] >= gpus:
            free[node] -= gpus
            pods += gang(f"s{s}", [node], gpus=gpus)[:1]
    pre = [pending("p", gpus=need)]
    on, off = _plan(pods, nodes, pre), _plan(pods, nodes, pre, shrink=False)
    assert on.feasible == off.feasible
    if not on.feasible:
        return
    assert on.lost_gpu_seconds + on.penalty_gpu_seconds <= (
        off.lost_gpu_seconds + off.penalty_gpu_seconds + 1e-6)
    snap = snapshot(nodes, [*pods, *pre])
    for group in on.victim_groups:
        if group.gang is None:
            continue
        bound = [p for p in snap.gang_pods(group.gang) if p.node is not None]
        if group.shrink:
            minimum = shrink.gang_minimum(bound)
            assert minimum is not None
            assert len(bound) - len(group.victims) >= minimum
            assert {v.node for v in group.victims} <= set(on.target_nodes)
        else:
            assert len(group.victims) == len(bound)


@pytest.mark.parametrize(("value", "labels", "want", "problem"), [
    ("2", {"scheduling.ai/gang-name": "j", "scheduling.ai/gang-total": "3"}, 2, None),
    (" 3 ", {"scheduling.ai/gang-name": "j"}, 3, None),
    ("4", {"scheduling.ai/gang-name": "j", "scheduling.ai/gang-total": "3"}, None, "more than"),
    ("0", {"scheduling.ai/gang-name": "j"}, None, "integer"),
    ("two", {"scheduling.ai/gang-name": "j"}, None, "integer"),
    ("-1", {"scheduling.ai/gang-name": "j"}, None, "integer"),
    ("2", {}, None, "no gang"),
])
def test_min_members_annotation_is_parsed_strictly(value, labels, want, problem):
    pod, problems = ann.build_pod(uid="u", name="n", namespace="ns", labels=labels,
                                  annotations={ann.MIN_MEMBERS: value}, now=DAY)
    assert pod.gang_minimum == want
    if problem is None:
        assert problems == ()
    else:
        (p,) = problems
        assert p.key == ann.MIN_MEMBERS and problem in p.problem


@given(value=st.text(max_size=12))
def test_min_members_never_crashes_and_is_a_count_or_nothing(value):
    pod, _ = ann.build_pod(uid="u", name="n", namespace="ns",
                           labels={"scheduling.ai/gang-name": "j"},
                           annotations={ann.MIN_MEMBERS: value}, now=DAY)
    assert pod.gang_minimum is None or 1 <= pod.gang_minimum <= 100_000

