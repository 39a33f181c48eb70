"""Fractional GPUs: shares of one device packed together in the engine, shown to the planner
as thousandths of a GPU and charged at their fraction."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.model import MILLI_PER_GPU, CheckpointMode, Node, Resources
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


def cap_of(gpus, shared):
    return devices.Capacity([Node(name="n", allocatable=Resources(
        cpu_milli=10**6, memory_mib=10**6, gpus=gpus))], ["G"], [shared])


def test_shares_pack_on_shared_devices_and_whole_pods_on_whole_ones():
    cap = cap_of(3, 2)
    assert cap.place([member("a", 300)], ["a"]) == [0]
    assert cap.place([member("b", 600)], ["b"]) == [0]  # packed onto a's device
    assert sorted(cap.shared[0]) == [0, 900]
    assert cap.place([member("c", 0, 1)], ["c"]) == [0]  # the one whole device
    assert cap.place([member("d", 0, 1)], ["d"]) is None  # a shared device is no whole GPU
    assert cap.place([member("e", 950)], ["e"]) == [0]  # the second shared device
    assert cap.place([member("f", 200)], ["f"]) is None  # 100 and 50 left
    assert cap.place([member("g", 100)], ["g"]) == [0]
    cap.give(0, devices.requests(member("e", 950)), "e")
    assert cap.place([member("f", 200)], ["f"]) == [0]
    shown = cap.exclusions([member("x", 0, 1)])[0].allocatable
    assert (shown.gpus, shown.gpu_milli) == (1, 2 * MILLI_PER_GPU)


def test_the_split_follows_the_fractional_share_of_demand():
    assert devices.shared_split([8, 8, 2], 0.0) == [0, 0, 0]
    assert devices.shared_split([8, 8, 2], 0.01) == [0, 0, 1]  # any share gets a device
    assert devices.shared_split([2, 8, 4], 0.1) == [1, 0, 0]  # 1.4 of 14 GPUs
    assert devices.shared_split([2, 8, 4], 0.2) == [1, 1, 1]  # 2.8, no whole pod to keep
    # an 8-GPU pod keeps the 8-GPU node whole
    assert devices.shared_split([2, 8, 4], 0.2, whole=8) == [1, 0, 1]
    assert devices.shared_split([8, 8, 2], 0.5, whole=8) == [1, 0, 1]  # one per node at most
    assert devices.shared_split([1, 0, 1], 1.0) == [1, 0, 1]
    jobs = [job(0, 0.0, milli=500, duration=HOUR), job(1, 0.0, gpus=2, duration=HOUR)]
    assert devices.fractional_demand_share(jobs) == pytest.approx(0.5 / 2.5)


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.sampled_from([0, 100, 250, 500, 700])),
                    min_size=1, max_size=30), shared=st.integers(0, 3))
def test_shares_never_overfill_a_device_and_whole_pods_stay_whole(ops, shared):
    gpus = 3
    cap = cap_of(gpus, shared)
    held: list[tuple[str, workload.Member]] = []
    for k, (add, milli) in enumerate(ops):
        if add or not held:
            m = member(f"p{k}", milli, 1)
            if cap.place([m], [m.name]) is not None:
                held.append((m.name, m))
        else:
            name, m = held.pop(0)
            cap.give(0, devices.requests(m), name)
        assert all(0 <= used <= MILLI_PER_GPU for used in cap.shared[0])
        whole = sum(1 for _, m in held if not m.gpu_milli)
        assert cap.free[0].gpus == gpus - shared - whole >= 0
        assert sum(cap.shared[0]) == sum(m.gpu_milli for _, m in held)
        assert cap.free[0].gpu_milli == shared * MILLI_PER_GPU - sum(cap.shared[0])
    for name, m in held:
        cap.give(0, devices.requests(m), name)
    assert cap.free[0] == cap.nodes[0].allocatable


class _Checked(engine.Simulation):
    """Asserts, at every plan, that the planner's free capacity is the engine's."""

    def _preempt(self, js):
        snap = self._snapshot([self._model(js, k, None, self.t)
                               for k in range(len(js.job.members))], js.job)
        for i, n in enumerate(self.cap.nodes):
            free = snap.free(n.name)
            assert (free.gpus, free.gpu_milli) == (self.cap.free[i].gpus,
                                                   self.cap.free[i].gpu_milli)
        return super()._preempt(js)


def test_the_planner_sees_the_engines_free_whole_and_shared_capacity():
    jobs = [job(0, 0.0, milli=400), job(1, 0.0, milli=300), job(2, 0.0, gpus=1),
            job(3, 60.0, milli=700), job(4, 120.0, gpus=2),
            job(5, HOUR, milli=500, high=True, duration=600.0),
            job(6, 2 * HOUR, gpus=1, high=True, duration=600.0)]
    w = wl(*jobs, gpus=4)
    for policy in ("kube-default", "checkpoint-aware"):
        r = _Checked(w, node(4), policy, IDEAL).run()
        assert r.preemptions >= 2 and r.plans_invalid == 0


def test_a_fractional_victim_is_charged_at_its_share_of_the_restore():
    # one GPU: a 0.75 share runs; a 0.5-GPU preemptor evicts it, which pays 0.75 × 400 s
    w = wl(job(0, 0.0, milli=750), job(1, HOUR, milli=500, high=True, duration=600.0))
    cfg = replace(IDEAL, restore_seconds=400.0)
    r = engine.Simulation(w, node(), "checkpoint-aware", cfg).run()
    assert r.preemptions == 1
    assert r.restart_gpu_hours == pytest.approx(0.75 * 400 / HOUR)
    assert r.lost_work_gpu_hours == pytest.approx(0.75 * (HOUR + 30) / HOUR)
