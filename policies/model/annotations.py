"""Strict parsing of the ``ckpt-preempt.io/`` pod annotations into planner fields, and the one
builder from a pod's metadata to ``model.Pod`` (``build_pod``) that the controller and
snapshot documents share.

Every malformed value yields an ``AnnotationProblem`` (the controller emits it as a Warning
Event) and acts as if the annotation were absent, so that no value a tenant writes buys a pod
protection, and none makes it cheaper to preempt:

- any bad checkpoint annotation drops *all* checkpoint information, and the pod is charged from
  its start whatever the unknown-checkpoint policy (never cheaper than reporting nothing);
  another project's name for the last checkpoint (``LAST_CHECKPOINT_ALIASES``) is read only when
  ours is absent, with the same parsing and the same consequence;
- a bad ``preemptible``, ``min-runtime`` or ``nvlink`` is ignored: preemptible, no min-runtime,
  no NVLink need;
- a bad ``checkpoint-interval`` or ``expected-end`` is ignored: nothing is predicted, and the
  planner evicts as it would without them (``policies.planner.timing``: a prediction only ever
  makes a plan wait, up to the drain cap, and a victim whose checkpoint or end does not come by then
  is evicted and charged as before);
- a bad gang name is ignored (the next convention, if any, names the gang), a bad gang total
  leaves the gang's size undeclared;
- a bad ``min-members`` (not a count, more than the gang's declared total, or on a pod in no
  gang) is ignored: the gang is not elastic, so no member of it can leave more cheaply than the
  whole gang.

Protection is the admin's to grant (``Limits``): an opt-out (``preemptible: "false"``) is
honoured only in the namespaces or priority classes the config lists, and a min-runtime only up
to the configured cap; an opt-out that is not allowed is ignored with a problem.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ckpt_preempt.policies.model import gangs
from ckpt_preempt.policies.model.model import (
    ZERO,
    CheckpointMode,
    NvlinkNeed,
    Pod,
    Resources,
    UnknownCheckpoint,
)
from ckpt_preempt.policies.model.times import parse_rfc3339

PREFIX = "ckpt-preempt.io/"
CHECKPOINT = PREFIX + "checkpoint"
LAST_CHECKPOINT = PREFIX + "last-checkpoint"
CHECKPOINT_SECONDS = PREFIX + "checkpoint-seconds"
MIN_RUNTIME = PREFIX + "min-runtime"
PREEMPTIBLE = PREFIX + "preemptible"
NVLINK = PREFIX + "nvlink"
# the fewest members a gang runs with (torchrun-elastic style jobs): members above it may leave
MIN_MEMBERS = PREFIX + "min-members"
# when to preempt (policies.planner.timing): a periodic checkpointer's declared period (a
# duration), and when a pod expects to end (RFC 3339)
CHECKPOINT_INTERVAL = PREFIX + "checkpoint-interval"
EXPECTED_END = PREFIX + "expected-end"
# the checkpoint agent declares a loop's end from its progress (controller/agent/progress.py) and
# declares it again only once it moved by more than max(this, the share below of the time left);
# the simulator's progress-estimated ends follow the same rule (policies/sim/planner_view.py)
END_REDECLARE_MIN_SECONDS = 60.0
END_REDECLARE_SHARE = 0.1
RESERVED_TAINT = PREFIX + "reserved"  # the node taint of a plan's reservation (the controller's)
# Other projects' names for our last-checkpoint, read only when ours is absent (ours wins when
# both are set). Volcano's checkpoint-aware victim ordering proposal reads this RFC 3339 (UTC)
# time: https://github.com/volcano-sh/volcano/issues/5998, PR #5999 (plugin "checkpoint",
# DefaultCheckpointTimeKey; closed unmerged when read). Kueue discussed the idea without naming a
# key (kueue#477).
LAST_CHECKPOINT_ALIASES = ("volcano.sh/last-checkpoint-time",)
# Every key prefix whose pod annotations planning reads: ours, the gang conventions' and the
# checkpoint aliases (whole keys, which work as prefixes of themselves).
PREFIXES = (PREFIX, *(p for p in gangs.PREFIXES if p != PREFIX), *LAST_CHECKPOINT_ALIASES)
ANY = "*"  # in an opt-out list: every namespace, or every priority class
# The default unknown-checkpoint policy, chosen from the simulator (README, "The simulator").
UNKNOWN_CHECKPOINT = UnknownCheckpoint()
CLOCK_SKEW_SECONDS = 60.0  # a last-checkpoint this far in the future is rejected

# ASCII digits only, whole string only (fullmatch: "$" would also accept a trailing newline).
_PART = r"([0-9]+(?:\.[0-9]+)?)"
_DURATION = re.compile(rf"(?:{_PART}h)?(?:{_PART}m)?(?:{_PART}s)?")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


@dataclass(frozen=True, kw_only=True)
class AnnotationProblem:
    key: str
    value: str
    problem: str
    consequence: str

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}: {self.problem}; {self.consequence}"


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What the admin lets pods ask for (controller config): caps in seconds, who may opt out
    (a namespace or a priority class listed, or ``ANY``; by default nobody: protection from
    preemption is what PriorityClasses are for, and an annotation anyone can write must not
    grant it), and the policy for pods that report no checkpoint."""

    max_checkpoint_seconds: float = 600.0
    max_min_runtime: float = 3600.0
    opt_out_namespaces: frozenset[str] = frozenset()
    opt_out_priority_classes: frozenset[str] = frozenset()
    unknown_checkpoint: UnknownCheckpoint = UNKNOWN_CHECKPOINT

    def may_opt_out(self, namespace: str, priority_class: str) -> bool:
        return bool(
            {ANY, namespace} & self.opt_out_namespaces
            or (priority_class and {ANY, priority_class} & self.opt_out_priority_classes)
        )


