"""The disruption protocol in the event loop (policies/sim/disruption_sim.py) against cases
computed by hand: one node and one checkpointer per case, every cost beyond unsaved work off
unless the case needs it, so each charge is arithmetic on the numbers below."""

import pytest

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import disruptions as dis
from ckpt_preempt.policies.sim import engine, workload
from ckpt_preempt.policies.sim.disruption_sim import DisruptedSimulation
from ckpt_preempt.policies.sim.trace import TraceNode

HOUR = 3600.0
IDEAL = engine.SimConfig().without_costs()  # no restore, no report lag, drains never fail
POLICY = "checkpoint-aware-drain"
NO_AUTOSCALER = dis.DisruptionParams(autoscaler_check_seconds=0.0)


def node(i, gpus=4, model="G"):
    return TraceNode(name=f"n{i}", cpu_milli=96000, memory_mib=10**6, gpus=gpus, model=model)


def job(i, gpus, *, mode=CheckpointMode.ON_REQUEST, interval=HOUR, checkpoint=100.0,
        duration=20 * HOUR, arrival=0.0, spec="", high=False):
    return workload.Job(
        id=i, name=f"j{i}", arrival=arrival, duration=duration,
        priority=1000 if high else 0, qos="LS" if high else "BE",
        members=(workload.Member(name=f"j{i}-0", cpu_milli=1000, memory_mib=1024, gpus=gpus,
                                 gpu_spec=spec),),
        checkpoint=mode, interval=interval,
        checkpoint_seconds=checkpoint if mode is not CheckpointMode.NONE else None)


def wl(*jobs, window=6 * HOUR, gpus=4):
    return workload.Workload(jobs=tuple(jobs), compress=1.0, offered_load=1.0, extra_pods=0,
                             window=window, capacity_gpus=gpus,
                             params=workload.WorkloadParams())


def run(w, nodes, world, fixed=(), params=NO_AUTOSCALER, config=IDEAL):
    return DisruptedSimulation(w, nodes, POLICY, config, world=world, params=params,
                               fixed=tuple(fixed)).run()


def test_a_maintenance_drain_loses_exactly_the_hand_value_in_each_world():
    # A 2-GPU on-request job on a 4-GPU node, periodic checkpoints every hour from 0, a 100 s
    # checkpoint. Cordon at 4400 s, kubectl drain 600 s later (5000 s).
    d = dis.disruption(0, dis.MAINTENANCE, 0, 4400.0, dis.DEFAULT_PARAMS)
    w = wl(job(0, 2))
    by_world = {world: run(w, [node(0)], world, [d]) for world in dis.WORLDS}
    plain = by_world["no-gate"].kinds[dis.MAINTENANCE]
    # no gate: killed at 5000, back to the 3600 checkpoint: 1400 s on 2 GPUs; an instant drain
    assert plain.lost_work_gpu_hours == pytest.approx(2 * 1400 / HOUR)
    assert plain.delay_gpu_hours == 0.0 and plain.drain_extra_seconds == (0.0,)
    for world in ("gate", "gate+warning"):
        k = by_world[world].kinds[dis.MAINTENANCE]
        # held from 5000 to its checkpoint's end at 5100 (the early one at 4400 is 600 s stale,
        # more than a fresh 100 s one, so the warned pod is asked again): 100 s on 2 GPUs lost,
        # and the drain's extra 100 s on the 2 GPUs that neither train nor checkpoint
        assert k.lost_work_gpu_hours == pytest.approx(2 * 100 / HOUR), world
        assert k.delay_gpu_hours == pytest.approx(2 * 100 / HOUR), world
        assert k.drain_extra_seconds == (100.0,)
        (ev,) = by_world[world].evictions
        assert (ev.at, ev.requests) == (5100.0, 1 if world == "gate" else 2)
    for r in by_world.values():  # one disruption, one eviction, the same restart (none here)
        k = r.kinds[dis.MAINTENANCE]
        assert (k.disruptions, k.evictions, k.restart_gpu_hours) == (1, 1, 0.0)
        # the node leaves when its drain ends and is back an hour later
        assert r.outages == ((0, 0, r.evictions[0].at, r.evictions[0].at + HOUR),)


