"""Which GPUs of a node are in use, read from hwprobe's ``gpu-use`` annotation. Pure.

hwprobe reads the kubelet's PodResources API and publishes, next to its topology annotation,
which NVML GPU indices each pod holds (``ANNOTATION``, schema ``SCHEMA``, hwprobe/README.md).
With it the planner judges ``nvlink: required`` pods exactly instead of assuming the busy GPUs
sit where they hurt most (``topology.NodeTopology.nvlink_fits``):

- ``attach`` ties the report to the snapshot's pods on the node (the report names pods by
  namespace and name, as the PodResources API does): a listed pod is *known* (its indices);
  a GPU pod the report does not list, bound since, is *unknown* (it holds GPUs, which ones is
  not known); indices the report gives to pods the snapshot does not have are *orphans*, busy
  for good. A report is not used (the worst case stays) when it is older than
  ``MAX_AGE_SECONDS`` or from the future, counts other GPUs than the topology, puts a GPU in
  two pods, gives a pod another number of GPUs than it requests, or lists a pod that started
  less than ``CLOCK_SKEW_SECONDS`` before it (the entry may be an earlier pod of that name).
- ``free_gpus_needed`` is the least number of free GPUs, as the planner counts them, with
  which a free NVLink domain of the needed size surely exists, whichever pods the planner then
  evicts: an adversary may evict any set of the node's pods, put the unknown pods' GPUs and
  those of the plan's own earlier placements on any free GPU, and never frees an orphan.

Nothing here makes a pod cheaper to evict or keeps one from being evicted: only how many GPUs
must be freed on a node for an NVLink-bound pod changes, and never above the worst case.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Protocol

from ckpt_preempt.policies.model.times import rfc3339
from ckpt_preempt.policies.model.topology import NodeTopology, json_report

ANNOTATION = "hwprobe.ckpt-preempt.io/gpu-use"  # on Nodes, written by hwprobe
SCHEMA = "hwprobe-gpu-use/v1"
# A report older than this is ignored. hwprobe republishes it at least every
# ``hwprobe serve --gpu-use-refresh`` seconds (default 300), so three missed refreshes.
MAX_AGE_SECONDS = 900.0
# Clocks of nodes and the API server may differ by this much. A pod that started later than
# this before the report might be a newer pod of the same name, so its entry is not trusted.
CLOCK_SKEW_SECONDS = 60.0
# Known GPU pods on one node up to which every eviction set is tried (2**12 sets); above it
# the node keeps the worst-case rule.
MAX_KNOWN_PODS = 12


class GpuUseError(ValueError):
    """The annotation is not a usable report; the node keeps the worst-case NVLink rule."""


@dataclass(frozen=True, kw_only=True)
class GpuUseReport:
    """The annotation as published: when, how many GPUs, which indices each pod holds."""

    observed: float  # unix seconds
    gpu_count: int
    pods: tuple[tuple[str, str, frozenset[int]], ...]  # (namespace, name, GPU indices)


@dataclass(frozen=True, kw_only=True)
class GpuUse:
    """A node's GPUs in use, tied to the snapshot's pods (``Node.gpu_use``)."""

    known: tuple[tuple[str, frozenset[int]], ...]  # (pod uid, its GPU indices), by uid
    unknown: int = 0  # GPUs held by the node's pods whose indices are not known
    orphans: frozenset[int] = frozenset()  # busy, held by no pod of the snapshot
    observed: float = 0.0

    @property
    def held(self) -> int:
        """GPUs the snapshot's pods on the node hold: what the planner subtracts."""
        return sum(len(g) for _, g in self.known) + self.unknown


