"""Elastic jobs in the simulator (policies.sim.elastic): shrink, run on slower, grow back."""

from dataclasses import replace

import pytest

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import engine, scenarios, workload
from ckpt_preempt.policies.sim.trace import TraceNode

HOUR = 3600.0
R = engine.SimConfig().rendezvous_seconds
GRACE = engine.SimConfig().grace_seconds


def nodes(n):
    return [TraceNode(name=f"n{i}", cpu_milli=96000, memory_mib=10**6, gpus=8, model="G")
            for i in range(n)]


def job(i, arrival, members, *, duration, minimum=None, high=False):
    return workload.Job(
        id=i, name=f"j{i}", arrival=arrival, duration=duration,
        priority=1000 if high else 0, qos="LS" if high else "BE",
        members=tuple(workload.Member(name=f"j{i}-{k}", cpu_milli=1000, memory_mib=1024, gpus=8)
                      for k in range(members)),
        checkpoint=CheckpointMode.NONE, interval=None, checkpoint_seconds=None,
        min_members=minimum,
    )


class Probe(engine.Simulation):
    """Records when each job's pods last stopped (a finish, or an eviction)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.stopped = {}

    def _stop(self, js, at):
        self.stopped[js.job.id] = at
        super()._stop(js, at)


def run(minimum, policy="checkpoint-aware", **cfg):
    """A 3-member elastic job (10 h of work) fills 3 nodes; a 1-node high job arrives at 1 h
    and runs 1 h."""
    jobs = (job(0, 0.0, 3, duration=10 * HOUR, minimum=minimum),
            job(1, HOUR, 1, duration=HOUR, high=True))
    w = workload.Workload(jobs=jobs, compress=1.0, offered_load=1.0, extra_pods=0,
                          window=12 * HOUR, capacity_gpus=24, params=workload.WorkloadParams())
    sim = Probe(w, nodes(3), policy,
                replace(engine.SimConfig().without_costs(), **cfg))
    return sim.run(), sim.stopped


def test_a_shrunken_job_runs_on_slower_and_grows_back_losing_only_its_rendezvous():
    r, stopped = run(minimum=2)
    assert (r.shrinks, r.grown_back, r.victims, r.gangs_broken, r.plans_invalid) == (
        1, 1, 1, 0, 0)
    # a re-form on 24 GPUs at the shrink and again at the grow-back: no work lost
    assert r.lost_work_gpu_hours == 0
    assert r.restart_gpu_hours == pytest.approx(2 * 24 * R / HOUR)
    # it finishes later by both re-forms and a third of the hour it ran on two of three
    # members (throughput proportional to workers), less the rendezvous inside that hour
    release = HOUR + GRACE
    slow = HOUR - R  # the high job's hour, after the first re-form
    assert stopped[0] == pytest.approx(10 * HOUR + R + slow / 3 + R)
    assert release < stopped[0]


def test_with_shrink_off_the_elastic_job_is_evicted_whole():
    r, _ = run(minimum=2, shrink=False)
    assert (r.shrinks, r.victims) == (0, 3)
    assert r.lost_work_gpu_hours == pytest.approx(24 * (HOUR + GRACE) / HOUR)


@pytest.mark.parametrize("policy", ["checkpoint-aware-drain", "cost-aware"])
def test_our_search_shrinks_in_every_policy_built_on_it_unless_shrink_is_off(policy):
    assert run(minimum=2, policy=policy)[0].shrinks == 1
    assert run(minimum=2, policy=policy, shrink=False)[0].shrinks == 0


def test_kube_default_never_shrinks():
    assert run(minimum=2, policy="kube-default")[0].shrinks == 0


def test_a_job_without_a_minimum_is_never_shrunk():
    r, _ = run(minimum=None)
    assert (r.shrinks, r.victims) == (0, 3)


def test_the_elastic_draw_leaves_every_other_draw_of_the_training_trace_as_it_was():
    with_elastic = scenarios.training_trace(4, scenarios.TrainingParams(jobs=600))
    without = scenarios.training_trace(
        4, scenarios.TrainingParams(jobs=600, elastic_share=0.0))
    assert [replace(t, min_pods=None) for t in with_elastic] == without
    elastic = [t for t in with_elastic if t.min_pods is not None]
    assert elastic and all(t.pods > 1 and t.qos == scenarios.LOW_QOS for t in elastic)
    assert all(1 <= t.min_pods < t.pods for t in elastic)
    # and the jobs built from them carry the minimum
    arrivals = [workload.Arrival(pod=t, at=t.creation, duration=t.lifetime) for t in elastic]
    assert [j.min_members for j in scenarios.jobs_from(arrivals)] == [
        t.min_pods for t in elastic]
