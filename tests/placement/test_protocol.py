"""FGD's benchmark protocol: arrivals, the run's invariants, binning, the scoring budget."""

from __future__ import annotations

import random
from collections import Counter
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.placement import baselines, fgd, ours, protocol
from ckpt_preempt.policies.placement.devices import (
    MILLI_PER_GPU,
    GpuNode,
    PodShape,
    fits,
    new_node,
)
from ckpt_preempt.policies.placement.paper import PAPER_MEDIAN_130

DATA = resources.files("ckpt_preempt.policies").joinpath("data")


@pytest.fixture(scope="module")
def small_openb() -> tuple[tuple[GpuNode, ...], tuple[PodShape, ...]]:
    """One tenth of the openb cluster and of the default trace (same mix)."""
    nodes = protocol.load_nodes(DATA.joinpath("openb_node_list_gpu_node.csv").read_text())
    pods = protocol.load_pods(DATA.joinpath("openb_pod_list_default.csv").read_text())
    return protocol.subsample(nodes, pods, 0.1, seed=0)


def capacity(nodes) -> int:
    return sum(n.gpu_count for n in nodes) * MILLI_PER_GPU


def test_the_bundled_trace_matches_the_paper_cluster():
    nodes = protocol.load_nodes(DATA.joinpath("openb_node_list_gpu_node.csv").read_text())
    assert (len(nodes), capacity(nodes)) == (1213, 6212 * MILLI_PER_GPU)
    assert [n.name for n in nodes] == sorted(n.name for n in nodes)


def test_arrivals_shuffle_every_trace_pod_then_top_up_to_the_ratio(small_openb):
    nodes, pods = small_openb
    cap = capacity(nodes)
    arrived = protocol.arrivals(pods, cap, seed=42)
    head = arrived[: len(pods)]
    assert Counter(head) == Counter(pods) and head != list(pods)  # a permutation, shuffled
    total = sum(p.total_gpu_milli for p in arrived)
    assert total <= protocol.TUNE_RATIO * cap + 7 * MILLI_PER_GPU  # the per-GPU stop quirk
    assert total > protocol.TUNE_RATIO * cap - MILLI_PER_GPU
    assert protocol.arrivals(pods, cap, seed=42) == arrived  # deterministic per seed
    assert protocol.arrivals(pods, cap, seed=43) != arrived


def test_a_run_keeps_the_protocol_invariants(small_openb):
    nodes, pods = small_openb
    arrived = protocol.arrivals(pods, capacity(nodes), seed=42)
    result = protocol.run(nodes, arrived, baselines.BestFit(), seed=42)
    assert result.placed + result.failed == len(arrived)
    arrived_milli = [a for a, _ in result.curve]
    allocated = [u for _, u in result.curve]
    assert arrived_milli == sorted(arrived_milli) and allocated == sorted(allocated)
    assert allocated[-1] == sum(n.gpu_used_total for n in result.nodes) <= capacity(nodes)
    # No departures: a pod that failed fits nowhere even in the (fuller) final state.
    for i in result.failed_indices:
        assert not any(fits(n, arrived[i]) for n in result.nodes)
    binned = protocol.binned_allocation(result)
    assert set(binned) == set(range(protocol.MAX_BIN_PCT + 1))
    assert binned[10] == pytest.approx(10, abs=0.6)  # early on, everything fits


def test_ours_beats_fgd_on_a_small_seeded_run(small_openb):
    nodes, pods = small_openb
    arrived = protocol.arrivals(pods, capacity(nodes), seed=42)
    got = {}
    for policy in (fgd.FGD(fgd.typical_pods(pods)), ours.Ours(pods)):
        got[policy.name] = protocol.run(nodes, arrived, policy, seed=42).final_allocation_pct
    assert got["Ours"] > got["FGD"]


def test_a_score_budget_falls_back_and_counts(small_openb):
    nodes, pods = small_openb
    arrived = protocol.arrivals(pods, capacity(nodes), seed=42)[:300]
    budget = protocol.ScoreBudget(max_evaluations=2, fallback=baselines.BestFit())
    result = protocol.run(nodes, arrived, ours.Ours(pods), seed=42, budget=budget)
    assert result.fallbacks > 0 and result.failed == 0
    calls = []
    clock_budget = protocol.ScoreBudget(  # a caller's clock, here a call counter
        over_budget=lambda n: calls.append(n) or len(calls) > 50, fallback=baselines.BestFit())
    result = protocol.run(nodes, arrived, ours.Ours(pods), seed=42, budget=clock_budget)
    assert result.fallbacks > 0 and calls


