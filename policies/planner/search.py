"""The planner's per-plan search: one member at a time, node by node.

``NodeSearch`` is the mutable working state of one try of a plan (free capacity, the units chosen,
the PDB budget spent, the rejections); ``_Sampler`` walks the candidate driver over it for one
request, and ``_judge``/``_cover`` bound and then solve each node. It is separate from
``policies.planner.preemption`` so the planner's entry point (``plan``, its config, the gang tries
and the plan it returns) reads apart from the node-level search it drives. The helpers others
use (``nvlink_gpus``, ``domain_fits``, ``sampling``) are imported from here.

Without preemption (``fit_without_preemption``), among the nodes where the pod fits as things
stand: the healthiest GPUs first (failing nodes are closed), then for ``nvlink: preferred`` pods
a node where one NVLink domain surely fits, then our placement scorer, the one the scheduler
extender's prioritize uses (``policies.placement.admission``: for a gang, the block of
same-request members still to place that a node can take), then the node's name.
``PlannerConfig.placement="bestfit"`` puts the fewest GPUs left over in the scorer's place.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ckpt_preempt.policies.model import gpu_use
from ckpt_preempt.policies.model.model import (
    NodeRejection,
    NvlinkNeed,
    Pod,
    RejectReason,
    Resources,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.placement import admission
from ckpt_preempt.policies.planner import candidates, cover, units
from ckpt_preempt.policies.planner.plan_cache import Share

if TYPE_CHECKING:
    from ckpt_preempt.policies.planner.preemption import PlannerConfig


def sampling(cfg: PlannerConfig) -> candidates.Sampling:
    return candidates.Sampling(
        min_candidate_nodes_percentage=cfg.min_candidate_nodes_percentage,
        min_candidate_nodes_absolute=cfg.min_candidate_nodes_absolute,
    )


def nvlink_gpus(pod: Pod, node, allocatable_gpus: int, placed: int = 0
                ) -> tuple[int | None, RejectReason | None]:
    """Free GPUs the node needs so the pod's NVLink requirement surely holds. ``placed``:
    GPUs the plan being built already put on the node; they count only where the node
    publishes which GPUs are in use (``policies.model.gpu_use``), else the worst case covers
    them."""
    if pod.nvlink is not NvlinkNeed.REQUIRED or pod.gpus <= 1:
        return pod.gpus, None
    if node.topology is None or node.topology.gpu_count != allocatable_gpus:
        # no report, or one that disagrees with the node's allocatable GPUs: unknown
        return None, RejectReason.NVLINK_UNKNOWN
    f = gpu_use.nvlink_free_gpus(node.topology, node.gpu_use, pod.gpus, allocatable_gpus,
                                 placed if node.gpu_use is not None else 0)
    if f is None:
        return None, RejectReason.NVLINK_INFEASIBLE
    return f, None


def domain_fits(pod: Pod, node, free_gpus: int) -> bool:
    """Would ``pod``'s GPUs surely share one NVLink domain on ``node`` with that many free?"""
    topo = node.topology
    if topo is None or topo.gpu_count != node.allocatable.gpus:
        return False
    if node.gpu_use is not None:
        f = gpu_use.nvlink_free_gpus(topo, node.gpu_use, pod.gpus, node.allocatable.gpus)
        return f is not None and free_gpus >= f
    return topo.nvlink_fits(free_gpus, pod.gpus)


