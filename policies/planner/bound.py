"""The starvation bound, and the fairness penalty that grows with a workload's history.

**The bound.** No workload (``Pod.workload``: its gang, else its controlling owner, else the
pod, as the fairness guard counts) is preempted more than ``max_preemptions`` times per
``window_seconds``. A workload at the bound is no victim for any policy: ``hold`` marks its
running pods ``PodHold.AT_PREEMPTION_BOUND`` when the snapshot is built (the simulator's
``PlannerView._snapshot``, the controller's reconcile), and every policy already leaves held
pods alone (``cost.ineligibility`` for the planner and cost-aware; the potential-victim filters
of kube-default and kube-workload). That is the one place the eligibility lives. A preemptor
that then fits nowhere waits; its plan's reason names ``RejectReason.VICTIMS_AT_BOUND``
(``waiting_reason``).

**The penalty.** The fairness guard used to charge each GPU ``penalty × n`` for the ``n``
preemptions of the last hour, and then forget. With the counts of the bound's longer window
(``Snapshot.preemption_history``) each GPU is charged ``penalty × max(n, 2^h - 1)``, ``h`` the
preemptions within the bound window: the charge doubles with each preemption the workload
suffered in that window, so the ordering stops returning to the same cheap job, the one whose
fresh checkpoint makes it look free. Without a history (``h = 0``) it is the old charge.

Defaults (assumptions, labelled as such; anchors, none of which sets our numbers):
- Slurm's ``PreemptExemptTime`` (slurm.conf; https://slurm.schedmd.com/preempt.html) exempts a
  job from preemption for a minimum run time after it starts (default 0: no exemption); our
  per-pod ``min-runtime`` annotation is that rule. It bounds how often, not how many times.
- LSF's ``MAX_JOB_PREEMPT`` (lsb.params/lsb.queues/lsb.applications; IBM Spectrum LSF 10.1
  docs, "LSF preemption with License Scheduler preemption") caps the times a job can be
  preempted over its life (unset: unlimited); AWS Batch's
  ``preemptionRetriesBeforeTermination`` is alike. A lifetime cap never forgets; ours does,
  after ``window_seconds``, as Kueue's admission fair sharing forgets usage over
  ``usageHalfLifeTime`` (Kueue docs, "Admission Fair Sharing").
- ``MAX_PREEMPTIONS_PER_WINDOW`` = 4 per ``PREEMPTION_BOUND_WINDOW_SECONDS`` = 24 h is our
  assumption: at most one preemption per six hours on average, a day being the scale of the
  replay weeks where one job was preempted 132-162 times (about 20 a day) under ours and 69
  (about 10 a day) under kube-default (README, "The simulator").

**Whose history it is.** A tenant chooses its pods' workload inside its namespace, never across
one (``policies.model.model.workload_key``; controller/README.md, "What a workload is"): a gang
label of its namespace, or an ownerReference. A new pod attached to a much-preempted workload would
take on its history: the penalty would make it dearer and the bound would hold it. So a
workload's preemptions count for it only while it holds no more GPUs than it did at one of them
(``attributable``; the controller records ``PlannedVictim.workload_gpus`` with each plan): the
protection its preemptions earned covers what was preempted, not pods added since. A workload
that grows past that is counted as never preempted, as a new one would be. The simulator's
workloads are jobs whose identity no tenant chooses, so it keeps plain counts; the one case the
rule would change there is an elastic job preempted only while shrunk and grown back since.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ckpt_preempt.policies.model.model import Pod, PodHold, RejectReason
from ckpt_preempt.policies.model.snapshot import Snapshot

MAX_PREEMPTIONS_PER_WINDOW = 4  # assumption (see above); 0 turns the bound off
PREEMPTION_BOUND_WINDOW_SECONDS = 86400.0  # assumption (see above)
_MAX_DOUBLINGS = 60  # the penalty's doublings stop here (2^60: beyond any loss)
GPU_SHARE_SLACK = 1e-9  # GPUs: a workload holding this little more than it did still holds as much


@dataclass(frozen=True, kw_only=True)
class Bound:
    """At most ``max_preemptions`` preemptions of one workload per ``window_seconds``
    (``max_preemptions`` 0: no bound)."""

    max_preemptions: int = MAX_PREEMPTIONS_PER_WINDOW
    window_seconds: float = PREEMPTION_BOUND_WINDOW_SECONDS

    def __post_init__(self) -> None:
        if isinstance(self.max_preemptions, bool) or not isinstance(self.max_preemptions, int) \
                or self.max_preemptions < 0:
            raise ValueError(f"max_preemptions must be a whole number >= 0, "
                             f"not {self.max_preemptions!r}")
        if not self.window_seconds > 0 or self.window_seconds == float("inf"):
            raise ValueError(f"window_seconds must be a finite number > 0, "
                             f"not {self.window_seconds!r}")

    @property
    def on(self) -> bool:
        return self.max_preemptions > 0

    def at_bound(self, counts: Mapping[str, int]) -> frozenset[str]:
        """The workloads that may not be preempted again within the window: those whose
        ``counts`` (preemptions within it) reached the bound."""
        if not self.on:
            return frozenset()
        return frozenset(w for w, n in counts.items() if n >= self.max_preemptions)


def attributable(counts: Mapping[str, int], preempted_gpus: Mapping[str, float],
                 holding: Mapping[str, float]) -> dict[str, int]:
    """``counts`` (preemptions per workload) less those of any workload holding more GPUs now
    (``holding``, ``Snapshot.gpus_by_workload``) than the most it held at one of them
    (``preempted_gpus``). A workload with no size recorded keeps its count: its plans were
    stored before sizes were (they age out of the window), or its counts came from an
    operator's snapshot file."""
    return {w: n for w, n in counts.items()
            if w not in preempted_gpus
            or holding.get(w, 0.0) <= preempted_gpus[w] + GPU_SHARE_SLACK}


