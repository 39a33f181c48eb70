"""The checkpoint-aware planner: victims by lost work, gangs whole, NVLink respected.

Pipeline for each preemptor member (a single pod, or each member of a pending gang, largest
first, on a working copy of free capacity so later members see earlier choices):

1. fits already? place it best-fit, no victims;
2. filter nodes (allocatable, cordon, NVLink) and bound each node's cost from below;
3. sample candidates as kube-scheduler does: scan nodes from a per-pod offset until
   ``max(10 % of nodes, 100)`` could free enough capacity;
4. evaluate those cheapest-bound first with the exact within-node search
   (``units.min_cover``), stopping once the bound exceeds the best plan found;
5. pick the node minimising (lost work, PDB violations, victims, name).

A gang victim frees its resources on every node it occupies, so later members may land there.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from policies import cost, units
from policies.model import (
    NodeRejection,
    NvlinkNeed,
    Placement,
    Plan,
    Pod,
    RejectReason,
    Resources,
    Snapshot,
    Victim,
    VictimGroup,
)

POLICY = "checkpoint-aware"


@dataclass(frozen=True, kw_only=True)
class PlannerConfig:
    drain: bool = True
    max_checkpoint_seconds: float = 600.0
    min_candidate_nodes_percentage: int = 10  # kube-scheduler DefaultPreemptionArgs default
    min_candidate_nodes_absolute: int = 100  # likewise
    search_budget: int = 20_000  # branch-and-bound steps per node
    record_rejections: bool = True


def num_candidates(nodes: int, cfg: PlannerConfig) -> int:
    n = nodes * cfg.min_candidate_nodes_percentage // 100
    return min(max(n, cfg.min_candidate_nodes_absolute), nodes)


def nvlink_gpus(pod: Pod, node, allocatable_gpus: int) -> tuple[int | None, RejectReason | None]:
    """Free GPUs the node needs so the pod's NVLink requirement surely holds."""
    if pod.nvlink is not NvlinkNeed.REQUIRED or pod.gpus <= 1:
        return pod.gpus, None
    if node.topology is None or node.topology.gpu_count != allocatable_gpus:
        # no report, or one that disagrees with the node's allocatable GPUs: unknown
        return None, RejectReason.NVLINK_UNKNOWN
    for f in range(pod.gpus, allocatable_gpus + 1):
        if node.topology.nvlink_fits(f, pod.gpus):
            return f, None
    return None, RejectReason.NVLINK_INFEASIBLE


class _Search:
    """Mutable working state of one ``plan`` call; never escapes it."""

    def __init__(self, snapshot: Snapshot, priority: int, cfg: PlannerConfig) -> None:
        self.s = snapshot
        self.cfg = cfg
        self.units = units.UnitBuilder(
            snapshot, priority, drain=cfg.drain, max_checkpoint_seconds=cfg.max_checkpoint_seconds
        )
        self.free: dict[str, Resources] = {}
        self.chosen: dict[str, units.Unit] = {}
        self.touched: set[str] = set()  # nodes where a chosen unit has pods
        self.rejections: list[NodeRejection] = []
        self.evaluated = 0
        self.exhausted: list[str] = []  # nodes whose exact search ran out of budget

    def free_on(self, node: str) -> Resources:
        if node not in self.free:
            self.free[node] = self.s.free(node)
        return self.free[node]

    def need_on(self, pod: Pod, node) -> tuple[Resources | None, RejectReason | None]:
        if not node.unschedulable and pod.nvlink is not NvlinkNeed.REQUIRED \
                and pod.requests.fits_in(node.allocatable):
            return pod.requests, None
        if node.unschedulable:
            return None, RejectReason.UNSCHEDULABLE
        if not pod.requests.fits_in(node.allocatable):
            return None, RejectReason.TOO_SMALL
        gpus, why = nvlink_gpus(pod, node, node.allocatable.gpus)
        if gpus is None:
            return None, why
        return Resources(
            cpu_milli=pod.requests.cpu_milli, memory_mib=pod.requests.memory_mib, gpus=gpus
        ), None

    def reject(self, pod: Pod, node: str, reason: RejectReason, detail: str = "") -> None:
        if self.cfg.record_rejections:
            text = f"{pod.name}: {detail}" if detail else pod.name
            self.rejections.append(NodeRejection(node=node, reason=reason, detail=text))

    def fit_without_preemption(self, pod: Pod) -> str | None:
        """Best fit (fewest GPUs left over) among nodes where the pod fits as things stand."""
        r = pod.requests
        simple = pod.nvlink is not NvlinkNeed.REQUIRED or pod.gpus <= 1
        free = self.s.free_by_node
        best = None
        for node in self.s.nodes:
            f = self.free.get(node.name) or free[node.name]
            if f.gpus < r.gpus or f.cpu_milli < r.cpu_milli or f.memory_mib < r.memory_mib:
                continue
            if node.unschedulable:
                continue
            if not simple:
                need, _ = self.need_on(pod, node)
                if need is None or not need.fits_in(f):
                    continue
            key = (f.gpus - r.gpus, node.name)
            if best is None or key < best:
                best = key
        return None if best is None else best[1]

    def place(self, pod: Pod) -> str | None:
        target = self.fit_without_preemption(pod)
        if target is not None:
            self.free[target] = self.free_on(target) - pod.requests
            return target
        nodes = self.s.nodes
        limit = num_candidates(len(nodes), self.cfg)
        offset = zlib.crc32(pod.uid.encode()) % len(nodes)  # spreads load, deterministic
        candidates = []
        scanned = 0
        for scanned in range(1, len(nodes) + 1):
            i = (offset + scanned - 1) % len(nodes)
            node = nodes[i]
            need, why = self.need_on(pod, node)
            if need is None:
                self.reject(pod, node.name, why)
                continue
            free = self.free_on(node.name)
            gap_gpus = max(0, need.gpus - free.gpus)
            gap_cpu = max(0, need.cpu_milli - free.cpu_milli)
            gap_mem = max(0, need.memory_mib - free.memory_mib)
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
            if gap_gpus > gpus or gap_cpu > cpu or gap_mem > mem:
                self.reject(pod, node.name, RejectReason.NOT_ENOUGH_PREEMPTIBLE)
                continue
            gap = Resources(cpu_milli=gap_cpu, memory_mib=gap_mem, gpus=gap_gpus)
            bound = units.gpu_lower_bound(pieces, gap_gpus, presorted=True)
            candidates.append((bound, i, node.name, gap))
            if len(candidates) >= limit:
                break
        if self.cfg.record_rejections:
            for k in range(scanned, len(nodes)):
                name = nodes[(offset + k) % len(nodes)].name
                self.reject(pod, name, RejectReason.NOT_SAMPLED)
        candidates.sort(key=lambda c: (c[0], c[1]))
        best = None  # (cost, pdb, victims, node, cover, units there)
        for bound, _, name, gap in candidates:
            if best is not None and bound > best[0]:
                self.reject(pod, name, RejectReason.COSTLIER, f"loses at least {bound:.0f} GPU-s")
                continue
            self.evaluated += 1
            here = self.units.units_on(name, exclude=self.chosen)
            cover = units.min_cover(here, name, gap, self.s.pdbs, self.cfg.search_budget)
            if cover is None:
                self.reject(pod, name, RejectReason.NOT_ENOUGH_PREEMPTIBLE)
                continue
            if cover.exhausted:
                self.exhausted.append(name)
            key = (cover.cost, cover.pdb_violations, cover.victims, name)
            if best is None or key < best[:4]:
                if best is not None:
                    self.reject(pod, best[3], RejectReason.COSTLIER, f"loses {best[0]:.0f} GPU-s")
                best = (*key, cover, {u.id: u for u in here})
            else:
                self.reject(pod, name, RejectReason.COSTLIER, f"loses {cover.cost:.0f} GPU-s")
        if best is None:
            return None
        name, cover, here_units = best[3], best[4], best[5]
        for uid in cover.unit_ids:
            unit = here_units[uid]
            self.chosen[uid] = unit
            for n, res in unit.release.items():
                self.free[n] = self.free_on(n) + res
                self.touched.add(n)
        self.free[name] = self.free_on(name) - pod.requests
        return name


