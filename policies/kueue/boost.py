"""The priority-boost a Kueue Workload should carry, from the work its pods have not saved.

Kueue v0.17 (alpha feature gate ``PriorityBoost``, KEP-7990, off by default:
``pkg/features/kube_features.go``) reads the Workload annotation ``kueue.x-k8s.io/priority-boost``
(``PriorityBoostAnnotationKey``, ``pkg/controller/constants/constants.go``): a base-10 signed
32-bit integer string (``strconv.ParseInt(value, 10, 32)``; missing means 0; with the gate on the
Workload webhook refuses an empty or unparsable value, ``pkg/webhooks/workload_webhook.go``).
Effective priority = ``spec.priority`` (nil: 0) + boost (``pkg/util/priority/priority.go``),
used for preemption eligibility (``SatisfiesPreemptionPolicy``,
``pkg/scheduler/preemption/common/preemption_policy.go``), candidate order
(``CandidatesOrdering``, ``common/ordering.go``: lower effective priority goes first) and queue
order. So a higher boost makes a Workload a later victim.

The rule (``decide``), for one Workload:

1. **Unsaved work**: the sum over its bound, not terminating pods of the planner's own charge,
   ``policies.planner.cost.lost_gpu_seconds`` without drain or restart (Kueue suspends the Job,
   it asks for no checkpoint): ``gpu_share × (now − last checkpoint)``, MIG slices as fractions,
   a pod that reports no checkpoint charged by the ``UnknownCheckpoint`` policy
   (``unknown_age``), a malformed report from the pod's start.
2. **Bucket** (log scale): 0 below ``first_bucket_gpu_seconds``, then one more for each doubling,
   up to ``max_boost``.
3. **Hysteresis** (a dead band below each boundary, no clock): the bucket rises as soon as the
   work reaches its boundary; it falls only once the work is below ``(1 − dead_band)`` × the
   lower boundary of the bucket now written. Work that hovers at a boundary therefore moves the
   boost once, not back and forth; a checkpoint (the work drops to about 0) lowers it at once.
   A boost that is absent, malformed or outside ``[0, cap]`` is no state: the bucket is used as is.
4. **Band**: the boost never exceeds ``cap = (the next priority in use above the Workload's) −
   priority − 1`` (``room_above``), nor ``max_boost``; so ``priority + boost`` stays strictly below
   every other priority value in use, and among Workloads of different priorities Kueue's
   eligibility and order are unchanged. The cap applies after the hysteresis: a class added
   between two priorities lowers boosts at once.
5. **Only admitted Workloads** carry a boost. A pending (or evicted) Workload gets 0 at once:
   its boost would also count as a preemptor's effective priority and in queue order.

What silence and lies are worth (tests/policies/test_kueue_boost_props.py):

- A pod that reports no checkpoint is charged exactly as a pod reporting one at the time the
  ``UnknownCheckpoint`` policy assumes (``now − unknown_age``, never before its start;
  ``start-time``: at its start). Its boost is that reporter's, no more: silence gains over an
  honest report only when the report is fresher than the operator's assumption. With the
  default ``start-time`` that is every report (silence is charged the whole run, as the planner
  charges it; kueue#477's concern); ``assume:<duration>`` or ``cluster-median`` caps what
  silence is worth. A reporter whose checkpoint is at least as old as the assumption never
  gains by going silent.
- Whatever checkpoint a pod claims (in the past, before its start, malformed, in the future),
  its unsaved work lies in ``[0, gpu_share × time since start]`` (the planner's clamp), so a lie
  gains at most the boost of a pod that never saved: the planner's charge for the same lie.
- The boost is monotone in unsaved work for a given written boost, and never crosses a
  priority in use.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from ckpt_preempt.policies.model.model import Pod
from ckpt_preempt.policies.planner.cost import lost_gpu_seconds

ANNOTATION = "kueue.x-k8s.io/priority-boost"  # Kueue PriorityBoostAnnotationKey
GROUP, WORKLOADS = "kueue.x-k8s.io", "workloads"  # the Workload CRD: workloads.kueue.x-k8s.io
# Kueue's priority of a Workload whose spec.priority is nil (pkg/constants/constants.go
# DefaultPriority): a priority in use whatever classes exist.
DEFAULT_PRIORITY = 0
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# strconv.ParseInt(s, 10, 32) accepts an optional sign and ASCII digits, nothing else
_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, kw_only=True)
class BoostRule:
    """The buckets and the dead band. Defaults: the first bucket at 0.25 GPU-hours (one GPU for
    15 minutes, 8 GPUs for under 2), 16 buckets (the last from 8,192 GPU-hours), a 25 % dead
    band (an assumption: wide enough for the jitter of several pods' reports and for a
    ``cluster-median`` charge that moves, narrow enough to follow a doubling)."""

    first_bucket_gpu_seconds: float = 900.0
    max_boost: int = 16
    dead_band: float = 0.25

    def __post_init__(self) -> None:
        if not 0 < self.first_bucket_gpu_seconds < float("inf"):
            raise ValueError("first_bucket_gpu_seconds must be a positive number")
        if not 0 <= self.max_boost <= 62:
            raise ValueError("max_boost must be between 0 and 62")
        if not 0 <= self.dead_band < 1:
            raise ValueError("dead_band must be in [0, 1)")

    def lower_edge(self, bucket: int) -> float:
        """The least unsaved work (GPU-seconds) in ``bucket`` (1 and up)."""
        return self.first_bucket_gpu_seconds * 2.0 ** (bucket - 1)

    def bucket(self, unsaved_gpu_seconds: float) -> int:
        b = 0
        while b < self.max_boost and unsaved_gpu_seconds >= self.lower_edge(b + 1):
            b += 1
        return b


DEFAULT_RULE = BoostRule()


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A Kueue Workload as the rule sees it: ``priority`` is ``spec.priority`` (nil: 0),
    ``annotation`` the priority-boost value written now (None: absent), ``admitted`` whether
    it holds quota and runs (its ``Admitted`` condition is True and it is not evicted)."""

    namespace: str
    name: str
    priority: int = DEFAULT_PRIORITY
    annotation: str | None = None
    admitted: bool = True

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, kw_only=True)
class Decision:
    """The boost the Workload should carry, why, and the annotation value to write (``write``
    False: the one there already says it; ``value`` None: remove the annotation, Kueue reads 0)."""

    boost: int
    unsaved_gpu_seconds: float
    bucket: int  # after the dead band, before the cap
    cap: int
    write: bool
    value: str | None


