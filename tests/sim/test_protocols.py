"""The three protocols on every workload: what each promises about arrivals, load and warm-up."""

import re
import statistics
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_preempt.controller.app import trace_files
from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import protocols
from ckpt_preempt.policies.sim.protocols import build, contended_nodes
from ckpt_preempt.policies.sim.trace import TraceError, TraceNode
from ckpt_preempt.policies.sim.workload import (
    Job,
    Member,
    WorkloadParams,
    generate,
    offered_load,
    scale_down,
)


@pytest.fixture(scope="module")
def loaded():
    return {w: trace_files.load(w) for w in protocols.WORKLOADS}


def _build(loaded, workload, protocol, seed=1, **kw):
    pods, nodes = loaded[workload]
    return build(workload=workload, protocol=protocol, seed=seed, pods=pods, nodes=nodes, **kw)


@pytest.mark.parametrize(("kw", "message"), [
    (dict(workload="philly", protocol="stress"), "unknown workload 'philly'"),
    (dict(workload="openb", protocol="burst"), "unknown protocol 'burst'"),
    (dict(workload="openb", protocol="replay", pods=None), "needs a pod trace"),
])
def test_unknown_names_and_missing_pods_are_clear_errors(loaded, kw, message):
    pods, nodes = loaded["openb"]
    args = dict(seed=1, pods=pods, nodes=nodes) | kw
    with pytest.raises(ValueError, match=message):
        build(**args)


def test_stress_is_the_compressed_generator(loaded):
    pods, nodes = loaded["openb"]
    w, kept = _build(loaded, "openb", "stress")
    params = WorkloadParams(seed=1)
    sp, sn = scale_down(pods, nodes, params)
    assert w.jobs == generate(sp, sn, params).jobs and kept == sn
    assert (w.protocol, w.warmup) == ("stress", 0.0)


def _pod_name(job_name: str) -> str:
    return re.sub(r"-\d+$", "", job_name.removeprefix("gang-"))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replay_prefills_keeps_real_time_and_is_contended(loaded, seed):
    pods, nodes = loaded["openb"]
    w, kept = _build(loaded, "openb", "replay", seed=seed)
    params = WorkloadParams()
    assert (w.protocol, w.compress) == ("replay", 1.0)
    assert w.window == params.replay_window_hours * 3600
    assert w.warmup == params.warmup_share * w.window
    prefilled = [j for j in w.jobs if j.done_before > 0]
    assert prefilled and all(j.arrival == 0 for j in prefilled)
    by_name = {p.name: p for p in pods}
    # every other job arrives at its pod's creation minus one common start: real-time spacing
    starts = {by_name[_pod_name(j.name)].creation - j.arrival
              for j in w.jobs if j.done_before == 0}
    assert len(starts) == 1
    t0 = starts.pop()
    for j in prefilled:
        pod = by_name[_pod_name(j.name)]
        assert pod.creation + j.done_before == pytest.approx(t0)
        assert j.duration == pytest.approx(pod.deletion - t0)
    # contended: the kept GPUs reach demand ÷ contention, one node fewer would not
    target = offered_load(w.jobs, 1, 0, w.window) / params.contention
    assert w.capacity_gpus == sum(n.gpus for n in kept) >= target
    assert w.capacity_gpus - 2 * max(n.gpus for n in kept) < target
    assert len(kept) < len(nodes)


def test_contended_nodes_stop_at_the_target_and_add_a_node_for_the_largest_pod():
    nodes = [TraceNode(name=f"n{i}", cpu_milli=1, memory_mib=1, gpus=g, model="")
             for i, g in enumerate([2, 2, 2, 2, 8])]
    w_jobs = _jobs_of_gpus([2, 2])  # 4 GPUs demanded over the whole window
    kept = contended_nodes(nodes, w_jobs, 10.0, 1.0, _FixedOrder([0, 1, 2, 3, 4]))
    assert [n.name for n in kept] == ["n0", "n1"]
    kept = contended_nodes(nodes, _jobs_of_gpus([8]), 10.0, 4.0, _FixedOrder([0, 1, 2, 3, 4]))
    assert [n.name for n in kept] == ["n0", "n4"]  # 2 GPUs reach 8 ÷ 4; an 8-GPU node is added


