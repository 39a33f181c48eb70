"""The cycle's planner caches (policies.planner.plan_cache): plans are the same with them as
without.

A controller cycle plans a queue of preemptors on one snapshot; each plan sees the snapshot
restricted by the plans made before it (their target nodes closed, their victims held) and by
its own exclusions. The property plans such queues twice, with one cache for the whole queue
and without, and requires identical plans; the unit tests pin down what invalidates what.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.model import (
    Node,
    NvlinkNeed,
    Pod,
    PodDisruptionBudget,
    PodHold,
    RejectReason,
    Resources,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import preemption
from ckpt_preempt.policies.planner.plan_cache import PlanCache, Ring
from tests.policies import builders
from tests.policies.builders import gpu_node, make_pod, pending
from tests.policies.test_properties import BITS, NOW, PRIORITIES, running_pod, topologies

QUEUES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cycles(draw) -> tuple[Snapshot, list[tuple[Pod, ...]], preemption.PlannerConfig, dict]:
    """A random cluster, a queue of preemptors (pending in the snapshot, as in a controller
    cycle), a planner config that samples few candidates, and per preemptor the nodes closed
    to it and the pods blocked for it before any plan of the cycle."""
    nodes, pods = [], []
    gangs = [f"default/seed/g{i}" for i in range(3)]
    gang_priority = {g: draw(st.sampled_from(PRIORITIES[:3])) for g in gangs}
    for i in range(draw(st.integers(1, 9))):
        gpus = draw(st.integers(1, 8))
        name = f"n{i}"
        nodes.append(Node(
            name=name, allocatable=Resources(cpu_milli=draw(st.sampled_from([4000, 96_000])),
                                             memory_mib=1 << 20, gpus=gpus),
            topology=draw(topologies(gpus)), unschedulable=draw(st.integers(0, 14)) == 0,
        ))
        left = gpus
        while left and len(pods) < 16 and draw(st.integers(0, 4)):
            g = draw(st.integers(1, left))
            gang = draw(st.sampled_from([None, None, *gangs]))
            prio = gang_priority[gang] if gang else draw(st.sampled_from(PRIORITIES))
            pods.append(running_pod(draw(BITS), f"p{len(pods)}", name, g, gang, prio))
            left -= g
    # some gangs elastic (policies.planner.shrink): their members above the minimum may go alone
    minimum = {g: draw(st.sampled_from([None, 1, 1, 2])) for g in gangs}
    pods = [replace(p, gang_minimum=minimum[p.gang]) if p.gang else p for p in pods]
    # some declare an end, past, within the drain cap or beyond it (end-aware victim choice,
    # policies.planner.timing.end_rate, whose charges fall as time passes)
    pods = [replace(p, expected_end=NOW + draw(st.sampled_from([-600.0, 120.0, 500.0, 1500.0])))
            if draw(st.integers(0, 3)) == 0 else p for p in pods]
    queue = []
    for k in range(draw(st.integers(1, 5))):
        size = draw(st.sampled_from([1, 1, 2, 3]))
        prio = draw(st.sampled_from([5, 15, 25, 35]))
        gpus = draw(st.integers(1, 8))
        nvlink = draw(st.sampled_from(list(NvlinkNeed)))
        key = f"default/seed/new{k}" if size > 1 else None
        queue.append(tuple(
            Pod(uid=f"new{k}-{m}", name=f"new{k}-{m}", priority=prio, gang=key,
                requests=Resources(cpu_milli=draw(st.sampled_from([0, 1000])), memory_mib=1,
                                   gpus=gpus), nvlink=nvlink)
            for m in range(size)))
    pdbs = tuple(
        PodDisruptionBudget(name=f"pdb-{app}", namespace="default", match_labels={"app": app},
                            disruptions_allowed=draw(st.integers(0, 2)))
        for app in ("a", "b") if draw(st.booleans()))
    recent = {w: 1 for w in sorted({p.workload for p in pods}) if draw(st.integers(0, 4)) == 0}
    # preemptions within the bound's window: the fairness penalty, and report parity's floor
    history = {w: draw(st.integers(1, 2)) for w in sorted({p.workload for p in pods})
               if draw(st.integers(0, 2)) == 0}
    snap = Snapshot(now=NOW, nodes=tuple(nodes), pods=tuple(pods) + sum(queue, ()), pdbs=pdbs,
                    recent_preemptions=recent, preemption_history=history,
                    queued_gpus=draw(st.sampled_from([0.0, 0.0, 4.0])))
    cfg = preemption.PlannerConfig(
        min_candidate_nodes_absolute=draw(st.integers(1, 4)),
        record_rejections=draw(st.booleans()),
        restart_seconds=draw(st.sampled_from([0.0, 60.0])),
        rendezvous_seconds=draw(st.sampled_from([1.0, 60.0])),
    )
    names, uids = [n.name for n in nodes], [p.uid for p in pods]
    own = [
        (dict.fromkeys(draw(st.lists(st.sampled_from(names), max_size=2)), RejectReason.NODE_TAINT),
         dict.fromkeys(draw(st.lists(st.sampled_from(uids), max_size=2)) if uids else [],
                       PodHold.EVICTION_BLOCKED))
        for _ in queue]
    return snap, queue, cfg, {"own": own, "chain": draw(st.booleans())}


def _plan_cycle(snap, queue, cfg, extra, cache):
    """Plan the queue as controller.planning.reconcile does, each on the view earlier plans
    leave."""
    plans = []
    for pre, (closed, blocked) in zip(queue, extra["own"], strict=True):
        shut = {**closed, **{n: RejectReason.NODE_HELD for p in plans for n in p.target_nodes}}
        held = {**blocked, **{v.uid: PodHold.HELD_BY_PLAN for p in plans for v in p.victims}}
        if extra["chain"]:  # a view of a view: first own exclusions, then the other plans'
            view = snap.restricted(closed=closed, held=blocked).restricted(closed=shut, held=held)
        else:
            view = snap.restricted(closed=shut, held=held)
        plan = preemption.plan(view, pre, cfg, cache)
        plans.append(plan)
    return plans


@QUEUES
@given(cycles())
def test_a_cycle_plans_the_same_with_the_caches_as_without(cycle):
    snap, queue, cfg, extra = cycle
    cache = PlanCache(snap)

    def plans(c):
        # nodes_evaluated is a diagnostic count: a gang's later tries may find a cover the
        # cache already holds and evaluate fewer nodes (hypothesis found a 3-against-5 case)
        return [replace(p, nodes_evaluated=0) for p in _plan_cycle(snap, queue, cfg, extra, c)]

    assert plans(cache) == plans(None)
    # and a second pass over the same queue, on entries the first one stored
    assert plans(cache) == plans(None)


# --- invalidation ------------------------------------------------------------------------------

def _cluster() -> Snapshot:
    """n1: one cheap 8-GPU victim; n2: a pricier one; n3 and n4: a gang across both."""
    return builders.snapshot([gpu_node(f"n{i}", 8) for i in range(1, 5)], [
        make_pod("cheap", node="n1", gpus=8, age=600),
        make_pod("dear", node="n2", gpus=8, age=7200),
        make_pod("g-a", node="n3", gpus=8, age=60, gang="default/seed/g"),
        make_pod("g-b", node="n4", gpus=8, age=60, gang="default/seed/g"),
    ])


def test_a_held_victim_is_not_served_from_the_cache():
    snap = _cluster()
    cache = PlanCache(snap)
    first = preemption.plan(snap, [pending("a", gpus=8)], cache=cache)
    assert [v.name for v in first.victims] == ["g-a", "g-b"]  # 2 × 8 GPUs × 60 s: cheapest
    view = snap.restricted(held={"uid-g-a": PodHold.HELD_BY_PLAN})
    assert cache.delta(view).pods == {"n3", "n4"}  # one held member protects the whole gang
    second = preemption.plan(view, [pending("b", gpus=8)], cache=cache)
    assert [v.name for v in second.victims] == ["cheap"]
    assert second == preemption.plan(view, [pending("b", gpus=8)])


def test_a_closed_node_is_not_served_from_the_cache():
    snap = _cluster()
    cache = PlanCache(snap)
    assert preemption.plan(snap, [pending("a", gpus=8)], cache=cache).target_nodes == ("n3",)
    view = snap.restricted(closed={"n3": RejectReason.NODE_HELD, "n4": RejectReason.NODE_TAINT})
    assert cache.delta(view).nodes == {"n3", "n4"}
    second = preemption.plan(view, [pending("b", gpus=8)], cache=cache)
    assert second.target_nodes == ("n1",)
    assert second == preemption.plan(view, [pending("b", gpus=8)])


def test_priority_bands_keep_apart_what_each_preemptor_may_evict():
    """A preemptor of priority 15 may not evict the priority-20 pod a 25 may: it reuses
    nothing the other band stored."""
    snap = builders.snapshot([gpu_node("n1", 8), gpu_node("n2", 8)], [
        make_pod("p20", node="n1", gpus=8, age=60, priority=20),
        make_pod("p10", node="n2", gpus=8, age=7200, priority=10),
    ])
    cache = PlanCache(snap)
    assert cache.band(15) != cache.band(25) and cache.band(11) == cache.band(20)
    high = preemption.plan(snap, [pending("hi", gpus=8, priority=25)], cache=cache)
    assert [v.name for v in high.victims] == ["p20"]
    low = preemption.plan(snap, [pending("lo", gpus=8, priority=15)], cache=cache)
    assert [v.name for v in low.victims] == ["p10"]


def test_a_snapshot_not_restricted_from_the_base_gets_no_cache():
    snap = _cluster()
    cache = PlanCache(snap)
    other = Snapshot(now=snap.now, nodes=snap.nodes, pods=snap.pods[1:])
    assert cache.delta(other) is None
    assert cache.delta(other.restricted(closed={"n1": RejectReason.NODE_TAINT})) is None
    preemption.plan(snap, [pending("a", gpus=8)], cache=cache)  # fills the cache
    assert preemption.plan(other, [pending("b", gpus=8)], cache=cache) == preemption.plan(
        other, [pending("b", gpus=8)])


def test_a_view_of_a_view_adds_up_both_restrictions():
    snap = _cluster()
    cache = PlanCache(snap)
    view = snap.restricted(closed={"n1": RejectReason.NODE_TAINT}).restricted(
        held={"uid-dear": PodHold.EVICTION_BLOCKED})
    delta = cache.delta(view)
    assert delta.nodes == {"n1"} and delta.pods == {"n2"}


def test_ring_skips_only_nodes_stored_as_yielding_nothing():
    ring = Ring(6)
    assert ring.next_open(0) == 0
    for i in (0, 1, 3):
        ring.store(i, ("no",), candidate=False)
    ring.store(2, ("yes",), candidate=True)
    assert [ring.next_open(i) for i in range(7)] == [2, 2, 2, 4, 4, 5, 6]
    ring.store(4, ("no",), candidate=False)
    ring.store(5, ("no",), candidate=False)
    assert ring.next_open(3) == 6 and ring.next_open(0) == 2


def test_ring_walk_visits_fresh_positions_even_where_the_base_yields_nothing():
    ring = Ring(6)
    for i in range(6):
        ring.store(i, ("no",) if i != 4 else ("yes",), candidate=i == 4)
    seen = []

    def visit(k, known):
        seen.append((k, known))
        return k if known is not None or k == 1 else None

    assert ring.walk(3, 5, [1], visit) == [4, 1]  # from 3, wrapping: 4, then fresh 1
    assert seen == [(4, ("yes",)), (1, None)]
    assert ring.walk(5, 1, [], lambda k, known: k) == [4]  # wraps around to the one candidate
