"""Two-job worlds: does reporting checkpoints make a job a more frequent victim?

One node with 2 GPUs is held by two identical 1-GPU low-priority jobs that checkpoint every
``interval`` minutes; either, both or neither reports its checkpoints. Then 1-GPU
high-priority pods arrive. Each preemptor must take one of the two, so the world isolates one
question of the starvation bound (issue 22): whether publishing checkpoints makes a job
preempted more often over its life than it would be if it stayed silent.

``twin_world`` builds one world; ``draw_world`` draws the interval and preemptors of a seeded
random one (1-16 arrivals in the first 47 hours, each running 1 minute to 2 hours, as the
property test in tests/sim/test_bound.py draws them).
"""

from __future__ import annotations

import random

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import workload
from ckpt_preempt.policies.sim.trace import TraceNode

HOUR = 3600.0
INTERVALS_MIN = (5, 15, 30, 60, 120)  # checkpoint intervals a random world draws from
MOST_ARRIVALS = 16
WORLD_HOURS = 48.0


def nodes(count: int = 1, gpus: int = 2) -> list[TraceNode]:
    return [TraceNode(name=f"n{i}", cpu_milli=96000, memory_mib=10**6, gpus=gpus, model="G")
            for i in range(count)]


def low_job(i: int, interval_min: float, *, reports: bool) -> workload.Job:
    """A 1-GPU low-priority job running 500 h from time 0, checkpointing every
    ``interval_min`` minutes, publishing its checkpoints or not."""
    return _one_gpu(i, 0.0, 500 * HOUR, "BE", interval_min=interval_min, reports=reports)


def high_job(i: int, arrival: float, duration: float) -> workload.Job:
    """A 1-GPU high-priority pod (a preemptor) that never checkpoints."""
    return _one_gpu(i, arrival, duration, "LS", interval_min=None, reports=False)


def world(jobs: list[workload.Job], hours: float) -> workload.Workload:
    """These jobs on a 2-GPU cluster, measured over ``hours`` from time 0."""
    return workload.Workload(jobs=tuple(jobs), compress=1.0, offered_load=1.0, extra_pods=0,
                             window=hours * HOUR, capacity_gpus=2,
                             params=workload.WorkloadParams())


def _one_gpu(i: int, arrival: float, duration: float, qos: str, *,
             interval_min: float | None, reports: bool) -> workload.Job:
    return workload.Job(
        id=i, name=f"j{i}", arrival=arrival, duration=duration,
        priority=workload.PRIORITY[qos], qos=qos,
        members=(workload.Member(name=f"j{i}-0", cpu_milli=1000, memory_mib=1024, gpus=1),),
        checkpoint=CheckpointMode.PERIODIC if interval_min else CheckpointMode.NONE,
        interval=interval_min * 60.0 if interval_min else None, checkpoint_seconds=None,
        reports=reports)


def twin_world(interval_min: float, arrivals: list[tuple[float, float]], *,
               reports: tuple[bool, bool] = (True, False),
               hours: float = WORLD_HOURS) -> workload.Workload:
    """The two low-priority jobs (ids 0 and 1; ``reports`` says which publish their
    checkpoints), running 500 h from time 0, and one 1-GPU high-priority pod per
    ``(arrival s, duration s)``."""
    jobs = [low_job(i, interval_min, reports=reports[i]) for i in (0, 1)]
    jobs += [high_job(2 + k, at, dur) for k, (at, dur) in enumerate(arrivals)]
    return world(jobs, hours)


def draw_world(seed: int) -> tuple[int, list[tuple[float, float]]]:
    """A seeded random world: its checkpoint interval (minutes) and sorted arrivals."""
    rng = random.Random(f"twins-{seed}")
    interval = rng.choice(INTERVALS_MIN)
    count = rng.randint(1, MOST_ARRIVALS)
    arrivals = sorted((rng.uniform(0.2 * HOUR, (WORLD_HOURS - 1) * HOUR),
                       rng.uniform(60.0, 2 * HOUR)) for _ in range(count))
    return interval, arrivals
