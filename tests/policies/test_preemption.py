"""The checkpoint-aware planner: what it evicts, what it refuses, and why."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ckpt_preempt.policies.baselines import kube_default
from ckpt_preempt.policies.model.model import (
    CheckpointMode,
    NvlinkNeed,
    PodHold,
    RejectReason,
    UnknownCheckpoint,
)
from ckpt_preempt.policies.model.topology import single_domain
from ckpt_preempt.policies.planner import preemption
from ckpt_preempt.policies.planner.preemption import PlannerConfig
from tests.policies.builders import (
    NOW,
    gang,
    gpu_node,
    hgx_h100,
    make_pod,
    pdb,
    pending,
    snapshot,
    split_domains,
    workload_of,
)

HOUR = 3600.0


def _plan(snap, *preemptors, **cfg):
    return preemption.plan(snap, list(preemptors), PlannerConfig(**cfg))


def _victim_names(plan):
    return sorted(v.name for v in plan.victims)


def _reasons(plan):
    return {(r.node, r.reason) for r in plan.rejections}


def test_freshest_checkpoint_is_preempted_where_kube_default_picks_the_youngest():
    snap = snapshot(
        [gpu_node("node-a", 1), gpu_node("node-b", 1)],
        [
            make_pod("old-fresh-ckpt", node="node-a", priority=1, age=10 * HOUR,
                     checkpoint_age=120.0),
            make_pod("young-no-ckpt", node="node-b", priority=1, age=2 * HOUR),
        ],
    )
    ours = _plan(snap, pending("hi"))
    theirs = kube_default.plan(snap, [pending("hi")])
    assert _victim_names(ours) == ["old-fresh-ckpt"]
    assert ours.lost_gpu_seconds == pytest.approx(120.0)
    assert ours.target_nodes == ("node-a",)
    assert _victim_names(theirs) == ["young-no-ckpt"]
    assert theirs.lost_gpu_seconds == pytest.approx(2 * HOUR)


def test_restart_cost_is_charged_per_evicted_gpu_drained_or_not():
    # 8 GPUs that checkpointed 1 min ago against 1 GPU 20 min unsaved: without restarts the
    # big fresh pod is cheaper (480 < 1200 GPU-s); a 5-minute restart per GPU turns it round
    # (480 + 2400 > 1200 + 300).
    snap = snapshot(
        [gpu_node("node-a", 8), gpu_node("node-b", 8)],
        [
            make_pod("big-fresh", node="node-a", priority=1, gpus=8, checkpoint_age=60.0),
            make_pod("small-stale", node="node-b", priority=1, gpus=1, checkpoint_age=1200.0),
            make_pod("filler", node="node-b", priority=500, gpus=7),
        ],
    )
    assert _victim_names(_plan(snap, pending("hi", gpus=1))) == ["big-fresh"]
    plan = _plan(snap, pending("hi", gpus=1), restart_seconds=300.0)
    assert _victim_names(plan) == ["small-stale"]
    assert plan.lost_gpu_seconds == pytest.approx(1200.0 + 300.0)
    drained = replace(snap.pods[0], checkpoint=CheckpointMode.ON_REQUEST, checkpoint_seconds=30.0)
    one = snapshot([gpu_node("node-a", 8)], [drained])
    got = _plan(one, pending("hi", gpus=1), restart_seconds=300.0)
    assert got.victims[0].drain and got.lost_gpu_seconds == pytest.approx(8 * (30.0 + 300.0))


@pytest.mark.parametrize(
    ("single_age", "want", "cost"),
    [
        pytest.param(0.75 * HOUR, ["single"], 4 * 0.75 * HOUR,
                     id="gang costs its whole loss: a lone pod dearer than one member wins"),
        pytest.param(3 * HOUR, ["train-0", "train-1"], 2 * 4 * 1800.0,
                     id="whole gang evicted when it loses less in total"),
    ],
)
def test_gang_goes_whole_and_is_charged_whole(single_age, want, cost):
    # Each gang member loses 4 GPUs × 30 min = 2 GPU-h; the whole gang loses 4 GPU-h.
    members = gang("train", ["node-a", "node-b"], gpus=4, priority=1, age=5 * HOUR,
                   checkpoint_age=1800.0)
    snap = snapshot(
        [gpu_node("node-a", 8), gpu_node("node-b", 8)],
        [*members,
         make_pod("single", node="node-a", gpus=4, priority=1, age=single_age),
         make_pod("guard", node="node-b", gpus=4, priority=500)],
    )
    got = _plan(snap, pending("hi", gpus=4))
    assert got.feasible
    assert _victim_names(got) == want
    assert got.lost_gpu_seconds == pytest.approx(cost)
    if len(want) == 2:
        (group,) = got.victim_groups
        assert group.gang == "default/seed/train"
        assert {v.node for v in group.victims} == {"node-a", "node-b"}


@pytest.mark.parametrize(
    ("victim", "feasible"),
    [
        pytest.param(dict(priority=99), True, id="one below the preemptor: eligible"),
        pytest.param(dict(priority=100), False, id="equal priority: never a victim"),
        pytest.param(dict(priority=101), False, id="higher priority: never a victim"),
        pytest.param(dict(priority=1, preemptible=False), False, id="opted out"),
        pytest.param(dict(priority=1, age=300.0, min_runtime=600.0), False,
                     id="within its min-runtime"),
        pytest.param(dict(priority=1, age=900.0, min_runtime=600.0), True,
                     id="past its min-runtime"),
        pytest.param(dict(priority=1, terminating=True), False, id="already terminating"),
    ],
)
def test_eligibility(victim, feasible):
    snap = snapshot([gpu_node("n", 1)], [make_pod("v", node="n", **victim)])
    got = _plan(snap, pending("hi", priority=100))
    assert got.feasible is feasible
    assert _victim_names(got) == (["v"] if feasible else [])
    if not feasible:
        assert _reasons(got) == {("n", RejectReason.NOT_ENOUGH_PREEMPTIBLE)}


@pytest.mark.parametrize(
    "protected",
    [
        pytest.param(dict(preemptible=False), id="an opted-out member protects its gang"),
        pytest.param(dict(priority=100), id="a high-priority member protects its gang"),
        pytest.param(dict(age=60.0, min_runtime=600.0), id="a young member protects its gang"),
    ],
)
def test_one_ineligible_member_protects_the_whole_gang(protected):
    a, _ = gang("g", ["node-a", "node-b"], priority=1, age=HOUR, checkpoint_age=10.0)
    b = make_pod("g-1", node="node-b", gang=a.gang, **{"priority": 1, **protected})
    snap = snapshot(
        [gpu_node("node-a", 1), gpu_node("node-b", 1), gpu_node("node-c", 1)],
        [a, b, make_pod("costly", node="node-c", priority=1, age=9 * HOUR)],
    )
    got = _plan(snap, pending("hi"))
    assert _victim_names(got) == ["costly"]


@pytest.mark.parametrize(
    ("cfg", "seconds", "want_cost", "want_drain", "deadline"),
    [
        pytest.param(dict(), 120.0, 2 * 120.0, True, NOW + 120.0,
                     id="on-request with drain loses only its checkpoint time"),
        pytest.param(dict(), None, 2 * 600.0, True, NOW + 600.0,
                     id="no checkpoint-seconds: the configured maximum"),
        pytest.param(dict(), 900.0, 2 * 5 * HOUR, False, NOW,
                     id="checkpoint longer than the cap saves nothing"),
        pytest.param(dict(max_checkpoint_seconds=1000.0), 900.0, 2 * 900.0, True, NOW + 900.0,
                     id="a higher cap admits the longer checkpoint"),
        pytest.param(dict(drain=False), 120.0, 2 * 5 * HOUR, False, NOW,
                     id="drain disabled: full loss"),
    ],
)
def test_on_request_drain(cfg, seconds, want_cost, want_drain, deadline):
    snap = snapshot(
        [gpu_node("n", 2)],
        [make_pod("v", node="n", gpus=2, priority=1, age=5 * HOUR,
                  mode=CheckpointMode.ON_REQUEST, checkpoint_seconds=seconds)],
    )
    got = _plan(snap, pending("hi", gpus=2), **cfg)
    (v,) = got.victims
    assert v.drain is want_drain
    assert got.lost_gpu_seconds == pytest.approx(want_cost)
    assert v.lost_gpu_seconds == pytest.approx(want_cost)
    assert got.drain_deadline == pytest.approx(deadline)
    assert v.checkpoint_seconds == (deadline - NOW if want_drain else None)


def test_on_request_victim_beats_a_fresher_periodic_one():
    snap = snapshot(
        [gpu_node("node-a", 1), gpu_node("node-b", 1)],
        [make_pod("periodic", node="node-a", priority=1, mode=CheckpointMode.PERIODIC,
                  checkpoint_age=300.0),
         make_pod("asks", node="node-b", priority=1, age=8 * HOUR,
                  mode=CheckpointMode.ON_REQUEST, checkpoint_seconds=60.0)],
    )
    got = _plan(snap, pending("hi"))
    assert _victim_names(got) == ["asks"]
    assert got.drain_deadline == NOW + 60.0


@pytest.mark.parametrize(
    ("cost_a", "cost_b", "want", "violations"),
    [
        pytest.param(HOUR, HOUR, "node-b", 0, id="equal loss: the PDB breaks the tie"),
        pytest.param(HOUR, 2 * HOUR, "node-a", 1, id="PDB never outweighs lost work"),
    ],
)
def test_pdb_is_a_tie_breaker(cost_a, cost_b, want, violations):
    snap = snapshot(
        [gpu_node("node-a", 1), gpu_node("node-b", 1)],
        [make_pod("a", node="node-a", priority=1, age=cost_a, labels={"app": "x"}),
         make_pod("b", node="node-b", priority=1, age=cost_b)],
        [pdb("guard", {"app": "x"}, 0)],
    )
    got = _plan(snap, pending("hi"))
    assert got.target_nodes == (want,)
    assert got.pdb_violations == violations


@pytest.mark.parametrize(
    ("node", "feasible", "rejection"),
    [
        pytest.param(gpu_node("n", 8), False, RejectReason.NVLINK_UNKNOWN,
                     id="topology unknown: rejected"),
        pytest.param(hgx_h100("n"), True, None, id="HGX single domain: feasible"),
        pytest.param(split_domains("n", 2, 2, 2, 2), False, RejectReason.NVLINK_INFEASIBLE,
                     id="islands of 2 cannot hold 4"),
        pytest.param(split_domains("n", 4, 4), True, None,
                     id="islands of 4 hold 4 once the node is emptied"),
    ],
)
def test_nvlink_required(node, feasible, rejection):
    snap = snapshot([node], [make_pod(f"v{i}", node="n", priority=1) for i in range(8)])
    got = _plan(snap, pending("hi", gpus=4, nvlink=NvlinkNeed.REQUIRED))
    assert got.feasible is feasible
    if rejection:
        assert _reasons(got) == {("n", rejection)}
        assert got.reason
    else:
        assert got.placements[0].node == "n"


@pytest.mark.parametrize(
    "nvlink",
    [pytest.param(NvlinkNeed.NONE, id="no need"),
     pytest.param(NvlinkNeed.PREFERRED, id="preferred")],
)
def test_nvlink_not_required_ignores_unknown_topology(nvlink):
    pods = [make_pod(f"v{i}", node="n", priority=1) for i in range(8)]
    snap = snapshot([gpu_node("n", 8)], pods)
    got = _plan(snap, pending("hi", gpus=4, nvlink=nvlink))
    assert got.feasible and len(got.victims) == 4


def test_nvlink_on_islands_frees_enough_for_the_worst_case():
    # 4+4 islands, 4 GPUs busy at low priority: which are busy is unknown, so 4 free GPUs may
    # straddle both islands. With one busy GPU left, one island is surely whole: evict the
    # three cheapest, keep the dearest.
    snap = snapshot(
        [split_domains("n", 4, 4)],
        [make_pod(f"v{i}", node="n", priority=1, age=HOUR * (i + 1)) for i in range(4)],
    )
    got = _plan(snap, pending("hi", gpus=4, nvlink=NvlinkNeed.REQUIRED))
    assert got.feasible
    assert _victim_names(got) == ["v0", "v1", "v2"]


def test_gang_preemptor_places_every_member_on_several_nodes():
    nodes = [gpu_node(f"node-{i}", 8) for i in range(3)]
    pods = [make_pod(f"low-{i}", node=f"node-{i}", gpus=8, priority=1, age=HOUR * (i + 1))
            for i in range(3)]
    members = gang("big", [None, None], gpus=8, priority=100)
    got = _plan(snapshot(nodes, pods), *members)
    assert got.feasible
    assert sorted(p.pod_uid for p in got.placements) == sorted(m.uid for m in members)
    assert got.target_nodes == ("node-0", "node-1")  # the two that lose least
    assert _victim_names(got) == ["low-0", "low-1"]


def test_gang_preemptor_is_infeasible_unless_every_member_fits():
    nodes = [gpu_node("node-0", 8), gpu_node("node-1", 8)]
    pods = [make_pod("low", node="node-0", gpus=8, priority=1),
            make_pod("high", node="node-1", gpus=8, priority=500)]
    got = _plan(snapshot(nodes, pods), *gang("big", [None, None], gpus=8, priority=100))
    assert not got.feasible
    assert "fits nowhere" in got.reason


def test_gang_victim_frees_room_for_a_later_member_elsewhere():
    victims = gang("old", ["node-0", "node-1"], gpus=8, priority=1, checkpoint_age=60.0)
    members = gang("new", [None, None], gpus=8, priority=100)
    got = _plan(snapshot([gpu_node("node-0", 8), gpu_node("node-1", 8)], victims), *members)
    assert got.feasible
    assert got.target_nodes == ("node-0", "node-1")
    assert len(got.victim_groups) == 1
    assert got.lost_gpu_seconds == pytest.approx(2 * 8 * 60.0)


def test_fits_without_preemption():
    snap = snapshot(
        [gpu_node("roomy", 8), gpu_node("snug", 4)],
        [make_pod(node="roomy", gpus=2, priority=1), make_pod(node="snug", gpus=2, priority=1)],
    )
    got = _plan(snap, pending("hi", gpus=2))
    assert got.feasible and not got.victims
    assert got.reason == "fits without preemption"
    assert got.placements[0].node == "snug"  # best fit
    assert got.drain_deadline is None
    assert got.lost_gpu_seconds == 0


def test_infeasible_plan_has_a_reason_and_a_rejection_per_node():
    snap = snapshot(
        [gpu_node("cordoned", 8, unschedulable=True), gpu_node("small", 2), gpu_node("busy", 4)],
        [make_pod(node="busy", gpus=4, priority=500), make_pod(node="small", priority=1)],
    )
    got = _plan(snap, pending("hi", gpus=4))
    assert not got.feasible
    assert got.reason and "hi" in got.reason
    assert _reasons(got) == {
        ("cordoned", RejectReason.UNSCHEDULABLE),
        ("small", RejectReason.TOO_SMALL),
        ("busy", RejectReason.NOT_ENOUGH_PREEMPTIBLE),
    }
    assert not got.victims and not got.placements


def test_costlier_nodes_are_rejected_with_their_loss():
    snap = snapshot(
        [gpu_node("cheap", 1), gpu_node("dear", 1)],
        [make_pod(node="cheap", priority=1, age=60.0), make_pod(node="dear", priority=1, age=HOUR)],
    )
    got = _plan(snap, pending("hi"))
    assert got.target_nodes == ("cheap",)
    assert _reasons(got) == {("dear", RejectReason.COSTLIER)}


def test_cpu_shortage_is_covered_too():
    snap = snapshot(
        [gpu_node("n", 8, cpu=4000)],
        [make_pod("cpu-hog", node="n", gpus=0, cpu=3500, priority=1),
         make_pod("gpu-user", node="n", gpus=1, cpu=100, priority=1, age=9 * HOUR)],
    )
    got = _plan(snap, pending("hi", gpus=1, cpu=1000))
    assert _victim_names(got) == ["cpu-hog"]


def test_empty_cluster_is_an_infeasible_plan_not_an_exception():
    got = _plan(snapshot([], []), pending("hi"))
    assert not got.feasible and got.reason
    assert not got.placements and not got.victims


@pytest.mark.parametrize(
    ("n_nodes", "limit"),
    [
        pytest.param(60, 60, id="60 nodes: every node is a candidate"),
        pytest.param(300, 100, id="300 nodes: at least 100 candidates"),
        pytest.param(1500, 150, id="1500 nodes: 10 % of them"),
    ],
)
def test_candidate_sampling(n_nodes, limit):
    nodes = [gpu_node(f"n{i:04d}", 1) for i in range(n_nodes)]
    pods = [make_pod(f"p{i:04d}", node=f"n{i:04d}", priority=1) for i in range(n_nodes)]
    got = _plan(snapshot(nodes, pods), pending("hi"))
    assert got.feasible
    assert got.nodes_evaluated == limit  # equal bounds: none pruned, none beyond the sample
    skipped = [r for r in got.rejections if r.reason is RejectReason.NOT_SAMPLED]
    assert len(skipped) == n_nodes - limit
    assert len({r.node for r in skipped}) == len(skipped)
    assert got.placements[0].node not in {r.node for r in skipped}


def test_sampling_counts_only_nodes_that_could_free_enough():
    # 150 nodes that can never help, then 150 that can: the sample keeps scanning past the useless.
    useless = [gpu_node(f"a{i:03d}", 1) for i in range(150)]
    useful = [gpu_node(f"b{i:03d}", 1) for i in range(150)]
    pods = [make_pod(f"hi-{i}", node=f"a{i:03d}", priority=500) for i in range(150)]
    pods += [make_pod(f"lo-{i}", node=f"b{i:03d}", priority=1) for i in range(150)]
    got = _plan(snapshot(useless + useful, pods), pending("hi"))
    assert got.feasible
    assert got.nodes_evaluated == 100
    assert got.target_nodes[0].startswith("b")


@pytest.mark.parametrize(
    ("guarded", "others", "preemptor"),
    [
        pytest.param(dict(gpus=2, checkpoint_age=0.0), dict(gpus=1, checkpoint_age=0.0),
                     dict(gpus=2), id="pods checkpointed just now"),
        pytest.param(dict(gpus=0, cpu=2000), dict(gpus=0, cpu=1000), dict(gpus=1, cpu=2000),
                     id="CPU-only pods"),
    ],
)
def test_pdb_breaks_ties_between_zero_cost_covers(guarded, others, preemptor):
    # Sorted by uid the guarded pod comes first, so the search meets its cover first.
    node = gpu_node("n", 4 if guarded["gpus"] else 8, cpu=4000)
    snap = snapshot(
        [node],
        [make_pod("a-guarded", node="n", priority=1, labels={"app": "x"}, **guarded),
         make_pod("b", node="n", priority=1, **others),
         make_pod("c", node="n", priority=1, **others)],
        [pdb("guard", {"app": "x"}, 0)],
    )
    got = _plan(snap, pending("hi", **preemptor))
    assert got.lost_gpu_seconds == 0.0
    assert got.pdb_violations == 0
    assert _victim_names(got) == ["b", "c"]


def test_search_budget_exhaustion_is_reported_as_such():
    snap = snapshot([gpu_node("n", 2)], [make_pod("a", node="n", priority=1),
                                         make_pod("b", node="n", priority=1, age=2 * HOUR)])
    got = _plan(snap, pending("hi", gpus=2), search_budget=1)
    assert got.feasible
    assert _victim_names(got) == ["a", "b"]
    assert "search budget exhausted on 1 node(s)" in got.reason


# --- nvlink: preferred ---------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [pytest.param("fits", id="fits without preemption"),
                                  pytest.param("preempts", id="after preemption")])
def test_nvlink_preferred_breaks_ties_toward_one_domain(mode):
    # Two nodes, alike in lost work; "a-split" sorts first by name but its 2+2 islands cannot
    # surely hold 4 GPUs in one domain; "b-hgx" can. Only a preferred pod cares.
    victims = [] if mode == "fits" else [
        make_pod(f"{n}-v", node=n, gpus=4, priority=1, age=HOUR) for n in ("a-split", "b-hgx")]
    nodes = [split_domains("a-split", 2, 2), gpu_node("b-hgx", 4, topology=single_domain(4))]
    snap = snapshot(nodes, victims)
    preferred = _plan(snap, pending("hi", gpus=4, nvlink=NvlinkNeed.PREFERRED))
    plain = _plan(snap, pending("hi", gpus=4))
    assert preferred.target_nodes == ("b-hgx",)
    assert plain.target_nodes == ("a-split",)
    assert preferred.lost_gpu_seconds == plain.lost_gpu_seconds  # a tie-break, nothing more
    if mode == "preempts":
        (lost,) = [r for r in preferred.rejections if r.node == "a-split"]
        assert lost.reason == RejectReason.COSTLIER and "NVLink" in lost.detail


def test_nvlink_preferred_never_costs_lost_work():
    snap = snapshot(
        [split_domains("a-split", 2, 2), gpu_node("b-hgx", 4, topology=single_domain(4))],
        [make_pod("cheap", node="a-split", gpus=4, priority=1, age=60.0),
         make_pod("dear", node="b-hgx", gpus=4, priority=1, age=HOUR)],
    )
    got = _plan(snap, pending("hi", gpus=4, nvlink=NvlinkNeed.PREFERRED))
    assert got.target_nodes == ("a-split",) and _victim_names(got) == ["cheap"]


# --- never a partial gang -----------------------------------------------------------------------

def _gang_vs_single(allowed, single_labels=None):
    """A 2-member gang (cheap) on node-a, a dearer single on node-b; PDBs as given."""
    members = gang("train", ["node-a", "node-a"], gpus=4, priority=1, checkpoint_age=60.0,
                   labels={"app": "train"})
    single = make_pod("single", node="node-b", gpus=8, priority=1, age=HOUR,
                      labels=single_labels or {})
    return snapshot([gpu_node("node-a", 8), gpu_node("node-b", 8)], [*members, single],
                    [pdb("train", {"app": "train"}, allowed)])


@pytest.mark.parametrize(("allowed", "want"), [
    pytest.param(2, ["train-0", "train-1"], id="the PDB lets the whole gang go"),
    pytest.param(1, ["single"], id="it would refuse one member: the gang is no candidate"),
    pytest.param(0, ["single"], id="it allows none"),
])
def test_a_gang_goes_only_if_its_pdbs_let_all_of_it_go(allowed, want):
    snap = _gang_vs_single(allowed)
    got = _plan(snap, pending("hi", gpus=8))
    assert _victim_names(got) == want
    assert preemption.gang_pdb_problem(snap, [v.uid for v in got.victims]) is None
    if allowed < 2:
        from ckpt_preempt.policies.baselines import oracle  # the oracle follows the same rule
        best = oracle.solve(snap, [pending("hi", gpus=8)])
        assert best.unit_ids == ("uid-single",)


def test_single_pods_of_a_gangs_pdb_count_against_it():
    # One PDB allows 2 and covers the gang (2 members) and the single s0: the gang and s0
    # together would leave the Eviction API refusing one of them, so the plan pays for the
    # dearer, uncovered "free" instead of s0.
    members = gang("train", ["node-a", "node-a"], gpus=2, priority=1, checkpoint_age=60.0,
                   labels={"app": "x"})
    s0 = make_pod("s0", node="node-a", gpus=2, priority=1, age=HOUR, labels={"app": "x"})
    free = make_pod("free", node="node-a", gpus=2, priority=1, age=10 * HOUR)
    snap = snapshot([gpu_node("node-a", 8)], [*members, s0, free], [pdb("x", {"app": "x"}, 2)])
    got = _plan(snap, pending("hi", gpus=6))
    assert _victim_names(got) == ["free", "train-0", "train-1"]
    assert preemption.gang_pdb_problem(snap, [v.uid for v in got.victims]) is None
    problem = preemption.gang_pdb_problem(snap, ["uid-s0", "uid-train-0", "uid-train-1"])
    assert "covers 3" in problem


def test_single_pods_keep_the_soft_pdb_rule():
    snap = snapshot([gpu_node("n", 1)], [make_pod("s", node="n", priority=1, labels={"a": "b"})],
                    [pdb("guard", {"a": "b"}, 0)])
    got = _plan(snap, pending("hi"))
    assert _victim_names(got) == ["s"] and got.pdb_violations == 1


def test_gang_pdb_problem_names_the_pdb_and_ignores_pods_already_going():
    snap = _gang_vs_single(1)
    uids = ["uid-train-0", "uid-train-1"]
    problem = preemption.gang_pdb_problem(snap, uids)
    assert "default/train" in problem and "allows 1" in problem and "covers 2" in problem
    assert preemption.gang_pdb_problem(snap, ["uid-single"]) is None  # no gang among them
    assert preemption.gang_pdb_problem(snap, ["uid-train-0"]) is None  # 1 covered, 1 allowed
    assert preemption.gang_pdb_problem(snap, ["gone", "uid-single"]) is None


def test_a_victim_gang_across_nodes_counts_every_member_against_its_pdb():
    # The preemptor gang needs both nodes; each victim gang member sits on one; the PDB
    # allows only one disruption, so that gang is no candidate and the plan is infeasible.
    members = gang("v", ["node-a", "node-b"], gpus=8, priority=1, labels={"app": "v"})
    snap = snapshot([gpu_node("node-a", 8), gpu_node("node-b", 8)], members,
                    [pdb("v", {"app": "v"}, 1)])
    got = _plan(snap, *gang("hi", [None, None], gpus=8, priority=100))
    assert not got.feasible


# --- fairness -----------------------------------------------------------------------------------

def _two_victims(recent):
    pods = [make_pod("often", node="node-a", priority=1, checkpoint_age=60.0),
            make_pod("rarely", node="node-b", priority=1, checkpoint_age=600.0)]
    snap = snapshot([gpu_node("node-a", 1), gpu_node("node-b", 1)], pods)
    return replace(snap, recent_preemptions=recent)


@pytest.mark.parametrize(("recent", "penalty", "want"), [
    pytest.param({}, 1800.0, "often", id="nobody preempted lately: the cheaper one"),
    pytest.param({workload_of("often"): 1}, 1800.0, "rarely",
                 id="preempted lately: 60 s + 1800 s penalty loses to 600 s"),
    pytest.param({workload_of("often"): 1}, 300.0, "often",
                 id="a small penalty only shifts the bar"),
    pytest.param({workload_of("often"): 1}, 0.0, "often", id="penalty 0: the guard is off"),
    pytest.param({workload_of("often"): 1, workload_of("rarely"): 1}, 1800.0, "often",
                 id="both preempted lately: lost work decides again"),
])
def test_fairness_penalty_steers_away_from_the_recently_preempted(recent, penalty, want):
    got = _plan(_two_victims(recent), pending("hi"), fairness_penalty_seconds=penalty)
    assert _victim_names(got) == [want]
    (group,) = got.victim_groups
    # lost work is reported as it is; the penalty separately
    assert group.lost_gpu_seconds == pytest.approx(60.0 if want == "often" else 600.0)
    assert group.penalty_gpu_seconds == pytest.approx(penalty * recent.get(workload_of(want), 0))


def test_fairness_never_makes_a_plan_infeasible():
    snap = replace(snapshot([gpu_node("n", 1)], [make_pod("only", node="n", priority=1)]),
                   recent_preemptions={workload_of("only"): 50})
    got = _plan(snap, pending("hi"))
    assert _victim_names(got) == ["only"] and "fairness" in got.victim_groups[0].reason


def test_fairness_counts_per_workload_not_per_pod():
    # The gang's members share one workload key; its penalty is charged on all its GPUs.
    members = gang("g", ["n", "n"], gpus=1, priority=1, checkpoint_age=60.0)
    snap = replace(snapshot([gpu_node("n", 2)], members),
                   recent_preemptions={"default/seed/g": 2})
    got = _plan(snap, pending("hi", gpus=2), fairness_penalty_seconds=100.0)
    assert got.penalty_gpu_seconds == pytest.approx(2 * 100.0 * 2)
    assert {v.workload for v in got.victims} == {"default/seed/g"}


# --- the unknown-checkpoint policy --------------------------------------------------------------

@pytest.mark.parametrize(("policy", "want", "cost"), [
    pytest.param(UnknownCheckpoint(), "reports", 2 * HOUR,
                 id="start-time: the silent pod loses its 4 h, the reporter 2 h"),
    pytest.param(UnknownCheckpoint(kind="cluster-median"), "silent", 1 * HOUR,
                 id="cluster-median: the silent pod is assumed the reporters' median, 1 h"),
    pytest.param(UnknownCheckpoint(kind="assume", seconds=1800.0), "silent", 1800.0,
                 id="assume 30 min"),
])
def test_unknown_checkpoint_policy(policy, want, cost):
    # reported checkpoint ages: 2 h, 0 and 1 h (the median: 1 h); higher priority pods count
    pods = [make_pod("silent", node="a", priority=1, age=4 * HOUR),
            make_pod("reports", node="b", priority=1, age=5 * HOUR, checkpoint_age=2 * HOUR),
            make_pod("other", node="c", priority=500, age=5 * HOUR, checkpoint_age=0.0),
            make_pod("higher", node="d", priority=500, age=5 * HOUR, checkpoint_age=HOUR)]
    snap = replace(snapshot([gpu_node(n, 1) for n in "abcd"], pods), unknown_checkpoint=policy)
    got = _plan(snap, pending("hi"))
    assert _victim_names(got) == [want]
    assert got.lost_gpu_seconds == pytest.approx(cost)
    # kube-default's losses are counted the same way, so the two compare like with like
    theirs = kube_default.plan(snap, [pending("hi")])
    (v,) = theirs.victims
    assert v.lost_gpu_seconds == pytest.approx(
        cost_of(snap, snap.pod_by_uid[v.uid]))


def cost_of(snap, pod):
    from ckpt_preempt.policies.planner import cost as cost_model
    return pod.gpus * cost_model.work_since_checkpoint(pod, snap.now,
                                                       snap.unknown_checkpoint_age)


def test_a_malformed_checkpoint_is_charged_from_start_whatever_the_policy():
    pod = replace(make_pod("bad", node="a", priority=1, age=4 * HOUR), checkpoint_malformed=True)
    snap = replace(snapshot([gpu_node("a", 1)], [pod]),
                   unknown_checkpoint=UnknownCheckpoint(kind="assume", seconds=60.0))
    assert _plan(snap, pending("hi")).lost_gpu_seconds == pytest.approx(4 * HOUR)


# --- explicit exclusions -------------------------------------------------------------------------

def test_excluded_nodes_and_held_pods_say_why():
    pods = [make_pod("held", node="free", priority=1),
            make_pod("blocked", node="free", priority=1, gpus=1)]
    snap = snapshot([gpu_node("free", 2), gpu_node("tainted", 2), gpu_node("cordoned", 2,
                                                                       unschedulable=True)], pods)
    view = snap.restricted(closed={"tainted": RejectReason.NODE_TAINT,
                                   "cordoned": RejectReason.NODE_HELD},
                           held={"uid-held": PodHold.HELD_BY_PLAN,
                                 "uid-blocked": PodHold.EVICTION_BLOCKED})
    got = _plan(view, pending("hi", gpus=2))
    assert not got.feasible
    why = {r.node: (r.reason, r.detail) for r in got.rejections}
    assert why["tainted"][0] == RejectReason.NODE_TAINT
    assert why["cordoned"][0] == RejectReason.UNSCHEDULABLE  # cordoned stays cordoned
    assert why["free"][0] == RejectReason.NOT_ENOUGH_PREEMPTIBLE
    assert "held-by-another-plan" in why["free"][1]
    assert "eviction-blocked-recently" in why["free"][1]
    theirs = kube_default.plan(view, [pending("hi", gpus=2)])
    assert not theirs.feasible