def parse_boost(raw: str | None) -> int | None:
    """The boost Kueue reads from ``raw`` (None: absent, 0), or None when Kueue would refuse it."""
    if raw is None:
        return None
    if not _INTEGER.fullmatch(raw):
        return None
    value = int(raw)
    return value if INT32_MIN <= value <= INT32_MAX else None


def effective_boost(raw: str | None) -> int:
    """What Kueue adds to the priority for ``raw``: absent or unparsable is 0."""
    value = parse_boost(raw)
    return 0 if value is None else value


def room_above(priority: int, in_use: Iterable[int]) -> int | None:
    """The largest boost that keeps ``priority + boost`` below every priority in use above it;
    None when none is above."""
    above = [p for p in in_use if p > priority]
    return None if not above else min(above) - priority - 1


def unsaved_gpu_seconds(pods: Iterable[Pod], now: float, unknown_age: float | None) -> float:
    """The work a Workload's pods lose if it is preempted now, by the planner's cost function:
    bound pods that are not terminating, no drain (Kueue asks for no checkpoint), no restart."""
    return sum(lost_gpu_seconds(p, now, drain=False, max_checkpoint_seconds=0.0,
                                unknown_age=unknown_age)[0]
               for p in pods if p.node is not None and not p.terminating)


def decide(workload: Workload, pods: Collection[Pod], *, now: float,
           priorities_in_use: Iterable[int], unknown_age: float | None,
           rule: BoostRule = DEFAULT_RULE) -> Decision:
    """The boost ``workload`` should carry (module docstring, steps 1–5). ``pods``: its own
    pods (the caller maps them, within its namespace); ``priorities_in_use``: the values of the
    cluster's PriorityClasses and WorkloadPriorityClasses (``DEFAULT_PRIORITY`` and the
    Workload's own are added); ``unknown_age``: the planner's
    ``Snapshot.unknown_checkpoint_age``."""
    unsaved = unsaved_gpu_seconds(pods, now, unknown_age) if workload.admitted else 0.0
    room = room_above(workload.priority, (*priorities_in_use, DEFAULT_PRIORITY))
    cap = max(0, rule.max_boost if room is None else min(room, rule.max_boost))
    held = parse_boost(workload.annotation)
    target = rule.bucket(unsaved)
    if workload.admitted and held is not None and 0 < held <= cap and target < held \
            and unsaved >= (1 - rule.dead_band) * rule.lower_edge(held):
        target = held  # inside the dead band below the bucket written: stay
    boost = min(target, cap) if workload.admitted else 0
    value = None if boost == 0 else str(boost)
    # absent and 0 are the same to Kueue; a malformed value is replaced (the webhook would
    # refuse every later update of the Workload while it stands)
    write = parse_boost(workload.annotation) != boost \
        and not (boost == 0 and workload.annotation is None)
    return Decision(boost=boost, unsaved_gpu_seconds=unsaved, bucket=target, cap=cap,
                    write=write, value=value)
