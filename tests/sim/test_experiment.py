"""The multi-seed experiment: strongest baseline, paired ratios over seeds, pooled losses."""

import pytest

from ckpt_preempt.policies.sim import engine, experiment, stats, workload
from ckpt_preempt.policies.sim.trace import TraceNode, TracePod

HOUR = 3600.0
BASELINES = ("kube-default", "kube-workload", "cost-aware")


def result(policy, lost, *, losses=(), max_pre=1, restart=0.0, delay=0.0, broken=0):
    return engine.PolicyResult(
        policy=policy, lost_gpu_hours=lost, preemptions=len(losses), victims=2 * len(losses),
        gangs_broken=broken, preemptor_wait_p50_s=0.0, preemptor_wait_p95_s=0.0,
        high_jobs_waiting=0, gpu_utilisation=0.9, plans=len(losses), plans_failed=0,
        plans_invalid=0, plan_latency_p50_ms=0.0, plan_latency_p99_ms=0.0,
        max_preemptions_per_workload=max_pre, workloads_preempted=len(losses),
        preemptions_per_workload={}, victim_jobs_unreported=0,
        lost_work_gpu_hours=lost - restart, restart_gpu_hours=restart, delay_gpu_hours=delay,
        eviction_losses=tuple(losses), lost_series=(),
    )


# per seed: kube-default, kube-workload, cost-aware, checkpoint-aware
LOST = {1: (100.0, 60.0, 80.0, 30.0), 2: (90.0, 50.0, 40.0, 30.0), 3: (120.0, 70.0, 90.0, 21.0),
        4: (110.0, 66.0, 75.0, 40.0), 5: (95.0, 55.0, 85.0, 11.0)}
NAMES = (*BASELINES, "checkpoint-aware")


def runs():
    out = []
    for seed, row in LOST.items():
        for name, lost in zip(NAMES, row, strict=True):
            out.append(experiment.Run(seed=seed, result=result(
                name, lost, losses=(lost / 4, lost / 2, lost / 4), max_pre=seed,
                restart=lost / 10)))
    return out


@pytest.fixture(scope="module")
def cell_result():
    return experiment.summarise(experiment.Cell(), runs(), baselines=BASELINES, resamples=2000)


def test_strongest_baseline_has_the_lowest_median_even_when_it_loses_one_seed(cell_result):
    # cost-aware beats kube-workload on seed 2, but kube-workload's median (60) is lower (80)
    assert cell_result.strongest_baseline == "kube-workload"
    assert [p.policy for p in cell_result.policies] == list(NAMES)
    assert cell_result.seeds == (1, 2, 3, 4, 5)


def test_ratio_is_the_median_of_per_seed_ratios_with_an_interval_over_seeds(cell_result):
    ours = cell_result.summary_of("checkpoint-aware")
    per_seed = [row[3] / row[1] for row in LOST.values()]
    assert ours.vs_strongest.median == pytest.approx(stats.median(per_seed))
    assert ours.vs_strongest.n == 5
    assert min(per_seed) <= ours.vs_strongest.low < ours.vs_strongest.median
    assert ours.vs_strongest.median < ours.vs_strongest.high <= max(per_seed)
    kube = [row[3] / row[0] for row in LOST.values()]
    assert ours.vs_kube_default.median == pytest.approx(stats.median(kube))
    base = cell_result.summary_of("kube-workload")
    assert base.vs_strongest.median == 1.0 and base.vs_strongest.low == base.vs_strongest.high


def test_losses_are_pooled_over_seeds_and_the_worst_workload_is_the_worst_seed(cell_result):
    kube = cell_result.summary_of("kube-default")
    pooled = [x for row in LOST.values() for x in (row[0] / 4, row[0] / 2, row[0] / 4)]
    assert kube.eviction_loss_max == 60.0
    assert kube.eviction_loss_p50 == pytest.approx(stats.percentile(pooled, 50))
    assert kube.eviction_loss_p99 == pytest.approx(stats.percentile(pooled, 99))
    assert kube.max_preemptions_per_workload == 5
    assert kube.lost.median == 100.0 and kube.lost.low <= 100.0 <= kube.lost.high
    assert kube.restart == pytest.approx(10.0) and kube.lost_work == pytest.approx(90.0)


