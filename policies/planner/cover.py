"""The PDB rule for gangs and the exact within-node search over eviction units.

``PdbBudget`` charges the units one plan chooses to the PDBs covering them: a gang may go only
if every PDB covering it allows all the victims of the plan it covers to go (the Eviction API
would otherwise refuse some members and leave the gang half-evicted); single pods only count as
PDB violations, as in kube-scheduler. ``min_cover`` is the branch-and-bound search for the
cheapest set of units freeing what a pod needs on one node, and ``gpu_lower_bound`` the bound
that orders nodes before it runs. They are apart from ``policies.planner.units`` (what a unit is
and how one is built from a snapshot) because they only consume units.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckpt_preempt.policies.model.model import (
    ZERO,
    Pod,
    PodDisruptionBudget,
    Resources,
    breaks_budget,
)

if TYPE_CHECKING:
    from ckpt_preempt.policies.planner.units import Unit


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


def pdb_violations(pods: Iterable[Pod], pdbs: Sequence[PodDisruptionBudget]) -> int:
    """Victims whose eviction breaks a PDB, charging budgets in the given order."""
    return sum(breaks_budget(pods, pdbs)) if pdbs else 0


def covers(have: Resources, need: Resources) -> bool:
    return need.fits_in(have)


def _gangs_offered_twice(units: Sequence[Unit]) -> frozenset[str]:
    """The gangs with more than one unit among ``units`` (an elastic gang's alternatives)."""
    seen: set[str] = set()
    twice: set[str] = set()
    for u in units:
        if u.gang is not None:
            (twice if u.gang in seen else seen).add(u.gang)
    return frozenset(twice)


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
    admit next to those chosen is skipped: adding more only uses up more budget. Units of one
    gang exclude each other (an elastic gang's shrinks and its whole unit,
    ``policies.planner.shrink``):
    a cover takes at most one of them.
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
    exclusive = _gangs_offered_twice(order)  # gangs of which a cover takes one unit at most
    taken: set[str] = set()  # those gangs, among the units chosen

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
        alone = u.gang not in exclusive
        if not alone and u.gang in taken:
            pass  # another unit of its gang is chosen
        elif gate is None or not u.pdb_cover:
            chosen.append(i)
            if not alone:
                taken.add(u.gang)
            dfs(i + 1, have + rel[i], c + u.cost, count + len(u.pods))
            taken.discard(u.gang)
            chosen.pop()
        elif gate.admits(u):
            chosen.append(i)
            gate.add(u)
            if not alone:
                taken.add(u.gang)
            dfs(i + 1, have + rel[i], c + u.cost, count + len(u.pods))
            taken.discard(u.gang)
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
            if order[i].gang in exclusive:
                if order[i].gang in taken:
                    continue
                taken.add(order[i].gang)
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
