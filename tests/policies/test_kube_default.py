"""kube-scheduler's DefaultPreemption, criterion by criterion (pickOneNodeForPreemption order)."""

from __future__ import annotations

import random

import pytest

from ckpt_preempt.policies.baselines import kube_default
from ckpt_preempt.policies.baselines.kube_default import (
    KubeDefaultConfig,
    filter_pods_with_pdb_violation,
    num_candidates,
    select_victims_on_node,
)
from ckpt_preempt.policies.model.model import (
    ZERO,
    LabelRequirement,
    PodDisruptionBudget,
    RejectReason,
    Resources,
)
from tests.policies.builders import NOW, gang, gpu_node, make_pod, pdb, pending, snapshot

INT32_MIN = -(2**31)
SEEDS = range(8)  # with two candidate nodes, these seeds cover both evaluation orders


def _two_nodes(gpus, on_a, on_b, pdbs=()):
    nodes = [gpu_node("node-a", gpus), gpu_node("node-b", gpus)]
    pods = [make_pod(node="node-a", **kw) for kw in on_a]
    pods += [make_pod(node="node-b", **kw) for kw in on_b]
    return snapshot(nodes, pods, pdbs)


def _chosen(snap, preemptor, seed):
    got = kube_default.plan(snap, [preemptor], KubeDefaultConfig(seed=seed))
    assert got.feasible, got.reason
    return got.target_nodes[0]


# Each case: the winner node is better on exactly the named criterion and ties on every earlier
# one, while every *later* criterion points at the other node, so only that criterion decides.
CRITERIA = [
    pytest.param(
        1, [dict(priority=1, labels={"app": "a"})], [dict(priority=50)],
        [pdb("guard-a", {"app": "a"}, 0)], "node-b",
        id="1 fewest PDB violations beats a lower-priority victim",
    ),
    pytest.param(
        2, [dict(priority=10, gpus=2)], [dict(priority=9), dict(priority=9, age=60.0)], (),
        "node-b",
        id="2 lowest highest-victim priority beats smaller sum and fewer victims",
    ),
    pytest.param(
        2, [dict(priority=5, age=60.0), dict(priority=5, age=60.0)],
        [dict(priority=5, age=7200.0), dict(priority=1, age=7200.0)], (), "node-b",
        id="3 smallest priority sum beats later start",
    ),
    pytest.param(
        2, [dict(priority=0, gpus=2, age=7200.0)],
        [dict(priority=0, age=60.0), dict(priority=INT32_MIN, age=60.0)], (), "node-a",
        id="4 fewest victims when priority sums tie (int32 offset) beats later start",
    ),
    pytest.param(
        1, [dict(priority=5, age=7200.0)], [dict(priority=5, age=3600.0)], (), "node-b",
        id="5 latest start of the highest-priority victim",
    ),
    pytest.param(
        2, [dict(priority=5, age=3 * 3600.0), dict(priority=5, age=60.0)],
        [dict(priority=5, age=2 * 3600.0), dict(priority=5, age=2 * 3600.0)], (), "node-b",
        id="5 compares the earliest start among the highest-priority victims",
    ),
    pytest.param(
        2, [dict(priority=5, age=2 * 3600.0), dict(priority=1, age=60.0)],
        [dict(priority=5, age=3600.0), dict(priority=1, age=9 * 3600.0)], (), "node-b",
        id="5 ignores the start times of lower-priority victims",
    ),
]


@pytest.mark.parametrize(("gpus", "on_a", "on_b", "pdbs", "winner"), CRITERIA)
def test_pick_one_node_criterion_decides_regardless_of_order(gpus, on_a, on_b, pdbs, winner):
    snap = _two_nodes(gpus, on_a, on_b, pdbs)
    preemptor = pending("hi", priority=100, gpus=gpus)
    assert {_chosen(snap, preemptor, seed) for seed in SEEDS} == {winner}


def test_criterion_6_first_node_in_evaluation_order():
    snap = _two_nodes(1, [dict(priority=5)], [dict(priority=5)])
    preemptor = pending("hi", priority=100)
    for seed in SEEDS:
        first = ["node-a", "node-b"][random.Random(seed).randrange(2)]
        assert _chosen(snap, preemptor, seed) == first
    assert {_chosen(snap, preemptor, seed) for seed in SEEDS} == {"node-a", "node-b"}


# --- SelectVictimsOnNode ---------------------------------------------------------------------

def _on_node(*specs):
    return [make_pod(f"v{i}", node="n", **kw) for i, kw in enumerate(specs)]


