"""Report parity: publishing checkpoints does not make a workload a more frequent victim.

A pod that reports its last checkpoint (``Pod.last_checkpoint``) shows what evicting it loses;
one that declares periodic checkpoints but reports none is charged as the unknown-checkpoint
policy says, by default all its work since it started. A planner that evicts where the least
is lost therefore turns to the reporter first, and again after each of its checkpoints: in the
two-job worlds of ``bench.incentive`` the reporter was hit more often than it would have been
silent in 989 of 1,000 worlds (issue 22's rule says: never more likely).

The rule, per preemptor: among the pods that could be its victims (``cost.ineligibility``:
running, lower priority, past min-runtime, not held), let ``floor`` be the fewest preemptions
within the bound's window (``Snapshot.preemption_history``) of any *silent* workload (a pod
declaring ``checkpoint: periodic`` that reports no checkpoint and no malformed one). Every
*reporting* pod (``checkpoint: periodic`` with a valid last checkpoint) of a workload
preempted ``floor`` times or more is held (``PodHold.REPORT_PARITY``) for that plan. So a
reporter is chosen only while it has been preempted fewer times than every silent
alternative: of two such jobs the silent one is taken first and the two then alternate. A
silent job that is away (evicted, not yet back) is no alternative, so this is not a guarantee
per world; ``bench.incentive`` measures it (the reporter over its twin in 0 of 1,000 worlds).
Loss still decides among the reporters that are not held, and among the silent ones.

When the held view has no plan (only held reporters would make room: the silent workloads are
on nodes or in sizes that cannot help) the preemptor is planned without the holds
(``preemption.plan``): the reporter would have been the victim had it been silent too.

Out of scope, said plainly: a pod declaring ``checkpoint: none`` (or nothing at all, the same)
is charged all its work since it started and is no silent alternative here. That is the
truthful charge for a job that never checkpoints, and holding reporters behind such jobs would
evict the pods that lose the most first. A job that does checkpoint but declares nothing is
therefore still evicted after the reporters, as before; the rule covers the choice the planner
can see, whether a periodic job publishes its checkpoints.
"""

from __future__ import annotations

from ckpt_preempt.policies.model.model import CheckpointMode, Pod, PodHold
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import cost


def _periodic(pod: Pod) -> bool:
    return pod.checkpoint is CheckpointMode.PERIODIC and not pod.checkpoint_malformed


def reports(pod: Pod) -> bool:
    """A periodic pod showing a valid last checkpoint."""
    return _periodic(pod) and pod.last_checkpoint is not None


def silent(pod: Pod) -> bool:
    """A periodic pod that reports no checkpoint (and no malformed one)."""
    return _periodic(pod) and pod.last_checkpoint is None


def held(snapshot: Snapshot, priority: int) -> dict[str, PodHold]:
    """The reporting pods a preemptor of ``priority`` may not take while a silent alternative
    has been preempted no more often (uid -> ``PodHold.REPORT_PARITY``); empty when no silent
    pod below ``priority`` could go. Runs on every plan, so the cheap field tests come first
    and eligibility is judged only for periodic pods."""
    counts, now = snapshot.preemption_history, snapshot.now
    could = [p for p in snapshot.pods
             if _periodic(p) and cost.ineligibility(p, priority, now) is None]
    silent_counts = [counts.get(p.workload, 0) for p in could if p.last_checkpoint is None]
    if not silent_counts:
        return {}
    floor = min(silent_counts)
    return {p.uid: PodHold.REPORT_PARITY for p in could
            if p.last_checkpoint is not None and counts.get(p.workload, 0) >= floor}
