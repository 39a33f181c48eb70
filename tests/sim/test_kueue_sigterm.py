"""Save on SIGTERM (policies/sim/sigterm.py) in the engine: a victim stopped without a checkpoint
request saves when its job can and its grace period covers its checkpoint time; otherwise it
loses its work since its last checkpoint, as it always did. And the rows that set it."""

from __future__ import annotations

import pytest

from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import engine, planners, sigterm, workload
from ckpt_preempt.policies.sim.trace import TraceNode

HOUR = 3600.0
PLAN_AT = 1.5 * HOUR  # the preemptor arrives; the victim last checkpointed at 1 h
UNSAVED = PLAN_AT + 30.0 - HOUR  # what a plain kill after the 30 s grace loses, seconds


def _nodes(count: int, gpus: int = 1) -> list[TraceNode]:
    return [TraceNode(name=f"n{i}", cpu_milli=96000, memory_mib=10**6, gpus=gpus, model="G")
            for i in range(count)]


def _low(ckpt: float | None, *, mode=CheckpointMode.PERIODIC, reports=True, members=1):
    return workload.Job(
        id=0, name="low", arrival=0.0, duration=500 * HOUR, priority=0, qos="BE",
        members=tuple(workload.Member(name=f"low-{k}", cpu_milli=1000, memory_mib=1024, gpus=1)
                      for k in range(members)),
        checkpoint=mode, interval=HOUR if mode is not CheckpointMode.NONE else None,
        checkpoint_seconds=ckpt, reports=reports, restore_seconds=0.0)


def _high():
    return workload.Job(
        id=1, name="high", arrival=PLAN_AT, duration=600.0, priority=1000, qos="LS",
        members=(workload.Member(name="high-0", cpu_milli=1000, memory_mib=1024, gpus=1),),
        checkpoint=CheckpointMode.NONE, interval=None, checkpoint_seconds=None)


def _run(low, policy, nodes=1, **cfg):
    w = workload.Workload(jobs=(low, _high()), compress=1.0, offered_load=1.0, extra_pods=0,
                          window=6 * HOUR, capacity_gpus=nodes, params=workload.WorkloadParams())
    knobs = dict(restore_job_gpu_seconds=0.0, drain_failure_share=0.0, drain_overrun_share=0.0,
                 report_jitter_seconds=0.0)
    config = engine.SimConfig(**{**knobs, **cfg})
    sim = engine.Simulation(w, _nodes(nodes), policy, config)
    return sim, sim.run()


def _lost_seconds(r) -> float:
    return round(r.lost_work_gpu_hours * 3600, 6)


# (row, checkpoint seconds, mode, reports) -> (lost work s, preemptor's wait s, saved, failed)
CASES = {
    "world off: the unsaved work, as always": (
        ("kube-default", 20.0, CheckpointMode.PERIODIC, True), (UNSAVED, 30.0, 0, 0)),
    "grace covers: the default 30 s covers a 20 s save": (
        ("kube-default+sigterm", 20.0, CheckpointMode.PERIODIC, True), (20.0, 30.0, 1, 0)),
    "grace does not cover: the default 30 s, a 60 s save": (
        ("kube-default+sigterm", 60.0, CheckpointMode.PERIODIC, True), (UNSAVED, 30.0, 0, 0)),
    "sized grace covers a 60 s save; the preemptor waits for it": (
        ("kube-default+sigterm-sized", 60.0, CheckpointMode.PERIODIC, True), (60.0, 60.0, 1, 0)),
    "sized grace: the cap plus the margin covers 620 s": (
        ("kube-default+sigterm-sized", 620.0, CheckpointMode.PERIODIC, True),
        (620.0, 620.0, 1, 0)),
    "sized grace is capped: 700 s is not covered": (
        ("kube-default+sigterm-sized", 700.0, CheckpointMode.PERIODIC, True),
        (UNSAVED, 30.0, 0, 0)),
    "on-request jobs save on SIGTERM too": (
        ("kueue-classical+sigterm-sized", 90.0, CheckpointMode.ON_REQUEST, True),
        (90.0, 90.0, 1, 0)),
    "the job cannot checkpoint: no save, everything since its start lost": (
        ("kube-default+sigterm-sized", 60.0, CheckpointMode.NONE, True),
        (PLAN_AT + 30.0, 30.0, 0, 0)),
    "a silent job runs without the SDK: no save": (
        ("kube-default+sigterm-sized", 60.0, CheckpointMode.PERIODIC, False),
        (UNSAVED, 30.0, 0, 0)),
    "no declared checkpoint time: no save": (
        ("ours-under-kueue", None, CheckpointMode.PERIODIC, True), (UNSAVED, 30.0, 0, 0)),
}