SELECT = [
    pytest.param(
        1, [dict(priority=5), dict(priority=3)], (), ["v1"], 0,
        id="reprieves the most important first, evicts the rest",
    ),
    pytest.param(
        1, [dict(priority=5, age=100.0), dict(priority=5, age=900.0)], (), ["v0"], 0,
        id="equal priority: the earlier start is more important and is reprieved",
    ),
    pytest.param(
        3, [dict(priority=1), dict(priority=4), dict(priority=2), dict(priority=3)], (),
        ["v3", "v2", "v0"], 0,
        id="victims come back most important first",
    ),
    pytest.param(
        1, [dict(priority=1, labels={"app": "a"}), dict(priority=5)],
        [pdb("guard", {"app": "a"}, 0)], ["v1"], 0,
        id="PDB-violating pods are reprieved before more important ones",
    ),
    pytest.param(
        2, [dict(priority=1, labels={"app": "a"}), dict(priority=5)],
        [pdb("guard", {"app": "a"}, 0)], ["v1", "v0"], 1,
        id="a violating pod that cannot be reprieved is counted",
    ),
    pytest.param(
        2, [dict(priority=10), dict(priority=1), dict(priority=1)], (), ["v1", "v2"], 0,
        id="equal priority is never a victim",
    ),
    pytest.param(
        1, [dict(priority=1, terminating=True), dict(priority=2)], (), ["v1"], 0,
        id="terminating pods are not potential victims",
    ),
]


@pytest.mark.parametrize(("need", "specs", "pdbs", "want", "violations"), SELECT)
def test_select_victims_on_node(need, specs, pdbs, want, violations):
    pods = _on_node(*specs)
    got = select_victims_on_node(
        pending("hi", priority=10, gpus=need), pods, ZERO, pdbs, NOW
    )
    assert got is not None
    victims, n_violating = got
    assert [p.name for p in victims] == want
    assert n_violating == violations


@pytest.mark.parametrize(
    ("need", "specs", "free"),
    [
        pytest.param(4, [dict(priority=50, gpus=2), dict(priority=1, gpus=2)], 0,
                     id="removing every lower-priority pod is not enough"),
        pytest.param(1, [dict(priority=10), dict(priority=50)], 0,
                     id="no lower-priority pod at all"),
        pytest.param(1, [], 1, id="empty node: nothing to preempt"),
        pytest.param(3, [dict(priority=1, terminating=True), dict(priority=1)], 1,
                     id="terminating pods free nothing in the dry run"),
    ],
)
def test_select_victims_on_node_gives_none(need, specs, free):
    got = select_victims_on_node(
        pending("hi", priority=10, gpus=need), _on_node(*specs), Resources(gpus=free), (), NOW
    )
    assert got is None


def test_select_victims_counts_free_capacity_already_there():
    pods = _on_node(dict(priority=1, gpus=1), dict(priority=2, gpus=1))
    victims, _ = select_victims_on_node(
        pending("hi", priority=10, gpus=2), pods, Resources(gpus=1), (), NOW
    )
    assert [p.name for p in victims] == ["v0"]


# --- filterPodsWithPDBViolation ----------------------------------------------------------------

FILTER = [
    pytest.param([pdb("b", {"app": "a"}, 1)], [{"app": "a"}, {"app": "a"}], ["p1"],
                 id="budget 1: the second covered pod violates (decrement, then < 0)"),
    pytest.param([pdb("b", {"app": "a"}, 0)], [{"app": "a"}], ["p0"],
                 id="budget 0: the first covered pod violates"),
    pytest.param([pdb("b", {"app": "a"}, 2)], [{"app": "a"}, {"app": "a"}], [],
                 id="budget 2 covers two pods"),
    pytest.param([pdb("b", {"app": "a"}, 1), pdb("c", {"tier": "x"}, 0)],
                 [{"app": "a", "tier": "x"}], ["p0"],
                 id="one exhausted budget among several is enough"),
    pytest.param([pdb("b", {"app": "a"}, 0, namespace="other")], [{"app": "a"}], [],
                 id="a budget in another namespace does not cover the pod"),
    pytest.param([pdb("b", {}, 0)], [{"app": "a"}], [],
                 id="an empty selector covers nothing"),
    pytest.param([pdb("b", {"app": "a"}, 0)], [{"app": "b"}, {}], [],
                 id="unmatched labels are never violating"),
    pytest.param([pdb("b", {"app": "a"}, 1)], [{"app": "a"}, {}, {"app": "a"}, {"app": "a"}],
                 ["p2", "p3"], id="order is kept and the budget is charged in order"),
    # The three rules below came from disagreements with kube-scheduler v1.37.2 in
    # bench/differential.py; upstream: FilterVictimsWithPDBViolation, preemption/util.go.
    pytest.param([PodDisruptionBudget(name="b", namespace="default", match_labels={},
                                      match_all=True, disruptions_allowed=0)],
                 [{"app": "a"}], [],
                 id="the selector {} covers nothing for the scheduler (the Eviction API: all)"),
    pytest.param([PodDisruptionBudget(name="b", namespace="default", match_labels={},
                                      match_expressions=(LabelRequirement(
                                          key="app", operator="DoesNotExist"),),
                                      disruptions_allowed=0)],
                 [{}], [], id="a pod without labels matches no budget, even one it satisfies"),
    pytest.param([pdb("b", {"app": "a"}, 0), pdb("c", {"tier": "x"}, 1)],
                 [{"app": "a", "tier": "x"}, {"tier": "x"}], ["p0"],
                 id="charging stops at the first broken budget: c keeps its disruption"),
]