@dataclass(frozen=True, kw_only=True)
class PodPolicyFields:
    checkpoint: CheckpointMode = CheckpointMode.NONE
    last_checkpoint: float | None = None
    checkpoint_seconds: float | None = None
    min_runtime: float = 0.0
    preemptible: bool = True
    nvlink: NvlinkNeed = NvlinkNeed.NONE
    gang: str | None = None
    gang_total: int | None = None
    checkpoint_malformed: bool = False  # a checkpoint annotation was bad: all were dropped
    problems: tuple[AnnotationProblem, ...] = ()
    gang_minimum: int | None = None  # MIN_MEMBERS: the fewest members the gang runs with
    checkpoint_interval: float | None = None
    expected_end: float | None = None


def parse_duration(value: str) -> float:
    """Seconds from ``"90"``, ``"90s"``, ``"15m"`` or ``"1h30m"``; ValueError otherwise."""
    v = value.strip()
    if _NUMBER.fullmatch(v):
        return float(v)
    m = _DURATION.fullmatch(v)
    if not v or m is None or not any(m.groups()):
        raise ValueError("expected seconds or a duration such as 90s, 15m, 1h30m")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s


def parse_unknown_checkpoint(value: str) -> UnknownCheckpoint:
    """``start-time``, ``cluster-median`` or ``assume:<duration>`` (e.g. ``assume:30m``)."""
    v = value.strip()
    if v.startswith("assume:"):
        seconds = parse_duration(v.removeprefix("assume:"))
        if not 0 < seconds < float("inf"):
            raise ValueError("assume: needs a positive duration, e.g. assume:30m")
        return UnknownCheckpoint(kind="assume", seconds=seconds)
    if v in ("start-time", "cluster-median"):
        return UnknownCheckpoint(kind=v)
    raise ValueError("expected start-time, cluster-median or assume:<duration> (assume:30m)")


def last_checkpoint_key(ann: Mapping[str, str]) -> str | None:
    """The one annotation the last checkpoint time is read from: ours when present (even when
    malformed: a bad value of ours is never rescued by an alias), else the first alias present
    in ``LAST_CHECKPOINT_ALIASES`` order; None when there is none."""
    return next((k for k in (LAST_CHECKPOINT, *LAST_CHECKPOINT_ALIASES) if k in ann), None)


