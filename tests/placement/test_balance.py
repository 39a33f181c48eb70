"""Pack or spread (bench/placement_research/balance.py): the chooser, the spreading scorer,
departures."""

from __future__ import annotations

import pytest

from bench.placement_research import balance
from ckpt_preempt.policies.placement.devices import PodShape, new_node, place

WHOLE = PodShape(cpu_milli=4000, gpu_count=1, gpu_milli=1000)
EIGHT = PodShape(cpu_milli=8000, gpu_count=8, gpu_milli=1000)


def nodes(k: int = 2):
    return [new_node(f"n{i}", "V100", 96000, 512 * 1024, 8) for i in range(k)]


@pytest.mark.parametrize(("gpus", "util", "rule", "want"), [
    (100, 0.05, balance.StrategyRule(busy_utilisation=0.15), balance.SPREAD),
    (100, 0.15, balance.StrategyRule(busy_utilisation=0.15), balance.PACK),
    (100, 0.05, balance.StrategyRule(busy_utilisation=0.15, large_cluster_gpus=64),
     balance.PACK),
    (32, 0.05, balance.StrategyRule(busy_utilisation=0.15, large_cluster_gpus=64),
     balance.SPREAD),
])
def test_choose_packs_when_busy_or_large_and_spreads_otherwise(gpus, util, rule, want):
    assert balance.choose(gpus, util, rule) == want


def test_spread_prefers_the_emptier_node_and_gpu_where_bestfit_packs():
    used = place(nodes(1)[0], WHOLE, (0,))
    fresh = new_node("n9", "V100", 96000, 512 * 1024, 8)
    spread, pack = balance.POLICIES[balance.SPREAD](), balance.POLICIES[balance.PACK]()
    assert spread.evaluate(fresh, WHOLE)[0] > spread.evaluate(used, WHOLE)[0]
    assert pack.evaluate(used, WHOLE)[0] > pack.evaluate(fresh, WHOLE)[0]
    half = PodShape(cpu_milli=1000, gpu_count=1, gpu_milli=500)
    shared = place(fresh, half, (3,))  # GPU 3 has 500 left; the others 1000
    assert spread.evaluate(shared, half)[1] != (3,)
    assert pack.evaluate(shared, half)[1] == (3,)


def test_remove_gives_back_what_place_took():
    node = nodes(1)[0]
    pod = PodShape(cpu_milli=3000, memory_mib=100, gpu_count=2, gpu_milli=1000)
    back = balance.remove(place(node, pod, (1, 2)), pod, (1, 2))
    assert (back.gpu_free, back.cpu_free, back.memory_free) == (
        node.gpu_free, node.cpu_free, node.memory_free)


def test_departures_free_room_and_spreading_strands_the_large_pod():
    item, big = balance.TimedPod(WHOLE, 10.0), balance.TimedPod(EIGHT, 10.0)
    # two one-GPU pods, then an eight-GPU pod: packing keeps a node whole, spreading does not
    stream = [(0.0, item), (1.0, item), (2.0, big)]
    pack = balance.run(nodes(), stream, lambda _u: balance.PACK, "pack")
    spread = balance.run(nodes(), stream, lambda _u: balance.SPREAD, "spread")
    assert pack.failed_pct < spread.failed_pct
    # ... unless the small pods have left by the time it comes
    later = [(0.0, item), (1.0, item), (20.0, big)]
    assert balance.run(nodes(), later, lambda _u: balance.SPREAD, "spread").failed_pct == 0


def test_winner_needs_a_material_failure_gap_to_pick_packing():
    def result(failed, hot):
        return balance.BalanceResult(strategy="x", arrived=1, failed_pct=failed,
                                     hot_load_pct=hot, mean_utilisation_pct=0)
    assert balance.winner(result(0.0, 100), result(2.0, 40)) == balance.PACK
    assert balance.winner(result(0.0, 100), result(0.2, 40)) == balance.SPREAD
    assert balance.winner(result(0.0, 50), result(0.0, 50)) == "tie"


def test_arrivals_offer_the_asked_utilisation_on_average():
    pods = [balance.TimedPod(WHOLE, 100.0)]
    stream = balance.arrivals(pods, capacity_milli=16_000, utilisation=0.5, seed=1)
    span = stream[-1][0] - stream[0][0]
    offered = len(stream) * 1000 * 100.0 / span / 16_000
    assert 0.4 < offered < 0.6