class NodeSearch:
    """Mutable working state of one ``plan`` call; never escapes it."""

    def __init__(self, snapshot: Snapshot, builder: units.UnitBuilder, cfg: PlannerConfig,
                 memo: dict, shared: Share | None = None) -> None:
        self.s = snapshot
        self.shared = shared  # the cycle's caches, for nodes this view has as the cycle's
        self.cfg = cfg
        self.units = builder  # its caches do not depend on what a search chose, so it is shared
        self.free: dict[str, Resources] = {}
        self.chosen: dict[str, units.Unit] = {}
        self.touched: set[str] = set()  # nodes where a chosen unit has pods
        self.dirty: set[str] = set()  # nodes whose free or evictable pods this search changed
        self.cost = 0.0  # lost work of everything chosen so far
        self.first_cost = 0.0  # of the first member's victims alone
        self.memo = memo  # what clean nodes yield, shared by every try of a plan
        self.rejections: list[NodeRejection] = []
        self.evaluated = 0
        self.exhausted: list[str] = []  # nodes whose exact search ran out of budget
        self.pdb = cover.PdbBudget(snapshot.pdbs)  # what the chosen units charged to each PDB
        self.no_clique = ""  # why no NVLink clique can host the gang (policies.model.cliques)
        self.ahead: Sequence[Pod] = ()  # gang members still to place after the current one
        self.scorer: admission.AdmissionScorer | None = None  # built when first needed
        self.keep_candidates = False  # keep the next ``place``'s sampled candidates:
        self.candidates: list[tuple[float, int, str, Resources]] = []  # (bound, index, node, gap)

    def free_on(self, node: str) -> Resources:
        if node not in self.free:
            self.free[node] = self.s.free(node)
        return self.free[node]

    def need_on(self, pod: Pod, node) -> tuple[Resources | None, RejectReason | None]:
        if node.closed is None and (
                pod.nvlink is not NvlinkNeed.REQUIRED and pod.requests.fits_in(node.allocatable)):
            return pod.requests, None
        closed = node.closed
        if closed is not None:
            return None, closed
        if not pod.requests.fits_in(node.allocatable):
            return None, RejectReason.TOO_SMALL
        placed = 0
        if node.gpu_use is not None and node.name in self.dirty:  # earlier members here
            released = sum(u.release[node.name].gpus for u in self.chosen.values()
                           if node.name in u.release)
            placed = self.s.free(node.name).gpus + released - self.free_on(node.name).gpus
        gpus, why = nvlink_gpus(pod, node, node.allocatable.gpus, placed)
        if gpus is None:
            return None, why
        return replace(pod.requests, gpus=gpus), None

    def reject(self, pod: Pod, node: str, reason: RejectReason, detail: str = "") -> None:
        if self.cfg.record_rejections:
            text = f"{pod.name}: {detail}" if detail else pod.name
            self.rejections.append(NodeRejection(node=node, reason=reason, detail=text))

    def fit_without_preemption(self, pod: Pod) -> str | None:
        """Among nodes where the pod fits as things stand: the healthiest GPUs, then (for
        ``nvlink: preferred``) one NVLink domain, then our placement scorer
        (``policies.placement.admission``; or the fewest GPUs left over with ``bestfit``),
        then the name."""
        r = pod.requests
        simple = pod.nvlink is not NvlinkNeed.REQUIRED or pod.gpus <= 1
        prefer = pod.nvlink is NvlinkNeed.PREFERRED and pod.gpus > 1
        free = self.s.free_by_node
        if r.gpus > 0:  # only nodes with enough free GPUs, from the index, and those changed
            pool = self.s.free_gpus_index
            names = {name for _, name in pool[bisect.bisect_left(pool, (r.gpus, "")):]}
            by_name = self.s.node_by_name
            nodes = [by_name[n] for n in sorted(names.union(self.free))
                     if n in by_name]  # a victim gang may free room outside a clique's view
        else:
            nodes = self.s.nodes
        bestfit = self.cfg.placement == admission.BESTFIT
        best = None
        tied: list[tuple] = []  # (node, free) sharing the best health and NVLink rank
        for node in nodes:
            f = self.free.get(node.name) or free[node.name]
            if f.gpus < r.gpus or f.cpu_milli < r.cpu_milli or f.memory_mib < r.memory_mib \
                    or f.gpu_milli < r.gpu_milli:
                continue
            if node.closed is not None:
                continue
            if not simple:
                need, _ = self.need_on(pod, node)
                if need is None or not need.fits_in(f):
                    continue
            # nvlink: preferred: all such nodes lose nothing; prefer healthy GPUs, then one
            # domain, then the placement rule
            rank = (node.health.rank, not domain_fits(pod, node, f.gpus) if prefer else False)
            if bestfit:
                key = (*rank, f.gpus - r.gpus, node.name)
                if best is None or key < best:
                    best = key
                continue
            if best is None or rank < best:
                best, tied = rank, []
            if rank == best:
                tied.append((node, f))
        if best is None:
            return None
        if bestfit:
            return best[3]
        if len(tied) == 1:
            return tied[0][0].name
        return self._score(pod, tied)

    def _score(self, pod: Pod, tied: list[tuple]) -> str:
        """The node our placement scorer prefers for ``pod`` among ``tied`` (node, free)."""
        if self.scorer is None:
            self.scorer = admission.AdmissionScorer(self.s)
        members = 1
        if self.cfg.placement == admission.GANG_BLOCK:
            members += sum(1 for p in self.ahead
                           if p.requests == pod.requests and p.nvlink is pod.nvlink)
        best = None
        for node, f in tied:
            primary, tie = self.scorer.key(node, f, pod.requests, members)
            key = (-primary, -tie, node.name)
            if best is None or key < best:
                best = key
        return best[2]

    def _scan(self, pod: Pod) -> list[tuple[float, int, str, Resources]]:
        """Sample candidate nodes with the shared driver, as kube-scheduler does: (bound,
        index, node, gap) for each, cheapest bound first.

        What a node yields depends only on the request and on that node's state, so nodes no
        placement of this plan has changed come from the per-request memo that every try of
        the plan shares.
        """
        sampler = _Sampler(self, pod)
        if sampler.kept is not None and not self.cfg.record_rejections:
            found = self._skipping_walk(sampler)
            found.sort()  # by (bound, index): indices are unique, so nothing further is compared
            return found
        walk = candidates.find_candidates(sampler, self.s.nodes, sampling(self.cfg))
        if self.cfg.record_rejections:
            for node in walk.unvisited:
                self.reject(pod, node.name, RejectReason.NOT_SAMPLED)
        return sorted(walk.candidates, key=lambda c: (c[0], c[1]))

    def _skipping_walk(self, sampler: _Sampler) -> list[tuple]:
        """The candidates ``candidates.find_candidates`` finds, in walk order, without
        visiting the nodes the cycle already knows yield none: those the cycle's base has as
        this view has them and that no placement of this plan changed. Rejections are not
        recorded, so a node that yields nothing is simply passed over."""
        nodes = self.s.nodes
        index = self.shared.cache.node_index
        fresh = [index[name] for name in self.shared.unshared.union(self.dirty) if name in index]

        def visit(k: int, known) -> tuple | None:
            if known is not None:  # a candidate the cycle already judged
                return known[0], k, nodes[k].name, known[1]
            return sampler.select_victims(nodes[k], 0, k)

        n = len(nodes)
        want = candidates.num_candidates(n, sampling(self.cfg))
        return sampler.kept.walk(sampler.offset(n), want, fresh, visit)

    def _judge(self, pod: Pod, node) -> tuple[RejectReason, str] | tuple[float, Resources]:
        """Why ``node`` cannot host ``pod`` even after preemption (reason, detail), or (a
        lower bound on the cost there, the resources still missing)."""
        need, why = self.need_on(pod, node)
        if need is None:
            return why, ""
        free = self.free_on(node.name)
        gap_gpus = max(0, need.gpus - free.gpus)
        gap_cpu = max(0, need.cpu_milli - free.cpu_milli)
        gap_mem = max(0, need.memory_mib - free.memory_mib)
        gap_milli = max(0, need.gpu_milli - free.gpu_milli)
        ev = self.units.evictable_on(node.name)
        if node.name in self.touched:  # an earlier member's victims were here: drop them
            pieces, cpu, mem, gpus = [], 0, 0, 0
            for rate, g, c, m, unit_id in ev.entries:
                if unit_id in self.chosen:
                    continue
                cpu += c
                mem += m
                if g:
                    gpus += g
                    pieces.append((rate, g))
            pieces.sort()
        else:
            pieces, cpu, mem, gpus = ev.pieces, ev.cpu_milli, ev.memory_mib, ev.gpus
        # MIG slices are not tracked per unit chosen here: min_cover checks them exactly
        if gap_gpus > gpus or gap_cpu > cpu or gap_mem > mem or gap_milli > ev.gpu_milli:
            held = ", ".join(f"{n} pod(s) {why}" for why, n in sorted(ev.held.items()))
            return RejectReason.NOT_ENOUGH_PREEMPTIBLE, held
        gap = Resources(cpu_milli=gap_cpu, memory_mib=gap_mem, gpus=gap_gpus, gpu_milli=gap_milli)
        return cover.gpu_lower_bound(pieces, gap_gpus), gap

    def _cover(self, name: str, gap: Resources) -> tuple:
        """The exact cover of ``gap`` on node ``name`` the PDBs admit next to the units chosen
        so far, and the units there."""
        clean = name not in self.dirty
        key = ("cover", name, gap, self.pdb.key())
        got = self.memo.get(key) if clean else None
        shared = self.shared
        if got is None and clean and shared is not None and name not in shared.unshared:
            got = shared.covers.get(key)  # the same cover for every gang member and plan
            if got is None:
                here = self.units.units_on(name)
                got = shared.covers[key] = (
                    cover.min_cover(here, name, gap, self.s.pdbs, self.cfg.search_budget,
                                    self.pdb), {u.id: u for u in here})
            self.memo[key] = got
        if got is None:
            here = self.units.units_on(name, exclude=self.chosen)
            got = (cover.min_cover(here, name, gap, self.s.pdbs, self.cfg.search_budget,
                                   self.pdb),
                   {u.id: u for u in here})
            if clean:
                self.memo[key] = got
        return got

    def place(self, pod: Pod, rank: int = 0) -> str | None:
        """Place ``pod``, on the cheapest node to preempt on, or the ``rank``-th cheapest."""
        target = self.fit_without_preemption(pod)
        if target is not None:
            self.free[target] = self.free_on(target) - pod.requests
            self.dirty.add(target)
            return target
        if not self.cfg.record_rejections and not pod.requests.fits_in(
                self.s.largest_allocatable):
            return None  # fits on no node; with rejections recorded, each node says so
        found = self._scan(pod)
        if self.keep_candidates:
            self.candidates, self.keep_candidates = found, False
        prefer = pod.nvlink is NvlinkNeed.PREFERRED and pod.gpus > 1
        by_name = self.s.node_by_name
        # the rank+1 best: (cost, pdb, victims, no NVLink domain surely fits, node, cover,
        # units there), ordered by cost, pdb, the node's health, then the rest
        top: list[tuple] = []
        for bound, _, name, gap in found:
            if len(top) > rank and bound > top[-1][0]:
                if not self.cfg.record_rejections:
                    break  # bounds only grow from here: nothing left can win
                self.reject(pod, name, RejectReason.COSTLIER,
                            f"loses at least {bound / 3600:.2f} GPU-h")
                continue
            self.evaluated += 1
            cover, here = self._cover(name, gap)
            if cover is None:
                self.reject(pod, name, RejectReason.NOT_ENOUGH_PREEMPTIBLE,
                            "no cover keeps every gang whole under its PDBs" if self.s.pdbs
                            else "")
                continue
            if cover.exhausted:
                self.exhausted.append(name)
            miss = False
            if prefer:
                freed = sum(here[u].release[name].gpus for u in cover.unit_ids)
                miss = not domain_fits(pod, self.s.node_by_name[name],
                                       self.free_on(name).gpus + freed)
            top.append((cover.cost, cover.pdb_violations, cover.victims, miss, name, cover, here))
            top.sort(key=lambda t: (t[0], t[1], by_name[t[4]].health.rank, *t[2:5]))
            if len(top) > rank + 1:
                out = top.pop()
                self.reject(pod, out[4], RejectReason.COSTLIER, f"loses {out[0] / 3600:.2f} GPU-h"
                            + (" (as much, but no NVLink domain surely fits there)"
                               if out[0] == top[-1][0] and out[3] else ""))
        if len(top) <= rank:
            return None
        for other in top[:rank]:
            self.reject(pod, other[4], RejectReason.COSTLIER,
                        f"loses {other[0] / 3600:.2f} GPU-h, "
                        "but leaves the rest of the gang costlier")
        name, cover, here_units = top[rank][4], top[rank][5], top[rank][6]
        for uid in cover.unit_ids:
            self.take(here_units[uid])
        self.free[name] = self.free_on(name) - pod.requests
        self.dirty.add(name)
        return name

    def take(self, unit: units.Unit) -> None:
        """Evict ``unit``: charge its cost and PDB budget, free what it holds on every node."""
        self.chosen[unit.id] = unit
        self.cost += unit.cost
        self.pdb.add(unit)
        for n, res in unit.release.items():
            self.free[n] = self.free_on(n) + res
            self.touched.add(n)
            self.dirty.add(n)
        if unit.shrink:  # its gang's other nodes offer it no more (policies.planner.shrink)
            self.dirty.update(self.units.nodes_of(unit))


