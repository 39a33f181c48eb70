"""The job builder and the stress generator: same seed, same jobs as before the protocols came."""

import hashlib
import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim.trace import TracePod, parse_nodes, parse_pods
from ckpt_preempt.policies.sim.workload import (
    Arrival,
    Job,
    Member,
    WorkloadParams,
    generate,
    jobs_from,
    offered_load,
    scale_down,
)

DATA = Path(__file__).resolve().parents[2] / "policies" / "data"
# the stress workload of seed 1 (scale 0.25): a fingerprint of every job, and its counts. Pinned
# again when the load began counting a fractional pod at its share of a GPU (GPU sharing), which
# draws more background pods; before, it was the generator as of commit 2a94036
STRESS_SEED1_SHA256 = "731e2ece2f0f36e7770aa0d24912b138e61775d75d3a44be96f2cd2541233aa5"
STRESS_SEED1 = dict(jobs=19143, extra_pods=35466, offered_load=1.423927292, nodes=303)


def _fingerprint(jobs) -> str:
    h = hashlib.sha256()
    for j in jobs:
        h.update(repr((
            j.id, j.name, round(j.arrival, 6), round(j.duration, 6), j.priority, j.qos,
            tuple((m.name, m.gpus, m.cpu_milli, m.memory_mib) for m in j.members),
            j.checkpoint.value, j.interval,
            None if j.checkpoint_seconds is None else round(j.checkpoint_seconds, 6), j.reports,
        )).encode())
    return h.hexdigest()


def test_stress_generator_gives_the_jobs_it_always_gave():
    pods = parse_pods((DATA / "openb_pod_list_default.csv").read_text().splitlines())
    nodes = parse_nodes((DATA / "openb_node_list_gpu_node.csv").read_text().splitlines())
    params = WorkloadParams(seed=1)
    sp, sn = scale_down(pods, nodes, params)
    w = generate(sp, sn, params)
    assert dict(jobs=len(w.jobs), extra_pods=w.extra_pods,
                offered_load=round(w.offered_load, 9), nodes=len(sn)) == STRESS_SEED1
    assert _fingerprint(w.jobs) == STRESS_SEED1_SHA256
    assert (w.protocol, w.warmup) == ("stress", 0.0)


def _pod(name: str, gpus: int, milli: int, qos: str = "BE", spec: str = "") -> TracePod:
    return TracePod(name=name, cpu_milli=100, memory_mib=100, gpus=gpus, gpu_milli=milli,
                    qos=qos, creation=0.0, deletion=100.0, gpu_spec=spec)


def test_members_carry_milli_gpu_only_when_fractional_and_the_gpu_spec():
    arrivals = [
        Arrival(pod=_pod("frac", 1, 300, spec="T4|P100"), at=0.0, duration=10.0),
        Arrival(pod=_pod("whole", 1, 1000), at=1.0, duration=10.0),
        Arrival(pod=_pod("multi", 4, 4000), at=2.0, duration=10.0, done_before=7.0),
    ]
    params = WorkloadParams(gang_share=0.0)
    jobs = jobs_from(arrivals, params, random.Random(1))
    members = [j.members[0] for j in jobs]
    assert [(m.gpus, m.gpu_milli, m.gpu_spec) for m in members] == [
        (1, 300, "T4|P100"), (1, 0, ""), (4, 0, ""),
    ]
    assert [j.done_before for j in jobs] == [0.0, 0.0, 7.0]
    assert [j.arrival for j in jobs] == [0.0, 1.0, 2.0]


def test_high_priority_jobs_never_checkpoint_nor_join_gangs():
    arrivals = [Arrival(pod=_pod(f"p{i}", 1, 1000, qos="LS"), at=float(i), duration=5.0)
                for i in range(20)]
    jobs = jobs_from(arrivals, WorkloadParams(gang_share=1.0), random.Random(2))
    assert len(jobs) == 20
    assert all(j.checkpoint is CheckpointMode.NONE and not j.is_gang for j in jobs)


def _job(arrival: float, duration: float, gpus: int) -> Job:
    return Job(id=0, name="j", arrival=arrival, duration=duration, priority=0, qos="BE",
               members=(Member(name="m", cpu_milli=1, memory_mib=1, gpus=gpus),),
               checkpoint=CheckpointMode.NONE, interval=None, checkpoint_seconds=None)


@settings(max_examples=200, deadline=None)
@given(
    spans=st.lists(st.tuples(st.floats(-100, 100), st.floats(0, 100), st.integers(1, 8)),
                   max_size=20),
    start=st.floats(-50, 50), length=st.floats(1, 100), capacity=st.integers(1, 64),
)
def test_offered_load_is_the_clipped_gpu_time_share(spans, start, length, capacity):
    jobs = [_job(a, d, g) for a, d, g in spans]
    end = start + length
    expected = sum(g * max(0.0, min(end, a + d) - max(start, a)) for a, d, g in spans)
    assert abs(offered_load(jobs, capacity, start, end) * capacity * length - expected) < 1e-6
    assert offered_load(jobs, capacity, end, start) == 0.0