def test_a_budget_without_fallback_is_refused():
    node = new_node("a", "T4", cpu_milli=8000, memory_mib=8192, gpus=1)
    pod = PodShape(cpu_milli=100, gpu_count=1, gpu_milli=100)
    with pytest.raises(ValueError, match="fallback"):
        protocol.run([node], [pod], baselines.BestFit(), seed=1,
                     budget=protocol.ScoreBudget(max_evaluations=0))


node_st = st.builds(
    lambda i, gpus, cpu: new_node(f"n{i:03d}", "T4", cpu_milli=cpu, memory_mib=1 << 16,
                                  gpus=gpus),
    st.integers(0, 999), st.sampled_from([1, 2, 4, 8]), st.sampled_from([4000, 16000, 64000]))
pod_st = st.one_of(
    st.builds(lambda c: PodShape(cpu_milli=c), st.integers(500, 20000)),
    st.builds(lambda c, m: PodShape(cpu_milli=c, gpu_count=1, gpu_milli=m),
              st.integers(500, 12000), st.integers(1, 999)),
    st.builds(lambda c, k: PodShape(cpu_milli=c, gpu_count=k, gpu_milli=MILLI_PER_GPU),
              st.integers(500, 12000), st.sampled_from([1, 2, 4, 8])),
)
POLICIES = [lambda pods: fgd.FGD(fgd.typical_pods(pods)), lambda pods: ours.Ours(pods)] + [
    (lambda pods, cls=cls: cls()) for cls in baselines.BASELINES]


@settings(max_examples=40, deadline=None)
@given(nodes=st.lists(node_st, min_size=1, max_size=6, unique_by=lambda n: n.name),
       pods=st.lists(pod_st, min_size=1, max_size=40),
       which=st.integers(0, len(POLICIES) - 1))
def test_any_policy_never_overallocates_and_fails_only_pods_that_fit_nowhere(nodes, pods, which):
    nodes = sorted(nodes, key=lambda n: n.name)
    policy = POLICIES[which](tuple(pods))
    result = protocol.run(nodes, pods, policy, seed=7)
    for node in result.nodes:
        assert all(0 <= g <= MILLI_PER_GPU for g in node.gpu_free)
        assert node.cpu_free >= 0 and node.memory_free >= 0
    assert result.curve[-1][1] == sum(n.gpu_used_total for n in result.nodes)
    for i in result.failed_indices:  # replay up to the failed pod: it fit nowhere then
        before = protocol.run(nodes, pods[:i], POLICIES[which](tuple(pods)), seed=7).nodes
        assert not any(fits(n, pods[i]) for n in before)


def test_simulator_order_is_a_seeded_permutation_that_decides_ties():
    nodes = [new_node(f"n{i:02d}", "V100", 96000, 512 * 1024, 8) for i in range(20)]
    order = protocol.simulator_order(nodes, 42)
    assert sorted(n.name for n in order) == [n.name for n in nodes]
    assert order == protocol.simulator_order(list(reversed(nodes)), 42)  # input order is ignored
    assert [n.name for n in order] != [n.name for n in protocol.simulator_order(nodes, 43)]
    # a CPU-only pod scores 0 everywhere under GpuPacking: it lands on the first in that order
    cpu_pod = PodShape(cpu_milli=1000)
    result = protocol.run(order, [cpu_pod], baselines.GpuPacking(), seed=42)
    assert result.nodes[0].cpu_free == 96000 - 1000
    assert all(n.cpu_free == 96000 for n in result.nodes[1:])


def _gpu_pod(milli: int, count: int = 1) -> PodShape:
    return PodShape(cpu_milli=1000, memory_mib=1024, gpu_count=count, gpu_milli=milli)


class _Scripted:
    """A stand-in for random.Random whose draws are written down in the test."""

    def __init__(self, draws: list[int]) -> None:
        self.draws = draws

    def randrange(self, n: int) -> int:
        got = self.draws.pop(0)
        assert 0 <= got < n
        return got


def test_tune_down_removes_drawn_pods_until_at_or_below_the_target():
    a, b, c, d, e = _gpu_pod(1000), _gpu_pod(1000, 2), _gpu_pod(500), _gpu_pod(0), _gpu_pod(300)
    # 1000 + 2000 + 500 + 0 + 300 = 3800 > 2500. Draw index 0 (a): 2800, still above. Then the
    # list is [b, c, d, e]; draw index 2 (d, no GPU): 2800. Then [b, c, e]; draw 1 (c): 2300
    # <= 2500, stop. What is left keeps its order: [b, e].
    got = protocol._tune_down([a, b, c, d, e], 3800, 2500.0, _Scripted([0, 2, 1]))
    assert got == [b, e]
    # Equal to the target is not above it: nothing is removed.
    assert protocol._tune_down([a, c], 1500, 1500.0, _Scripted([])) == [a, c]