class _Pod(Protocol):
    uid: str
    name: str
    namespace: str
    start_time: float | None

    @property
    def gpus(self) -> int: ...


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_gpu_use(value: str) -> GpuUseReport:
    """Strictly parse the annotation; raise GpuUseError naming what is wrong."""
    doc = json_report(value, SCHEMA, GpuUseError)
    observed = doc.get("observed")
    try:
        when = datetime.fromisoformat(str(observed).replace("Z", "+00:00"))
    except ValueError as e:
        raise GpuUseError(f"observed must be an RFC 3339 time, got {observed!r}") from e
    if when.tzinfo is None:
        raise GpuUseError(f"observed must carry a time zone, got {observed!r}")
    count = doc.get("gpu_count")
    if not _int(count) or count < 0:
        raise GpuUseError(f"gpu_count must be a non-negative integer, got {count!r}")
    raw = doc.get("pods")
    if not isinstance(raw, list):
        raise GpuUseError("pods must be a list")
    pods = []
    for entry in raw:
        if not isinstance(entry, dict):
            raise GpuUseError(f"pod entry {entry!r} is not an object")
        ns, name, gpus = entry.get("namespace"), entry.get("name"), entry.get("gpus")
        if not isinstance(ns, str) or not isinstance(name, str) or not ns or not name:
            raise GpuUseError(f"pod entry {entry!r} needs a namespace and a name")
        if not isinstance(gpus, list) or not gpus:
            raise GpuUseError(f"pod {ns}/{name}: gpus must be a non-empty list")
        for i in gpus:
            if not _int(i) or not 0 <= i < count:
                raise GpuUseError(f"pod {ns}/{name}: GPU index {i!r} outside 0..{count - 1}")
        if len(set(gpus)) != len(gpus):
            raise GpuUseError(f"pod {ns}/{name}: a GPU index appears twice")
        pods.append((ns, name, frozenset(gpus)))
    return GpuUseReport(observed=when.timestamp(), gpu_count=count, pods=tuple(pods))


def report_body(gpu_count: int, pods: Iterable[tuple[str, str, Iterable[int]]]) -> dict:
    """The report without its time, as hwprobe publishes it: what changes when allocations
    change (hwprobe republishes on a change). ``pods``: (namespace, name, GPU indices)."""
    return {"schema": SCHEMA, "gpu_count": gpu_count,
            "pods": [{"namespace": ns, "name": name, "gpus": sorted(gpus)}
                     for ns, name, gpus in sorted(pods, key=lambda p: (p[0], p[1]))]}


def format_gpu_use(body: dict, observed: float) -> str:
    """The annotation's value: ``report_body`` and when it was observed (unix seconds), as
    compact JSON that ``parse_gpu_use`` reads back."""
    return json.dumps({**body, "observed": rfc3339(observed)}, separators=(",", ":"),
                      sort_keys=True)


def attach(report: GpuUseReport, topology: NodeTopology | None, pods: Iterable[_Pod],
           now: float) -> tuple[GpuUse | None, str | None]:
    """The report tied to the snapshot's pods bound to the node, or (None, why not)."""
    age = now - report.observed
    if age > MAX_AGE_SECONDS:
        return None, f"report is {age:.0f} s old (more than {MAX_AGE_SECONDS:.0f} s); ignored"
    if age < -CLOCK_SKEW_SECONDS:
        return None, f"report is {-age:.0f} s in the future; ignored"
    if topology is None or topology.gpu_count != report.gpu_count:
        have = "no topology" if topology is None else f"topology has {topology.gpu_count}"
        return None, f"report has {report.gpu_count} GPUs, {have}; ignored"
    seen: set[int] = set()
    for _, _, gpus in report.pods:
        if seen & gpus:
            return None, (f"GPU {min(seen & gpus)} is in more than one pod (shared GPUs); "
                          "ignored")
        seen |= gpus
    entries = {(ns, name): gpus for ns, name, gpus in report.pods}
    trusted_before = report.observed - CLOCK_SKEW_SECONDS
    known, unknown, claimed = [], 0, set()
    for p in pods:
        if p.gpus <= 0:
            continue
        gpus = entries.get((p.namespace, p.name))
        if gpus is None:  # bound since the report: it holds GPUs, which ones is not known
            unknown += p.gpus
            continue
        if p.start_time is None or p.start_time > trusted_before:
            # the entry may be an earlier pod of that name, whose GPUs may not be free yet
            return None, (f"report predates pod {p.namespace}/{p.name}; ignored until the "
                          "next one")
        if len(gpus) != p.gpus:
            return None, (f"report gives pod {p.namespace}/{p.name} {len(gpus)} GPUs, it "
                          f"requests {p.gpus}; ignored")
        known.append((p.uid, gpus))
        claimed.add((p.namespace, p.name))
    orphans = frozenset().union(*(g for key, g in entries.items() if key not in claimed))
    return GpuUse(known=tuple(sorted(known, key=lambda k: k[0])), unknown=unknown,
                  orphans=orphans, observed=report.observed), None


