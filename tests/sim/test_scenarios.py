"""The training scenario draws from the cited distributions and nothing else."""

from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import scenarios
from ckpt_preempt.policies.sim.scenarios import TrainingParams, jobs_from, training_trace
from ckpt_preempt.policies.sim.workload import Arrival

N = 4000
SHORT_MIN, SHORT_MAX = 60 * 10**1.5, 60 * 10**3  # seconds: 60·10^U(1.5, 3)
LONG_MAX = 60 * 10**4


@pytest.fixture(scope="module")
def trace():
    return training_trace(1, TrainingParams(jobs=N))


def test_single_node_sizes_follow_the_cited_mix(trace):
    single = [t for t in trace if t.pods == 1]
    counts = Counter(t.gpus_per_pod for t in single)
    assert set(counts) == set(scenarios.JOB_GPUS)
    for gpus, weight in zip(scenarios.JOB_GPUS, scenarios.JOB_GPU_WEIGHTS, strict=True):
        assert abs(counts[gpus] / len(single) - weight) < 0.03, (gpus, counts)


def test_multi_node_jobs_are_gangs_of_whole_nodes(trace):
    multi = [t for t in trace if t.pods > 1]
    assert abs(len(multi) / N - TrainingParams().multi_node_share) < 0.02
    assert {t.pods for t in multi} == set(TrainingParams().multi_node_pods)
    assert {t.gpus_per_pod for t in multi} == {scenarios.NODE_GPUS}


def test_run_times_follow_the_two_log_uniform_ranges(trace):
    runs = [t.lifetime for t in trace]
    assert min(runs) >= SHORT_MIN and max(runs) <= LONG_MAX
    long_share = sum(r > SHORT_MAX for r in runs) / N
    assert abs(long_share - scenarios.LONG_RUN_SHARE) < 0.03
    # log-uniform: the short range's lower half in log10 holds half the short runs
    short = [r for r in runs if r <= SHORT_MAX]
    lower = sum(r <= 60 * 10**2.25 for r in short) / len(short)
    assert abs(lower - 0.5) < 0.04


def test_priorities_and_checkpoints(trace):
    high = [t for t in trace if t.qos == scenarios.HIGH_QOS]
    assert abs(len(high) / N - scenarios.HIGH_SHARE) < 0.03
    assert all(t.checkpoint is CheckpointMode.NONE and t.interval is None for t in high)
    low = [t for t in trace if t.qos != scenarios.HIGH_QOS]
    assert {t.checkpoint for t in low} == {CheckpointMode.ON_REQUEST, CheckpointMode.PERIODIC}
    lo, hi = TrainingParams().epoch_hours
    for t in low:
        assert t.interval == 1800.0 or 3600 * lo <= t.interval <= 3600 * hi
    thirty = sum(t.interval == 1800.0 for t in low) / len(low)
    assert abs(thirty - TrainingParams().periodic_30min_share) < 0.04
    assert all(60 <= t.restore_seconds <= 600 for t in trace)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_trace_is_seeded_and_arrivals_increase(seed):
    a = training_trace(seed, TrainingParams(jobs=50))
    assert a == training_trace(seed, TrainingParams(jobs=50))
    assert all(x.creation < y.creation for x, y in pairwise(a))
    assert a != training_trace(seed + 1, TrainingParams(jobs=50))


def test_jobs_keep_the_drawn_shape():
    items = training_trace(2, TrainingParams(jobs=200))
    arrivals = [Arrival(pod=t, at=float(i), duration=t.lifetime, done_before=float(i % 3))
                for i, t in enumerate(items)]
    jobs = jobs_from(arrivals)
    for job, t in zip(jobs, items, strict=True):
        assert len(job.members) == t.pods and job.gpus == t.gpus
        assert {m.gpus for m in job.members} == {t.gpus_per_pod}
        assert (job.interval, job.restore_seconds, job.checkpoint) == (
            t.interval, t.restore_seconds, t.checkpoint)
        assert job.high == (t.qos == scenarios.HIGH_QOS)
    assert [j.done_before for j in jobs[:3]] == [0.0, 1.0, 2.0]