class _FixedOrder:
    def __init__(self, order):
        self.order = order

    def sample(self, population, k):
        return self.order[:k]


def _jobs_of_gpus(gpus):
    return [Job(id=i, name=f"j{i}", arrival=0.0, duration=10.0, priority=0, qos="BE",
                members=(Member(name="m", cpu_milli=1, memory_mib=1, gpus=g),),
                checkpoint=CheckpointMode.NONE, interval=None, checkpoint_seconds=None)
            for i, g in enumerate(gpus)]


@pytest.mark.parametrize("workload", protocols.WORKLOADS)
@pytest.mark.parametrize("utilisation", [0.8, 1.4])
def test_steady_offers_the_target_utilisation(loaded, workload, utilisation):
    loads = []
    for seed in range(1, 13):
        w, kept = _build(loaded, workload, "steady", seed=seed, utilisation=utilisation)
        assert (w.protocol, w.warmup) == ("steady", 6 * 3600.0)
        assert w.capacity_gpus == sum(n.gpus for n in kept)
        loads.append(w.offered_load)
    assert statistics.mean(loads) == pytest.approx(utilisation, rel=0.05)
    assert all(x == pytest.approx(utilisation, rel=0.3) for x in loads)


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(1, 10**6))
def test_steady_starts_in_equilibrium(loaded, seed):
    w, _ = _build(loaded, "openb", "steady", seed=seed)
    # the pre-filled jobs alone already offer about the target load at t = 0, counted as the
    # rate is, in GPU shares (a 0.46-GPU pod is 0.46, not the one device it touches): counted in
    # devices, openb's shared pods make it 1.15 on average (1.28 on one seed)
    at_start = sum(j.gpu_share for j in w.jobs if j.arrival == 0) / w.capacity_gpus
    assert at_start == pytest.approx(1.0, rel=0.25)
    assert all(j.done_before > 0 for j in w.jobs if j.arrival == 0)
    assert max(j.arrival for j in w.jobs) < w.window


@pytest.mark.parametrize("protocol", protocols.PROTOCOLS)
def test_training_runs_under_every_protocol(loaded, protocol):
    w, kept = _build(loaded, "training", protocol)
    assert w.protocol == protocol and w.jobs
    assert any(j.is_gang for j in w.jobs) and any(j.high for j in w.jobs)
    assert all(j.restore_seconds is not None for j in w.jobs)
    biggest = max(n.gpus for n in kept)
    assert all(m.gpus <= biggest for j in w.jobs for m in j.members)


@pytest.mark.parametrize("seed", [1, 2])
def test_training_stress_stops_at_the_target_load(loaded, seed):
    w, _ = _build(loaded, "training", "stress", seed=seed)
    biggest_job = max(j.gpus for j in w.jobs)
    assert 1.3 <= w.offered_load < 1.3 + biggest_job / w.capacity_gpus
    assert sorted(j.arrival for j in w.jobs) == [j.arrival for j in w.jobs]
    assert all(0 <= j.arrival < w.window for j in w.jobs)


def test_multigpu20_replays_with_drawn_times(loaded):
    w, _ = _build(loaded, "openb-multigpu20", "replay")
    assert any(j.gpus >= 8 for j in w.jobs) and any(j.done_before > 0 for j in w.jobs)


def test_trace_files_refuse_missing_and_unknown(tmp_path: Path):
    with pytest.raises(TraceError, match=r"absent.csv: no such file"):
        trace_files.load("openb", pods_path=tmp_path / "absent.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu\np,1,1,x\n")
    with pytest.raises(TraceError, match=r"bad.csv: line 2: num_gpu='x'"):
        trace_files.load("openb", pods_path=bad)
    with pytest.raises(ValueError, match="unknown workload"):
        trace_files.load("alibaba")
    with pytest.raises(ValueError, match="takes no --pods"):
        trace_files.load("training", pods_path=bad)


def test_trace_files_give_untimed_pods_reproducible_times(tmp_path: Path):
    untimed = tmp_path / "untimed.csv"
    untimed.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,8,8000\nb,1,1,1,300\n")
    first, _ = trace_files.load("openb", pods_path=untimed)
    again, _ = trace_files.load("openb", pods_path=untimed)
    assert first == again and first is not None and first[1].fractional


