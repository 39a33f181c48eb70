"""Eviction units, as the planner and the oracle see them.

A unit is what one eviction decision removes: a single pod, or every running member of a gang
(a gang goes whole or not at all), or, for an elastic gang, some of its members above its
minimum (a shrink, ``policies.planner.shrink``; built only when the builder has
``rendezvous_seconds``).
A whole unit's cost is the whole gang's lost work, plus the fairness penalty for a workload
preempted recently, and it frees the whole gang's resources, on every node the gang occupies.

The PDB rule for gangs (``PdbBudget``) and the exact within-node search (``min_cover``) are in
``policies.planner.cover``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ckpt_preempt.policies.model.model import ZERO, Pod, PodHold, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import bound, cost, parity, shrink, timing


@dataclass(frozen=True, kw_only=True)
class Unit:
    id: str  # gang key, or the pod uid for a pod outside any gang
    gang: str | None
    pods: tuple[Pod, ...]
    losses: tuple[float, ...]  # per pod, GPU-seconds
    drained: tuple[bool, ...]  # per pod
    release: Mapping[str, Resources]  # node -> resources freed there
    penalty: float = 0.0  # fairness: GPU-seconds charged for the workload's recent preemptions
    pdb_cover: tuple[tuple[int, int], ...] = ()  # (index into Snapshot.pdbs, pods it covers)
    cost: float = 0.0  # what the search minimises: lost work plus penalty
    shrink: bool = False  # some members of an elastic gang, which runs on without them

    @property
    def lost(self) -> float:
        return sum(self.losses)


@dataclass(frozen=True, kw_only=True, slots=True)
class EndWait:
    """End-aware charges (``policies.planner.timing.end_rate``): a pod whose declared end is
    seen (end + ``margin``) within ``max_wait`` is charged ``rate`` (the preemptor's GPUs) x
    its wait, when that is less than its loss."""

    margin: float
    max_wait: float
    rate: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Evictable:
    """The evictable pods on one node for one preemptor priority, with their totals."""

    entries: list[tuple[float, int, int, int, str]]  # (GPU-s charged per GPU, gpus, cpu, mem,
    #                                                    unit)
    cpu_milli: int
    memory_mib: int
    gpus: int
    pieces: list[tuple[float, int]]  # (GPU-s charged per GPU, gpus) of GPU pods, cheapest first
    held: Mapping[str, int]  # pods that are no candidates only because another plan holds them
    #                          or their eviction was blocked: count per reason
    gpu_milli: int = 0  # MIG slices (thousandths of a GPU) all of them together hold
    # the earliest time a pod here, or a member of its gang, passes its min-runtime (it may
    # become a victim then), or a pod's end-aware charge starts falling (``EndWait``); what
    # this says holds until that time
    stale_after: float = math.inf


class UnitBuilder:
    """Builds units lazily, so a plan touches only the pods on the nodes it evaluates.

    Eligibility is per unit: one ineligible member (higher priority, opted out, too young,
    terminating, held) protects its whole gang, and so does a PDB covering more of the gang's
    members than it allows to go. ``penalty_seconds`` is the fairness penalty: each GPU of a
    workload preempted n times recently and h times within the bound's window is charged
    max(n, 2^h - 1) × that many seconds on top of its loss (``bound.penalty_factor``).
    ``parity_floor``: report parity's floor for this preemptor (``parity.floor``); a pod the
    rule then holds (``parity.holds``) is no candidate, as if it were held
    (``PodHold.REPORT_PARITY``). None: the rule holds nobody.
    """

    def __init__(
        self, snapshot: Snapshot, preemptor_priority: int, *, drain: bool,
        max_checkpoint_seconds: float, penalty_seconds: float = 0.0,
        restart_seconds: float = 0.0, shared: dict[str, Evictable] | None = None,
        unshared: frozenset[str] = frozenset(), rendezvous_seconds: float | None = None,
        restart_workload_gpu_seconds: float = 0.0,
        end_wait: EndWait | None = None, parity_floor: int | None = None,
    ) -> None:
        self.parity_floor = parity_floor
        # a pod whose declared end is seen within the wait is charged the preemptor's wait for
        # it when that is less than its loss (``charge``); None: loss only
        self.end_wait = end_wait
        self.s = snapshot
        # a restart's fixed part, whatever the workload's size: charged once per unit that
        # goes whole (a gang or a pod), on its first pod; a shrink restarts nothing
        self.restart_workload_gpu_seconds = restart_workload_gpu_seconds
        # None: no elastic shrink, every gang goes whole (``policies.planner.shrink``)
        self.rendezvous_seconds = rendezvous_seconds
        self._shrink_rate: dict[str, float] = {}
        # ``shared``: a cycle's store of what ``evictable_on`` found, for this builder's priority
        # band and cost settings (``policies.planner.plan_cache``), used for every node but
        # ``unshared`` (where the snapshot differs from the one the store describes)
        self._shared = shared
        self._unshared = unshared
        self.restart_seconds = restart_seconds
        self.priority = preemptor_priority
        self.drain = drain
        self.max_checkpoint_seconds = max_checkpoint_seconds
        self.unknown_age = snapshot.unknown_checkpoint_age
        self.recent = snapshot.recent_preemptions if penalty_seconds > 0 else {}
        self.history = snapshot.preemption_history if penalty_seconds > 0 else {}
        self.penalty_seconds = penalty_seconds
        self._why: dict[str, str | None] = {}  # per gang: one bad member protects all
        self._units: dict[str, Unit] = {}
        self._loss: dict[str, tuple[float, bool]] = {}
        self._evictable: dict[str, Evictable] = {}
        self._gang_grows_up: dict[str, float] = {}

    def unit_id(self, pod: Pod) -> str:
        return pod.gang or pod.uid

    def members(self, pod: Pod) -> list[Pod]:
        """The bound pods evicted together with ``pod``: its gang's, or just itself."""
        if pod.gang is None:
            return [pod]
        return [p for p in self.s.gang_pods(pod.gang) if p.node is not None]

    def ineligibility(self, pod: Pod) -> cost.Ineligible | None:
        """Why ``pod`` alone may not be a victim (``cost.ineligibility``, then report
        parity's hold), or None."""
        r = cost.ineligibility(pod, self.priority, self.s.now)
        if r is None and self.parity_floor is not None and parity.holds(
                pod, self.parity_floor, self.s.preemption_history):
            return cost.Ineligible.REPORT_PARITY
        return r

    def why_not(self, pod: Pod) -> str | None:
        """None when the pod's unit may be evicted, else the reason it may not."""
        if pod.gang is None:
            r = self.ineligibility(pod)
            return None if r is None else str(r)
        uid = pod.gang
        if uid in self._why:
            return self._why[uid]
        why = None
        members = self.members(pod)
        for p in members:
            r = self.ineligibility(p)
            if r is not None:
                why = f"gang-member-{r}"
                break
        if why is None and any(n > self.s.pdbs[i].disruptions_allowed
                               for i, n in self.pdb_cover(members)):
            why = str(cost.Ineligible.GANG_PDB)
        self._why[uid] = why
        return why

    def pdb_cover(self, pods: Iterable[Pod]) -> tuple[tuple[int, int], ...]:
        """(index into the snapshot's PDBs, how many of ``pods`` it covers), for each PDB
        that covers any."""
        by_ns = self.s.pdbs_by_namespace
        if not by_ns:
            return ()
        count: dict[int, int] = {}
        for p in pods:
            for i, b in by_ns.get(p.namespace, ()):
                if b.covers(p):
                    count[i] = count.get(i, 0) + 1
        return tuple(sorted(count.items()))

    def loss(self, pod: Pod) -> tuple[float, bool]:
        got = self._loss.get(pod.uid)
        if got is None:
            got = cost.lost_gpu_seconds(
                pod, self.s.now, drain=self.drain,
                max_checkpoint_seconds=self.max_checkpoint_seconds, unknown_age=self.unknown_age,
                restart_seconds=self.restart_seconds,
            )
            self._loss[pod.uid] = got
        return got

    def charge(self, pod: Pod, lost: float) -> float:
        """What the search charges for evicting ``pod`` whose loss is ``lost``: that, or the
        wait for its declared end when ``end_wait`` is on and the wait is cheaper."""
        if self.end_wait is None:
            return lost
        ends = self.end_wait
        seen = timing.end_seen(pod, self.s.now, margin=ends.margin, max_wait=ends.max_wait)
        return lost if seen is None else min(lost, ends.rate * (seen - self.s.now))

    def penalty(self, pod: Pod) -> float:
        """The fairness penalty charged for evicting ``pod`` (GPU-seconds)."""
        if not self.recent and not self.history:
            return 0.0
        w = pod.workload
        return pod.gpu_share * self.penalty_seconds * bound.penalty_factor(
            self.recent.get(w, 0), self.history.get(w, 0))

    def unit(self, pod: Pod) -> Unit:
        uid = self.unit_id(pod)
        got = self._units.get(uid)
        if got is None:
            pods = sorted(self.members(pod), key=lambda p: p.uid)
            lost = [self.loss(p) for p in pods]
            if self.restart_workload_gpu_seconds:
                first, drained = lost[0]
                lost[0] = (first + self.restart_workload_gpu_seconds, drained)
            release: dict[str, Resources] = {}
            for p in pods:
                release[p.node] = release.get(p.node, ZERO) + p.requests
            penalty = sum(self.penalty(p) for p in pods)
            got = Unit(
                id=uid, gang=pod.gang, pods=tuple(pods), losses=tuple(x for x, _ in lost),
                drained=tuple(d for _, d in lost), release=release, penalty=penalty,
                pdb_cover=self.pdb_cover(pods), cost=penalty + sum(
                    self.charge(p, x) for p, (x, _) in zip(pods, lost, strict=True)),
            )
            self._units[uid] = got
        return got

    def evictable_on(self, node: str) -> Evictable:
        """What preempting on ``node`` could free: each evictable pod, and the totals."""
        got = self._evictable.get(node)
        if got is None and self._shared is not None and node not in self._unshared:
            got = self._shared.get(node)
            if got is None:
                got = self._shared[node] = self._evictable_on(node)
            self._evictable[node] = got
        if got is None:
            got = self._evictable[node] = self._evictable_on(node)
        return got

    def _evictable_on(self, node: str) -> Evictable:
        entries, pieces, cpu, mem, gpus, milli = [], [], 0, 0, 0, 0
        held: dict[str, int] = {}
        prio, now, recent = self.priority, self.s.now, self.recent or self.history
        ends = self.end_wait
        floor, history = self.parity_floor, self.s.preemption_history
        stale_after = math.inf
        for p in self.s.pods_on_node.get(node, ()):
            if p.gang is None:  # inline _min_runtime_end: this loop is the planner's hottest
                start = p.start_time
                if start is not None and now < start + p.min_runtime < stale_after:
                    stale_after = start + p.min_runtime
            else:
                stale_after = min(stale_after, self._grows_up(p))
            if ends is not None and p.expected_end is not None \
                    and p.expected_end + ends.margin > now:
                # its end-aware charge falls from when its end comes within the wait
                stale_after = min(stale_after, max(
                    now, p.expected_end + ends.margin - ends.max_wait))
            # the pod's own standing (``ineligibility`` inlined: this loop is the hottest);
            # a gang member's unit is judged once per gang (``why_not``)
            own = cost.ineligibility(p, prio, now)
            if own is None and floor is not None and parity.holds(p, floor, history):
                own = cost.Ineligible.REPORT_PARITY
            why = own if p.gang is None else self.why_not(p)
            if why is not None:
                if p.held is not None and not p.terminating and p.priority < prio:
                    held[p.held] = held.get(p.held, 0) + 1
                elif own is cost.Ineligible.REPORT_PARITY:
                    held[PodHold.REPORT_PARITY] = held.get(PodHold.REPORT_PARITY, 0) + 1
                continue
            r = p.requests
            if r.gpus:
                charge = self.charge(p, self.loss(p)[0])
                if p.gang is not None and self.rendezvous_seconds is not None:
                    charge = min(charge, self.shrink_rate(p) * r.gpus)
                rate = (charge + self.penalty(p) if recent else charge) / r.gpus
            else:
                rate = 0.0
            entries.append((rate, r.gpus, r.cpu_milli, r.memory_mib, p.gang or p.uid))
            cpu += r.cpu_milli
            mem += r.memory_mib
            milli += r.gpu_milli
            if r.gpus:
                gpus += r.gpus
                pieces.append((rate, r.gpus))
        pieces.sort()
        return Evictable(entries=entries, cpu_milli=cpu, memory_mib=mem, gpus=gpus,
                         pieces=pieces, held=held, gpu_milli=milli, stale_after=stale_after)

    def _grows_up(self, pod: Pod) -> float:
        """When the next of ``pod``'s unit's members passes its min-runtime (inf: none is
        still within it)."""
        if pod.gang is None:
            return _min_runtime_end(pod, self.s.now)
        got = self._gang_grows_up.get(pod.gang)
        if got is None:
            got = self._gang_grows_up[pod.gang] = min(
                (_min_runtime_end(p, self.s.now) for p in self.members(pod)), default=math.inf)
        return got

    def shrink_rate(self, pod: Pod) -> float:
        """A lower bound on what a shrink of ``pod``'s gang costs per GPU it frees (inf: it
        cannot shrink)."""
        got = self._shrink_rate.get(pod.gang)
        if got is None:
            got = self._shrink_rate[pod.gang] = shrink.rate_bound(
                self.members(pod), self.rendezvous_seconds)
        return got

    def shrink_units(self, pod: Pod, node: str) -> list[Unit]:
        """The shrinks of ``pod``'s elastic gang that evict only members on ``node``
        (``policies.planner.shrink``); none without ``rendezvous_seconds`` or spare members."""
        if self.rendezvous_seconds is None or pod.gang is None:
            return []
        members = self.members(pod)
        out = []
        for leaving in shrink.options(members, node):
            lost = shrink.shrink_cost(members, self.rendezvous_seconds)
            penalty = sum(self.penalty(p) for p in leaving)
            pods = tuple(sorted(leaving, key=lambda p: p.uid))
            out.append(Unit(
                id=shrink.unit_id(pod.gang, node, len(pods)), gang=pod.gang, pods=pods,
                losses=tuple(lost / len(pods) for _ in pods),
                drained=tuple(self.drain for _ in pods),
                release={node: shrink.release(pods)}, penalty=penalty,
                pdb_cover=self.pdb_cover(pods), cost=lost + penalty, shrink=True))
        return out

    def nodes_of(self, unit: Unit) -> set[str]:
        """The nodes where choosing ``unit`` changes what may still be evicted: where it frees
        resources, and for a shrink every node of its gang (the gang is offered no more)."""
        if not unit.shrink:
            return set(unit.release)
        return {p.node for p in self.s.gang_pods(unit.gang) if p.node is not None}

    def units_on(self, node: str, exclude: Iterable[str] | Mapping[str, Unit] = ()) -> list[Unit]:
        """The eligible units with pods on ``node``, those of an elastic gang's shrinks
        included; ``exclude``: unit ids, or chosen units by id (their gangs are left out)."""
        skip = set(exclude)
        if isinstance(exclude, Mapping):
            skip.update(u.gang for u in exclude.values() if u.gang is not None)
        out: dict[str, Unit] = {}
        for p in self.s.pods_on_node.get(node, ()):
            uid = self.unit_id(p)
            if uid in skip or uid in out or self.why_not(p) is not None:
                continue
            out[uid] = self.unit(p)
            for u in self.shrink_units(p, node):
                out[u.id] = u
        return list(out.values())

    def all_units(self) -> list[Unit]:
        out: dict[str, Unit] = {}
        for p in self.s.pods:
            if p.node is not None and self.why_not(p) is None:
                out.setdefault(self.unit_id(p), self.unit(p))
        return list(out.values())


def _min_runtime_end(pod: Pod, now: float) -> float:
    """When ``pod`` passes its min-runtime (``cost.ineligibility``), if that is still ahead
    of ``now``; inf when it has, or never will while the pod stays as it is (no start time:
    it counts as just started at every ``now``)."""
    if pod.start_time is None:
        return math.inf
    end = pod.start_time + pod.min_runtime  # a start in the future counts as young too
    return end if end > now else math.inf
