"""RFC 3339 times as every format of ours writes and reads them (annotations, stored plans,
Events, reports), to and from unix seconds. Pure; the lowest module of ``policies``."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def rfc3339(t: float) -> str:
    """Unix seconds as an RFC 3339 timestamp in UTC, whole seconds (annotations, Event notes,
    the agent's hook environment): ``parse_rfc3339``'s inverse to the second."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(t: float | datetime) -> str:
    """An RFC 3339 timestamp in UTC with microseconds: Kubernetes' MicroTime (a Lease's times,
    an events.k8s.io Event's eventTime)."""
    when = t if isinstance(t, datetime) else datetime.fromtimestamp(t, UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(value: str) -> float:
    """Unix seconds from an RFC 3339 timestamp with an explicit offset; ValueError otherwise."""
    v = value.strip()
    if not _RFC3339.fullmatch(v):
        raise ValueError("expected RFC 3339 with a zone offset, e.g. 2026-12-02T09:00:00Z")
    return datetime.fromisoformat(v.upper()).timestamp()
