"""Save on SIGTERM: a world in which a training loop checkpoints when its pod is told to stop.

Kubernetes stops a pod with SIGTERM and kills it with SIGKILL once the pod's
``terminationGracePeriodSeconds`` has passed. Kueue preempts by suspending the victim's Job, and
the Job controller deletes its pods with their own grace period (Kueue v0.17.0
``pkg/controller/jobframework/reconciler.go`` ``stopJob``; kubernetes
``pkg/controller/job/job_controller.go``); kube-scheduler's preemption deletes pods with theirs
too. With the SDK saving on SIGTERM, a victim stopped without a checkpoint request still saves
its work when its grace period covers its checkpoint.

``SimConfig.sigterm_save`` says which world the engine replays (``policies/sim/engine.py``):

- ``OFF`` (``""``, the default, and every row that existed before this world): a victim stopped
  without a drain loses its work since its last checkpoint, as the engine always charged.
- ``DEFAULT_GRACE``: every pod keeps Kubernetes' default grace, ``SimConfig.grace_seconds``
  (30 s): what any cluster gets once its jobs save on SIGTERM.
- ``SIZED_GRACE``: the grace webhook (``policies.disruption.grace_period.decide``) gives each pod
  that declares a checkpoint time that time, rounded up to a second and capped at the drain cap
  (``SimConfig.max_checkpoint_seconds``), plus its default margin (``MARGIN_SECONDS``, 30 s);
  other pods keep the default.

Who saves (``attempt``): a victim stopped without a checkpoint request whose job checkpoints
(periodic or on request), declares its checkpoint time and runs the SDK (it publishes its
checkpoints: a silent job is taken to run without it), whose grace covers that time, and all of
whose pods are stopped together: a member taken out of a gang alone cannot finish a collective
save, as the other ranks are not told (it hangs until SIGKILL and saves nothing). A save fails or
overruns at the rates a checkpoint on request does (``costs.drain_outcome``: the same seeded
draw per job and preemption, the grace as its deadline). A victim that saved loses its
checkpoint time, as a drained one does, and stops when the save ends; one whose save failed
loses its work since its last checkpoint and stops at its grace's end (SIGKILL). Either way the
preemptor waits for it, and the wait beyond ``grace_seconds`` is delay.

Not modelled: stops other than preemptions (the disruption protocol's node drains, shrinks)
keep the engine's charge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ckpt_preempt.policies.disruption.grace_period import DEFAULT_MARGIN_SECONDS as MARGIN_SECONDS
from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.sim.costs import DrainOutcome, drain_outcome
from ckpt_preempt.policies.sim.workload import Job

OFF = ""
DEFAULT_GRACE = "default"
SIZED_GRACE = "sized"
WORLDS = (OFF, DEFAULT_GRACE, SIZED_GRACE)
SAVING_MODES = (CheckpointMode.PERIODIC, CheckpointMode.ON_REQUEST)


def grace(world: str, checkpoint_seconds: float | None, *, default: float, cap: float) -> float:
    """A pod's grace period in ``world``: the sized one for a pod declaring its checkpoint
    time (that time rounded up, at most ``cap``, plus the margin, as the webhook sizes it),
    else ``default``."""
    if world == SIZED_GRACE and checkpoint_seconds is not None:
        return float(math.ceil(min(checkpoint_seconds, cap)) + MARGIN_SECONDS)
    return default


def can_save(job: Job) -> bool:
    """Whether the job saves on SIGTERM at all: it checkpoints, says how long that takes and
    runs the SDK (publishes its checkpoints)."""
    return (job.checkpoint in SAVING_MODES and job.checkpoint_seconds is not None
            and job.reports)


@dataclass(frozen=True, kw_only=True)
class Save:
    """How one victim's save on SIGTERM went."""

    saved: bool  # the checkpoint finished within the grace period
    seconds: float  # from SIGTERM until the pod is gone (save time, or the grace: SIGKILL)
    failed: bool  # the save ended without a checkpoint (drain_outcome's failure, or a part gang)
    overran: bool  # the save took longer than the job's estimate


def attempt(job: Job, *, world: str, whole: bool, seed: int, nth: int, default_grace: float,
            cap: float, failure_share: float, overrun_share: float,
            overrun_factor: float) -> Save | None:
    """The save of ``job`` stopped by SIGTERM for the ``nth`` time (0-based); None when it
    does not try (world off, the job cannot save, or its grace is shorter than its checkpoint
    time): it then stops as the engine always stopped victims. ``whole``: all of its pods are
    stopped, not only some members of its gang."""
    if world == OFF or not can_save(job):
        return None
    estimate = job.checkpoint_seconds or 0.0
    limit = grace(world, estimate, default=default_grace, cap=cap)
    if estimate > limit:
        return None
    if not whole:
        return Save(saved=False, seconds=limit, failed=True, overran=False)
    out: DrainOutcome = drain_outcome(
        seed=seed, job_id=job.id, nth=nth, estimate=estimate, deadline=limit,
        failure_share=failure_share, overrun_share=overrun_share, overrun_factor=overrun_factor)
    return Save(saved=out.saved, seconds=out.seconds, failed=out.failed, overran=out.overran)