@pytest.mark.parametrize(("pdbs", "labels", "want_violating"), FILTER)
def test_filter_pods_with_pdb_violation(pdbs, labels, want_violating):
    pods = [make_pod(f"p{i}", node="n", labels=lab) for i, lab in enumerate(labels)]
    violating, ok = filter_pods_with_pdb_violation(pods, pdbs)
    assert [p.name for p in violating] == want_violating
    assert [p.name for p in ok] == [p.name for p in pods if p.name not in want_violating]


# --- calculateNumCandidates --------------------------------------------------------------------

@pytest.mark.parametrize(
    ("nodes", "pct", "absolute", "want"),
    [
        pytest.param(1, 10, 100, 1, id="one node: capped at n"),
        pytest.param(50, 10, 100, 50, id="fewer than 100 nodes: all of them"),
        pytest.param(100, 10, 100, 100, id="exactly 100"),
        pytest.param(999, 10, 100, 100, id="10 % below 100: at least 100"),
        pytest.param(1009, 10, 100, 100, id="10 % rounds down"),
        pytest.param(1010, 10, 100, 101, id="10 % above 100"),
        pytest.param(5000, 10, 100, 500, id="large cluster: 10 %"),
        pytest.param(200, 50, 10, 100, id="percentage from the config"),
        pytest.param(200, 1, 10, 10, id="absolute minimum from the config"),
    ],
)
def test_num_candidates(nodes, pct, absolute, want):
    cfg = KubeDefaultConfig(
        min_candidate_nodes_percentage=pct, min_candidate_nodes_absolute=absolute
    )
    assert num_candidates(nodes, cfg) == want


# --- what kube-default does not know ------------------------------------------------------------

@pytest.mark.parametrize(
    ("young_ckpt", "old_ckpt"),
    [
        pytest.param(None, None, id="no checkpoints"),
        pytest.param(None, 60.0, id="the older pod checkpointed a minute ago"),
        pytest.param(60.0, None, id="the younger pod checkpointed a minute ago"),
        pytest.param(3000.0, 10.0, id="both checkpointed"),
    ],
)
def test_kube_default_ignores_checkpoints(young_ckpt, old_ckpt):
    snap = _two_nodes(
        1, [dict(priority=1, age=10 * 3600.0, checkpoint_age=old_ckpt)],
        [dict(priority=1, age=3600.0, checkpoint_age=young_ckpt)],
    )
    for seed in SEEDS:
        assert _chosen(snap, pending("hi"), seed) == "node-b"


def test_kube_default_evicts_one_gang_member_and_is_charged_the_whole_gang():
    members = gang("train", ["node-a", "node-b"], priority=1, age=3600.0)
    snap = snapshot([gpu_node("node-a", 1), gpu_node("node-b", 1)], members)
    got = kube_default.plan(snap, [pending("hi")])
    assert got.feasible
    assert len(got.victims) == 1
    (group,) = got.victim_groups
    assert group.gang == "default/seed/train"
    assert group.lost_gpu_seconds == pytest.approx(2 * 3600.0)
    assert got.victims[0].lost_gpu_seconds == pytest.approx(3600.0)


def test_kube_default_fits_without_preemption():
    snap = snapshot([gpu_node("a", 2), gpu_node("b", 4)], [make_pod(node="b", priority=1)])
    got = kube_default.plan(snap, [pending("hi", gpus=2)])
    assert got.feasible and not got.victims
    assert got.placements[0].node == "a"  # best fit: no GPU left over
    assert got.drain_deadline is None


def test_kube_default_infeasible_names_every_node():
    snap = snapshot(
        [gpu_node("cordoned", 8, unschedulable=True), gpu_node("small", 1), gpu_node("busy", 4)],
        [make_pod(node="busy", gpus=4, priority=500)],
    )
    got = kube_default.plan(snap, [pending("hi", gpus=4)])
    assert not got.feasible and got.reason
    assert {(r.node, r.reason) for r in got.rejections} == {
        ("cordoned", RejectReason.UNSCHEDULABLE),
        ("small", RejectReason.TOO_SMALL),
        ("busy", RejectReason.NOT_ENOUGH_PREEMPTIBLE),
    }


def test_kube_default_grace_period_sets_the_deadline():
    snap = _two_nodes(1, [dict(priority=1)], [dict(priority=1)])
    got = kube_default.plan(snap, [pending("hi")], KubeDefaultConfig(grace_period_seconds=45.0))
    assert got.drain_deadline == NOW + 45.0