def _pinned_jobs(specs_gpus):
    return [Job(id=i, name=f"j{i}", arrival=0.0, duration=10.0, priority=0, qos="BE",
                members=(Member(name="m", cpu_milli=1, memory_mib=1, gpus=g, gpu_spec=spec),),
                checkpoint=CheckpointMode.NONE, interval=None, checkpoint_seconds=None)
            for i, (spec, g) in enumerate(specs_gpus)]


def test_every_pinned_pod_class_gets_nodes_of_its_model_in_proportion_to_its_demand():
    # four A nodes first in the seeded order, the B nodes last: unpinned demand alone would
    # stop at two A nodes and leave the B-pinned pods nowhere to run
    nodes = [TraceNode(name=f"a{i}", cpu_milli=1, memory_mib=1, gpus=2, model="A")
             for i in range(4)]
    nodes += [TraceNode(name=f"b{i}", cpu_milli=1, memory_mib=1, gpus=2, model="B")
              for i in range(3)]
    order = _FixedOrder(list(range(7)))
    jobs = _pinned_jobs([("", 2), ("B", 2), ("B", 2), ("A|B", 1)])
    kept = contended_nodes(nodes, jobs, 10.0, 1.0, order)
    names = [n.name for n in kept]
    # B demands 4 GPUs: two B nodes; "A|B" (1 GPU) is served by them; 7 GPUs are demanded in
    # all: two A nodes more (8 GPUs)
    assert names == ["a0", "a1", "b0", "b1"]
    # a class no node suits is left without, and the rest is sized as before
    kept = contended_nodes(nodes, _pinned_jobs([("", 2), ("C", 2)]), 10.0, 1.0, order)
    assert [n.name for n in kept] == ["a0", "a1"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replay_gives_a_pinned_class_nodes_for_its_demand(seed):
    # the bundled openb traces pin no pod; this one pins a third of its pods to the rare model B
    from ckpt_preempt.policies.sim.trace import TracePod

    nodes = [TraceNode(name=f"a{i}", cpu_milli=64000, memory_mib=10**6, gpus=4, model="A")
             for i in range(30)]
    nodes += [TraceNode(name=f"b{i}", cpu_milli=64000, memory_mib=10**6, gpus=4, model="B")
              for i in range(6)]
    pods = [TracePod(name=f"p{k}", cpu_milli=1000, memory_mib=1000, gpus=1, gpu_milli=1000,
                     qos="BE" if k % 4 else "LS", creation=600.0 * k,
                     deletion=600.0 * k + 7200.0, gpu_spec="B" if k % 3 == 0 else "")
            for k in range(2000)]
    w, kept = build(workload="openb", protocol="replay", seed=seed, pods=pods, nodes=nodes)
    b_gpus = sum(n.gpus for n in kept if n.model == "B")
    b_demand = sum(m.gpus * max(0.0, min(j.duration, w.window - j.arrival))
                   for j in w.jobs for m in j.members if m.gpu_spec == "B") / w.window
    assert b_demand > 0 and b_gpus >= b_demand / WorkloadParams().contention


@pytest.mark.parametrize("seed", [2, 3])
def test_more_replay_windows_replay_more_of_the_trace_on_a_larger_cluster(loaded, seed):
    one, _ = _build(loaded, "openb", "replay", seed=seed)
    three, _ = _build(loaded, "openb", "replay", seed=seed,
                      params=WorkloadParams(replay_windows=3))
    # the first window is the one a single-window replay takes; two more are added to it
    def pods(w):
        return {re.sub(r"-\d+-\d+$", "", m.name) for j in w.jobs for m in j.members}

    assert pods(one) <= pods(three)
    assert len(three.jobs) > 1.5 * len(one.jobs)
    assert three.capacity_gpus > 1.5 * one.capacity_gpus
    assert three.window == one.window and three.warmup == one.warmup
    with pytest.raises(ValueError, match="replay_windows"):
        _build(loaded, "openb", "replay", params=WorkloadParams(replay_windows=0))
