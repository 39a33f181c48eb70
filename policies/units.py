"""Eviction units and the exact within-node search shared by the planner and the oracle.

A unit is what one eviction decision removes: a single pod, or every running member of a gang
(a gang goes whole or not at all). Its cost is the whole gang's lost work, plus the fairness
penalty for a workload preempted recently, and it frees the whole gang's resources, on every
node the gang occupies.

PDBs: a gang may go only if every PDB covering it allows all the victims of the plan it covers
to go (the Eviction API would otherwise refuse some members and leave the gang half-evicted);
single pods only count as PDB violations, as in kube-scheduler. ``PdbBudget`` tracks this
across the units of one plan.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ckpt_preempt.policies import cost
from ckpt_preempt.policies.model import (
    ZERO,
    Pod,
    PodDisruptionBudget,
    Resources,
    Snapshot,
    breaks_budget,
)


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

    @property
    def lost(self) -> float:
        return sum(self.losses)


class PdbBudget:
    """Victims charged to each PDB by the units chosen so far, and which PDBs cover a chosen
    gang (those must not be exceeded). Mutable; ``add`` and ``remove`` undo each other."""

    def __init__(self, pdbs: Sequence[PodDisruptionBudget]) -> None:
        self.allowed = [b.disruptions_allowed for b in pdbs]
        self.used = [0] * len(pdbs)
        self.gangs = [0] * len(pdbs)  # chosen gangs each PDB covers

    def admits(self, unit: Unit) -> bool:
        """Can ``unit`` join without a PDB that covers a chosen gang allowing too few?"""
        gang = unit.gang is not None
        for i, n in unit.pdb_cover:
            if (gang or self.gangs[i]) and self.used[i] + n > self.allowed[i]:
                return False
        return True

    def add(self, unit: Unit) -> None:
        for i, n in unit.pdb_cover:
            self.used[i] += n
            self.gangs[i] += unit.gang is not None

    def remove(self, unit: Unit) -> None:
        for i, n in unit.pdb_cover:
            self.used[i] -= n
            self.gangs[i] -= unit.gang is not None

    def key(self) -> tuple:
        """The state, for memo keys: () while nothing is charged."""
        return tuple(self.used) + tuple(self.gangs) if any(self.used) else ()

    def copy(self) -> PdbBudget:
        out = PdbBudget(())
        out.allowed, out.used, out.gangs = self.allowed, list(self.used), list(self.gangs)
        return out


def gang_pdb_ok(units: Iterable[Unit], pdbs: Sequence[PodDisruptionBudget]) -> bool:
    """Do these units together leave every gang whole under the PDBs?"""
    budget = PdbBudget(pdbs)
    for u in units:
        budget.add(u)
    return all(used <= allowed for used, allowed, gangs
               in zip(budget.used, budget.allowed, budget.gangs, strict=True) if gangs)


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
    # become a victim then); what this says holds until that time
    stale_after: float = math.inf


class UnitBuilder:
    """Builds units lazily, so a plan touches only the pods on the nodes it evaluates.

    Eligibility is per unit: one ineligible member (higher priority, opted out, too young,
    terminating, held) protects its whole gang, and so does a PDB covering more of the gang's
    members than it allows to go. ``penalty_seconds`` is the fairness penalty: each GPU of a
    workload preempted n times recently is charged n × that many seconds on top of its loss.
    """

    def __init__(
        self, snapshot: Snapshot, preemptor_priority: int, *, drain: bool,
        max_checkpoint_seconds: float, penalty_seconds: float = 0.0,
        restart_seconds: float = 0.0, shared: dict[str, Evictable] | None = None,
        unshared: frozenset[str] = frozenset(),
    ) -> None:
        self.s = snapshot
        # ``shared``: a cycle's store of what ``evictable_on`` found, for this builder's priority
        # band and cost settings (``policies.plan_cache``), used for every node but ``unshared``
        # (where the snapshot differs from the one the store describes)
        self._shared = shared
        self._unshared = unshared
        self.restart_seconds = restart_seconds
        self.priority = preemptor_priority
        self.drain = drain
        self.max_checkpoint_seconds = max_checkpoint_seconds
        self.unknown_age = snapshot.unknown_checkpoint_age
        self.recent = snapshot.recent_preemptions if penalty_seconds > 0 else {}
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

    def why_not(self, pod: Pod) -> str | None:
        """None when the pod's unit may be evicted, else the reason it may not."""
        if pod.gang is None:
            r = cost.ineligibility(pod, self.priority, self.s.now)
            return None if r is None else str(r)
        uid = pod.gang
        if uid in self._why:
            return self._why[uid]
        why = None
        members = self.members(pod)
        for p in members:
            r = cost.ineligibility(p, self.priority, self.s.now)
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

    def penalty(self, pod: Pod) -> float:
        """The fairness penalty charged for evicting ``pod`` (GPU-seconds)."""
        if not self.recent:
            return 0.0
        return pod.gpu_share * self.penalty_seconds * self.recent.get(pod.workload, 0)

    def unit(self, pod: Pod) -> Unit:
        uid = self.unit_id(pod)
        got = self._units.get(uid)
        if got is None:
            pods = sorted(self.members(pod), key=lambda p: p.uid)
            lost = [self.loss(p) for p in pods]
            release: dict[str, Resources] = {}
            for p in pods:
                release[p.node] = release.get(p.node, ZERO) + p.requests
            penalty = sum(self.penalty(p) for p in pods)
            got = Unit(
                id=uid, gang=pod.gang, pods=tuple(pods), losses=tuple(x for x, _ in lost),
                drained=tuple(d for _, d in lost), release=release, penalty=penalty,
                pdb_cover=self.pdb_cover(pods), cost=sum(x for x, _ in lost) + penalty,
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
        prio, now, recent = self.priority, self.s.now, self.recent
        stale_after = math.inf
        for p in self.s.pods_on_node.get(node, ()):
            if p.gang is None:  # inline _min_runtime_end: this loop is the planner's hottest
                start = p.start_time
                if start is not None and now < start + p.min_runtime < stale_after:
                    stale_after = start + p.min_runtime
            else:
                stale_after = min(stale_after, self._grows_up(p))
            # the common case, single pods, without the per-gang memo
            why = cost.ineligibility(p, prio, now) if p.gang is None else self.why_not(p)
            if why is not None:
                if p.held is not None and not p.terminating and p.priority < prio:
                    held[p.held] = held.get(p.held, 0) + 1
                continue
            r = p.requests
            if r.gpus:
                charge = self.loss(p)[0]
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

    def units_on(self, node: str, exclude: Iterable[str] = ()) -> list[Unit]:
        skip = set(exclude)
        out: dict[str, Unit] = {}
        for p in self.s.pods_on_node.get(node, ()):
            uid = self.unit_id(p)
            if uid in skip or uid in out or self.why_not(p) is not None:
                continue
            out[uid] = self.unit(p)
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


def pdb_violations(pods: Iterable[Pod], pdbs: Sequence[PodDisruptionBudget]) -> int:
    """Victims whose eviction breaks a PDB, charging budgets in the given order."""
    return sum(breaks_budget(pods, pdbs)) if pdbs else 0


def covers(have: Resources, need: Resources) -> bool:
    return need.fits_in(have)


def gpu_lower_bound(pieces: list[tuple[float, int]], need_gpus: int) -> float:
    """Fractional-knapsack bound on the cost of freeing ``need_gpus`` GPUs.

    ``pieces`` are (GPU-seconds lost per GPU, GPUs) for each evictable pod on the node, sorted
    cheapest first (``Evictable.pieces`` already is). A unit
    costs at least the sum of its pods' own losses, so relaxing units into pods keeps this a
    lower bound on the exact cover.
    """
    if need_gpus <= 0:
        return 0.0
    bound, left = 0.0, need_gpus
    for rate, gpus in pieces:
        take = min(gpus, left)
        bound += rate * take
        left -= take
        if left == 0:
            return bound
    return float("inf")


@dataclass(frozen=True, kw_only=True)
class Cover:
    unit_ids: tuple[str, ...]
    cost: float
    pdb_violations: int
    victims: int
    exhausted: bool  # the search budget ran out; the cover is the best found, maybe not optimal


def min_cover(
    units: Sequence[Unit],
    node: str,
    need: Resources,
    pdbs: Sequence[PodDisruptionBudget],
    budget: int = 20_000,
    pdb_budget: PdbBudget | None = None,
) -> Cover | None:
    """Exact minimum of (cost, PDB violations, victims) over unit subsets freeing ``need``
    that keep every gang whole under the PDBs (``pdb_budget``: what the plan's other units
    already charged; None when nothing is and there are no PDBs).

    Depth-first branch and bound over units sorted cheapest first. A branch is cut when
    everything left cannot cover the need, or when its cost plus a bound on the GPUs still
    missing (at the cheapest per-GPU rate left) cannot beat the best cover. Units that free
    nothing the need lacks are dropped first: they only add victims. A unit the PDBs do not
    admit next to those chosen is skipped: adding more only uses up more budget.
    """

    def useful(r: Resources) -> bool:
        return (
            (need.gpus > 0 and r.gpus > 0)
            or (need.cpu_milli > 0 and r.cpu_milli > 0)
            or (need.memory_mib > 0 and r.memory_mib > 0)
            or (need.gpu_milli > 0 and r.gpu_milli > 0)
        )

    order = sorted(
        (u for u in units if useful(u.release[node])), key=lambda u: (u.cost, len(u.pods), u.id)
    )
    rel = [u.release[node] for u in order]
    n = len(order)
    suffix = [ZERO] * (n + 1)
    rate = [float("inf")] * (n + 1)  # cheapest lost GPU-seconds per freed GPU from i on
    most = [(0, 0, 0)] * (n + 1)  # the most any one unit from i on frees, per dimension
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + rel[i]
        m = most[i + 1]
        most[i] = (max(m[0], rel[i].gpus), max(m[1], rel[i].cpu_milli),
                   max(m[2], rel[i].memory_mib))
        own = order[i].cost / rel[i].gpus if rel[i].gpus else float("inf")
        rate[i] = min(rate[i + 1], own)
    if not covers(suffix[0], need):
        return None
    if pdb_budget is None and pdbs and any(u.pdb_cover for u in order):
        pdb_budget = PdbBudget(pdbs)
    gate = pdb_budget if pdb_budget is not None and any(u.pdb_cover for u in order) else None
    best: list = [None]  # (cost, pdb, victims, ids)
    steps = 0
    chosen: list[int] = []

    def record(c: float, count: int) -> None:
        ids = tuple(order[i].id for i in chosen)
        pdb = pdb_violations((p for i in chosen for p in order[i].pods), pdbs)
        key = (c, pdb, count, ids)
        if best[0] is None or key < best[0]:
            best[0] = key

    def _more_units(i: int, have: Resources) -> int:
        """At least this many more units (one victim each at least) must join to cover."""
        m = most[i]
        gaps = (need.gpus - have.gpus, need.cpu_milli - have.cpu_milli,
                need.memory_mib - have.memory_mib)
        return max(-(-g // step) if g > 0 and step else 0 for g, step in zip(gaps, m, strict=True))

    def _partial_pdb() -> int:
        return pdb_violations((p for i in chosen for p in order[i].pods), pdbs)

    def dfs(i: int, have: Resources, c: float, count: int) -> None:
        nonlocal steps
        steps += 1
        if covers(have, need):
            record(c, count)
            return
        if i == n or steps > budget:
            return
        b = best[0]
        if b is not None:
            missing = need.gpus - have.gpus
            bound = c + (missing * rate[i] if missing > 0 else 0.0)
            if bound > b[0]:
                return
            # an equal-cost branch only adds victims, and PDB violations never shrink as
            # victims are added: cut it unless it can still win on PDBs or on victims
            if c == b[0] and count + _more_units(i, have) >= b[2] and (
                not pdbs or _partial_pdb() >= b[1]
            ):
                return
        if not covers(have + suffix[i], need):
            return
        u = order[i]
        if gate is None or not u.pdb_cover:
            chosen.append(i)
            dfs(i + 1, have + rel[i], c + u.cost, count + len(u.pods))
            chosen.pop()
        elif gate.admits(u):
            chosen.append(i)
            gate.add(u)
            dfs(i + 1, have + rel[i], c + u.cost, count + len(u.pods))
            gate.remove(u)
            chosen.pop()
        dfs(i + 1, have, c, count)

    dfs(0, ZERO, 0.0, 0)
    if best[0] is None and steps > budget:
        # budget spent before any cover: fall back to the cheapest-first greedy cover the
        # PDBs admit (without PDBs one exists: everything together covers the need)
        greedy = gate.copy() if gate is not None else None
        have = ZERO
        for i in range(n):
            if greedy is not None and not greedy.admits(order[i]):
                continue
            if greedy is not None:
                greedy.add(order[i])
            chosen.append(i)
            have = have + rel[i]
            if covers(have, need):
                record(sum(order[i].cost for i in chosen),
                       sum(len(order[i].pods) for i in chosen))
                break
    if best[0] is None:
        return None
    c, pdb, count, ids = best[0]
    return Cover(
        unit_ids=ids, cost=c, pdb_violations=pdb, victims=count, exhausted=steps > budget
    )
