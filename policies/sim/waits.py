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


def next_checkpoint(vs: JobState, t: float) -> tuple[float, float] | None:
    """The job's first periodic checkpoint durable after ``t`` (its step time, and when it is
    durable), if it checkpoints periodically."""
    s = vs.schedule
    if s is None:
        return None
    if not s.exact:
        return s.next_durable(vs.origin, t)
    interval = s.interval
    step = vs.origin + interval if t < vs.origin \
        else vs.origin + ((t - vs.origin) // interval + 1) * interval
    return step, step


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
            step, durable = nxt
            error = report_error(seed=seed, job_id=vs.job.id, checkpoint=step,
                                 jitter=cfg.report_jitter_seconds)
            if step + error > t:  # an older published time is no ack of this plan
                at.append(durable + lag)
        seen.append(min(at))
    return max(0.0, min(timing.deadline, max(seen, default=t)) - t)
