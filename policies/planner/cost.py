"""The cost model: GPU-seconds of work a pod loses when it is evicted now.

``cost(p) = gpus(p) × (now − last_checkpoint(p))``. A pod that reports no checkpoint is charged
as the snapshot's ``UnknownCheckpoint`` policy says (``unknown_age``: at most that many seconds
old; None: since its start); a pod whose checkpoint annotations are malformed is charged from
its start whatever the policy. An ``on-request`` pod that will be drained loses only its
checkpoint time, provided that time fits under the operator's drain cap (a checkpoint the
deadline would cut short saves nothing). ``restart_seconds`` (the operator's estimate of how long
an evicted job takes to be rescheduled, reload its checkpoint and warm up; 0 by default) adds
``gpus × restart_seconds`` to every victim, drained or not: without it a fresh checkpoint looks
free, and the same cheap job is chosen again and again although each restart idles its GPUs.
Eligibility: strictly lower priority, not opted out, past min-runtime, not already
terminating, not held by another plan, blocked, or at the preemption bound
(``policies.planner.bound``).
"""

from __future__ import annotations

import enum

from ckpt_preempt.policies.model.model import CheckpointMode, Pod, PodHold


class Ineligible(enum.StrEnum):
    NOT_LOWER_PRIORITY = "priority-not-lower"
    OPTED_OUT = "opted-out"
    MIN_RUNTIME = "within-min-runtime"
    TERMINATING = "already-terminating"
    NOT_RUNNING = "not-bound"
    HELD_BY_PLAN = PodHold.HELD_BY_PLAN.value
    EVICTION_BLOCKED = PodHold.EVICTION_BLOCKED.value
    AT_PREEMPTION_BOUND = PodHold.AT_PREEMPTION_BOUND.value  # policies.planner.bound
    REPORT_PARITY = PodHold.REPORT_PARITY.value  # policies.planner.parity
    GANG_PDB = "gang-exceeds-its-pdb"  # a PDB covering the gang allows fewer than its members


def work_since_checkpoint(pod: Pod, now: float, unknown_age: float | None = None) -> float:
    """Seconds of unsaved work; never negative, never credits a checkpoint before start."""
    start = pod.start_time if pod.start_time is not None else now
    last = pod.last_checkpoint
    if last is None:
        last = start if unknown_age is None or pod.checkpoint_malformed else now - unknown_age
    return max(0.0, now - max(start, last))


def drain_seconds(pod: Pod, max_checkpoint_seconds: float) -> float | None:
    """How long to wait for this pod's checkpoint, or None when draining it saves nothing."""
    if pod.checkpoint is not CheckpointMode.ON_REQUEST:
        return None
    secs = pod.checkpoint_seconds if pod.checkpoint_seconds is not None else max_checkpoint_seconds
    return secs if secs <= max_checkpoint_seconds else None


def lost_gpu_seconds(
    pod: Pod, now: float, *, drain: bool, max_checkpoint_seconds: float,
    unknown_age: float | None = None, restart_seconds: float = 0.0,
) -> tuple[float, bool]:
    """(lost GPU-seconds, whether the pod is drained first); a restart is charged either way."""
    share = pod.gpu_share  # a MIG slice is charged as its fraction of a GPU
    restart = share * restart_seconds
    full = share * work_since_checkpoint(pod, now, unknown_age)
    if drain:
        secs = drain_seconds(pod, max_checkpoint_seconds)
        if secs is not None and share * secs < full:
            return share * secs + restart, True
    return full + restart, False


def ineligibility(pod: Pod, preemptor_priority: int, now: float) -> Ineligible | None:
    if pod.node is None:
        return Ineligible.NOT_RUNNING
    if pod.terminating:
        return Ineligible.TERMINATING
    if pod.held is not None:
        return Ineligible(pod.held.value)
    if pod.priority >= preemptor_priority:
        return Ineligible.NOT_LOWER_PRIORITY
    if not pod.preemptible:
        return Ineligible.OPTED_OUT
    start = pod.start_time if pod.start_time is not None else now
    if now - start < pod.min_runtime:
        return Ineligible.MIN_RUNTIME
    return None
