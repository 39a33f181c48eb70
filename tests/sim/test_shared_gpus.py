"""Fractional GPUs: shares of one device packed together in the engine, shown to the planner
as thousandths of a GPU and charged at their fraction."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model import MILLI_PER_GPU, CheckpointMode, Node, Resources
from ckpt_preempt.policies.sim import devices, engine, workload
from ckpt_preempt.policies.sim.trace import TraceNode

HOUR = 3600.0
IDEAL = engine.SimConfig().without_costs()


def node(gpus=1):
    return [TraceNode(name="n0", cpu_milli=96000, memory_mib=10**6, gpus=gpus, model="G")]


def member(name, milli=0, gpus=1):
    return workload.Member(name=name, cpu_milli=1000, memory_mib=1024, gpus=gpus,
                           gpu_milli=milli)


def job(i, arrival, *, milli=0, gpus=1, high=False, duration=10 * HOUR):
    return workload.Job(
        id=i, name=f"j{i}", arrival=arrival, duration=duration,
        priority=1000 if high else 0, qos="LS" if high else "BE",
        members=(member(f"j{i}-0", milli, gpus),), checkpoint=CheckpointMode.NONE,
        interval=None, checkpoint_seconds=None)


def wl(*jobs, gpus=1, window=4 * HOUR):
    return workload.Workload(jobs=tuple(jobs), compress=1.0, offered_load=1.0, extra_pods=0,
                             window=window, capacity_gpus=gpus,
                             params=workload.WorkloadParams())


def test_two_half_gpu_pods_share_one_device():
    # one GPU, two 0.5-GPU jobs at 0, then a 0.5-GPU high-priority pod at 1 h: both low jobs
    # run side by side (no wait, nothing else fits), so the preemptor evicts one of them and
    # that one loses half a GPU × (1 h + 30 s grace)
    w = wl(job(0, 0.0, milli=500), job(1, 0.0, milli=500),
           job(2, HOUR, milli=500, high=True, duration=600.0))
    r = engine.Simulation(w, node(), "checkpoint-aware", IDEAL).run()
    assert r.preemptions == 1 and r.plans_invalid == 0
    assert r.lost_gpu_hours == pytest.approx(0.5 * (HOUR + 30) / HOUR)


def test_a_whole_gpu_pod_cannot_use_a_shared_device():
    cap = devices.Capacity([Node(name="n", allocatable=Resources(cpu_milli=9000, memory_mib=9000,
                                                                 gpus=2))], ["G"])
    assert cap.place([member("a", 300)], ["a"]) == [0]
    assert cap.place([member("b", 600)], ["b"]) == [0]  # packed onto a's device
    assert len(cap.shared[0]) == 1
    assert cap.place([member("c", 0, 1)], ["c"]) == [0]  # the second device, whole
    assert cap.place([member("d", 0, 1)], ["d"]) is None
    assert cap.place([member("e", 200)], ["e"]) is None  # 100 left on the shared device
    assert cap.place([member("f", 100)], ["f"]) == [0]
    shown = cap.exclusions([member("x", 0, 1)])[0].allocatable
    assert (shown.gpus, shown.gpu_milli) == (1, MILLI_PER_GPU)


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.sampled_from([0, 100, 250, 500, 700])),
                    min_size=1, max_size=30))
def test_shares_never_overfill_a_device_and_free_devices_come_back_whole(ops):
    gpus = 3
    cap = devices.Capacity([Node(name="n", allocatable=Resources(
        cpu_milli=10**6, memory_mib=10**6, gpus=gpus))], ["G"])
    held: list[tuple[str, workload.Member]] = []
    for k, (add, milli) in enumerate(ops):
        if add or not held:
            m = member(f"p{k}", milli, 1)
            if cap.place([m], [m.name]) is not None:
                held.append((m.name, m))
        else:
            name, m = held.pop(0)
            cap.give(0, devices.requests(m), name)
        assert all(0 < used <= MILLI_PER_GPU for used in cap.shared[0].values())
        whole = sum(1 for _, m in held if not m.gpu_milli)
        assert cap.free[0].gpus == gpus - whole - len(cap.shared[0])
        shown = cap.exclusions([])[0].allocatable
        assert shown.gpus + shown.gpu_milli // MILLI_PER_GPU == gpus
    for name, m in held:
        cap.give(0, devices.requests(m), name)
    assert cap.free[0].gpus == gpus and not cap.shared[0]


def test_a_fractional_victim_is_charged_at_its_share_of_the_restore():
    # one GPU: a 0.75 share runs; a 0.5-GPU preemptor evicts it, which pays 0.75 × 400 s
    w = wl(job(0, 0.0, milli=750), job(1, HOUR, milli=500, high=True, duration=600.0))
    cfg = replace(IDEAL, restore_seconds=400.0)
    r = engine.Simulation(w, node(), "checkpoint-aware", cfg).run()
    assert r.preemptions == 1
    assert r.restart_gpu_hours == pytest.approx(0.75 * 400 / HOUR)
    assert r.lost_work_gpu_hours == pytest.approx(0.75 * (HOUR + 30) / HOUR)


def test_the_planner_cannot_free_a_shared_device_for_a_whole_gpu_preemptor():
    # the documented difference (devices.py, 2): one GPU shared by a 0.25 share; a whole-GPU
    # preemptor finds no plan and waits for the share to finish
    w = wl(job(0, 0.0, milli=250, duration=2 * HOUR), job(1, HOUR, high=True, duration=600.0))
    r = engine.Simulation(w, node(), "checkpoint-aware", IDEAL).run()
    assert r.preemptions == 0 and r.plans_failed > 0
    assert r.preemptor_wait_p50_s == pytest.approx(HOUR)