class _Sampler:
    """The planner as a sampler of the candidate driver, for one request: every node is
    walked (closed or too small ones are judged, and rejected, on the way), from an offset
    hashed from the pod's uid; a candidate is a node whose lower bound is finite."""

    def __init__(self, search: NodeSearch, pod: Pod) -> None:
        self.search, self.pod = search, pod
        self.seen = search.memo.setdefault(("scan", pod.requests, pod.nvlink), {})
        shared = search.shared
        # what this request shape yields on nodes this view has as the cycle's base has them
        self.kept = None if shared is None else shared.judged(pod.requests, pod.nvlink)
        self.unshared = frozenset() if shared is None else shared.unshared

    def potential(self, node) -> bool:
        return True

    def offset(self, nodes: int) -> int:
        return zlib.crc32(self.pod.uid.encode()) % nodes  # spreads load, deterministic

    def select_victims(self, node, step: int, index: int):
        search, name = self.search, node.name
        clean = name not in search.dirty
        if clean and self.kept is not None and name not in self.unshared:
            got = self.kept.judged[index]  # the base's node: what every plan of the cycle saw
            if got is None:
                got = search._judge(self.pod, node)
                self.kept.store(index, got, not isinstance(got[0], RejectReason))
        else:
            got = self.seen.get(name) if clean else None
            if got is None:
                got = search._judge(self.pod, node)
                if clean:
                    self.seen[name] = got
        if isinstance(got[0], RejectReason):
            search.reject(self.pod, name, *got)
            return None
        return got[0], index, name, got[1]

    def violates_pdb(self, candidate) -> bool:
        return False  # known only after the exact search; the bound is what orders the walk
