"""The synthetic training-job scenario: DNN training jobs drawn from published distributions.

No training-job trace ships with this repository, so ``training_trace`` draws one, seeded, and the
protocols (stress, replay, steady) replay it like an openb trace. Each figure below is either
cited (where it was read) or marked as an assumption.

- GPUs per job: 1 (70 %), 2 (10 %), 4 (15 %), 8 (5 %). Cited: Gavel's job generator, "sampled
  from the Philly distribution" (Narayanan et al., OSDI '20; github.com/stanford-futuredata/gavel
  commit c4fa400, scheduler/utils.py, ``_generate_scale_factor``), the Philly cluster being the
  one of Jeon et al., USENIX ATC '19.
- Run time: 60·10^U(1.5, 3) s with probability 0.8, else 60·10^U(3, 4) s (32 min to 6.9 days).
  Cited: the same file, ``_generate_duration`` ("from the Philly distribution").
- High-priority share: 20 % of jobs. Cited: Gavel's multi-priority option gives 20 % of jobs the
  higher weight (same file, ``generate_job``).
- Multi-node jobs: 10 % of jobs run as gangs of 2 or 4 pods of 8 GPUs. Assumption: the cited
  size mix stops at one 8-GPU node.
- Checkpoint interval: half every 30 min, half at epoch ends every U(1, 4) h. 30 min: the
  default interval of Check-N-Run (Eisenman et al., NSDI '22), read in a summary
  (www.bohrium.com paper-details page for Check-N-Run), not the paper; epoch-boundary
  checkpoints with epochs of "several hours": CheckFreq (Mohan et al., FAST '21, abstract);
  the 1-4 h range is an assumption.
- Checkpoint on request: 50 % of low-priority jobs; a write takes U(30, 180) s. Assumption (the
  openb generator's range).
- Restore after an eviction: U(60, 600) s. Assumption; CheckFreq's abstract says its
  checkpoints cut recovery "from hours to seconds", which bounds neither end.
- CPU and memory: 4 cores and 16 GiB per GPU. Assumption, sized to fit every openb node type.
- Elastic: 50 % of low-priority multi-node jobs run elastic (torchrun-elastic style), with a
  minimum of half their pods; drawn from their own seeded stream, so every other draw is as
  without them. Assumption: no published share of elastic training jobs was found.
- Arrivals: Poisson with mean gap 300 s. Assumption; every protocol rescales time or shrinks
  the cluster to reach its load, so only the mix matters.

- Silent checkpointing: ``WorkloadParams.share_silent`` of the jobs that checkpoint never
  publish it, drawn per job as for openb. Assumption: none by default (bench/harsh_world.py
  sweeps 0, 0.25 and 0.5).

Training jobs that checkpoint do so periodically; ``on_request_share`` of them also checkpoint on
request (they can be drained). High-priority jobs are the preemptors and never checkpoint.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim.workload import Arrival, Job, Member, WorkloadParams, is_silent

JOB_GPUS = (1, 2, 4, 8)
JOB_GPU_WEIGHTS = (0.70, 0.10, 0.15, 0.05)
LONG_RUN_SHARE = 0.2  # runs of 60·10^U(3, 4) s; the rest 60·10^U(1.5, 3) s
SHORT_RUN_LOG10_MIN = (1.5, 3.0)
LONG_RUN_LOG10_MIN = (3.0, 4.0)
HIGH_SHARE = 0.2
NODE_GPUS = 8  # a multi-node job's pods each take a whole 8-GPU node
CPU_MILLI_PER_GPU = 4000
MEMORY_MIB_PER_GPU = 16384
HIGH_QOS, LOW_QOS = "LS", "BE"
HIGH_PRIORITY, LOW_PRIORITY = 1000, 0


@dataclass(frozen=True, kw_only=True)
class TrainingParams:
    jobs: int = 4000  # length of the drawn trace
    mean_gap_s: float = 300.0
    multi_node_share: float = 0.10
    multi_node_pods: tuple[int, ...] = (2, 4)
    periodic_30min_share: float = 0.5  # the rest checkpoint at epoch ends
    checkpoint_interval_s: float = 1800.0
    epoch_hours: tuple[float, float] = (1.0, 4.0)
    on_request_share: float = 0.5
    checkpoint_seconds: tuple[float, float] = (30.0, 180.0)
    restore_seconds: tuple[float, float] = (60.0, 600.0)
    elastic_share: float = 0.5  # of low-priority multi-node jobs (assumption)
    elastic_min_fraction: float = 0.5  # their minimum: this share of their pods, at least 1

    def describe(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class TrainingJob:
    """One drawn training job; has the trace-pod fields the protocols read."""

    name: str
    creation: float
    deletion: float
    qos: str
    pods: int
    gpus_per_pod: int
    checkpoint: CheckpointMode
    interval: float | None
    checkpoint_seconds: float | None
    restore_seconds: float
    min_pods: int | None = None  # elastic: the fewest pods it runs with; None: all

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod

    @property
    def lifetime(self) -> float:
        return self.deletion - self.creation


def _run_seconds(rng: random.Random) -> float:
    low, high = LONG_RUN_LOG10_MIN if rng.random() < LONG_RUN_SHARE else SHORT_RUN_LOG10_MIN
    return 60.0 * 10 ** rng.uniform(low, high)


def training_trace(seed: int, params: TrainingParams = TrainingParams()) -> list[TrainingJob]:
    """``params.jobs`` training jobs with Poisson arrivals from t = 0, seeded."""
    rng = random.Random(f"training-{seed}")
    elastic_rng = random.Random(f"training-elastic-{seed}")  # apart: the other draws stay
    out = []
    t = 0.0
    for i in range(params.jobs):
        t += rng.expovariate(1.0 / params.mean_gap_s)
        high = rng.random() < HIGH_SHARE
        if rng.random() < params.multi_node_share:
            pods, per_pod = rng.choice(params.multi_node_pods), NODE_GPUS
        else:
            pods, per_pod = 1, rng.choices(JOB_GPUS, JOB_GPU_WEIGHTS)[0]
        run = _run_seconds(rng)
        if rng.random() < params.periodic_30min_share:
            interval = params.checkpoint_interval_s
        else:
            interval = 3600.0 * rng.uniform(*params.epoch_hours)
        on_request = rng.random() < params.on_request_share
        ckpt = rng.uniform(*params.checkpoint_seconds)
        restore = rng.uniform(*params.restore_seconds)
        if high:
            mode, interval_or_none, ckpt_or_none = CheckpointMode.NONE, None, None
        elif on_request:
            mode, interval_or_none, ckpt_or_none = CheckpointMode.ON_REQUEST, interval, ckpt
        else:
            mode, interval_or_none, ckpt_or_none = CheckpointMode.PERIODIC, interval, ckpt
        elastic = pods > 1 and not high and elastic_rng.random() < params.elastic_share
        out.append(TrainingJob(
            name=f"train-{i:05d}", creation=t, deletion=t + run,
            qos=HIGH_QOS if high else LOW_QOS, pods=pods, gpus_per_pod=per_pod,
            checkpoint=mode, interval=interval_or_none, checkpoint_seconds=ckpt_or_none,
            restore_seconds=restore,
            min_pods=max(1, int(pods * params.elastic_min_fraction)) if elastic else None,
        ))
    return out


def jobs_from(arrivals: list[Arrival], params: WorkloadParams | None = None) -> list[Job]:
    """Arrivals of ``TrainingJob`` items become jobs; every pod of a job is one gang member.
    ``params.share_silent`` of the jobs that checkpoint never report it (as for openb)."""
    seed, share = (params.seed, params.share_silent) if params else (0, 0.0)
    jobs = []
    for n, a in enumerate(arrivals):
        t: TrainingJob = a.pod  # type: ignore[assignment]
        silent = t.interval is not None and is_silent(seed, n, share)
        jobs.append(Job(
            id=n, name=f"{t.name}-{n}", arrival=a.at, duration=a.duration,
            priority=HIGH_PRIORITY if t.qos == HIGH_QOS else LOW_PRIORITY, qos=t.qos,
            members=tuple(
                Member(name=f"{t.name}-{n}-{k}", cpu_milli=CPU_MILLI_PER_GPU * t.gpus_per_pod,
                       memory_mib=MEMORY_MIB_PER_GPU * t.gpus_per_pod, gpus=t.gpus_per_pod)
                for k in range(t.pods)
            ),
            checkpoint=t.checkpoint, interval=t.interval,
            checkpoint_seconds=t.checkpoint_seconds, restore_seconds=t.restore_seconds,
            done_before=a.done_before, min_members=t.min_pods, reports=not silent,
        ))
    return jobs
