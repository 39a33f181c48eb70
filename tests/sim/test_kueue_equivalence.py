"""Save on SIGTERM is off for every row that existed before it, and then the engine's results
equal the old engine's, whatever the policy, workload or protocol; and Kueue's rows never break
a gang in the engine.

``OldEngine`` is the engine's ``_execute`` and ``_charge`` as they were before save on SIGTERM
(commit a260cd2), kept verbatim so that the property compares against them; when the engine's
internals change (a faster engine), this copy and its property go, the results being pinned by
the benches' recorded figures instead."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_preempt.controller.app import trace_files
from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim import engine, planners, protocols, waits
from ckpt_preempt.policies.sim.costs import drain_outcome, restart_gpu_seconds, split_at
from ckpt_preempt.policies.sim.devices import requests

CELLS = (("training", "replay"), ("training", "stress"), ("openb", "stress"))


class OldEngine(engine.Simulation):
    """The engine before save on SIGTERM (a260cd2's ``_execute`` and ``_charge``)."""

    def _execute(self, js, plan, snap):
        t, cfg = self.t, self.cfg
        measured = self.ledger.measured(t)
        drained = {v.uid for v in plan.victims if v.drain}
        deadline = min(cfg.max_checkpoint_seconds, max(
            (v.checkpoint_seconds or 0.0 for v in plan.victims if v.drain), default=0.0))
        hit = sorted({int(v.uid.split("-")[0]) for v in plan.victims})
        leaving = {v.uid for g in plan.victim_groups if g.shrink for v in g.victims}
        release = t + max(cfg.grace_seconds, deadline, waits.timed_wait(
            plan, [self.running[j] for j in hit], t, cfg, self.seed))
        ended = {job_id for job_id in hit if plan.timing is not None and plan.timing.waits
                 and waits.job_end(self.running[job_id]) <= release}
        self.counts["preemptions"] += measured
        for job_id in hit:
            vs = self.running[job_id]
            if job_id in ended:
                self._stop(vs, waits.job_end(vs))
                continue
            times = self.preempted.setdefault(job_id, [])
            nth = len(times)
            times.append(t)
            self.measured_preemptions[job_id] += measured
            self.counts["unreported"] += measured and not self._reports(vs.job)
            evicted = {p.uid for p, _ in vs.pods}
            named = {v.uid for v in plan.victims} & evicted
            if self._shrinks(vs, named, leaving, t, release, measured):
                continue
            if vs.job.is_gang and named != evicted:
                if plan.policy not in planners.GANG_UNAWARE:
                    self.counts["invalid"] += 1
                self.counts["gangs_broken"] += measured
            self._charge(vs, t, release, bool(drained & evicted), nth, deadline, measured)
            self.counts["victims"] += measured * len(evicted)
        placed = [0] * len(js.job.members)
        by_uid = {p.pod_uid: p.node for p in plan.placements}
        allowed = self.cap.allowed_for(js.job.members)
        for k, m in enumerate(js.job.members):
            i = self.index[by_uid[f"{js.job.id}-{k}"]]
            r = requests(m)
            if not self.cap.fits(i, r) or (allowed is not None and i not in allowed):
                self.counts["invalid"] += 1
            self.cap.take(i, r, f"{js.job.id}-{k}")
            placed[k] = i
        self.high.remove(js)
        self._waited(js, release)
        waited = max(deadline, release - t if plan.timing is not None else 0.0)
        self.ledger.delayed(t, js.job.gpu_share * max(0.0, waited - cfg.grace_seconds))
        self._start(js, placed, release)

    def _charge(self, vs, t, release, drained, nth, deadline, measured, *_):
        job, cfg = vs.job, self.cfg
        share = sum(job.members[int(p.uid.split("-")[1])].gpu_share for p, _ in vs.pods)
        saved_by_drain = False
        if drained and job.checkpoint is CheckpointMode.ON_REQUEST:
            out = drain_outcome(
                seed=self.seed, job_id=job.id, nth=nth, estimate=job.checkpoint_seconds or 0.0,
                deadline=deadline, failure_share=cfg.drain_failure_share,
                overrun_share=cfg.drain_overrun_share, overrun_factor=cfg.drain_overrun_factor)
            self.counts["drains_failed"] += measured and out.failed
            self.counts["drains_overrun"] += measured and out.overran
            if out.saved:
                saved_by_drain = True
                saved = max(0.0, t - vs.origin)
                lost, prior = share * out.seconds, 0.0
        if not saved_by_drain:
            last = vs.last_checkpoint(release)
            saved = max(0.0, last - vs.origin)
            inside, before = split_at(max(last, vs.origin), release, self.w.warmup)
            lost, prior = share * inside, share * before
        restore = job.restore_seconds if job.restore_seconds is not None else cfg.restore_seconds
        self._stop(vs, release)
        vs.remaining = max(1.0, vs.remaining - saved * vs.speed)
        vs.restore = restore
        self.ledger.evicted(t, lost, restart_gpu_seconds(
            gpu_share=share, per_gpu_seconds=restore,
            per_job_gpu_seconds=cfg.restore_job_gpu_seconds), prior)
        self._push(release, "requeue", vs)


@pytest.fixture(scope="module")
def traces():
    return {w: trace_files.load(w) for w in ("openb", "training")}


def _build(traces, cell, seed):
    pods, nodes = traces[cell[0]]
    return protocols.build(workload=cell[0], protocol=cell[1], seed=seed, pods=pods, nodes=nodes,
                           scale=0.02, utilisation=1.2)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cell=st.sampled_from(CELLS), seed=st.integers(1, 30),
       policy=st.sampled_from((*planners.KNOWN, planners.KUEUE_POLICY)),
       harsh=st.booleans())
def test_with_save_on_sigterm_off_the_results_equal_the_old_engines(traces, cell, seed, policy,
                                                                     harsh):
    w, used = _build(traces, cell, seed)
    cfg = engine.SimConfig()
    if harsh:  # every drain fails or overruns: the paths a save on SIGTERM shares
        cfg = replace(cfg, drain_failure_share=0.5, drain_overrun_share=0.5)
    new = engine.Simulation(w, used, policy, cfg).run()
    old = OldEngine(w, used, policy, cfg).run()
    assert new == old


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cell=st.sampled_from(CELLS), seed=st.integers(1, 30),
       row=st.sampled_from((planners.KUEUE_POLICY, f"{planners.KUEUE_POLICY}+sigterm-sized",
                            planners.OURS_UNDER_KUEUE)))
def test_kueue_rows_never_break_a_gang_and_plan_only_what_fits(traces, cell, seed, row):
    w, used = _build(traces, cell, seed)
    r = engine.Simulation(w, used, row, engine.SimConfig()).run()
    assert r.gangs_broken == 0 and r.plans_invalid == 0


def test_a_world_where_nobody_can_save_equals_the_world_off(traces):
    # the default 30 s grace covers none of the generators' checkpoint times (30-180 s)
    w, used = _build(traces, ("training", "replay"), 3)
    off = engine.Simulation(w, used, "kube-default", engine.SimConfig()).run()
    on = engine.Simulation(w, used, "kube-default+sigterm", engine.SimConfig()).run()
    assert off.preemptions > 0 and replace(on, policy=off.policy) == off
