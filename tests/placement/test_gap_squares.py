"""The Sum-of-Squares variant of our scorer (bench/placement_research/gap_squares.py): its own run
loop must place exactly as the protocol's when the term is off, the term must be the growth of
sum N(h)^2, and every mode must keep the protocol's invariants."""

from __future__ import annotations

from collections import Counter
from importlib import resources

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.placement_research import gap_squares
from ckpt_preempt.policies.placement import ours, protocol
from ckpt_preempt.policies.placement.devices import MILLI_PER_GPU

DATA = resources.files("ckpt_preempt.policies").joinpath("data")
SEED = 42


@pytest.fixture(scope="module")
def small_run():
    nodes = protocol.load_nodes(DATA.joinpath("openb_node_list_gpu_node.csv").read_text())
    pods = protocol.load_pods(DATA.joinpath("openb_pod_list_default.csv").read_text())
    nodes, pods = protocol.subsample(nodes, pods, 0.1, seed=0)
    capacity = sum(n.gpu_count for n in nodes) * MILLI_PER_GPU
    return protocol.simulator_order(nodes, SEED), protocol.arrivals(pods, capacity, SEED), pods


def test_with_the_term_off_it_places_exactly_as_the_protocol(small_run):
    nodes, arrivals, trace = small_run
    want = protocol.run(nodes, arrivals, ours.Ours(trace), SEED)
    got = gap_squares.run(nodes, arrivals, ours.Ours(trace), SEED, mode="off")
    assert got.curve == want.curve
    assert got.failed_indices == want.failed_indices
    assert got.nodes == want.nodes


@pytest.mark.parametrize("mode", ["tie", "first", "blend"])
def test_every_mode_keeps_the_protocol_invariants(small_run, mode):
    nodes, arrivals, trace = small_run
    result = gap_squares.run(nodes, arrivals, ours.Ours(trace), SEED, mode=mode)
    assert result.placed + result.failed == len(arrivals)
    for node in result.nodes:  # place() refuses overallocation; nothing negative slipped by
        assert all(0 <= g <= MILLI_PER_GPU for g in node.gpu_free)
        assert node.cpu_free >= 0 and node.memory_free >= 0
    placed = result.curve[-1][1]
    free = sum(sum(n.gpu_free) for n in result.nodes)
    assert placed + free == result.total_gpu_milli


def test_the_first_mode_changes_where_shared_pods_go(small_run):
    """The term is live: ranking by it first moves pods (a no-op term would not)."""
    nodes, arrivals, trace = small_run
    off = gap_squares.run(nodes, arrivals, ours.Ours(trace), SEED, mode="off")
    first = gap_squares.run(nodes, arrivals, ours.Ours(trace), SEED, mode="first")
    assert first.nodes != off.nodes


def test_an_unknown_mode_is_refused(small_run):
    nodes, arrivals, trace = small_run
    with pytest.raises(ValueError, match="mode must be one of"):
        gap_squares.run(nodes, arrivals, ours.Ours(trace), SEED, mode="squares")


def _sum_of_squares(free: list[int]) -> int:
    counts = Counter(g for g in free if 0 < g < MILLI_PER_GPU)
    return sum(n * n for n in counts.values())


@given(st.lists(st.integers(0, 100).map(lambda k: k * 10), max_size=30),
       st.integers(0, 29), st.integers(1, 100).map(lambda k: k * 10))
def test_square_growth_is_the_change_of_the_sum_of_squares(free, which, milli):
    free = [*free, MILLI_PER_GPU]
    i = which % len(free)
    if free[i] < milli:
        return
    gaps = Counter(g for g in free if 0 < g < MILLI_PER_GPU)
    after = [*free[:i], free[i] - milli, *free[i + 1:]]
    assert gap_squares.square_growth(gaps, free[i], milli) == (
        _sum_of_squares(after) - _sum_of_squares(free))
