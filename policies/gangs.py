"""Gang membership from every labelling convention in use, parsed strictly.

A pod belongs to at most one gang. Conventions are tried in a fixed order and the first one
present with a well-formed name wins (a JobSet pod that Kueue also groups is one gang, not two).
A malformed value counts as absent: a bad name lets the next convention decide, a bad total
leaves the gang without a declared size. Each comes back as a ``GangError`` for the caller to
report (see ``policies.annotations``); none of them ever protects a pod.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


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
    name_key: str
    total_key: str | None = None


# Order matters: the first convention a pod carries names its gang.
CONVENTIONS: tuple[Convention, ...] = (
    Convention(id="seed", name_key="scheduling.ai/gang-name", total_key="scheduling.ai/gang-total"),
    Convention(
        id="kueue",
        name_key="kueue.x-k8s.io/pod-group-name",
        total_key="kueue.x-k8s.io/pod-group-total-count",
    ),
    Convention(id="volcano", name_key="scheduling.k8s.io/group-name"),
    Convention(id="coscheduling", name_key="scheduling.x-k8s.io/pod-group"),
    Convention(id="lws", name_key="leaderworkerset.sigs.k8s.io/group-key"),
    Convention(id="jobset", name_key="jobset.sigs.k8s.io/jobset-name"),
)
# The key prefixes of every convention, in convention order, each once ("kueue.x-k8s.io/").
PREFIXES: tuple[str, ...] = tuple(dict.fromkeys(
    key.split("/", 1)[0] + "/"
    for c in CONVENTIONS for key in (c.name_key, c.total_key) if key is not None
))

# A DNS-1123 subdomain-ish value that also admits label-value characters ('_').
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,251}[A-Za-z0-9])?")  # used with fullmatch
_COUNT = re.compile(r"[1-9][0-9]{0,5}")
MAX_GANG_SIZE = 100_000


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
            key=f"{namespace}/{conv.id}/{name}", convention=conv.id, name=name, total=total
        )
        return member, tuple(problems)
    return None, tuple(problems)
