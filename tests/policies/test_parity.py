"""Report parity (policies.planner.parity): a periodic pod that reports its checkpoints is no
victim while a silent one that could go instead was preempted no more often."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.model import CheckpointMode, PodHold
from ckpt_preempt.policies.planner import cost, parity, preemption
from ckpt_preempt.policies.planner.plan_cache import PlanCache
from ckpt_preempt.policies.planner.preemption import PlannerConfig
from tests.policies.builders import gang, gpu_node, make_pod, pending, snapshot, workload_of

HOUR = 3600.0
PERIODIC = CheckpointMode.PERIODIC


def _twins(*, reporter_history: int = 0, silent_history: int = 0, reporter_gpus: int = 1,
           silent_gpus: int = 1, silent_mode: CheckpointMode = PERIODIC, **silent):
    """A reporter that checkpointed a minute ago and a silent pod, each filling its node."""
    pods = [make_pod("reporter", node="a", priority=1, age=4 * HOUR, checkpoint_age=60.0,
                     mode=PERIODIC, gpus=reporter_gpus),
            make_pod("silent", node="b", age=4 * HOUR, mode=silent_mode, gpus=silent_gpus,
                     **{"priority": 1, **silent})]
    snap = snapshot([gpu_node("a", reporter_gpus), gpu_node("b", silent_gpus)], pods)
    return replace(snap, preemption_history={workload_of("reporter"): reporter_history,
                                             workload_of("silent"): silent_history})


def _held(snap, preemptor):
    """The reporters the rule holds back from ``preemptor`` (uid -> ``PodHold.REPORT_PARITY``):
    the eligible pods ``parity.holds`` holds at ``parity.floor``, from the index of periodic
    pods (the planner applies the floor inside its units instead of listing them)."""
    at = parity.floor(snap, preemptor)
    if at is None:
        return {}
    priority = min(p.priority for p in preemptor)
    _, reporting_at = snap.periodic_positions
    return {snap.pods[i].uid: PodHold.REPORT_PARITY for i in reporting_at
            if parity.holds(snap.pods[i], at, snap.preemption_history)
            and cost.ineligibility(snap.pods[i], priority, snap.now) is None}


def _victims(plan):
    return sorted(v.name for v in plan.victims)


def test_the_silent_pod_goes_first_when_both_were_preempted_as_often():
    snap = _twins()
    assert _held(snap, [pending("hi")]) == {"uid-reporter": PodHold.REPORT_PARITY}
    got = preemption.plan(snap, [pending("hi")])
    assert _victims(got) == ["silent"]
    assert PodHold.REPORT_PARITY in got.reason and "held back" in got.reason
    # loss alone takes the reporter, whose minute of work is the cheapest
    off = preemption.plan(snap, [pending("hi")], PlannerConfig(report_parity=False))
    assert _victims(off) == ["reporter"]


def test_where_loss_alone_takes_no_held_reporter_the_rule_changes_nothing_but_the_reason():
    # the silent pod started a minute ago, so loss alone takes it too
    pods = [make_pod("reporter", node="a", priority=1, age=4 * HOUR, checkpoint_age=600.0,
                     mode=PERIODIC),
            make_pod("silent", node="b", priority=1, age=60.0, mode=PERIODIC)]
    snap = snapshot([gpu_node("a", 1), gpu_node("b", 1)], pods)
    assert _held(snap, [pending("hi")]) == {"uid-reporter": PodHold.REPORT_PARITY}
    got = preemption.plan(snap, [pending("hi")])
    off = preemption.plan(snap, [pending("hi")], PlannerConfig(report_parity=False))
    assert _victims(got) == ["silent"]
    # the same plan; the reporter's node is passed over as held rather than as costlier
    assert replace(got, reason="", rejections=()) == replace(off, reason="", rejections=())
    assert [(r.node, r.detail) for r in got.rejections] == [("a", "hi: 1 pod(s) report-parity")]
    assert PodHold.REPORT_PARITY in got.reason and PodHold.REPORT_PARITY not in off.reason


def test_no_silent_alternative_no_floor_and_the_plan_says_nothing_of_holds():
    snap = _twins(silent_mode=CheckpointMode.NONE)
    assert parity.floor(snap, [pending("hi")]) is None
    got = preemption.plan(snap, [pending("hi")])
    assert got == preemption.plan(snap, [pending("hi")], PlannerConfig(report_parity=False))


def test_a_reporter_preempted_fewer_times_than_every_silent_pod_is_chosen_by_loss():
    snap = _twins(reporter_history=1, silent_history=2)
    assert _held(snap, [pending("hi")]) == {}
    assert _victims(preemption.plan(snap, [pending("hi")])) == ["reporter"]


def test_a_silent_pod_on_a_node_that_cannot_host_the_preemptor_holds_nobody():
    # the preemptor needs 2 GPUs: the silent pod's 1-GPU node cannot host it, so it is no
    # alternative and the reporter is not held (before, it was held and the hold relaxed)
    snap = _twins(reporter_gpus=2)
    assert _held(snap, [pending("hi", gpus=2)]) == {}
    got = preemption.plan(snap, [pending("hi", gpus=2)])
    assert _victims(got) == ["reporter"] and got.feasible
    assert PodHold.REPORT_PARITY not in got.reason
    # a free GPU beside the silent pod makes its node a host: the reporter is held again
    roomy = replace(snap, nodes=(snap.nodes[0], gpu_node("b", 2)))
    assert _held(roomy, [pending("hi", gpus=2)]) == {"uid-reporter": PodHold.REPORT_PARITY}
    assert _victims(preemption.plan(roomy, [pending("hi", gpus=2)])) == ["silent"]


def test_when_only_the_held_reporter_makes_room_the_hold_is_relaxed():
    # a two-member gang needs both nodes: the silent pod's node hosts one member, the held
    # view has no room for the other, so the plan takes the reporter too
    snap = _twins()
    pre = gang("hi", [None, None], priority=100)
    assert _held(snap, pre) == {"uid-reporter": PodHold.REPORT_PARITY}
    got = preemption.plan(snap, pre)
    assert _victims(got) == ["reporter", "silent"] and got.feasible
    assert "relaxed" in got.reason


def test_a_silent_pod_on_a_closed_node_holds_nobody():
    snap = _twins()
    closed = replace(snap, nodes=(snap.nodes[0], replace(snap.nodes[1], unschedulable=True)))
    assert _held(closed, [pending("hi")]) == {}


def test_a_silent_pod_on_a_node_the_snapshot_lacks_holds_nobody():
    # bad input (a pod bound to a node not listed) is no alternative, and never a crash
    snap = _twins()
    gone = replace(snap, nodes=(snap.nodes[0],))
    assert parity.floor(gone, [pending("hi")]) is None
    assert _victims(preemption.plan(gone, [pending("hi")])) == ["reporter"]


def test_a_pod_that_declares_no_checkpoints_is_no_silent_alternative():
    # charged all its 4 h truthfully: holding the reporter behind it would evict the costliest
    snap = _twins(silent_mode=CheckpointMode.NONE)
    assert _held(snap, [pending("hi")]) == {}
    assert _victims(preemption.plan(snap, [pending("hi")])) == ["reporter"]


def test_a_silent_pod_that_could_not_go_holds_nobody():
    for silent in ({"priority": 100}, {"min_runtime": 5 * HOUR}, {"preemptible": False},
                   {"terminating": True}):
        snap = _twins(**silent)
        assert _held(snap, [pending("hi")]) == {}, silent
    held_at_bound = _twins()
    held_at_bound = replace(held_at_bound, pods=tuple(
        replace(p, held=PodHold.AT_PREEMPTION_BOUND) if p.name == "silent" else p
        for p in held_at_bound.pods))
    assert _held(held_at_bound, [pending("hi")]) == {}


def test_a_silent_pod_that_could_not_go_holds_nobody_even_beside_the_reporter():
    # the reporter's node could host the preemptor, but the silent pod there outranks it
    pods = [make_pod("reporter", node="a", priority=0, age=2 * HOUR, checkpoint_age=60.0,
                     mode=PERIODIC),
            make_pod("silent", node="a", priority=5, age=2 * HOUR, mode=PERIODIC)]
    snap = snapshot([gpu_node("a", 2)], pods)
    assert _held(snap, [pending("hi", priority=3)]) == {}
    assert _held(snap, [pending("hi", priority=9)]) == {
        "uid-reporter": PodHold.REPORT_PARITY}


def test_a_malformed_checkpoint_is_neither_reporting_nor_silent():
    snap = _twins()
    bad = replace(snap, pods=tuple(replace(p, checkpoint_malformed=True, last_checkpoint=None)
                                   if p.name == "silent" else p for p in snap.pods))
    assert _held(bad, [pending("hi")]) == {}
    reporter = next(p for p in snap.pods if p.name == "reporter")
    assert reporter.reports_periodic is True
    assert replace(reporter, checkpoint_malformed=True).reports_periodic is None
    silent = next(p for p in snap.pods if p.name == "silent")
    assert silent.reports_periodic is False


@st.composite
def periodic_clusters(draw):
    """Up to 6 single-GPU-or-two pods on 1-3 nodes, each periodic and reporting or silent, or
    never checkpointing, with random preemption histories; a 1- or 2-GPU preemptor."""
    nodes = [gpu_node(f"n{i}", draw(st.integers(1, 4))) for i in range(draw(st.integers(1, 3)))]
    pods, history = [], {}
    for i in range(draw(st.integers(1, 6))):
        node = draw(st.sampled_from(nodes))
        kind = draw(st.sampled_from(["reports", "silent", "none"]))
        pod = make_pod(f"p{i}", node=node.name, priority=draw(st.integers(0, 2)),
                       gpus=draw(st.integers(1, 2)), age=draw(st.floats(60.0, 10 * HOUR)),
                       checkpoint_age=draw(st.floats(0.0, 60.0)) if kind == "reports" else None,
                       mode=CheckpointMode.NONE if kind == "none" else PERIODIC)
        pods.append(pod)
        history[pod.workload] = draw(st.integers(0, 3))
    snap = replace(snapshot(nodes, pods), preemption_history=history)
    return snap, pending("hi", gpus=draw(st.integers(1, 2)), priority=1 + draw(st.integers(0, 2)))


@settings(max_examples=150, deadline=None)
@given(periodic_clusters())
def test_parity_never_makes_a_plan_infeasible_and_a_held_reporter_goes_only_as_a_last_resort(
        case):
    snap, pre = case
    on = preemption.plan(snap, [pre])
    off = preemption.plan(snap, [pre], PlannerConfig(report_parity=False))
    assert on.feasible == off.feasible
    held = _held(snap, [pre])
    if not held or not on.feasible:
        return
    in_view = preemption.plan(snap.restricted(held=held), [pre])
    if in_view.feasible:  # the held view had a plan: no held reporter is among its victims
        assert not {v.uid for v in on.victims} & set(held)
        assert _victims(on) == _victims(in_view)


def _held_by_scan(snap, preemptor):
    """``_held`` as the rule reads, over every pod: the reference for the index."""
    priority = min(p.priority for p in preemptor)
    could = [p for p in snap.pods if p.node is not None and p.checkpoint is PERIODIC
             and not p.checkpoint_malformed
             and cost.ineligibility(p, priority, snap.now) is None]
    counts = snap.preemption_history
    floors = [counts.get(p.workload, 0) for p in could if p.last_checkpoint is None
              and parity._could_host(snap, p.node, preemptor, priority)]
    if not floors:
        return {}
    return {p.uid: PodHold.REPORT_PARITY for p in could
            if p.last_checkpoint is not None and counts.get(p.workload, 0) >= min(floors)}


@settings(max_examples=400, deadline=None)
@given(periodic_clusters(), st.data())
def test_the_index_of_periodic_pods_gives_what_a_scan_of_every_pod_gives(case, data):
    # also on a restricted view holding some pods: it shares its base's index
    snap, pre = case
    assert _held(snap, [pre]) == _held_by_scan(snap, [pre])
    some = data.draw(st.sets(st.sampled_from([p.uid for p in snap.pods])))
    view = snap.restricted(held=dict.fromkeys(some, PodHold.AT_PREEMPTION_BOUND))
    assert _held(view, [pre]) == _held_by_scan(view, [pre])


@st.composite
def parity_worlds(draw):
    """``periodic_clusters`` with a bound gang of two (reporting or silent) beside the pods,
    sometimes, and a pending gang of two as the preemptor, sometimes."""
    snap, pre = draw(periodic_clusters())
    pods, history = list(snap.pods), dict(snap.preemption_history)
    if draw(st.booleans()):
        names = [n.name for n in snap.nodes]
        reports = draw(st.booleans())
        members = gang("g", [draw(st.sampled_from(names)) for _ in range(2)],
                       priority=draw(st.integers(0, 2)), mode=PERIODIC, age=5 * HOUR,
                       checkpoint_age=30.0 if reports else None)
        pods += members
        history[members[0].workload] = draw(st.integers(0, 3))
    preemptor = [pre]
    if draw(st.booleans()):
        preemptor = gang("hi", [None, None], priority=pre.priority)
    return replace(snap, pods=tuple(pods), preemption_history=history), preemptor


def _plan_on_the_held_view(snap, preemptor):
    """The rule planned the plain way: on a view holding every reporter it holds
    (``Snapshot.restricted``), and without the rule when that view has no plan. The
    reference for the floor applied inside the planner's units."""
    off = PlannerConfig(report_parity=False)
    held = _held(snap, preemptor)
    if held:
        got = preemption.plan(snap.restricted(held=held), preemptor, off)
        if got.feasible:
            return got
    return preemption.plan(snap, preemptor, off)


@settings(max_examples=300, deadline=None)
@given(parity_worlds())
def test_the_floor_in_the_units_plans_what_the_held_view_planned(case):
    # the same victims, placements, losses and rejections; only the reason's words differ.
    # With the cycle's cache too (PlanCache), as the controller plans
    snap, preemptor = case
    got = preemption.plan(snap, preemptor)
    assert replace(got, reason="") == replace(_plan_on_the_held_view(snap, preemptor), reason="")
    assert preemption.plan(snap, preemptor, cache=PlanCache(snap)) == got
