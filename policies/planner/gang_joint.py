"""Placing a pending gang: member by member, then the tries that look at the gang as a whole.

``place_members`` places every member in turn, largest first, on a working copy of free
capacity (``search.NodeSearch``), so later members see what earlier ones took and freed.
That greedy walk charges each member the full cost of the victims it picks, so a victim
that frees room for several members at once looks dear to the first member alone. ``improve``
therefore tries, next to the member-by-member plan, and keeps the cheapest total:

- the first member on its next-cheapest node(s) (``PlannerConfig.gang_first_member_alternatives``);
- the first 2, 3, ... members packed onto one node, freed by one joint cover (not for an
  ``nvlink: required`` gang of multi-GPU members, whose members need a domain each);
- **joint seeds**: each of the cheapest ``PlannerConfig.joint_seeds`` victim gangs spread
  over several nodes that could host a member (``spread_units``) is evicted first, and the
  members are then placed one by one on what it freed. Its cost is counted once for every
  member it makes room for, so the plan that evicts one spread victim gang to place the whole
  preemptor gang is found (issue 22: the native side-by-side's seed 1,
  ``e2e/test_native_compare.py``).

Which gangs are seeds: those on the candidate nodes the first member's search sampled whose
lower bound for it is within the plan's cost. A gang on no such node is not tried even when
evicting it first would be cheaper (``tests/policies/test_gang_joint.py`` has such a case):
scanning every gang of the cluster cost ~17 ms CPU per gang plan at the frontier size.

Every try is a complete plan under the same rules as the first (whole victim gangs, the PDB
budget, NVLink cliques), and one replaces the plan only when it is strictly better on (lost
work + penalty, PDB violations, victims), so the result never costs more than the
member-by-member plan. A try stops as soon as it costs more than the plan it would have to
beat. The seeds depend only on the snapshot (or view) and the preemptor, never on what the
cycle's caches hold (a bound kept from an earlier cycle is recomputed before it admits a
node), so plans stay the same with and without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ckpt_preempt.policies.model import cliques
from ckpt_preempt.policies.model.model import NvlinkNeed, Placement, Pod, RejectReason, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import cover, units
from ckpt_preempt.policies.planner.plan_cache import Share
from ckpt_preempt.policies.planner.search import NodeSearch

# Assumption, not tuned: how many spread victim gangs (cheapest first) a gang plan also tries
# evicting first. Each try is a whole member-by-member plan, cut short once it costs more than
# the best so far. bench/plan_latency.py's spot queue (seed 3) found at most 5 per gang plan.
JOINT_SEEDS = 8


def total(search: NodeSearch) -> tuple[float, int, int]:
    """(lost work + fairness penalty, PDB violations, victims) of everything a search chose."""
    chosen = list(search.chosen.values())
    return (
        sum(u.cost for u in chosen),
        cover.pdb_violations((p for u in chosen for p in u.pods), search.s.pdbs),
        sum(len(u.pods) for u in chosen),
    )


def place_members(
    snapshot: Snapshot, members: Sequence[Pod], config, builder: units.UnitBuilder,
    memo: dict, first_rank: int = 0, together: int = 1, ceiling: float = float("inf"),
    shared: Share | None = None, seed: units.Unit | None = None, collect: bool = False,
) -> tuple[NodeSearch, list[Placement], Pod | None]:
    """Place every member in turn, the first on its ``first_rank``-th cheapest node; with
    ``together`` > 1, the first that many members share one node, freed by one joint cover;
    with ``seed``, that unit is evicted before any member is placed; with ``collect``, the
    search keeps the candidate nodes sampled for the first member (``NodeSearch.candidates``).

    An ``nvlink: required`` gang on a cluster with NVLink cliques is placed inside one clique
    (``policies.model.cliques``): each candidate clique is tried in turn and the cheapest total
    wins.

    Returns the search, the placements, and the member that fit nowhere (None when all fit),
    or at which the lost work passed ``ceiling`` (a try that cannot win is given up).
    """
    domains = cliques.gang_cliques(snapshot, members, memo)
    if domains is None:
        return _place_in(snapshot, members, config, builder, memo, first_rank, together,
                         ceiling, shared, seed, collect)
    best: tuple[NodeSearch, list[Placement]] | None = None
    failed: list[tuple[str, NodeSearch, Pod]] = []
    evaluated = 0
    for clique in domains:
        limit = ceiling if best is None else min(ceiling, best[0].cost)
        # the cycle's shared judgements index the whole node list: not this view's
        search, placements, stuck = _place_in(
            cliques.clique_view(snapshot, clique, memo), members, config, builder, memo,
            first_rank, together, limit, None, seed, collect)
        evaluated += search.evaluated
        if stuck is not None:
            failed.append((clique, search, stuck))
        elif best is None or total(search) < total(best[0]):
            best = (search, placements)
            if total(search) == (0.0, 0, 0):
                break  # nothing loses less than fitting without preemption
    if best is not None:
        best[0].evaluated = evaluated
        return best[0], best[1], None
    out = NodeSearch(snapshot, builder, config, memo, shared)
    out.evaluated = evaluated
    seen = set()
    for _, search, _ in failed:
        for r in search.rejections:
            if r not in seen:
                seen.add(r)
                out.rejections.append(r)
    if config.record_rejections:
        out.rejections.extend(cliques.outside(snapshot, domains, members))
    shown = 3  # cliques named in the reason; the rejections hold every node's
    tried = "; ".join(f"clique {c}: {stuck.name} fits nowhere in it"
                      for c, _, stuck in failed[:shown])
    if len(failed) > shown:
        tried += f"; {len(failed) - shown} more clique(s) alike"
    out.no_clique = (f"{RejectReason.NVLINK_NO_CLIQUE.value}: no NVLink clique can host every "
                     f"member of the nvlink: required gang" + (f" ({tried})" if tried else
                     " (its running members are on no single clique, or no clique has GPUs "
                     "enough)"))
    return out, [], failed[0][2] if failed else members[0]


def _place_in(
    snapshot: Snapshot, members: Sequence[Pod], config, builder: units.UnitBuilder,
    memo: dict, first_rank: int, together: int, ceiling: float, shared: Share | None,
    seed: units.Unit | None, collect: bool,
) -> tuple[NodeSearch, list[Placement], Pod | None]:
    """``place_members`` on every node of ``snapshot``, whatever their cliques."""
    search = NodeSearch(snapshot, builder, config, memo, shared)
    search.keep_candidates = collect
    placements = []
    rest = list(members)
    if seed is not None:
        # a seed freeing room outside this view (another clique) is not this view's to take
        if not search.pdb.admits(seed) or any(n not in snapshot.node_by_name
                                              for n in seed.release):
            return search, placements, rest[0]
        search.take(seed)
        if search.cost > ceiling:
            return search, placements, rest[0]
    if together > 1:  # the first ``together`` members as one request, on one node
        group, rest = rest[:together], rest[together:]
        need = Resources()
        for pod in group:
            need = need + pod.requests
        node = search.place(replace(group[0], requests=need), first_rank)
        if node is None or search.cost > ceiling:
            return search, placements, group[0]
        placements.extend(Placement(pod_uid=pod.uid, node=node) for pod in group)
        first_rank = 0
    for k, pod in enumerate(rest):
        search.ahead = rest[k + 1:]
        node = search.place(pod, first_rank if k == 0 else 0)
        if node is None or search.cost > ceiling:
            return search, placements, pod
        placements.append(Placement(pod_uid=pod.uid, node=node))
        if len(placements) == 1:  # only the first member placed so far
            search.first_cost = search.cost
    return search, placements, None


def improve(
    snapshot: Snapshot, members: Sequence[Pod], config, builder: units.UnitBuilder,
    memo: dict, shared: Share | None, search: NodeSearch, placements: list[Placement],
) -> tuple[NodeSearch, list[Placement], int]:
    """The cheapest of the member-by-member plan (``search``, ``placements``: from
    ``place_members`` with ``collect``) and the tries in the module docstring: (its search, its
    placements, nodes the tries evaluated).

    Every try costs at least the first member's cheapest cover, so when the later members cost
    nothing (``search.cost == search.first_cost``) there is nothing to gain and none is made."""
    evaluated = 0
    if len(members) < 2 or search.cost <= search.first_cost:
        return search, placements, evaluated
    tries = [(rank, 1) for rank in range(1, config.gang_first_member_alternatives + 1)]
    if not any(p.nvlink is NvlinkNeed.REQUIRED and p.gpus > 1 for p in members):
        tries += [(0, k) for k in range(2, len(members) + 1)]
    ceiling, first = search.cost, search
    for rank, together in tries:
        alt, alt_placements, alt_stuck = place_members(
            snapshot, members, config, builder, memo, rank, together, ceiling, shared)
        evaluated += alt.evaluated
        if alt_stuck is None and total(alt) < total(search):
            search, placements = alt, alt_placements
    for seed in spread_units(snapshot, members, first, total(search)[0], config.joint_seeds):
        best = total(search)
        if seed.cost > best[0]:
            break  # seeds come cheapest first: this one alone costs more than the plan
        alt, alt_placements, alt_stuck = place_members(
            snapshot, members, config, builder, memo, ceiling=best[0], shared=shared, seed=seed)
        evaluated += alt.evaluated
        if alt_stuck is None and total(alt) < best:
            search, placements = alt, alt_placements
    return search, placements, evaluated


def spread_units(snapshot: Snapshot, members: Sequence[Pod], first: NodeSearch,
                 ceiling: float, limit: int) -> list[units.Unit]:
    """Up to ``limit`` evictable victim gangs, cheapest first (then by id), that cost no more
    than ``ceiling`` and hold resources on at least two open nodes big enough for a member (so
    they can make room for several members at once), among those on the candidate nodes the
    member-by-member search ``first`` sampled for its first member whose lower bound there is
    at most ``ceiling`` (a node above it cannot host the first member within the plan's cost).

    A bound the cycle's caches kept from an earlier cycle may be lower than the true one, so
    a node it admits is admitted only after its bound is recomputed: the seeds, and the plan,
    are the same with and without the caches."""
    if limit <= 0 or len(members) < 2:
        return []
    by_name = snapshot.node_by_name
    gang_pods = snapshot.pods_by_gang
    requests = {p.requests for p in members}
    builder = first.units
    found: dict[str, units.Unit] = {}
    judged: set[str] = set()  # gangs already found or ruled out
    for bound, _, name, _ in first.candidates:
        if bound > ceiling:
            break  # candidates come by bound; a true bound is never below a kept one
        new = []
        for *_, unit_id in builder.evictable_on(name).entries:
            if unit_id in judged or unit_id not in gang_pods:
                continue
            judged.add(unit_id)
            pod = next(p for p in gang_pods[unit_id] if p.node is not None)
            unit = builder.unit(pod)
            if unit.cost <= ceiling and _hosts(unit, by_name, requests) > 1:
                new.append(unit)
        if not new:
            continue
        if first.shared is not None:
            fresh = _bound_afresh(first, members[0], by_name[name])
            if fresh is None or fresh > ceiling:
                judged.difference_update(u.id for u in new)  # another node may admit them
                continue
        for unit in new:
            found[unit.id] = unit
    return sorted(found.values(), key=lambda u: (u.cost, u.id))[:limit]


def _hosts(unit: units.Unit, by_name: dict, requests: set[Resources]) -> int:
    """How many nodes ``unit`` frees room on that are open and big enough for a member."""
    count = 0
    for n in unit.release:
        node = by_name.get(n)
        count += node is not None and node.closed is None and any(
            r.fits_in(node.allocatable) for r in requests)
    return count


def _bound_afresh(first: NodeSearch, pod: Pod, node) -> float | None:
    """``pod``'s lower bound on ``node`` as ``first`` found it for its first member (nothing
    placed yet), but from the snapshot itself: never from the cycle's kept judgements or
    evictable pods, which an earlier cycle may have computed (lower, as costs only grow).
    None where the node cannot host the pod."""
    b = first.units
    fresh = units.UnitBuilder(first.s, b.priority, drain=b.drain,
                              max_checkpoint_seconds=b.max_checkpoint_seconds,
                              penalty_seconds=b.penalty_seconds, restart_seconds=b.restart_seconds,
                              restart_workload_gpu_seconds=b.restart_workload_gpu_seconds,
                              parity_floor=b.parity_floor)
    got = NodeSearch(first.s, fresh, first.cfg, {})._judge(pod, node)
    return None if isinstance(got[0], RejectReason) else got[0]