def hold(pods: Iterable[Pod], at_bound: frozenset[str]) -> tuple[Pod, ...]:
    """``pods`` with every running pod of a workload in ``at_bound`` held
    (``PodHold.AT_PREEMPTION_BOUND``); pods terminating or already held are left as they are."""
    if not at_bound:
        return tuple(pods)
    return tuple(
        replace(p, held=PodHold.AT_PREEMPTION_BOUND)
        if p.workload in at_bound and p.node is not None and not p.terminating and p.held is None
        else p
        for p in pods
    )


def penalty_factor(recent: int, history: int) -> float:
    """What the fairness penalty per GPU is multiplied by, for ``recent`` preemptions within the
    fairness window and ``history`` within the bound's window: ``max(recent, 2^history - 1)``."""
    return float(max(recent, 2 ** min(history, _MAX_DOUBLINGS) - 1))


def waiting_reason(snapshot: Snapshot, priority: int) -> str:
    """The clause a plan that found no room adds when pods it could otherwise have preempted
    (running, lower priority) are at the preemption bound; empty when there are none."""
    held = [p for p in snapshot.pods
            if p.held is PodHold.AT_PREEMPTION_BOUND and p.priority < priority
            and p.node is not None and not p.terminating]
    if not held:
        return ""
    workloads = len({p.workload for p in held})
    return (f"; {RejectReason.VICTIMS_AT_BOUND}: {len(held)} pod(s) of {workloads} workload(s) "
            f"were preempted as often as the bound allows lately, so it waits")


def pods_at_bound(snapshot: Snapshot, limit: Bound) -> frozenset[str]:
    """The uids of the running pods whose workload reached ``limit`` by the snapshot's
    ``preemption_history`` (preemptions within ``limit.window_seconds``), for a caller that
    holds them in a per-preemptor view (``Snapshot.restricted``) rather than in the snapshot."""
    workloads = limit.at_bound(snapshot.preemption_history)
    if not workloads:
        return frozenset()
    return frozenset(p.uid for p in snapshot.pods
                     if p.node is not None and not p.terminating and p.workload in workloads)
