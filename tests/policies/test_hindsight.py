"""The hindsight floor (policies/sim/hindsight.py): a hand-computed case, and properties on
small random instances: the search alone finds every registry policy's path (the floor is never
above any policy's loss), it is exact (the same floor from any starting incumbent), and the
floor's own path, replayed in the engine, is charged the floor."""

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import hindsight, planners
from ckpt_preempt.policies.sim.engine import SimConfig
from ckpt_preempt.policies.sim.trace import TraceNode
from ckpt_preempt.policies.sim.workload import Job, Member, Workload, WorkloadParams

HOUR = 3600.0
CFG = SimConfig()  # every cost on, as the benchmark runs it
TOLERANCE_GPU_HOURS = 1e-9


def _job(i: int, arrival: float, gpus: int, duration: float, *, members: int = 1,
         high: bool = False, mode: CheckpointMode = CheckpointMode.NONE,
         interval: float | None = None, checkpoint_seconds: float | None = None) -> Job:
    return Job(
        id=i, name=f"j{i}", arrival=arrival, duration=duration,
        priority=1000 if high else 0, qos="LS" if high else "BE",
        members=tuple(Member(name=f"j{i}-{k}", cpu_milli=1000, memory_mib=1024, gpus=gpus)
                      for k in range(members)),
        checkpoint=mode, interval=interval, checkpoint_seconds=checkpoint_seconds)


def _world(jobs: list[Job], node_gpus: list[int]) -> tuple[Workload, list[TraceNode]]:
    nodes = [TraceNode(name=f"n{i}", cpu_milli=96000, memory_mib=10**6, gpus=g, model="G")
             for i, g in enumerate(node_gpus)]
    window = max(j.arrival for j in jobs) + 1.0
    return Workload(jobs=tuple(sorted(jobs, key=lambda j: j.arrival)), compress=1.0,
                    offered_load=1.0, extra_pods=0, window=window,
                    capacity_gpus=sum(node_gpus), params=WorkloadParams()), nodes


def test_hand_computed_waiting_for_a_victims_end_is_the_floor():
    # One 8-GPU node. A (4 GPUs) checkpoints every 30 min from t=0; B (4 GPUs, never
    # checkpoints) starts at 1900 s and ends at 2400 s; the high-priority H (4 GPUs) arrives at
    # 2000 s. Evicting A now (after the 30 s grace): 4 x 230 s unsaved + 4 x 300 + 300 restart
    # = 2420 GPU-s; evicting B now: 4 x 130 + 1500 = 2020; A's next checkpoint (3600 s) is
    # past the 600 s drain cap; waiting for B's end: no victim, 4 GPUs x (400 - 30) s of
    # preemptor delay = 1480 GPU-s, the floor. Our timing policy waits for B too, but until it
    # can see the end (plus the 30 s report lag, 2430 s): 4 x (430 - 30) = 1600 GPU-s.
    a = _job(0, 0.0, 4, 10 * HOUR, mode=CheckpointMode.PERIODIC, interval=1800.0,
             checkpoint_seconds=60.0)
    b = _job(1, 1900.0, 4, 500.0)
    h = _job(2, 2000.0, 4, 1000.0, high=True)
    w, nodes = _world([a, b, h], [8])
    r = hindsight.floor(w, nodes, CFG, start_from_policies=False)
    assert r.floor_gpu_hours == pytest.approx(1480.0 / HOUR)
    assert r.found_by == "search" and r.decisions == 1
    assert r.choices[0].startswith("evict jobs [1] (drain []) +400s")
    timed = r.policy_gpu_hours[planners.TIMING_POLICY]
    assert timed == pytest.approx((2430.0 - 2000.0 - CFG.grace_seconds) * 4 / HOUR)
    assert r.floor_gpu_hours < min(r.policy_gpu_hours.values())
    replayed = hindsight.replay(w, nodes, CFG, r.script)
    assert replayed.lost_gpu_hours == pytest.approx(r.floor_gpu_hours)
    assert (replayed.victims, replayed.lost_work_gpu_hours) == (0, 0.0)


def test_a_script_that_stops_short_is_refused():
    a = _job(0, 0.0, 4, 10 * HOUR)
    b = _job(1, 1900.0, 4, 500.0)
    h = _job(2, 2000.0, 4, 1000.0, high=True)
    w, nodes = _world([a, b, h], [8])
    with pytest.raises(ValueError, match="script ends"):
        hindsight.replay(w, nodes, CFG, ())


def test_the_simulation_budget_is_enforced():
    a = _job(0, 0.0, 4, 10 * HOUR)
    b = _job(1, 1900.0, 4, 500.0)
    h = _job(2, 2000.0, 4, 1000.0, high=True)
    w, nodes = _world([a, b, h], [8])
    with pytest.raises(hindsight.HindsightLimit):
        hindsight.floor(w, nodes, CFG, max_simulations=2, start_from_policies=False)


MODES = st.sampled_from([
    (CheckpointMode.NONE, None), (CheckpointMode.PERIODIC, 900.0),
    (CheckpointMode.PERIODIC, 1800.0), (CheckpointMode.ON_REQUEST, 900.0),
    (CheckpointMode.ON_REQUEST, 1800.0)])


@st.composite
def instances(draw):
    node_gpus = draw(st.lists(st.sampled_from([4, 8]), min_size=1, max_size=2))
    jobs = []
    for _ in range(draw(st.integers(2, 5))):
        mode, interval = draw(MODES)
        gpus = draw(st.sampled_from([1, 2, 4]))
        members = draw(st.integers(1, 2)) if len(node_gpus) > 1 or gpus <= 2 else 1
        low = _job(len(jobs), draw(st.floats(0.0, 900.0)), gpus,
                   draw(st.floats(1200.0, 6 * HOUR)), members=members, mode=mode,
                   interval=interval, checkpoint_seconds=draw(st.floats(30.0, 180.0)))
        if members > 1 and draw(st.booleans()):  # elastic: runs on with one member
            low = replace(low, min_members=1)
        jobs.append(low)
    for _ in range(draw(st.integers(1, 2))):
        jobs.append(_job(len(jobs), draw(st.floats(1000.0, 3000.0)),
                         draw(st.sampled_from([1, 2, 4])), draw(st.floats(600.0, HOUR)),
                         high=True))
    jobs.sort(key=lambda j: j.arrival)
    return _world([replace(j, id=k) for k, j in enumerate(jobs)], node_gpus)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_the_floor_is_never_above_any_policy_and_is_exact(instance):
    w, nodes = instance
    alone = hindsight.floor(w, nodes, CFG, start_from_policies=False)
    for name, lost in alone.policy_gpu_hours.items():
        assert alone.floor_gpu_hours <= lost + TOLERANCE_GPU_HOURS, name
    assert set(alone.policy_gpu_hours) == set(planners.KNOWN)
    seeded = hindsight.floor(w, nodes, CFG)
    assert seeded.floor_gpu_hours == pytest.approx(alone.floor_gpu_hours, abs=1e-9)
    if alone.found_by == "search":
        replayed = hindsight.replay(w, nodes, CFG, alone.script)
        assert replayed.lost_gpu_hours == pytest.approx(alone.floor_gpu_hours, abs=1e-9)
