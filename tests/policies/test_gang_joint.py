"""Joint gang plans (``policies.planner.gang_joint``): a victim gang spread over several nodes is
considered once for every preemptor member it makes room for.

The property: on small random clusters with gang preemptors and spread victim gangs, the plan
never costs more than the member-by-member plan (``joint_seeds=0``) and never less than the
exact optimum (``policies.baselines.oracle``), and it is a valid plan (whole victim gangs, PDBs,
fit).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.baselines import oracle
from ckpt_preempt.policies.model.model import Plan, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import gang_joint, preemption, units
from ckpt_preempt.policies.planner.preemption import PlannerConfig
from tests.policies.builders import gang, gpu_node, make_pod, pdb, pending, snapshot

MEMBER_BY_MEMBER = PlannerConfig(joint_seeds=0)
HOUR = 3600.0


def _seed_one(pdbs=()) -> tuple[Snapshot, list]:
    """The native side-by-side's seed 1 (e2e/test_native_compare.py): gangs ga (39.84 GPU-h
    unsaved) and gb (10) straddle n0 and n1; s2 (44.48) and s3 (35.28) fill n2 and n3."""
    app = {"app": "train"}
    pods = gang("ga", ["n0", "n1"], gpus=4, age=4.98 * HOUR, labels=app)
    pods += gang("gb", ["n0", "n1"], gpus=4, age=2.79 * HOUR, checkpoint_age=1.25 * HOUR,
                 labels=app)
    pods += [make_pod("s2", node="n2", gpus=8, age=5.56 * HOUR, priority=10),
             make_pod("s3", node="n3", gpus=8, age=4.41 * HOUR)]
    return (snapshot([gpu_node(f"n{i}") for i in range(4)], pods, pdbs),
            gang("big", [None, None], gpus=8, priority=100))


def _victims(plan: Plan) -> list[str]:
    return sorted(v.name for v in plan.victims)


def test_one_spread_victim_gang_pair_frees_both_nodes_the_gang_needs():
    snap, members = _seed_one()
    before = preemption.plan(snap, members, MEMBER_BY_MEMBER)
    assert _victims(before) == ["s2", "s3"]
    assert before.lost_gpu_seconds == pytest.approx((44.48 + 35.28) * HOUR)
    got = preemption.plan(snap, members)
    assert _victims(got) == ["ga-0", "ga-1", "gb-0", "gb-1"]
    assert got.lost_gpu_seconds == pytest.approx((39.84 + 10.0) * HOUR)
    assert sorted(p.node for p in got.placements) == ["n0", "n1"]
    assert got.lost_gpu_seconds == pytest.approx(oracle.solve(snap, members).lost_gpu_seconds)


def test_a_spread_gang_its_pdb_protects_is_not_taken():
    # one whole gang of two may go, not both
    snap, members = _seed_one([pdb("train", {"app": "train"}, 3)])
    got = preemption.plan(snap, members)
    assert got.feasible
    assert preemption.gang_pdb_problem(snap, [v.uid for v in got.victims]) is None
    assert _victims(got) == ["s2", "s3"]


def _first_search(snap: Snapshot, members: list):
    builder = units.UnitBuilder(snap, 100, drain=True, max_checkpoint_seconds=600.0)
    search, _, stuck = gang_joint.place_members(snap, members, PlannerConfig(), builder, {},
                                                collect=True)
    assert stuck is None
    return search


def test_spread_units_are_gangs_on_the_first_members_candidates_cheapest_first():
    snap, members = _seed_one()
    first = _first_search(snap, members)
    # the first member went to n3 (s3, 35.28 GPU-h); the bound on n0 and n1 is 24.92 GPU-h
    # (each gang's share there), on n2 44.48
    assert first.first_cost == pytest.approx(35.28 * HOUR)
    assert sorted(c[2] for c in first.candidates) == ["n0", "n1", "n2", "n3"]
    seeds = gang_joint.spread_units(snap, members, first, float("inf"), 8)
    assert [u.id for u in seeds] == ["default/seed/gb", "default/seed/ga"]
    # within 30 GPU-h: both nodes, but ga alone costs 39.84
    assert [u.id for u in gang_joint.spread_units(snap, members, first, 30 * HOUR, 8)] == [
        "default/seed/gb"]
    # within 20 GPU-h: no candidate node can host the first member
    assert gang_joint.spread_units(snap, members, first, 20 * HOUR, 8) == []
    assert [u.id for u in gang_joint.spread_units(snap, members, first, float("inf"), 1)] == [
        "default/seed/gb"]
    assert gang_joint.spread_units(snap, members, first, float("inf"), 0) == []
    assert gang_joint.spread_units(snap, members[:1], first, float("inf"), 8) == []
    # n0 cordoned: the gangs hold room on one open node only, so no seed
    cordoned = snapshot([gpu_node("n0", unschedulable=True), *snap.nodes[1:]], snap.pods)
    first = _first_search(cordoned, members)
    assert gang_joint.spread_units(cordoned, members, first, float("inf"), 8) == []


# --- the property ---------------------------------------------------------------------------------

@st.composite
def spread_cases(draw) -> tuple[Snapshot, list]:
    """2-4 full nodes of 4 or 8 GPUs: victim gangs of 2-3 members on distinct nodes, single
    pods filling the rest; a pending gang of 2-3 members, mostly of half or a whole node."""
    size = draw(st.sampled_from([4, 8]))
    names = [f"n{i}" for i in range(draw(st.integers(2, 4)))]
    free = dict.fromkeys(names, size)
    ages = st.sampled_from([0.5, 1.0, 2.0, 3.0, 5.0, 8.0])
    priorities = st.sampled_from([0, 0, 10, 200])
    apps = st.sampled_from([{}, {"app": "a"}, {"app": "b"}])
    pods = []
    for g in range(draw(st.integers(0, 4))):
        width = draw(st.integers(2, min(3, len(names))))
        on = draw(st.permutations(names))[:width]
        gpus = draw(st.sampled_from([size // 4, size // 2, size // 2]))
        if any(free[n] < gpus for n in on):
            continue
        for n in on:
            free[n] -= gpus
        age = draw(ages) * HOUR
        ckpt = draw(st.none() | st.sampled_from([0.0, 0.25, 0.5]))
        pods += gang(f"g{g}", list(on), gpus=gpus, age=age,
                     checkpoint_age=None if ckpt is None else ckpt * age,
                     priority=draw(priorities), labels=draw(apps))
    for n in names:
        while free[n]:
            gpus = draw(st.integers(1, free[n]))
            free[n] -= gpus
            pods.append(make_pod(f"s{len(pods)}", node=n, gpus=gpus, age=draw(ages) * HOUR,
                                 priority=draw(priorities), labels=draw(apps)))
    pdbs = tuple(pdb(f"pdb-{app}", {"app": app}, draw(st.integers(0, 4)))
                 for app in ("a", "b") if draw(st.booleans()))
    gpus = st.sampled_from([1, size // 2, size, size])
    members = [pending(f"new-{k}", gpus=draw(gpus), priority=100, gang="default/new")
               for k in range(draw(st.integers(2, 3)))]
    return snapshot([gpu_node(n, size) for n in names], pods, pdbs), members


def _cost(plan: Plan) -> float:
    return plan.lost_gpu_seconds + plan.penalty_gpu_seconds


def _check_valid(snap: Snapshot, members: list, plan: Plan) -> None:
    victims = {v.uid for v in plan.victims}
    for p in snap.pods:  # whole gangs, lower priority only
        if p.uid in victims:
            assert p.priority < 100
            if p.gang is not None:
                assert {q.uid for q in snap.gang_pods(p.gang) if q.node} <= victims
    assert preemption.gang_pdb_problem(snap, victims) is None
    free = {n.name: snap.free(n.name) for n in snap.nodes}
    for p in snap.pods:
        if p.uid in victims:
            free[p.node] = free[p.node] + p.requests
    by_uid = {p.uid: p for p in members}
    for placement in plan.placements:
        free[placement.node] = free[placement.node] - by_uid[placement.pod_uid].requests
    assert all(r.fits_in(Resources(cpu_milli=1 << 40, memory_mib=1 << 40, gpus=1 << 20))
               and min(r.gpus, r.cpu_milli, r.memory_mib) >= 0 for r in free.values()), free


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spread_cases())
def test_joint_plan_is_between_the_optimum_and_the_member_by_member_plan(case):
    snap, members = case
    joint = preemption.plan(snap, members)
    greedy = preemption.plan(snap, members, MEMBER_BY_MEMBER)
    try:
        best = oracle.solve(snap, members, max_sets=4000)
    except oracle.OracleLimit:
        assume(False)
    assert joint.feasible == greedy.feasible  # seeds only ever replace a plan found
    if joint.feasible:
        _check_valid(snap, members, joint)
        assert best.feasible
        assert _cost(joint) <= _cost(greedy) + 1e-6
        assert _cost(joint) >= best.cost - 1e-6


def test_a_bound_kept_from_an_earlier_cycle_adds_no_seed():
    """Three members (8, 4, 4 GPUs). Member by member: w on W (800), v on V (600), then gang
    ga (800, drained, half on X and half on Y): 2200. Evicting ga first would place the two
    small members on X and Y: 1600. But ga is on no candidate node whose bound for the first
    member is within 2200 (X: ga-0 + x, 2320 a minute on; Y: 2600), so it is not a seed. The
    bound of X kept from the earlier cycle (2080) is lower, so it must be recomputed, else a
    carried search would seed ga and plan otherwise than a search without caches. (1600 is
    missed: the seeds' rule, spread_units.)"""
    from dataclasses import replace

    from ckpt_preempt.policies.model.model import CheckpointMode
    from ckpt_preempt.policies.planner.plan_cache import PlanCache, changed_nodes

    def drained(name, node, gpus, seconds, **kw):
        return make_pod(name, node=node, gpus=gpus, age=9000.0, mode=CheckpointMode.ON_REQUEST,
                        checkpoint_seconds=seconds, **kw)

    pods = [drained("w", "W", 8, 100.0), drained("v", "V", 4, 150.0),
            drained("v-big", "V", 4, 550.0), make_pod("x", node="X", gpus=4, age=480.0),
            drained("y", "Y", 4, 550.0),
            *(drained(f"ga-{i}", n, 4, 100.0, gang="default/seed/ga") for i, n in
              enumerate("XY"))]
    later = snapshot([gpu_node(n) for n in "VWXY"], pods)
    earlier = replace(later, now=later.now - 60.0)
    members = [pending("big-0", gpus=8, gang="default/seed/big"),
               *(pending(f"big-{i}", gpus=4, gang="default/seed/big") for i in (1, 2))]
    cfg = PlannerConfig(record_rejections=False)
    cache = PlanCache(earlier)
    preemption.plan(earlier, members, cfg, cache)
    carried = PlanCache.carried(cache, later, changed_nodes(earlier, later))
    fresh = preemption.plan(later, members, cfg)
    assert fresh.lost_gpu_seconds == pytest.approx(2200.0)
    assert _victims(fresh) == ["ga-0", "ga-1", "v", "w"]
    got = preemption.plan(later, members, cfg, carried)
    assert replace(got, nodes_evaluated=0) == replace(fresh, nodes_evaluated=0)


def test_a_victim_gang_reaching_into_another_nvlink_clique_is_evicted_whole():
    """An nvlink: required gang is placed in one clique's view; a victim gang it evicts there
    also runs in the other clique, so the room it frees is partly outside the view. That
    raised KeyError before (search.fit_without_preemption looked the outside node up)."""
    from tests.policies.test_cliques import gang as nvlink_gang
    from tests.policies.test_cliques import tray

    nodes = [tray("a0", "A"), tray("a1", "A"), tray("b0", "B"), tray("b1", "B")]
    pods = gang("v", ["a1", "b0"], gpus=4, age=100.0)
    pods += [make_pod("x", node="a0", gpus=4, age=90_000.0),
             make_pod("y", node="b1", gpus=4, age=90_000.0)]
    got = preemption.plan(snapshot(nodes, pods), nvlink_gang(2))
    assert got.feasible
    assert _victims(got) == ["v-0", "v-1", "x"]
    assert sorted(p.node for p in got.placements) == ["a0", "a1"]


def test_joint_gangs_off_plans_the_gang_member_by_member_only():
    # the ablation the evidence reports (SimConfig.joint_gangs): none of improve's tries
    snap, members = _seed_one()
    off = preemption.plan(snap, members, PlannerConfig(joint_gangs=False))
    assert _victims(off) == ["s2", "s3"]
    assert off.lost_gpu_seconds == pytest.approx((44.48 + 35.28) * HOUR)