def free_gpus_needed(topology: NodeTopology, use: GpuUse, need: int, placed: int = 0
                     ) -> int | None:
    """The least free GPUs (as the planner counts them: the node's GPUs minus what the
    snapshot's pods hold, minus ``placed``) with which ``need`` free GPUs surely share one
    NVLink domain, whichever pods are evicted to get there. ``placed``: GPUs the plan being
    built already put on this node (where, the device plugin decides). None: too many known
    pods to try every eviction set; use the worst-case rule."""
    free_now = topology.gpu_count - use.held - placed
    if len(use.known) > MAX_KNOWN_PODS:
        return None
    most = _most_freed_while_blocked(
        tuple(sum(1 << i for i in d) for d in topology.domains),
        tuple(sorted(sum(1 << i for i in g) for _, g in use.known)),  # one key per layout
        sum(1 << i for i in use.orphans), topology.gpu_count, use.unknown, placed, need)
    if most is None:  # no eviction set leaves every domain short: a domain is free already
        return need
    return max(need, free_now + most + 1)


@lru_cache(maxsize=65536)
def _most_freed_while_blocked(domains: tuple[int, ...], known: tuple[int, ...], orphans: int,
                              gpu_count: int, unknown: int, placed: int, need: int
                              ) -> int | None:
    """The most GPUs (the planner's count) evicting some of the node's pods can free while
    every domain of at least ``need`` GPUs keeps fewer than ``need`` free, where the unknown
    pods' and the placed GPUs sit wherever blocks best; None when no set (not even none)
    blocks. Tries every set of known pods; unknown pods are taken as divisible, which gives
    the adversary more room, never less."""
    every = (1 << gpu_count) - 1
    free_base = every & ~orphans
    for mask in known:
        free_base &= ~mask
    big = [d for d in domains if d.bit_count() >= need]
    sizes = [m.bit_count() for m in known]
    best = None
    n = len(known)
    freed_mask = [0] * (1 << n)
    freed_count = [0] * (1 << n)
    for subset in range(1 << n):
        if subset:
            low = (subset & -subset).bit_length() - 1
            rest = subset & (subset - 1)
            freed_mask[subset] = freed_mask[rest] | known[low]
            freed_count[subset] = freed_count[rest] + sizes[low]
        free = free_base | freed_mask[subset]
        # GPUs that must stay busy (unknown pods kept, or placed) to block each domain
        to_fill = sum(max(0, (free & d).bit_count() - need + 1) for d in big)
        if to_fill > unknown + placed:
            continue
        evicted_unknown = min(unknown, unknown + placed - to_fill)
        freed = freed_count[subset] + evicted_unknown
        if best is None or freed > best:
            best = freed
    return best


def nvlink_free_gpus(topology: NodeTopology, use: GpuUse | None, need: int,
                     allocatable_gpus: int, placed: int = 0) -> int | None:
    """Free GPUs the node needs so ``need`` of them surely share a domain: exact with a
    usable ``use``, else the worst case; None when no number of free GPUs is enough."""
    exact = None if use is None else free_gpus_needed(topology, use, need, placed)
    if exact is not None:
        return exact if exact <= allocatable_gpus - placed else None
    for f in range(need, allocatable_gpus + 1):
        if topology.nvlink_fits(f, need):
            return f
    return None