def test_arrivals_thin_a_trace_that_asks_for_more_than_the_ratio():
    # Five 1-GPU pods (5000 milli) on a 2-GPU cluster: 130 % is 2600, so removals stop once
    # 2000 is left, whichever pods are drawn: two pods remain, each one of the trace's.
    pods = tuple(PodShape(cpu_milli=1000 * (i + 1), gpu_count=1, gpu_milli=MILLI_PER_GPU)
                 for i in range(5))
    for seed in range(42, 52):
        arrived = protocol.arrivals(pods, 2 * MILLI_PER_GPU, seed=seed)
        assert len(arrived) == 2 and set(arrived) <= set(pods)
        assert len(set(arrived)) == 2  # removed from the shuffle, never drawn as copies
        assert protocol.arrivals(pods, 2 * MILLI_PER_GPU, seed=seed) == arrived


@settings(max_examples=60, deadline=None)
@given(milli=st.lists(st.sampled_from([0, 100, 500, 1000]), min_size=1, max_size=30),
       counts=st.lists(st.sampled_from([1, 2, 8]), min_size=30, max_size=30),
       gpus=st.integers(1, 8), seed=st.integers(0, 10**6))
def test_tuned_arrivals_keep_the_shuffle_and_stop_at_the_target(milli, counts, gpus, seed):
    pods = tuple(PodShape(cpu_milli=i, gpu_count=c if m else 0, gpu_milli=m)
                 for i, (m, c) in enumerate(zip(milli, counts, strict=False)))
    cap = gpus * MILLI_PER_GPU
    total = sum(p.total_gpu_milli for p in pods)
    arrived = protocol.arrivals(pods, cap, seed=seed)
    target = protocol.TUNE_RATIO * cap
    if total > target:
        shuffled = list(pods)
        random.Random(seed).shuffle(shuffled)
        it = iter(shuffled)
        assert all(p in it for p in arrived)  # a subsequence of the shuffled trace
        kept = sum(p.total_gpu_milli for p in arrived)
        assert kept <= target
        # it stopped at the first removal that reached the target: just before the last
        # removal the demand was above it, and that pod is at most the largest one removed
        removed = Counter(pods) - Counter(arrived)
        assert kept + max(p.total_gpu_milli for p in removed.elements()) > target
    else:
        assert Counter(arrived[: len(pods)]) == Counter(pods)


def _bundled_pod_lists() -> list[str]:
    return sorted(f.name for f in DATA.iterdir()
                  if f.name.startswith("openb_pod_list_") and f.name.endswith(".csv"))


def test_every_trace_the_paper_reports_is_bundled():
    assert set(PAPER_MEDIAN_130) <= set(_bundled_pod_lists())


@pytest.mark.parametrize("name", _bundled_pod_lists())
def test_every_bundled_pod_list_loads_one_shape_per_row(name):
    text = DATA.joinpath(name).read_text()
    pods = protocol.load_pods(text)
    assert len(pods) == len(text.splitlines()) - 1
    assert any(p.is_shared for p in pods)  # gpushare100 has no whole-GPU pods at all
    assert all(0 <= p.gpu_milli <= MILLI_PER_GPU for p in pods)
    models = {n.model for n in protocol.load_nodes(
        DATA.joinpath("openb_node_list_gpu_node.csv").read_text())}
    # a pinned pod names only models the cluster has (the gpuspecNN traces pin some)
    assert all(set(p.gpu_spec.split("|")) <= models for p in pods if p.gpu_spec)


POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"


@pytest.mark.parametrize(("text", "message"), [
    pytest.param(f"{POD_HEADER}\np0,1000,2048,1,500,\np1,1000,2048,1,half,\n",
                 "pod list line 3: gpu_milli", id="not a number"),
    pytest.param(f"{POD_HEADER}\np0,-5,2048,0,0,\n", "line 2: cpu_milli", id="negative"),
    pytest.param(f"{POD_HEADER}\np0,1000,2048\n", "line 2: num_gpu", id="short row"),
    pytest.param("name,cpu_milli\np0,1000\n", "column memory_mib, num_gpu, gpu_milli missing",
                 id="missing columns"),
])
def test_a_bad_pod_row_is_refused_with_its_line(text, message):
    with pytest.raises(ValueError, match=message):
        protocol.load_pods(text)


def test_a_bad_node_row_is_refused_with_its_line():
    with pytest.raises(ValueError, match="node list line 2: gpu"):
        protocol.load_nodes("sn,cpu_milli,memory_mib,gpu,model\nn0,96000,1024,eight,V100M32\n")