def _groups(chosen: Sequence[units.Unit], cfg: PlannerConfig) -> list[VictimGroup]:
    out = []
    for u in sorted(chosen, key=lambda u: (-u.cost, u.id)):
        victims = tuple(
            Victim(
                uid=p.uid, name=p.name, namespace=p.namespace, node=p.node, gpus=p.gpus,
                priority=p.priority, lost_gpu_seconds=lost, drain=drained,
                checkpoint_seconds=cost.drain_seconds(p, cfg.max_checkpoint_seconds)
                if drained else None,
            )
            for p, lost, drained in zip(u.pods, u.losses, u.drained, strict=True)
        )
        if any(v.drain for v in victims):
            why = "on-request checkpoint: loses only its checkpoint time"
        elif u.gang:
            why = f"whole gang of {len(victims)}: least work since its last checkpoint"
        else:
            why = "least work lost since its last checkpoint"
        out.append(VictimGroup(gang=u.gang, victims=victims, lost_gpu_seconds=u.cost, reason=why))
    return out


def plan(
    snapshot: Snapshot, preemptor: Sequence[Pod], config: PlannerConfig = PlannerConfig()
) -> Plan:
    """Plan for one pending pod or every pending member of one gang."""
    members = sorted(preemptor, key=lambda p: (-p.gpus, -p.requests.cpu_milli, p.uid))
    uids = tuple(p.uid for p in members)
    if not members:
        return Plan(policy=POLICY, preemptor=(), feasible=False, reason="empty preemptor")
    if not snapshot.nodes:
        return Plan(
            policy=POLICY, preemptor=uids, feasible=False, reason="the cluster has no nodes"
        )
    priority = min(p.priority for p in members)
    search = _Search(snapshot, priority, config)
    placements = []
    for pod in members:
        node = search.place(pod)
        if node is None:
            return Plan(
                policy=POLICY, preemptor=uids, feasible=False,
                reason=f"{pod.name} fits nowhere even after preempting every eligible victim",
                rejections=tuple(search.rejections), nodes_evaluated=search.evaluated,
            )
        placements.append(Placement(pod_uid=pod.uid, node=node))
    groups = _groups(list(search.chosen.values()), config)
    drains = [v.checkpoint_seconds for g in groups for v in g.victims if v.drain]
    victim_pods = [p for u in search.chosen.values() for p in u.pods]
    total = sum(g.lost_gpu_seconds for g in groups)
    reason = (
        f"evict {len(victim_pods)} pod(s) in {len(groups)} group(s), "
        f"losing {total / 3600:.2f} GPU-h"
        if groups
        else "fits without preemption"
    )
    if search.exhausted:
        reason += (
            f"; search budget exhausted on {len(set(search.exhausted))} node(s) "
            f"({RejectReason.SEARCH_BUDGET}), so the cover there may not be the least"
        )
    return Plan(
        policy=POLICY,
        preemptor=uids,
        feasible=True,
        reason=reason,
        placements=tuple(placements),
        victim_groups=tuple(groups),
        pdb_violations=units.pdb_violations(victim_pods, snapshot.pdbs),
        drain_deadline=snapshot.now + max(drains) if drains else (snapshot.now if groups else None),
        rejections=tuple(search.rejections),
        nodes_evaluated=search.evaluated,
    )
