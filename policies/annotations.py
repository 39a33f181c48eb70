"""Strict parsing of the ``ckpt-preempt.io/`` pod annotations into planner fields.

Every malformed value yields an ``AnnotationProblem`` (the controller emits it as a Warning
Event) and a safe choice. The safe choice never makes a pod cheaper to preempt:

- any bad checkpoint annotation drops *all* checkpoint information (cost counts from start);
- a bad ``preemptible`` opts the pod out; a bad ``min-runtime`` takes the configured cap;
- a bad gang label makes the pod non-preemptible (evicting it alone would understate the cost
  of breaking the gang it probably belongs to).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from policies import gangs
from policies.model import CheckpointMode, NvlinkNeed

PREFIX = "ckpt-preempt.io/"
CHECKPOINT = PREFIX + "checkpoint"
LAST_CHECKPOINT = PREFIX + "last-checkpoint"
CHECKPOINT_SECONDS = PREFIX + "checkpoint-seconds"
MIN_RUNTIME = PREFIX + "min-runtime"
PREEMPTIBLE = PREFIX + "preemptible"
NVLINK = PREFIX + "nvlink"
CLOCK_SKEW_SECONDS = 60.0  # a last-checkpoint this far in the future is rejected

# ASCII digits only, whole string only (fullmatch: "$" would also accept a trailing newline).
_PART = r"([0-9]+(?:\.[0-9]+)?)"
_DURATION = re.compile(rf"(?:{_PART}h)?(?:{_PART}m)?(?:{_PART}s)?")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)


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
    """Operator caps from the controller config (seconds)."""

    max_checkpoint_seconds: float = 600.0
    max_min_runtime: float = 3600.0


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
    problems: tuple[AnnotationProblem, ...] = ()


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


def parse_rfc3339(value: str) -> float:
    """Unix seconds from an RFC 3339 timestamp with an explicit offset; ValueError otherwise."""
    v = value.strip()
    if not _RFC3339.fullmatch(v):
        raise ValueError("expected RFC 3339 with a zone offset, e.g. 2026-12-02T09:00:00Z")
    return datetime.fromisoformat(v.upper()).timestamp()


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
    if LAST_CHECKPOINT in ann:
        raw = ann[LAST_CHECKPOINT]
        try:
            last = parse_rfc3339(raw)
        except ValueError as e:
            p = AnnotationProblem(key=LAST_CHECKPOINT, value=raw, problem=str(e), consequence=drop)
            return CheckpointMode.NONE, None, None, p
        if last > now + CLOCK_SKEW_SECONDS:
            p = AnnotationProblem(
                key=LAST_CHECKPOINT, value=raw, problem="lies in the future", consequence=drop
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
) -> PodPolicyFields:
    problems: list[AnnotationProblem] = []
    mode, last, seconds, p = _checkpoint_fields(annotations, now, limits)
    if p:
        problems.append(p)

    min_runtime = 0.0
    if MIN_RUNTIME in annotations:
        raw = annotations[MIN_RUNTIME]
        try:
            min_runtime = min(parse_duration(raw), limits.max_min_runtime)
        except ValueError as e:
            min_runtime = limits.max_min_runtime
            problems.append(AnnotationProblem(
                key=MIN_RUNTIME, value=raw, problem=str(e),
                consequence=f"protected for the maximum min-runtime ({limits.max_min_runtime:g}s)",
            ))

    preemptible = True
    if PREEMPTIBLE in annotations:
        raw = annotations[PREEMPTIBLE].strip().lower()
        if raw not in ("true", "false"):
            problems.append(AnnotationProblem(
                key=PREEMPTIBLE, value=annotations[PREEMPTIBLE],
                problem="must be true or false", consequence="treated as opted out (false)",
            ))
        preemptible = raw == "true"

    nvlink = NvlinkNeed.NONE
    if NVLINK in annotations:
        try:
            nvlink = NvlinkNeed(annotations[NVLINK].strip())
        except ValueError:
            problems.append(AnnotationProblem(
                key=NVLINK, value=annotations[NVLINK],
                problem="must be required, preferred or none", consequence="treated as none",
            ))

    gang = total = None
    try:
        member = gangs.detect(namespace, labels, annotations)
    except gangs.GangError as e:
        member = None
        preemptible = False
        problems.append(AnnotationProblem(
            key=e.key, value=e.value, problem=str(e),
            consequence="not preempted (its gang cannot be determined)",
        ))
    if member is not None:
        gang, total = member.key, member.total

    return PodPolicyFields(
        checkpoint=mode, last_checkpoint=last, checkpoint_seconds=seconds,
        min_runtime=min_runtime, preemptible=preemptible, nvlink=nvlink,
        gang=gang, gang_total=total, problems=tuple(problems),
    )