def test_a_seed_where_the_baseline_lost_nothing_has_no_ratio():
    rs = [experiment.Run(seed=1, result=result("kube-default", 0.0)),
          experiment.Run(seed=1, result=result("checkpoint-aware", 0.0)),
          experiment.Run(seed=2, result=result("kube-default", 10.0)),
          experiment.Run(seed=2, result=result("checkpoint-aware", 4.0))]
    out = experiment.summarise(experiment.Cell(), rs, baselines=BASELINES, resamples=100)
    ours = out.summary_of("checkpoint-aware")
    assert out.strongest_baseline == "kube-default"
    assert ours.vs_strongest.n == 1 and ours.vs_strongest.median == 0.4


def test_no_baseline_ran_means_no_strongest_and_no_ratio():
    rs = [experiment.Run(seed=1, result=result("checkpoint-aware", 3.0))]
    out = experiment.summarise(experiment.Cell(), rs, baselines=BASELINES, resamples=100)
    assert out.strongest_baseline is None
    assert out.summary_of("checkpoint-aware").vs_strongest is None
    assert out.as_dict()["policies"][0]["ratio_vs_strongest"] is None


def test_ablation_turns_a_cost_off_and_names_itself():
    cell = experiment.Cell(protocol="replay")
    off = experiment.ablate(cell, "grace off", {"grace_seconds": 0.0})
    assert off.config.grace_seconds == 0.0 and off.ablation == "grace off"
    assert off.label == "openb/replay (grace off)"
    with pytest.raises(ValueError, match="SimConfig has no warp_drive"):
        experiment.ablate(cell, "bogus", {"warp_drive": 0.0})


def test_steady_cells_name_their_utilisation():
    assert experiment.Cell(protocol="steady", utilisation=1.2).label == "openb/steady@1.2"


def _trace():
    pods = [TracePod(name=f"be{i}", cpu_milli=1000, memory_mib=1024, gpus=1, gpu_milli=1000,
                     qos="BE", creation=i, deletion=40 * HOUR) for i in range(40)]
    pods += [TracePod(name=f"ls{i}", cpu_milli=1000, memory_mib=1024, gpus=2, gpu_milli=2000,
                      qos="LS", creation=10 * HOUR + i * 60, deletion=20 * HOUR)
             for i in range(6)]
    nodes = [TraceNode(name=f"n{i}", cpu_milli=96000, memory_mib=10**6, gpus=8, model="G")
             for i in range(4)]
    return pods, nodes


def test_run_cell_replays_every_seed_under_every_policy_on_one_workload_per_seed():
    pods, nodes = _trace()
    params = workload.WorkloadParams(load=0.2, window_hours=12, gang_share=0.5, gang_sizes=(4,))
    cell = experiment.Cell(scale=1.0, params=params)
    seen = []
    out = experiment.run_cell(
        cell, [3, 4], ["kube-default", "checkpoint-aware"], pods, nodes, resamples=200,
        progress=lambda seed, policy, f: seen.append((seed, policy)) if f >= 1 else None)
    assert seen == [(3, "kube-default"), (3, "checkpoint-aware"), (4, "kube-default"),
                    (4, "checkpoint-aware")]
    assert [(r.seed, r.policy) for r in out.runs] == seen
    for seed in (3, 4):
        facts = [r.workload for r in out.runs if r.seed == seed]
        assert facts[0] == facts[1] and facts[0]["jobs"] > 0
    ours = out.summary_of("checkpoint-aware")
    assert ours.gangs_broken == 0 and ours.plans_invalid == 0
    assert out.summary_of("kube-default").preemptions > 0


def test_the_all_costs_off_ablation_is_the_engine_without_costs():
    cell = experiment.Cell(workload="openb", protocol="replay")
    off = experiment.ablate(cell, "all costs off")
    assert off.config == cell.config.without_costs()
    restore_off = experiment.ablate(cell, "restore cost off").config
    assert restore_off.restore_seconds == restore_off.restore_job_gpu_seconds == 0
