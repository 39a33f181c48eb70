"""The starvation bound (policies.planner.bound): every policy leaves a workload at the bound
alone, a
preemptor that then fits nowhere waits and says why, and the fairness penalty doubles with the
workload's preemptions in the bound's window."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.baselines import cost_aware, kube_default, kube_workload
from ckpt_preempt.policies.model.model import CheckpointMode, PodHold, RejectReason
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import bound, preemption, units
from tests.policies.builders import NOW, gpu_node, make_pod, workload_of

POLICIES = {
    "kube-default": lambda s, pre: kube_default.plan(s, pre),
    "kube-workload": lambda s, pre: kube_workload.plan(s, pre),
    "cost-aware": lambda s, pre: cost_aware.plan(s, pre),
    "checkpoint-aware": lambda s, pre: preemption.plan(s, pre),
}


def _held(snapshot: Snapshot, limit: bound.Bound) -> Snapshot:
    """The snapshot as the simulator and the controller show it: pods at the bound held."""
    pods = bound.hold(snapshot.pods, limit.at_bound(snapshot.preemption_history))
    return Snapshot(now=snapshot.now, nodes=snapshot.nodes, pods=pods, pdbs=snapshot.pdbs,
                    recent_preemptions=snapshot.recent_preemptions,
                    preemption_history=snapshot.preemption_history)


@pytest.mark.parametrize("bad", [
    dict(max_preemptions=-1), dict(max_preemptions=1.5), dict(max_preemptions=True),
    dict(window_seconds=0), dict(window_seconds=-5), dict(window_seconds=float("inf")),
    dict(window_seconds=float("nan")),
])
def test_bad_bounds_are_refused(bad):
    with pytest.raises(ValueError):
        bound.Bound(**bad)


def test_at_bound_and_off():
    limit = bound.Bound(max_preemptions=2)
    assert limit.at_bound({"a": 1, "b": 2, "c": 5}) == {"b", "c"}
    assert bound.Bound(max_preemptions=0).at_bound({"a": 99}) == frozenset()


def test_hold_marks_only_running_pods_of_bounded_workloads():
    pods = (make_pod("a", node="n"), make_pod("b", node="n"), make_pod("p"),
            make_pod("t", node="n", terminating=True))
    bounded = frozenset({workload_of("a"), workload_of("p"), workload_of("t")})
    out = {p.name: p.held for p in bound.hold(pods, bounded)}
    assert out == {"a": PodHold.AT_PREEMPTION_BOUND, "b": None, "p": None, "t": None}


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_skips_a_workload_at_the_bound(policy):
    # one 2-GPU node: the young fresh-checkpointed pod is every policy's first choice; at the
    # bound, the other one goes instead
    young = make_pod("young", node="n", age=600, checkpoint_age=60,
                     mode=CheckpointMode.PERIODIC)
    old = make_pod("old", node="n", age=7200)
    pre = make_pod("pre", priority=10)
    snap = Snapshot(now=NOW, nodes=(gpu_node("n", 2),), pods=(young, old, pre))
    plan = POLICIES[policy](snap, [pre])
    assert {v.name for v in plan.victims} == {"young"}
    bounded = _held(Snapshot(now=NOW, nodes=snap.nodes, pods=snap.pods,
                             preemption_history={workload_of("young"): 2}),
                   bound.Bound(max_preemptions=2))
    plan = POLICIES[policy](bounded, [pre])
    assert plan.feasible and {v.name for v in plan.victims} == {"old"}


@pytest.mark.parametrize("policy", POLICIES)
def test_a_preemptor_whose_only_victims_are_at_the_bound_waits_and_says_why(policy):
    victim = make_pod("v", node="n", gpus=2)
    pre = make_pod("pre", priority=10, gpus=2)
    snap = _held(Snapshot(now=NOW, nodes=(gpu_node("n", 2),), pods=(victim, pre),
                          preemption_history={workload_of("v"): 3}), bound.Bound(max_preemptions=3))
    plan = POLICIES[policy](snap, [pre])
    assert not plan.feasible and not plan.victims
    assert str(RejectReason.VICTIMS_AT_BOUND) in plan.reason


@pytest.mark.parametrize("policy", ["kube-workload", "checkpoint-aware"])
def test_a_gang_at_the_bound_is_held_whole(policy):
    gang = [make_pod(f"g{i}", node=f"n{i}", gang="default/g", gpus=2) for i in range(2)]
    pre = make_pod("pre", priority=10, gpus=2)
    snap = _held(Snapshot(now=NOW, nodes=(gpu_node("n0", 2), gpu_node("n1", 2)),
                          pods=(*gang, pre), preemption_history={"default/g": 1}),
                 bound.Bound(max_preemptions=1))
    assert all(p.held is PodHold.AT_PREEMPTION_BOUND for p in snap.pods if p.gang)
    plan = POLICIES[policy](snap, [pre])
    assert not plan.feasible and str(RejectReason.VICTIMS_AT_BOUND) in plan.reason


@pytest.mark.parametrize(("recent", "history", "factor"), [
    (0, 0, 0), (2, 0, 2), (1, 1, 1), (1, 2, 3), (1, 3, 7), (5, 2, 5), (0, 4, 15),
])
def test_penalty_doubles_with_the_history(recent, history, factor):
    assert bound.penalty_factor(recent, history) == factor
    pod = make_pod("a", node="n", gpus=2)
    snap = Snapshot(now=NOW, nodes=(gpu_node("n"),), pods=(pod,),
                    recent_preemptions={workload_of("a"): recent},
                    preemption_history={workload_of("a"): history})
    b = units.UnitBuilder(snap, 10, drain=False, max_checkpoint_seconds=600,
                          penalty_seconds=900)
    assert b.penalty(pod) == 2 * 900 * factor


def test_the_history_turns_the_ordering_away_from_the_same_cheap_job():
    # a job that checkpointed a minute ago looks free; after three preemptions in the bound's
    # window (none in the last hour) it is charged 7 x 900 s per GPU and the other one goes
    cheap = make_pod("cheap", node="n", age=600, checkpoint_age=60, mode=CheckpointMode.PERIODIC)
    other = make_pod("other", node="n", age=3 * 3600, checkpoint_age=3600,
                     mode=CheckpointMode.PERIODIC)
    pre = make_pod("pre", priority=10)
    nodes = (gpu_node("n", 2),)
    forgets = Snapshot(now=NOW, nodes=nodes, pods=(cheap, other, pre))
    remembers = Snapshot(now=NOW, nodes=nodes, pods=(cheap, other, pre),
                         preemption_history={workload_of("cheap"): 3})
    assert {v.name for v in preemption.plan(forgets, [pre]).victims} == {"cheap"}
    assert {v.name for v in preemption.plan(remembers, [pre]).victims} == {"other"}


@st.composite
def bounded_cluster(draw):
    nodes = tuple(gpu_node(f"n{i}", draw(st.sampled_from([2, 4, 8]))) for i in range(
        draw(st.integers(1, 3))))
    pods, history = [], {}
    for i, n in enumerate(nodes):
        free = n.allocatable.gpus
        while free > 0:
            g = draw(st.integers(1, free))
            gang = draw(st.sampled_from([None, None, "default/g0", "default/g1"]))
            p = make_pod(f"p{i}-{free}", node=n.name, gpus=g, gang=gang,
                         age=draw(st.floats(60, 86_400)),
                         checkpoint_age=draw(st.one_of(st.none(), st.floats(0, 60))),
                         mode=CheckpointMode.PERIODIC)
            pods.append(p)
            history[p.workload] = draw(st.integers(0, 4))
            free -= g
    pre = make_pod("pre", priority=10, gpus=draw(st.integers(1, 8)))
    limit = bound.Bound(max_preemptions=draw(st.integers(1, 4)))
    snap = Snapshot(now=NOW, nodes=nodes, pods=(*pods, pre), preemption_history=history)
    return _held(snap, limit), pre, limit


@settings(max_examples=150, deadline=None)
@given(bounded_cluster(), st.sampled_from(sorted(POLICIES)))
def test_no_policy_ever_names_a_victim_at_the_bound(case, policy):
    snap, pre, limit = case
    at = limit.at_bound(snap.preemption_history)
    plan = POLICIES[policy](snap, [pre])
    assert not {v.workload for v in plan.victims} & at
    # a plan that fails while pods at the bound could have made room says so
    if not plan.feasible and any(p.held is PodHold.AT_PREEMPTION_BOUND for p in snap.pods):
        assert str(RejectReason.VICTIMS_AT_BOUND) in plan.reason


# ------------------------------------------------------------- whose history it is (attributable)


def test_workload_gpus_sums_what_each_workload_holds_on_nodes():
    pods = [make_pod("a", node="n1", gpus=2, gang="default/seed/g"),
            make_pod("b", node="n2", gpus=4, gang="default/seed/g"),
            make_pod("c", gpus=8, gang="default/seed/g"),  # pending: holds nothing yet
            make_pod("d", node="n1", gpus=0), make_pod("e", node="n2", gpus=1),
            # the same gang name and pod uid in another namespace are other workloads
            make_pod("e", node="n2", gpus=1, namespace="other", gang="default/seed/g")]
    assert Snapshot(now=NOW, nodes=(), pods=tuple(pods)).gpus_by_workload == {
        "default/seed/g": 6.0, workload_of("e"): 1.0, "other/gang/default/seed/g": 1.0}


@pytest.mark.parametrize(("holding", "kept"), [
    pytest.param(4.0, True, id="as large as when preempted"),
    pytest.param(2.0, True, id="smaller"),
    pytest.param(4.0 + 1e-12, True, id="rounding"),
    pytest.param(4.5, False, id="grown by a shared GPU"),
    pytest.param(12.0, False, id="pods attached since"),
])
def test_a_workload_keeps_its_count_only_while_no_larger_than_when_preempted(holding, kept):
    got = bound.attributable({"w": 3, "legacy": 2}, {"w": 4.0}, {"w": holding, "legacy": 99.0})
    assert got == ({"w": 3, "legacy": 2} if kept else {"legacy": 2})


@settings(max_examples=200, deadline=None)
@given(counts=st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 9)),
       sizes=st.dictionaries(st.sampled_from("abcdef"), st.floats(0, 64)),
       holding=st.dictionaries(st.sampled_from("abcdef"), st.floats(0, 64)))
def test_attribution_only_ever_forgets(counts, sizes, holding):
    """No workload gains a count or a higher one: attribution can make a pod cheaper to
    preempt only by taking away history that was not its own, never protect one more."""
    got = bound.attributable(counts, sizes, holding)
    assert set(got) <= set(counts)
    assert all(got[w] == counts[w] for w in got)
    assert {w for w in counts if w not in sizes} <= set(got)  # nothing recorded: as before
