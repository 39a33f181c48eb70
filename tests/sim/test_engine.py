"""The simulator on small synthetic traces: invariants every policy must keep."""

import pytest

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import engine, planners, report, workload
from ckpt_preempt.policies.sim.trace import TraceNode, TracePod

HOUR = 3600.0


def nodes(n=4, gpus=8):
    return [TraceNode(name=f"n{i}", cpu_milli=96000, memory_mib=10**6, gpus=gpus, model="G")
            for i in range(n)]


def pod(name, qos, gpus, start, end):
    return TracePod(name=name, cpu_milli=1000, memory_mib=1024, gpus=gpus, gpu_milli=gpus * 1000,
                    qos=qos, creation=start, deletion=end)


def background_then_burst():
    """Long low-priority jobs fill the cluster, then high-priority pods arrive."""
    pods = [pod(f"be{i}", "BE", 1, i, 40 * HOUR) for i in range(40)]
    pods += [pod(f"ls{i}", "LS", 2, 10 * HOUR + i * 60, 20 * HOUR) for i in range(6)]
    return pods


PARAMS = workload.WorkloadParams(seed=3, scale=1.0, load=0.2, window_hours=12, gang_share=0.5,
                                 gang_sizes=(4,))


@pytest.fixture(scope="module")
def comparison():
    return report.compare(background_then_burst(), nodes(), PARAMS, planners.POLICIES)


def test_same_workload_for_every_policy_and_high_pods_preempt(comparison):
    by = {r.policy: r for r in comparison.results}
    assert set(by) == set(planners.POLICIES)
    for r in by.values():
        assert r.preemptions > 0, r.policy
        assert r.plans_invalid == 0, r.policy
        assert r.lost_gpu_hours >= 0


def test_gang_aware_policies_never_break_gangs(comparison):
    by = {r.policy: r for r in comparison.results}
    assert by["checkpoint-aware"].gangs_broken == 0
    assert by["checkpoint-aware-drain"].gangs_broken == 0


def test_checkpoint_aware_loses_no_more_than_kube_default(comparison):
    assert comparison.lost_ratio("checkpoint-aware") <= 1.0
    assert comparison.lost_ratio("checkpoint-aware-drain") <= comparison.lost_ratio(
        "checkpoint-aware") + 1e-9


def job(i, arrival, members, priority=0, qos="BE", duration=10 * HOUR):
    return workload.Job(
        id=i, name=f"j{i}", arrival=arrival, duration=duration, priority=priority, qos=qos,
        members=tuple(workload.Member(name=f"j{i}-{k}", cpu_milli=1000, memory_mib=1024, gpus=1)
                      for k in range(members)),
        checkpoint=CheckpointMode.NONE, interval=None, checkpoint_seconds=None,
    )


def test_kube_default_breaks_the_youngest_gang_where_checkpoint_aware_takes_one_pod():
    # One 8-GPU node: four 1-GPU singles, then a 4-member gang that started 10 minutes later.
    # A 1-GPU high-priority pod arrives: kube-default evicts the youngest pod, a gang member,
    # which breaks the gang; checkpoint-aware pays 1 GPU x 2h rather than 4 GPUs x 1h50.
    jobs = [job(i, 60.0 * i, 1) for i in range(4)]
    jobs += [job(4, 600.0, 4), job(5, 2 * HOUR, 1, priority=1000, qos="LS", duration=HOUR)]
    w = workload.Workload(jobs=tuple(jobs), compress=1.0, offered_load=1.0, extra_pods=0,
                          window=3 * HOUR, capacity_gpus=8, params=workload.WorkloadParams())
    ideal = engine.SimConfig().without_costs()
    kube = engine.Simulation(w, nodes(1), "kube-default", ideal).run()
    aware = engine.Simulation(w, nodes(1), "checkpoint-aware", ideal).run()
    assert (kube.preemptions, kube.gangs_broken, kube.victims) == (1, 1, 4)
    assert (aware.preemptions, aware.gangs_broken, aware.victims) == (1, 0, 1)
    # kube-default: 4 members x (2h - 10 min + 30 s grace); aware: the youngest single
    assert kube.lost_gpu_hours == pytest.approx(4 * (2 * HOUR - 600 + 30) / HOUR)
    assert aware.lost_gpu_hours == pytest.approx((2 * HOUR - 180 + 30) / HOUR, rel=0.02)
    # with the default restore time every evicted GPU also sits idle while its job restarts,
    # and the (one) evicted job pays the fixed per-job term once
    real = engine.SimConfig()
    kube_real = engine.Simulation(w, nodes(1), "kube-default", real).run()
    assert kube_real.restart_gpu_hours == pytest.approx(
        (4 * real.restore_seconds + real.restore_job_gpu_seconds) / HOUR)
    assert kube_real.lost_gpu_hours == pytest.approx(
        kube.lost_gpu_hours + kube_real.restart_gpu_hours)
    assert kube_real.eviction_losses == (pytest.approx(kube_real.lost_gpu_hours),)


