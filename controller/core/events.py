"""Every Event reason ckpt-preempt's processes write (``Reason``), and what each means
(``MEANING``: the runbook's words, and the help of ``ckpt_preempt_events_total{reason}``).

One enum, so a reason is spelled once, metrics are labelled by a closed set, and a test can
check that every reason is documented (controller/README.md, "What it writes")."""

from __future__ import annotations

import enum
from types import MappingProxyType


class Reason(enum.StrEnum):
    PREEMPTION_PLANNED = "PreemptionPlanned"
    PREEMPTION_NOT_POSSIBLE = "PreemptionNotPossible"
    PREEMPTION_DONE = "PreemptionDone"
    PREEMPTION_ABORTED = "PreemptionAborted"
    CHECKPOINT_REQUESTED = "CheckpointRequested"
    CHECKPOINT_COMPLETED = "CheckpointCompleted"
    CHECKPOINT_DEADLINE_EXCEEDED = "CheckpointDeadlineExceeded"
    EVICTED = "Evicted"
    EVICTION_BLOCKED = "EvictionBlocked"
    EVICTION_DELAYED = "EvictionDelayed"
    GANG_ADMITTED = "GangAdmitted"
    GANG_TIMED_OUT = "GangTimedOut"
    GANG_TOTAL_MISMATCH = "GangTotalMismatch"
    INVALID_ANNOTATION = "InvalidAnnotation"
    DISRUPTION_CHECKPOINT_REQUESTED = "DisruptionCheckpointRequested"
    HEALTH_CHECKPOINT_REQUESTED = "HealthCheckpointRequested"


MEANING = MappingProxyType({
    Reason.PREEMPTION_PLANNED: "a plan was stored for this preemptor (its victims, nodes and "
                               "lost GPU-hours), or would be in a dry run",
    Reason.PREEMPTION_NOT_POSSIBLE: "no plan frees room for this preemptor now; the note says why",
    Reason.PREEMPTION_DONE: "the plan's victims are gone and its preemptor is bound",
    Reason.PREEMPTION_ABORTED: "the plan ended without placing its preemptor; it is re-planned on "
                               "the cluster as it is",
    Reason.CHECKPOINT_REQUESTED: "a plan asked this victim to checkpoint before its eviction",
    Reason.CHECKPOINT_COMPLETED: "the victim acknowledged the plan's checkpoint request",
    Reason.CHECKPOINT_DEADLINE_EXCEEDED: "the victim did not acknowledge by the deadline and is "
                                         "evicted anyway",
    Reason.EVICTED: "the plan evicted this pod through the Eviction API",
    Reason.EVICTION_BLOCKED: "the Eviction API refused a plan's eviction (a PodDisruptionBudget, "
                             "or an error); it is retried until evictionTimeoutSeconds",
    Reason.EVICTION_DELAYED: "the eviction gate refused an Eviction it did not make (a drain, an "
                             "autoscaler) until the pod checkpoints",
    Reason.GANG_ADMITTED: "a gated gang's members were placed together",
    Reason.GANG_TIMED_OUT: "a gated gang could not be placed within gangTimeoutSeconds",
    Reason.GANG_TOTAL_MISMATCH: "the gang's members disagree with its declared size",
    Reason.INVALID_ANNOTATION: "an annotation did not parse and is ignored (never as protection)",
    Reason.DISRUPTION_CHECKPOINT_REQUESTED: "the pod's node shows a disruption signal (cordon, "
                                            "autoscaler, termination notice): checkpoint now",
    Reason.HEALTH_CHECKPOINT_REQUESTED: "the pod's node has degraded GPUs: checkpoint now",
})  # tests/controller/test_events.py checks that every Reason has its meaning
