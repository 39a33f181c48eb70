"""Placement without preemption (gated gang admission and any preemptor that fits): our
placement scorer, after health and NVLink preference (policies/placement/admission.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.health import Health
from ckpt_preempt.policies.model.model import NvlinkNeed, Resources
from ckpt_preempt.policies.model.topology import single_domain
from ckpt_preempt.policies.placement import admission
from ckpt_preempt.policies.planner import preemption
from ckpt_preempt.policies.planner.preemption import PlannerConfig
from tests.policies.builders import (
    gang,
    gpu_node,
    make_pod,
    pending,
    snapshot,
    split_domains,
)


def _plan(snap, *preemptors, **cfg):
    return preemption.plan(snap, list(preemptors), PlannerConfig(**cfg))


def _fillers(gpus_per_pod: int, nodes: int = 4) -> tuple[list, list]:
    """Full 8-GPU nodes running pods of one shape: what makes that shape the target."""
    made, pods = [], []
    for i in range(nodes):
        made.append(gpu_node(f"full-{i}", 8))
        pods += [make_pod(f"full-{i}-{k}", node=f"full-{i}", gpus=gpus_per_pod, priority=1000)
                 for k in range(8 // gpus_per_pod)]
    return made, pods


def test_single_pod_keeps_a_whole_slot_where_best_fit_would_strand_gpus():
    # The cluster runs 4-GPU pods. A 2-GPU pod on "b" (4 free) leaves 2 GPUs no 4-GPU pod can
    # use; on "a" (6 free) both nodes still take a 4-GPU pod. Best fit picks "b".
    full, running = _fillers(4)
    snap = snapshot([gpu_node("a", 8), gpu_node("b", 8), *full], [
        *running, make_pod("a-used", node="a", gpus=2), make_pod("b-used", node="b", gpus=4)])
    got = _plan(snap, pending("hi", gpus=2))
    assert got.feasible and not got.victims
    assert got.target_nodes == ("a",)
    assert _plan(snap, pending("hi", gpus=2), placement=admission.BESTFIT).target_nodes == ("b",)


def _two_small_nodes():
    # The cluster runs 2-GPU pods. "a" has 3 GPUs free (a 4-GPU node), "b" 5.
    full, running = _fillers(2)
    return snapshot([gpu_node("a", 4), gpu_node("b", 8), *full], [
        *running, make_pod("a-used", node="a", gpus=1), make_pod("b-used", node="b", gpus=3)])


def test_gang_members_go_where_best_fit_would_strand_gpus():
    # Two 1-GPU members. Best fit puts both on "a" (3 -> 1 free: no 2-GPU pod fits there any
    # more). Our scorer, placing the pair as a block, takes "b" (5 -> 3); the second member
    # stays there too ("a" 3 -> 2 would no longer take a 3-GPU pod like b-used): both nodes
    # keep room for 2- and 3-GPU pods.
    members = gang("new", [None, None], gpus=1, priority=100)
    snap = _two_small_nodes()
    got = _plan(snap, *members)
    assert got.feasible and not got.victims
    assert [p.node for p in got.placements] == ["b", "b"]
    bestfit = _plan(snap, *members, placement=admission.BESTFIT)
    assert [p.node for p in bestfit.placements] == ["a", "a"]


def test_gang_block_scoring_undoes_the_per_pod_scorers_myopia():
    # Two 1-GPU members, the cluster runs 4-GPU pods, "a" has 5 free and "b" 4. One at a time,
    # the scorer puts the first on "a" (5 -> 4 still takes a 4-GPU pod) and then neither node
    # does; as a block, both go to "b" and "a" keeps room for a 4-GPU pod.
    full, running = _fillers(4)
    snap = snapshot([gpu_node("a", 8), gpu_node("b", 8), *full], [
        *running, make_pod("a-used", node="a", gpus=3), make_pod("b-used", node="b", gpus=4)])
    members = gang("new", [None, None], gpus=1, priority=100)
    block = _plan(snap, *members)
    assert [p.node for p in block.placements] == ["b", "b"]
    one_by_one = _plan(snap, *members, placement=admission.PER_POD)
    assert [p.node for p in one_by_one.placements] == ["a", "a"]


def test_health_and_nvlink_preference_come_before_the_scorer():
    full, running = _fillers(4)
    pods = [*running, make_pod("a-used", node="a", gpus=2), make_pod("b-used", node="b", gpus=4)]
    nodes = [gpu_node("a", 8), gpu_node("b", 8), *full]
    # the scorer prefers "a" (first test); a degraded "a" loses to a healthy "b"
    sick = [replace(n, health=Health.DEGRADED) if n.name == "a" else
            replace(n, health=Health.HEALTHY) for n in nodes]
    assert _plan(snapshot(sick, pods), pending("hi", gpus=2)).target_nodes == ("b",)
    failing = [replace(n, health=Health.FAILING) if n.name == "b" else n for n in sick]
    assert _plan(snapshot(failing, pods), pending("hi", gpus=2)).target_nodes == ("a",)
    # an nvlink: preferred pod takes the node where one domain surely fits, whatever the score
    islands = [split_domains("a", *[1] * 8), replace(gpu_node("b", 8), topology=single_domain(8)),
               *full]
    pre = pending("hi", gpus=2, nvlink=NvlinkNeed.PREFERRED)
    assert _plan(snapshot(islands, pods), pre).target_nodes == ("b",)


def test_equal_scores_go_to_the_smaller_name():
    snap = snapshot([gpu_node("b", 8), gpu_node("a", 8)], [])
    assert _plan(snap, pending("hi", gpus=2)).target_nodes == ("a",)


def test_mig_requests_are_scored_on_mig_capacity():
    # Two GPUs of 7 one-slice (142-milli) slices each; "b" has most of its MIG room used, "a"
    # none. A 1g pod goes into the room "b" has left rather than break into a fresh device;
    # best fit sees no whole GPUs either way and goes by name.
    def mig_node(name):
        return replace(gpu_node(name, 0), allocatable=Resources(
            cpu_milli=96_000, memory_mib=1 << 20, gpu_milli=2 * 994))
    used = replace(make_pod("b-used", node="b", gpus=0), requests=Resources(
        cpu_milli=1000, memory_mib=1024, gpu_milli=994 + 568))
    pre = replace(pending("hi", gpus=0), requests=Resources(
        cpu_milli=1000, memory_mib=1024, gpu_milli=142))
    snap = snapshot([mig_node("a"), mig_node("b")], [used])
    view = admission.device_view(snap.node_by_name["b"], snap.free("b"), mig=True)
    assert view.gpu_free == (0, 426)
    assert _plan(snap, pre).target_nodes == ("b",)
    assert _plan(snap, pre, placement=admission.BESTFIT).target_nodes == ("a",)


def test_unknown_placement_rule_is_refused():
    with pytest.raises(ValueError, match="placement must be one of"):
        PlannerConfig(placement="random")


# --- invariants ---------------------------------------------------------------------------------

@st.composite
def _cluster_and_gang(draw):
    nodes, pods = [], []
    for i in range(draw(st.integers(1, 5))):
        gpus = draw(st.sampled_from((4, 8)))
        cpu = draw(st.sampled_from((8_000, 32_000)))
        name = f"n{i}"
        nodes.append(gpu_node(name, gpus, cpu=cpu))
        left_gpus, left_cpu = gpus, cpu
        for k in range(draw(st.integers(0, 4))):
            g = draw(st.integers(0, left_gpus))
            c = draw(st.integers(0, left_cpu // 2))
            pods.append(make_pod(f"{name}-{k}", node=name, gpus=g, cpu=c,
                                 priority=draw(st.sampled_from((0, 1000)))))
            left_gpus, left_cpu = left_gpus - g, left_cpu - c
    size = draw(st.integers(1, 4))
    g = draw(st.sampled_from((0, 1, 2, 4)))
    cpu = draw(st.sampled_from((500, 4_000, 12_000)))
    members = gang("new", [None] * size, gpus=g, cpu=cpu, priority=100)
    return snapshot(nodes, pods), members, draw(st.sampled_from(admission.PLACEMENTS))


@settings(max_examples=150, deadline=None)
@given(_cluster_and_gang())
def test_a_placed_gang_is_whole_and_fits_every_node(case):
    snap, members, placement = case
    got = _plan(snap, *members, placement=placement)
    if not got.feasible:
        assert not got.placements
        return
    assert sorted(p.pod_uid for p in got.placements) == sorted(m.uid for m in members)
    evicted = {v.uid for v in got.victims}
    by_uid = {m.uid: m for m in members}
    for node in snap.nodes:
        held = [p.requests for p in snap.pods_on_node.get(node.name, ()) if p.uid not in evicted]
        held += [by_uid[p.pod_uid].requests for p in got.placements if p.node == node.name]
        assert sum(held, Resources()).fits_in(node.allocatable), node.name


def test_the_e2e_layout_separates_the_scorer_from_best_fit():
    # e2e/test_gated_scorer.py: "roomy" 6 of 8 GPUs free, "tight" 4; a gang of two 1-GPU pods
    snap = snapshot([gpu_node("roomy", 8), gpu_node("tight", 8)], [
        make_pod("two", node="roomy", gpus=2, cpu=100, mem=64),
        make_pod("four", node="tight", gpus=4, cpu=100, mem=64)])
    members = gang("pair", [None, None], gpus=1, cpu=100, mem=64, priority=1000)
    for placement, want in ((admission.GANG_BLOCK, "roomy"), (admission.PER_POD, "roomy"),
                            (admission.BESTFIT, "tight")):
        got = _plan(snap, *members, placement=placement)
        assert [p.node for p in got.placements] == [want, want], placement
