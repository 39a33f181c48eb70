"""The shared candidate driver: how many candidates, where the walk starts, when it stops."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.baselines import kube_default
from ckpt_preempt.policies.model.model import Node, RejectReason, Resources
from ckpt_preempt.policies.planner import candidates, preemption
from ckpt_preempt.policies.planner.candidates import (
    Sampling,
    find_candidates,
    num_candidates,
    preempt,
)
from tests.policies.builders import gpu_node, make_pod, pending, snapshot


def _nodes(n: int) -> list[Node]:
    return [Node(name=f"n{i:03d}", allocatable=Resources(gpus=8)) for i in range(n)]


@dataclass
class FakeSampler:
    """Candidates on the nodes named in ``yields``; those in ``violating`` break a PDB."""

    start: int
    yields: set[str] | None = None  # None: every node yields one
    violating: set[str] = field(default_factory=set)
    skip: set[str] = field(default_factory=set)  # filtered out before the walk
    visited: list[str] = field(default_factory=list)
    offsets_asked: list[int] = field(default_factory=list)

    def potential(self, node: Node) -> bool:
        return node.name not in self.skip

    def offset(self, nodes: int) -> int:
        self.offsets_asked.append(nodes)
        return self.start

    def select_victims(self, node: Node, step: int, index: int) -> str | None:
        assert step == len(self.visited)
        self.visited.append(node.name)
        return node.name if self.yields is None or node.name in self.yields else None

    def violates_pdb(self, candidate: str) -> bool:
        return candidate in self.violating

    def pick(self, found):
        return max(found)


@pytest.mark.parametrize(
    ("nodes", "want"),
    [(0, 0), (1, 1), (99, 99), (100, 100), (250, 100), (1009, 100), (1010, 101), (5000, 500)],
)
def test_num_candidates_is_ten_percent_at_least_100_at_most_all(nodes, want):
    assert num_candidates(nodes) == want


def test_num_candidates_takes_both_knobs():
    assert num_candidates(200, Sampling(min_candidate_nodes_percentage=50)) == 100
    assert num_candidates(200, Sampling(min_candidate_nodes_absolute=10)) == 20


def test_250_nodes_walk_100_from_the_offset_and_wrap():
    nodes = _nodes(250)
    s = FakeSampler(start=200)
    walk = find_candidates(s, nodes)
    assert s.visited == [f"n{i:03d}" for i in [*range(200, 250), *range(0, 50)]]
    assert list(walk.candidates) == s.visited
    assert walk.wanted == 100
    assert [n.name for n in walk.unvisited] == [f"n{i:03d}" for i in range(50, 200)]


def test_nodes_without_a_candidate_do_not_count():
    nodes = _nodes(250)
    yields = {f"n{i:03d}" for i in range(0, 250, 2)}  # every other node
    s = FakeSampler(start=0, yields=yields)
    walk = find_candidates(s, nodes)
    assert len(walk.candidates) == 100
    assert len(s.visited) == 199  # n000 ... n198: the 100th even node is n198


def test_pdb_violating_candidates_alone_never_stop_the_walk():
    nodes = _nodes(150)
    names = [n.name for n in nodes]
    s = FakeSampler(start=0, violating=set(names[:120]))
    walk = find_candidates(s, nodes)
    assert len(s.visited) == 121  # 120 violating ones, then the first clean one
    assert len(walk.candidates) == 121


def test_every_candidate_violating_walks_every_node():
    nodes = _nodes(150)
    s = FakeSampler(start=7, violating={n.name for n in nodes})
    walk = find_candidates(s, nodes)
    assert len(s.visited) == 150 and walk.unvisited == ()


def test_filtered_nodes_are_left_out_of_the_count_and_the_offset():
    nodes = _nodes(250)
    s = FakeSampler(start=0, skip={n.name for n in nodes[:100]})
    walk = find_candidates(s, nodes)
    assert s.offsets_asked == [150]
    assert len(walk.potential) == 150
    assert walk.wanted == 100
    assert s.visited[0] == "n100" and len(s.visited) == 100


def test_no_potential_node_draws_no_offset():
    nodes = _nodes(3)
    s = FakeSampler(start=0, skip={n.name for n in nodes})
    chosen, walk = preempt(s, nodes)
    assert chosen is None and walk.candidates == () and s.offsets_asked == []


def test_an_offset_out_of_range_is_refused():
    with pytest.raises(ValueError, match="offset"):
        find_candidates(FakeSampler(start=5), _nodes(5))


def test_preempt_lets_the_plugin_pick():
    chosen, walk = preempt(FakeSampler(start=3), _nodes(10))
    assert chosen == "n009" and len(walk.candidates) == 10


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 300),
    data=st.data(),
)
def test_the_walk_is_one_run_from_the_offset_that_stops_exactly_when_enough(n, data):
    nodes = _nodes(n)
    names = [x.name for x in nodes]
    skip = set(data.draw(st.sets(st.sampled_from(names))))
    potential = [x for x in names if x not in skip]
    start = data.draw(st.integers(0, max(0, len(potential) - 1)))
    yields = set(data.draw(st.sets(st.sampled_from(names))))
    violating = set(data.draw(st.sets(st.sampled_from(names))))
    s = FakeSampler(start=start, yields=yields, violating=violating, skip=skip)
    walk = find_candidates(s, nodes)
    if not potential:
        assert s.visited == [] and walk.candidates == ()
        return
    run = [potential[(start + k) % len(potential)] for k in range(len(s.visited))]
    assert s.visited == run
    assert list(walk.candidates) == [x for x in run if x in yields]
    want = num_candidates(len(potential))
    clean = [c for c in walk.candidates if c not in violating]
    enough = bool(clean) and len(walk.candidates) >= want
    if len(s.visited) < len(potential):  # stopped early: just now became enough
        assert enough
        assert s.visited[-1] in yields
        before = walk.candidates[:-1]
        assert not (any(c not in violating for c in before) and len(before) >= want)
    assert [x.name for x in walk.unvisited] == [
        potential[(start + k) % len(potential)] for k in range(len(s.visited), len(potential))
    ]


def test_the_planner_samples_through_the_driver_and_names_the_unvisited_nodes():
    nodes = [gpu_node(f"n{i:03d}", 1) for i in range(250)]
    pods = [make_pod(node=n.name, priority=1) for n in nodes]
    plan = preemption.plan(snapshot(nodes, pods), [pending("hi")])
    not_sampled = [r.node for r in plan.rejections if r.reason is RejectReason.NOT_SAMPLED]
    assert len(not_sampled) == 150
    start = int(not_sampled[0][1:])
    assert not_sampled == [f"n{(start + k) % 250:03d}" for k in range(150)]


def test_kube_default_evaluates_num_candidates_nodes():
    nodes = [gpu_node(f"n{i:03d}", 1) for i in range(250)]
    pods = [make_pod(node=n.name, priority=1) for n in nodes]
    snap = snapshot(nodes, pods)
    for seed in range(3):
        plugin = kube_default.NodePlugin(
            snap, pending("hi"), {n.name: snap.free(n.name) for n in nodes}, set(),
            random.Random(seed), [], kube_default.select_victims_on_node,
        )
        walk = candidates.find_candidates(plugin, nodes)
        assert len(walk.candidates) == 100 and len(walk.unvisited) == 150