def test_workload_is_deterministic_and_reports_its_load():
    a = workload.generate(background_then_burst(), nodes(), PARAMS)
    b = workload.generate(background_then_burst(), nodes(), PARAMS)
    assert a == b
    assert a.offered_load > 0 and a.capacity_gpus == 32
    c = workload.generate(background_then_burst(), nodes(),
                          workload.WorkloadParams(**{**PARAMS.describe(), "seed": 4}))
    assert [j.checkpoint for j in c.jobs] != [j.checkpoint for j in a.jobs]


def test_unknown_policy_and_bad_scale_are_clear_errors():
    with pytest.raises(ValueError, match="unknown policy 'fifo'"):
        planners.planner_for("fifo", 600)
    with pytest.raises(ValueError, match="scale must be in"):
        workload.scale_down([], [], workload.WorkloadParams(scale=0))


def test_results_report_how_often_each_workload_was_preempted(comparison):
    for r in comparison.results:
        hist = r.preemptions_per_workload
        assert r.workloads_preempted == sum(hist.values()) > 0
        assert r.max_preemptions_per_workload == max(hist)
        # every preemption hits at least one job; a job is counted once per preemption
        assert sum(n * k for n, k in hist.items()) >= r.preemptions
        assert 0 <= r.victim_jobs_unreported <= sum(n * k for n, k in hist.items())


def periodic_job(i, arrival, interval_min, *, duration=20 * HOUR, reports=True):
    return workload.Job(
        id=i, name=f"j{i}", arrival=arrival, duration=duration, priority=0, qos="BE",
        members=(workload.Member(name=f"j{i}-0", cpu_milli=1000, memory_mib=1024, gpus=1),),
        checkpoint=CheckpointMode.PERIODIC, interval=interval_min * 60.0,
        checkpoint_seconds=None, reports=reports,
    )


def _one_node_two_jobs(*, reports=True):
    """One 2-GPU node: a job that checkpoints every 15 min and one every 4 h (or, with
    ``reports`` False, the second never says when); then six short high-priority pods, one
    every 25 min from 1 h on."""
    jobs = [periodic_job(0, 0.0, 15), periodic_job(1, 0.0, 240, reports=reports)]
    jobs += [job(2 + k, HOUR + k * 1500.0, 1, priority=1000, qos="LS", duration=600.0)
             for k in range(6)]
    return workload.Workload(jobs=tuple(jobs), compress=1.0, offered_load=1.0, extra_pods=0,
                             window=6 * HOUR, capacity_gpus=2, params=workload.WorkloadParams())


def test_without_the_fairness_guard_the_frequent_checkpointer_pays_every_time():
    w = _one_node_two_jobs()
    off = engine.Simulation(w, nodes(1, gpus=2), "checkpoint-aware", engine.SimConfig(
        fairness_penalty_seconds=0.0, max_preemptions_per_window=0)).run()
    on = engine.Simulation(w, nodes(1, gpus=2), "checkpoint-aware",
                           engine.SimConfig(fairness_penalty_seconds=3600.0)).run()
    assert off.preemptions == on.preemptions == 6
    assert off.preemptions_per_workload == {6: 1}  # always the one that checkpoints often
    assert on.max_preemptions_per_workload < 6 and on.workloads_preempted == 2
    assert on.lost_gpu_hours >= off.lost_gpu_hours  # fairness costs some lost work


@pytest.mark.parametrize(("policy", "victim_reports"), [
    pytest.param("start-time", True, id="start-time: the silent job is charged from its start"),
    pytest.param("assume:5m", False, id="assume 5 min: the silent job looks cheapest"),
])
def test_unknown_checkpoint_policy_in_the_replay(policy, victim_reports):
    w = _one_node_two_jobs(reports=False)
    # report parity off: the charge alone decides (policies.planner.parity)
    r = engine.Simulation(w, nodes(1, gpus=2), "checkpoint-aware",
                          engine.SimConfig(unknown_checkpoint=policy, fairness_penalty_seconds=0.0,
                                           max_preemptions_per_window=0,
                                           report_parity=False)).run()
    assert r.preemptions == 6
    assert (r.victim_jobs_unreported == 0) is victim_reports


def test_with_report_parity_the_silent_job_is_taken_first_and_the_two_alternate():
    # the reporter checkpoints every 15 min, the silent one is charged from its start: by loss
    # alone the reporter takes all six (above); with parity it is held while the silent job was
    # preempted no more often, so the silent one goes first and they take three each
    w = _one_node_two_jobs(reports=False)
    sim = engine.Simulation(w, nodes(1, gpus=2), "checkpoint-aware", engine.SimConfig(
        fairness_penalty_seconds=0.0, max_preemptions_per_window=0))
    r = sim.run()
    assert r.preemptions == 6 and r.victim_jobs_unreported == 3
    first_silent, first_reporter = sim.preempted[1][0], sim.preempted[0][0]
    assert first_silent < first_reporter
