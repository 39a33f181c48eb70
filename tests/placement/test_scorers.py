"""FGD and its baselines score hand-made nodes as the simulator's formulas say."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from ckpt_preempt.policies.placement import baselines, fgd, ours, protocol
from ckpt_preempt.policies.placement.devices import PodShape, fits, new_node, place

SHARE_500 = PodShape(cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=500)


def one_gpu_node(name: str, used_milli: int = 0):
    node = new_node(name, "T4", cpu_milli=8000, memory_mib=32768, gpus=1)
    if used_milli:
        node = place(node, PodShape(cpu_milli=0, gpu_count=1, gpu_milli=used_milli), (0,))
    return node


def test_fgd_prefers_the_node_whose_fragmentation_grows_least():
    # Target: only 500-milli pods. A fresh GPU keeps room for one after the pod (F stays 0);
    # a GPU with 600 free keeps 100, which no target pod can use (F goes 0 -> 100).
    target = fgd.typical_pods([SHARE_500])
    fresh, used = one_gpu_node("n-a"), one_gpu_node("n-b", used_milli=400)
    policy = fgd.FGD(target)
    assert policy.evaluate(fresh, SHARE_500) == (int(100 / (1 + math.exp(0))), (0,))  # 50
    assert policy.evaluate(used, SHARE_500) == (int(100 / (1 + math.exp(0.1))), (0,))  # 47
    result = protocol.run([used, fresh], [SHARE_500], policy, seed=1)
    assert result.nodes[1].gpu_free == (500,)  # FGD chose the fresh GPU ...
    result = protocol.run([used, fresh], [SHARE_500], baselines.BestFit(), seed=1)
    assert result.nodes[0].gpu_free == (100,)  # ... where BestFit packs the used one


def test_equal_scores_go_to_the_smallest_name():
    nodes = [one_gpu_node("n-a"), one_gpu_node("n-b")]
    result = protocol.run(nodes, [SHARE_500], baselines.BestFit(), seed=3)
    assert [n.gpu_free for n in result.nodes] == [(500,), (1000,)]


def test_fgd_fragmentation_counts_small_gpus_and_unhostable_targets():
    target = (
        fgd.TargetPod(cpu_milli=1000, gpu_milli=500, gpu_count=1, gpu_spec="", weight=0.5),
        fgd.TargetPod(cpu_milli=1000, gpu_milli=1000, gpu_count=2, gpu_spec="", weight=0.25),
        fgd.TargetPod(cpu_milli=4000, gpu_milli=0, gpu_count=0, gpu_spec="", weight=0.25),
    )
    # GPUs free: 1000, 300. 500-pod fits: fragment 300; 2x1000 does not fit: all 1300;
    # CPU-only pods: every free milli-GPU counts (frag.go's XL/XR case).
    got = fgd.node_fragmentation("T4", 8000, (1000, 300), target)
    assert got == pytest.approx(0.5 * 300 + 0.25 * 1300 + 0.25 * 1300)
    # Too little CPU for any target: everything free is fragment.
    assert fgd.node_fragmentation("T4", 500, (1000, 300), target) == pytest.approx(1300)


def test_typical_pods_cover_the_threshold_in_count_order():
    a = PodShape(cpu_milli=1000, gpu_count=1, gpu_milli=1000)
    b = PodShape(cpu_milli=2000, gpu_count=1, gpu_milli=500)
    c = PodShape(cpu_milli=3000)
    pods = [a] * 90 + [b] * 6 + [c] * 4
    got = fgd.typical_pods(pods, threshold_pct=95)
    assert [(t.cpu_milli, round(t.weight, 4)) for t in got] == [(1000, 0.9375), (2000, 0.0625)]


@pytest.mark.parametrize(("free", "pod", "score"), [
    # The simulator's own cases: pkg/simulator/plugin/gpu_packing_score_test.go
    ((200, 1000, 1000, 500), (2, 1000), 48),
    ((1000, 1000, 1000, 1000), (2, 1000), 29),
    ((1000,) * 8, (2, 1000), 25),
    ((200, 1000, 1000, 500), (2, 200), 93),
])
def test_gpu_packing_matches_the_simulator_tests(free, pod, score):
    node = replace(new_node("n", "X", cpu_milli=96000, memory_mib=1 << 20, gpus=len(free)),
                   gpu_free=free)
    shape = PodShape(cpu_milli=100, gpu_count=pod[0], gpu_milli=pod[1])
    assert baselines.GpuPacking().score(node, shape) == score


def test_best_fit_and_dot_product_integer_scores():
    node = new_node("n", "G2", cpu_milli=96000, memory_mib=1 << 20, gpus=8)
    pod = PodShape(cpu_milli=32000, gpu_count=2, gpu_milli=1000)
    # left: 64000 mCPU, 6000 mGPU -> 0.5*64/128 + 0.5*6/8 = 0.625 -> int(37.5)
    assert baselines.BestFit().score(node, pod) == 37
    # dot: (96/128)(32/128) + (8/8)(2/8) = 0.4375 -> 1 - 0.21875 -> int(78.125)
    assert baselines.DotProd().score(node, pod) == 78


def test_gpu_clustering_prefers_nodes_running_the_same_kind():
    idle = new_node("a", "G2", cpu_milli=96000, memory_mib=1 << 20, gpus=8)
    shared = place(idle, SHARE_500, (0,))
    whole = place(idle, PodShape(cpu_milli=1000, gpu_count=1, gpu_milli=1000), (1,))
    scorer = baselines.GpuClustering()
    assert scorer.score(shared, SHARE_500) > scorer.score(idle, SHARE_500)
    assert scorer.score(idle, SHARE_500) > scorer.score(whole, SHARE_500)


def test_ours_cpu_balance_steers_cpu_only_pods_to_cpu_rich_nodes():
    # A CPU-only pod: on the GPU-dense node it would strand GPU capacity for lack of CPU.
    gpu_pod = PodShape(cpu_milli=12000, gpu_count=1, gpu_milli=1000)
    trace = (gpu_pod,) * 9 + (PodShape(cpu_milli=30000),)
    dense = new_node("a-dense", "G2", cpu_milli=96000, memory_mib=1 << 20, gpus=8)
    roomy = new_node("b-roomy", "T4", cpu_milli=104000, memory_mib=1 << 20, gpus=2)
    cpu_pod = PodShape(cpu_milli=30000)
    with_balance = protocol.run([dense, roomy], [cpu_pod], ours.Ours(trace), seed=1)
    assert with_balance.nodes[1].cpu_free == 104000 - 30000
    blind = ours.Ours(trace, ours.OursConfig(cpu_balance_weight=0, tie_break="name"))
    assert protocol.run([dense, roomy], [cpu_pod], blind, seed=1).nodes[0].cpu_free == 66000


def test_ours_config_rejects_unknown_values():
    with pytest.raises(ValueError, match="tie_break"):
        ours.OursConfig(tie_break="coin")
    with pytest.raises(ValueError, match="target"):
        ours.OursConfig(target="oracle")


def test_fits_respects_gpu_spec():
    node = new_node("n", "V100M16", cpu_milli=8000, memory_mib=8192, gpus=1)
    assert fits(node, PodShape(cpu_milli=1, gpu_count=1, gpu_milli=100, gpu_spec="V100M16|A10"))
    assert not fits(node, PodShape(cpu_milli=1, gpu_count=1, gpu_milli=100, gpu_spec="T4"))


def test_ours_with_an_empty_online_target_scores_and_learns():
    ours_online = ours.Ours((), ours.OursConfig(target="online"))
    node = one_gpu_node("n-a")
    assert ours_online.evaluate(node, SHARE_500)[1] == (0,)  # nothing learned yet: still scores
    version = ours_online.version
    ours_online.observe(SHARE_500)
    assert ours_online.version > version and ours_online.target[0].gpu_milli == 500


def test_ours_memory_balance_keeps_memory_next_to_free_gpus():
    # A memory-heavy CPU-only pod would leave the 8-GPU node too little memory for its GPUs.
    gpu_pod = PodShape(cpu_milli=4000, memory_mib=16384, gpu_count=1, gpu_milli=1000)
    dense = new_node("a-dense", "G2", cpu_milli=96000, memory_mib=160 * 1024, gpus=8)
    roomy = new_node("b-roomy", "G2", cpu_milli=96000, memory_mib=1024 * 1024, gpus=8)
    big = PodShape(cpu_milli=1000, memory_mib=100 * 1024)
    config = ours.OursConfig(tie_break="name", mem_balance_weight=1.0)
    aware = protocol.run([dense, roomy], [big], ours.Ours((gpu_pod,), config), seed=1)
    assert aware.nodes[1].memory_free == roomy.memory_mib - big.memory_mib
    blind = ours.Ours((gpu_pod,), replace(config, mem_balance_weight=0.0))
    assert protocol.run([dense, roomy], [big], blind, seed=1).nodes[0].memory_free == 60 * 1024