@pytest.mark.parametrize(("given", "want"), CASES.values(), ids=CASES.keys())
def test_save_on_sigterm(given, want):
    policy, ckpt, mode, reports = given
    lost, wait, saved, failed = want
    sim, r = _run(_low(ckpt, mode=mode, reports=reports), policy)
    assert r.preemptions == 1 and r.policy == policy
    assert _lost_seconds(r) == pytest.approx(lost)
    assert r.preemptor_wait_p95_s == pytest.approx(wait)
    assert r.delay_gpu_hours * 3600 == pytest.approx(max(0.0, wait - 30.0))
    assert (sim.counts["sigterm_saved"], sim.counts["sigterm_failed"]) == (saved, failed)


def test_a_failed_save_loses_the_unsaved_work_and_holds_until_sigkill():
    # every save fails (the drain failure rate): the sized grace (60 + 30 s) runs out
    sim, r = _run(_low(60.0), "kube-default+sigterm-sized", drain_failure_share=1.0)
    assert _lost_seconds(r) == pytest.approx(PLAN_AT + 90.0 - HOUR)
    assert r.preemptor_wait_p95_s == pytest.approx(90.0)
    assert (sim.counts["sigterm_saved"], sim.counts["sigterm_failed"]) == (0, 1)


def test_an_overrun_save_past_its_grace_saves_nothing():
    # twice the 20 s estimate is past the default 30 s grace; 2 x 10 s is within it
    _, r = _run(_low(20.0), "kube-default+sigterm", drain_overrun_share=1.0)
    assert _lost_seconds(r) == pytest.approx(UNSAVED)
    _, r = _run(_low(10.0), "kube-default+sigterm", drain_overrun_share=1.0)
    assert _lost_seconds(r) == pytest.approx(20.0)


def test_a_member_taken_out_of_its_gang_alone_cannot_save():
    # kube-default evicts one member of the 2-pod gang: the other ranks are not told, the save
    # hangs until SIGKILL; Kueue stops the whole Job, which saves
    low = _low(60.0, members=2)
    sim, r = _run(low, "kube-default+sigterm-sized", nodes=2)
    assert r.gangs_broken == 1 and sim.counts["sigterm_failed"] == 1
    assert _lost_seconds(r) == pytest.approx(2 * (PLAN_AT + 90.0 - HOUR))
    sim, r = _run(low, "kueue-classical+sigterm-sized", nodes=2)
    assert r.gangs_broken == 0 and sim.counts["sigterm_saved"] == 1
    assert _lost_seconds(r) == pytest.approx(2 * 60.0)


ATTEMPTS = {
    "world off": (dict(world=sigterm.OFF), None),
    "covered by the default grace": (dict(world=sigterm.DEFAULT_GRACE, ckpt=30.0),
                                     sigterm.Save(saved=True, seconds=30.0, failed=False,
                                                  overran=False)),
    "not covered by the default grace": (dict(world=sigterm.DEFAULT_GRACE, ckpt=31.0), None),
    "part of a gang": (dict(world=sigterm.SIZED_GRACE, whole=False),
                       sigterm.Save(saved=False, seconds=90.0, failed=True, overran=False)),
    "cannot checkpoint": (dict(world=sigterm.SIZED_GRACE, mode=CheckpointMode.NONE), None),
    "save fails": (dict(world=sigterm.SIZED_GRACE, failure=1.0),
                   sigterm.Save(saved=False, seconds=90.0, failed=True, overran=False)),
}


@pytest.mark.parametrize(("kw", "want"), ATTEMPTS.values(), ids=ATTEMPTS.keys())
def test_attempt(kw, want):
    job = _low(kw.get("ckpt", 60.0), mode=kw.get("mode", CheckpointMode.PERIODIC))
    got = sigterm.attempt(job, world=kw["world"], whole=kw.get("whole", True), seed=1, nth=0,
                          default_grace=30.0, cap=600.0, failure_share=kw.get("failure", 0.0),
                          overrun_share=0.0, overrun_factor=2.0)
    assert got == want


def test_grace_sizes():
    assert sigterm.grace(sigterm.DEFAULT_GRACE, 120.0, default=30.0, cap=600.0) == 30.0
    assert sigterm.grace(sigterm.SIZED_GRACE, 120.0, default=30.0, cap=600.0) == 150.0
    assert sigterm.grace(sigterm.SIZED_GRACE, 900.0, default=30.0, cap=600.0) == 630.0
    assert sigterm.grace(sigterm.SIZED_GRACE, None, default=30.0, cap=600.0) == 30.0


def test_rows_set_their_world_and_keep_their_name():
    for name, (policy, world) in planners.WORLD_ROWS.items():
        sim, r = _run(_low(60.0), name)
        assert sim.cfg.sigterm_save == world and r.policy == name
        assert planners.row(name) == (policy, world)
    assert planners.row("kube-default") == ("kube-default", None)
    assert planners.named("kueue-classical,ours-under-kueue") == (
        "kueue-classical", "ours-under-kueue")
    assert not set(planners.KUEUE_ROWS) & set(planners.KNOWN)  # no default report changes


def test_an_unknown_world_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown sigterm_save 'always'"):
        _run(_low(60.0), "kube-default", sigterm_save="always")