@pytest.mark.parametrize("checkpoint, warned_loss", [(60.0, 1430.0), (20.0, 30.0)])
def test_a_30s_spot_notice_loses_the_work_since_the_last_checkpoint(checkpoint, warned_loss):
    # Notice at 5000, the node gone at 5030; the last periodic checkpoint at 3600.
    d = dis.disruption(0, dis.SPOT_SHORT, 0, 5000.0, dis.DEFAULT_PARAMS)
    w = wl(job(0, 1, checkpoint=checkpoint))
    for world in dis.WORLDS:
        r = run(w, [node(0)], world, [d])
        k = r.kinds[dis.SPOT_SHORT]
        (ev,) = r.evictions
        assert ev.at == 5030.0  # nobody outlives the node
        # no Eviction reaches the gate on a 30 s notice, so only the warning asks; a 60 s
        # checkpoint cannot end inside 30 s: 1430 s lost in every world. A 20 s one can.
        lost = warned_loss if world == "gate+warning" else 1430.0
        assert k.lost_work_gpu_hours == pytest.approx(lost / HOUR), world
        assert k.delay_gpu_hours == 0.0 and k.drain_extra_seconds == ()  # a spot node just goes
        assert r.outages == ((0, 0, 5030.0, 5030.0 + dis.DEFAULT_PARAMS.spot_out_seconds),)


def test_the_autoscaler_scales_down_only_nodes_under_its_threshold_at_two_checks_in_a_row():
    # Three 4-GPU nodes, each job pinned to one by its GPU model. n0 is full all along; n1
    # runs 1 GPU (under half) at every check; n2 runs 2 GPUs (not under) until 900 s, then
    # nothing. Checks every 600 s: at 600 n1 is under once; at 1200 n1 is under a second time
    # and is scaled down (room elsewhere: n2's 4 free GPUs), while n2 is under for the first
    # time and stays; at 1800 n2 is under a second time and goes (it needs no room).
    nodes = [node(0, model="A"), node(1, model="B"), node(2, model="C")]
    w = wl(job(0, 4, spec="A"), job(1, 1, spec="B", mode=CheckpointMode.PERIODIC),
           job(2, 2, spec="C", duration=900.0), window=2000.0, gpus=12)
    r = run(w, nodes, "gate", params=dis.DEFAULT_PARAMS)
    assert [(node_, left) for _, node_, left, _ in r.outages] == [(1, 1200.0), (2, 1800.0)]
    k = r.kinds[dis.AUTOSCALER]
    assert (k.disruptions, k.evictions) == (2, 1)
    (ev,) = r.evictions  # n1's periodic job, which the gate cannot ask: 1200 s on 1 GPU
    assert (ev.job, ev.node, ev.at, ev.requests) == (1, 1, 1200.0, 0)
    assert k.lost_work_gpu_hours == pytest.approx(1200.0 / HOUR)


def test_the_autoscaler_stops_checking_at_the_window_end_so_the_run_ends():
    # A high-priority job that fits no node keeps the engine running past the window; the
    # autoscaler's checks used to push one another for ever (a run that never ended).
    checks = []

    class Counted(DisruptedSimulation):
        def _autoscale(self):
            checks.append(self.t)
            if len(checks) > 100:
                raise AssertionError("the autoscaler is still checking long past the window")
            super()._autoscale()

    w = wl(job(0, 8, high=True, mode=CheckpointMode.NONE), window=1800.0)
    r = Counted(w, [node(0)], POLICY, IDEAL, world="no-gate", params=dis.DEFAULT_PARAMS).run()
    assert checks == [600.0, 1200.0, 1800.0]
    assert r.policy.high_jobs_waiting == 1