def _checkpoint_fields(
    ann: Mapping[str, str], now: float, limits: Limits
) -> tuple[CheckpointMode, float | None, float | None, AnnotationProblem | None]:
    drop = "treated as having no checkpoint information"
    mode = CheckpointMode.NONE
    if CHECKPOINT in ann:
        try:
            mode = CheckpointMode(ann[CHECKPOINT].strip())
        except ValueError:
            p = AnnotationProblem(
                key=CHECKPOINT, value=ann[CHECKPOINT],
                problem="must be on-request, periodic or none", consequence=drop,
            )
            return CheckpointMode.NONE, None, None, p
    last = None
    key = last_checkpoint_key(ann)
    if key is not None:
        raw = ann[key]
        try:
            last = parse_rfc3339(raw)
        except ValueError as e:
            p = AnnotationProblem(key=key, value=raw, problem=str(e), consequence=drop)
            return CheckpointMode.NONE, None, None, p
        if last > now + CLOCK_SKEW_SECONDS:
            p = AnnotationProblem(
                key=key, value=raw, problem="lies in the future", consequence=drop
            )
            return CheckpointMode.NONE, None, None, p
        last = min(last, now)
    seconds = None
    if CHECKPOINT_SECONDS in ann:
        raw = ann[CHECKPOINT_SECONDS]
        try:
            seconds = parse_duration(raw)
        except ValueError as e:
            p = AnnotationProblem(
                key=CHECKPOINT_SECONDS, value=raw, problem=str(e), consequence=drop
            )
            return CheckpointMode.NONE, None, None, p
        if not math.isfinite(seconds) or seconds <= 0:
            p = AnnotationProblem(
                key=CHECKPOINT_SECONDS, value=raw, problem="must be positive", consequence=drop
            )
            return CheckpointMode.NONE, None, None, p
    del limits  # caps apply in the cost model, which knows whether a drain is planned
    return mode, last, seconds, None


def parse_pod_fields(
    *,
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    now: float,
    limits: Limits = Limits(),
    priority_class: str = "",
) -> PodPolicyFields:
    problems: list[AnnotationProblem] = []
    mode, last, seconds, p = _checkpoint_fields(annotations, now, limits)
    if p:
        problems.append(p)
    absent = "ignored, as if absent"

    min_runtime = 0.0
    if MIN_RUNTIME in annotations:
        raw = annotations[MIN_RUNTIME]
        try:
            min_runtime = min(parse_duration(raw), limits.max_min_runtime)
        except ValueError as e:
            problems.append(AnnotationProblem(
                key=MIN_RUNTIME, value=raw, problem=str(e), consequence=absent + ": no min-runtime"
            ))

    preemptible = True
    if PREEMPTIBLE in annotations:
        raw = annotations[PREEMPTIBLE]
        value = raw.strip().lower()
        if value not in ("true", "false"):
            problems.append(AnnotationProblem(
                key=PREEMPTIBLE, value=raw, problem="must be true or false",
                consequence=absent + ": preemptible",
            ))
        elif value == "false" and not limits.may_opt_out(namespace, priority_class):
            where = f"namespace {namespace}" + (
                f" or priority class {priority_class}" if priority_class else "")
            problems.append(AnnotationProblem(
                key=PREEMPTIBLE, value=raw,
                problem=f"opting out is not allowed in {where} (the controller config lists "
                        "who may: optOutNamespaces, optOutPriorityClasses)",
                consequence="ignored: preemptible",
            ))
        else:
            preemptible = value == "true"

    nvlink = NvlinkNeed.NONE
    if NVLINK in annotations:
        try:
            nvlink = NvlinkNeed(annotations[NVLINK].strip())
        except ValueError:
            problems.append(AnnotationProblem(
                key=NVLINK, value=annotations[NVLINK],
                problem="must be required, preferred or none", consequence=absent + ": none",
            ))

    interval, end, bad_timing = _timing_fields(annotations)
    problems.extend(bad_timing)

    member, bad = gangs.detect(namespace, labels, annotations)
    problems.extend(
        AnnotationProblem(key=e.key, value=e.value, problem=e.problem, consequence=absent)
        for e in bad
    )
    minimum = None
    if MIN_MEMBERS in annotations:
        minimum, bad_min = _min_members(annotations[MIN_MEMBERS], member)
        if bad_min is not None:
            problems.append(bad_min)
    return PodPolicyFields(
        checkpoint=mode, last_checkpoint=last, checkpoint_seconds=seconds,
        min_runtime=min_runtime, preemptible=preemptible, nvlink=nvlink,
        gang=member.key if member else None, gang_total=member.total if member else None,
        checkpoint_malformed=p is not None, problems=tuple(problems), gang_minimum=minimum,
        checkpoint_interval=None if p is not None else interval, expected_end=end,
    )


