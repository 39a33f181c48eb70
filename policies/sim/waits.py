"""How long the simulated controller waits for a plan's timing (``Plan.timing``), from the
ground truth: the victims ``policies.planner.timing`` chose to wait for are seen checkpointed when
their next periodic checkpoint's report arrives (``report_lag_seconds`` after it completes, and only
if the published time, with its seeded error, is later than the plan: the controller's ack rule), or
seen ended ``report_lag_seconds`` after they end; the plan evicts when all are seen, or at its
deadline. Used by ``Simulation._execute`` (policies/sim/engine.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ckpt_preempt.policies.model.model import Plan
from ckpt_preempt.policies.sim.costs import report_error

if TYPE_CHECKING:
    from ckpt_preempt.policies.sim.engine import JobState, SimConfig


def job_end(vs: JobState) -> float:
    """When a running job finishes if nothing stops it."""
    return vs.origin + vs.remaining


def next_checkpoint(vs: JobState, t: float) -> float | None:
    """The job's first periodic checkpoint after ``t``, if it checkpoints periodically."""
    interval = vs.job.interval
    if interval is None:
        return None
    if t < vs.origin:
        return vs.origin + interval
    return vs.origin + ((t - vs.origin) // interval + 1) * interval


def timed_wait(plan: Plan, victims: Sequence[JobState], t: float, cfg: SimConfig,
               seed: int) -> float:
    """Seconds from ``t`` until the controller evicts for ``plan``'s timing (0: no waits)."""
    timing = plan.timing
    if timing is None or not timing.waits:
        return 0.0
    lag = cfg.report_lag_seconds
    waited = {int(w.uid.split("-")[0]) for w in timing.waits}
    seen = []
    for vs in victims:
        if vs.job.id not in waited:
            continue
        at = [job_end(vs) + lag]
        nxt = next_checkpoint(vs, t)
        if nxt is not None and vs.job.reports:
            error = report_error(seed=seed, job_id=vs.job.id, checkpoint=nxt,
                                 jitter=cfg.report_jitter_seconds)
            if nxt + error > t:  # an older published time is no ack of this plan
                at.append(nxt + lag)
        seen.append(min(at))
    return max(0.0, min(timing.deadline, max(seen, default=t)) - t)
