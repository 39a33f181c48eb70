"""Gang membership from every labelling convention in use, parsed strictly.

A pod belongs to at most one gang. Conventions are tried in a fixed order and the first one
present with a well-formed name wins (a JobSet pod that Kueue also groups is one gang, not two).
A malformed value counts as absent: a bad name lets the next convention decide, a bad total
leaves the gang without a declared size. Each comes back as a ``GangError`` for the caller to
report (see ``policies.model.annotations``); none of them ever protects a pod.

A gang's size is declared in one of two ways. A pod label or annotation (``total_key``) states
the exact number of members: more members than that is a mistake. A group object of the
scheduler that owns the convention (a Volcano or coscheduling ``PodGroup``, read by
``controller.kube.group_crds``) states ``spec.minMember``, a minimum: the gang is complete once that
many members exist, and more is fine (elastic jobs). ``readiness`` decides from both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class GangError(ValueError):
    """A gang label or annotation is present but malformed."""

    def __init__(self, key: str, value: str, problem: str) -> None:
        super().__init__(f"{key}={value!r}: {problem}")
        self.key = key
        self.value = value
        self.problem = problem


@dataclass(frozen=True, kw_only=True)
class Convention:
    id: str
    name_key: str  # label or annotation naming the gang
    total_key: str | None = None  # label or annotation: the exact number of members
    group_object: str | None = None  # "<plural>.<group>" whose spec.minMember is a minimum


# Order matters: the first convention a pod carries names its gang. Sources (docs/design.md,
# "Aliases we read"): Kueue kubernetes-sigs/kueue pkg/controller/jobs/pod/constants/constants.go
# @b45bf1a (GroupNameLabel, GroupTotalCountAnnotation); Volcano
# volcano-sh/apis pkg/apis/scheduling/v1beta1/labels.go@v1.15.0 (KubeGroupNameAnnotationKey) and
# types.go (PodGroupSpec.MinMember); scheduler-plugins apis/scheduling/v1alpha1/types.go@903da7d
# (PodGroupLabel, PodGroupSpec.MinMember); LWS api/leaderworkerset/v1/leaderworkerset_types.go
# @v0.10.0-11-g060ab4d (GroupUniqueHashLabelKey, SizeAnnotationKey: LeaderWorkerTemplate.Size,
# leader included); JobSet api/jobset/v1alpha2/jobset_types.go@08dfbdf (JobSetNameKey).
CONVENTIONS: tuple[Convention, ...] = (
    Convention(id="seed", name_key="scheduling.ai/gang-name", total_key="scheduling.ai/gang-total"),
    Convention(
        id="kueue",
        name_key="kueue.x-k8s.io/pod-group-name",
        total_key="kueue.x-k8s.io/pod-group-total-count",
    ),
    Convention(id="volcano", name_key="scheduling.k8s.io/group-name",
               group_object="podgroups.scheduling.volcano.sh"),
    Convention(id="coscheduling", name_key="scheduling.x-k8s.io/pod-group",
               group_object="podgroups.scheduling.x-k8s.io"),
    Convention(id="lws", name_key="leaderworkerset.sigs.k8s.io/group-key",
               total_key="leaderworkerset.sigs.k8s.io/size"),
    # No total: jobset.sigs.k8s.io/global-replicas counts Jobs, and a Job's parallelism (pods
    # per Job) is on no pod, so a JobSet's pod count cannot be derived from its pods.
    Convention(id="jobset", name_key="jobset.sigs.k8s.io/jobset-name"),
)
BY_ID: dict[str, Convention] = {c.id: c for c in CONVENTIONS}
# The key prefixes of every convention, in convention order, each once ("kueue.x-k8s.io/").
PREFIXES: tuple[str, ...] = tuple(dict.fromkeys(
    key.split("/", 1)[0] + "/"
    for c in CONVENTIONS for key in (c.name_key, c.total_key) if key is not None
))

# A DNS-1123 subdomain-ish value that also admits label-value characters ('_').
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,251}[A-Za-z0-9])?")  # used with fullmatch
_COUNT = re.compile(r"[1-9][0-9]{0,5}")
MAX_GANG_SIZE = 100_000


def gang_key(namespace: str, convention: str, name: str) -> str:
    """The gang's key: unique across namespaces and conventions. Trust: ``namespace`` is always
    the pod's own and a name holds no "/" (``_NAME``), so a gang label or annotation can name a
    gang only in the namespace of the pod that carries it."""
    return f"{namespace}/{convention}/{name}"


class Readiness(StrEnum):
    """Whether a gang has the members its declared size asks for."""

    COMPLETE = "complete"  # no size declared, or every declared member exists
    INCOMPLETE = "incomplete"  # fewer than the exact total or the minimum: wait for the rest
    OVERFULL = "overfull"  # more than the exact total: a mistake, never admitted


def readiness(members: int, *, total: int | None, minimum: int | None) -> Readiness:
    """``total``: the exact size a pod declares; ``minimum``: a group object's minMember."""
    if total is not None and members > total:
        return Readiness.OVERFULL
    if any(need is not None and members < need for need in (total, minimum)):
        return Readiness.INCOMPLETE
    return Readiness.COMPLETE


@dataclass(frozen=True, kw_only=True)
class GangMembership:
    key: str  # "<namespace>/<convention>/<name>": unique across conventions
    convention: str
    name: str
    total: int | None


def _lookup(key: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    # Conventions differ on label vs annotation; accept either, label first.
    if key in labels:
        return labels[key]
    return annotations.get(key)


def parse_total(key: str, value: str) -> int:
    v = value.strip()  # what is checked is what is converted (str.strip drops more than int)
    if not _COUNT.fullmatch(v) or int(v) > MAX_GANG_SIZE:
        raise GangError(key, value, f"must be an integer between 1 and {MAX_GANG_SIZE}")
    return int(v)


def detect(
    namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[GangMembership | None, tuple[GangError, ...]]:
    """The pod's gang (None when it has none) and every malformed value passed over."""
    problems: list[GangError] = []
    for conv in CONVENTIONS:
        name = _lookup(conv.name_key, labels, annotations)
        if name is None:
            continue
        if not _NAME.fullmatch(name):
            problems.append(GangError(conv.name_key, name, "not a valid object name"))
            continue
        total = None
        if conv.total_key is not None:
            raw = _lookup(conv.total_key, labels, annotations)
            if raw is not None:
                try:
                    total = parse_total(conv.total_key, raw)
                except GangError as e:
                    problems.append(e)
        member = GangMembership(
            key=gang_key(namespace, conv.id, name), convention=conv.id, name=name, total=total
        )
        return member, tuple(problems)
    return None, tuple(problems)