def _min_members(raw: str, member: gangs.GangMembership | None
                 ) -> tuple[int | None, AnnotationProblem | None]:
    """The gang minimum ``raw`` declares, or None and why it is ignored (the gang is then not
    elastic: its members leave only all together)."""
    ignored = "ignored: the gang is not elastic, its members leave only all together"
    try:
        minimum = gangs.parse_total(MIN_MEMBERS, raw)
    except gangs.GangError as e:
        return None, AnnotationProblem(key=MIN_MEMBERS, value=raw, problem=e.problem,
                                       consequence=ignored)
    if member is None:
        return None, AnnotationProblem(key=MIN_MEMBERS, value=raw,
                                       problem="the pod is in no gang", consequence="ignored")
    if member.total is not None and minimum > member.total:
        return None, AnnotationProblem(
            key=MIN_MEMBERS, value=raw,
            problem=f"more than the gang's declared total of {member.total}", consequence=ignored)
    return minimum, None


def _timing_fields(ann: Mapping[str, str]
                   ) -> tuple[float | None, float | None, list[AnnotationProblem]]:
    """(checkpoint interval, expected end, problems): a bad value is ignored, as if absent."""
    absent = "ignored, as if absent: no timing prediction from it"
    problems = []
    interval = None
    if CHECKPOINT_INTERVAL in ann:
        raw = ann[CHECKPOINT_INTERVAL]
        try:
            interval = parse_duration(raw)
            if not math.isfinite(interval) or interval <= 0:
                raise ValueError("must be a positive duration")
        except ValueError as e:
            interval = None
            problems.append(AnnotationProblem(key=CHECKPOINT_INTERVAL, value=raw, problem=str(e),
                                              consequence=absent))
    end = None
    if EXPECTED_END in ann:
        raw = ann[EXPECTED_END]
        try:
            end = parse_rfc3339(raw)
        except (ValueError, OverflowError) as e:
            problems.append(AnnotationProblem(key=EXPECTED_END, value=raw, problem=str(e),
                                              consequence=absent))
    return interval, end, problems


def _earliest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def build_pod(
    *,
    uid: str,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    now: float,
    limits: Limits = Limits(),
    priority: int = 0,
    priority_class: str = "",
    requests: Resources = ZERO,
    node: str | None = None,
    start_time: float | None = None,
    owner_uid: str | None = None,
    terminating: bool = False,
    in_scope: bool = True,
    active_deadline_seconds: float | None = None,
) -> tuple[Pod, tuple[AnnotationProblem, ...]]:
    """The planner's view of one pod from its metadata, and what was wrong with it. A pod
    outside the controller's scope (``in_scope`` False) is never a victim.
    ``active_deadline_seconds`` (the pod's spec): it ends by then after its start, so its
    expected end is the earlier of that and ``expected-end``."""
    f = parse_pod_fields(namespace=namespace, labels=labels, annotations=annotations, now=now,
                         limits=limits, priority_class=priority_class)
    pod = Pod(
        uid=uid, name=name, namespace=namespace, priority=priority, requests=requests,
        node=node, start_time=start_time, checkpoint=f.checkpoint,
        last_checkpoint=f.last_checkpoint, checkpoint_seconds=f.checkpoint_seconds,
        min_runtime=f.min_runtime, preemptible=f.preemptible and in_scope, nvlink=f.nvlink,
        gang=f.gang, gang_total=f.gang_total, labels=labels, terminating=terminating,
        checkpoint_malformed=f.checkpoint_malformed, owner_uid=owner_uid,
        gang_minimum=f.gang_minimum,
        checkpoint_interval=f.checkpoint_interval,
        expected_end=_earliest(f.expected_end, None if active_deadline_seconds is None
                               or start_time is None else start_time + active_deadline_seconds),
    )
    return pod, f.problems


def checkpointed_after(annotations: Mapping[str, str], since: float, now: float) -> bool:
    """Whether the pod reports a checkpoint completed after ``since``: its last-checkpoint
    (``last_checkpoint_key``) parses, is later than ``since`` and not in the future beyond the
    clock skew. A plan waiting for a victim's next periodic checkpoint takes this as its
    acknowledgement."""
    key = last_checkpoint_key(annotations)
    if key is None:
        return False
    try:
        t = parse_rfc3339(annotations[key])
    except (ValueError, OverflowError):
        return False
    return since < t <= now + CLOCK_SKEW_SECONDS
