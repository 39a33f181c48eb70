"""The incremental cluster model: the watch cache converted once, kept up to date per change.

``convert.snapshot()`` rebuilds the whole ``policies`` Snapshot from the cache (seconds at
100k pods). ``ClusterModel`` instead keeps every pod's and node's converted record and the
Snapshot's indexes (pods per node, resources held per node, free capacity and its GPU index,
gang members, PDBs by namespace), plus what the reconcile pass looks up (unfinished pods by
uid, pending and terminating pods). ``sync(now)`` drains each store's ``ChangeLog``
(``controller.kube.watch``) and patches all of it at O(changes); ``snapshot()`` then hands the
indexes to a new Snapshot without copying them. The result equals ``convert.snapshot()`` on the
same cache (tests/controller/test_cluster_model_props.py checks it after every random event).

Time: a pod's conversion depends on ``now`` only through a last-checkpoint later than ``now``
(clamped, or rejected as lying in the future); such pods are re-converted on every sync until
``now`` passes it. Lost work and min-runtime are computed by the planner from
``Snapshot.now``. The views a sync returns stay valid until the next ``sync``.

The node and PDB half (records, free capacity, GPU health) is ``controller.kube.cluster_nodes``,
an object the model owns (``_cluster``).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Protocol

from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.cluster_nodes import NodesAndPdbs
from ckpt_preempt.controller.kube.informer import Changes
from ckpt_preempt.controller.kube.records import NodeInfo, PdbInfo, PodInfo
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.health import Health
from ckpt_preempt.policies.model.model import MILLI_PER_GPU, Gang, Pod, Resources
from ckpt_preempt.policies.model.native_gangs import NativeGroup
from ckpt_preempt.policies.model.snapshot import LAZY, Snapshot, gpu_milli
from ckpt_preempt.policies.model.times import parse_rfc3339


class Source(Protocol):
    def drain(self) -> Changes: ...


@dataclass(frozen=True, kw_only=True)
class View:
    """What one pass reads; valid until the model's next ``sync``."""

    by_uid: Mapping[str, PodInfo]  # unfinished pods
    nodes: Mapping[str, NodeInfo]
    pdbs: tuple[PdbInfo, ...]
    pending: tuple[PodInfo, ...]  # unfinished, unbound, not terminating; in the cache's order
    terminating: frozenset[str]  # uids
    plan_annotated: tuple[PodInfo, ...] = field(default=())  # carry the legacy plan annotation
    podgroups: Mapping[str, NativeGroup] = field(default_factory=dict)  # by <namespace>/<name>


class _PodEntry:
    __slots__ = ("checkpoint_at", "converted_at", "info", "pod", "problems", "seq")

    def __init__(self, info: PodInfo, seq: int) -> None:
        self.info, self.seq = info, seq
        self.pod: Pod | None = None  # None: finished (not in the snapshot)
        self.problems: tuple[str, ...] = ()
        self.checkpoint_at = _checkpoint_at(info)
        self.converted_at = float("-inf")


def _checkpoint_at(info: PodInfo) -> float:
    """The pod's reported last checkpoint, which its conversion compares with ``now``."""
    raw = info.annotations.get(ann.LAST_CHECKPOINT)
    if raw is None:
        return float("-inf")
    try:
        return parse_rfc3339(raw)
    except ValueError:
        return float("-inf")


_POD = attrgetter("pod")
# what convert.to_pod (and Scope.covers) read: a change elsewhere (resourceVersion, status
# conditions, nomination) leaves the converted pod as it was
_inputs = attrgetter("uid", "name", "namespace", "labels", "annotations", "priority",
                     "priority_class", "requests", "node", "start_time", "created", "owner_uid",
                     "deleting", "done", "pod_group", "scheduler_name")


class ClusterModel:
    def __init__(self, *, pods: Source, nodes: Source, pdbs: Source, scope: convert.Scope,
                 limits: ann.Limits, podgroups: Source | None = None) -> None:
        self._sources = (pods, nodes, pdbs)
        # native PodGroups (None: not watched): a change re-converts the pods naming the group
        self._podgroup_source = podgroups
        self._groups: dict[str, NativeGroup] = {}  # <namespace>/<name> -> group
        self._by_group: dict[str, set[str]] = {}  # <namespace>/<name> -> pod keys naming it
        self.scope, self.limits = scope, limits
        self._median = limits.unknown_checkpoint.kind == "cluster-median"
        self._now: float | None = None
        self._seq = 0
        # pods, keyed like the cache (namespace/name) and in its order
        self._pods: dict[str, _PodEntry] = {}
        self._live: dict[str, PodInfo] = {}  # uid -> unfinished pod
        self._model: dict[str, Pod] = {}  # uid -> Pod
        self._problems: dict[str, tuple[str, ...]] = {}
        # node / gang -> key -> (seq, Pod): sorting the pairs gives the cache's order
        self._on_node: dict[str, dict[str, tuple[int, Pod]]] = {}
        self._in_gang: dict[str, dict[str, tuple[int, Pod]]] = {}
        self._held_sum: dict[str, list[int]] = {}  # node -> [cpu, memory, gpus] held
        # Pod.workload -> GPUs it holds on nodes, in thousandths and as the Snapshot's
        # gpus_by_workload (policies.model.snapshot.workload_gpus) shows them
        self._workload_milli: dict[str, int] = {}
        self._workload_gpus: dict[str, float] = {}
        self._pending: dict[str, _PodEntry] = {}
        self._terminating: set[str] = set()
        self._annotated: dict[str, _PodEntry] = {}
        self._future: set[str] = set()  # keys whose conversion depends on now
        self._ages: list[float] = []  # checkpoint times of bound pods (cluster-median only)
        self._pod_tuple: tuple[Pod, ...] | None = ()
        self._dirty_nodes: set[str] = set()
        self._dirty_gangs: set[str] = set()
        # the Snapshot's indexes
        self._pods_on_node: dict[str, tuple[Pod, ...]] = {}
        self._held: dict[str, Resources] = {}
        self._gang_pods: dict[str, list[Pod]] = {}
        self._gangs: dict[str, Gang] = {}
        self._cluster = NodesAndPdbs(self._held)  # nodes, free capacity, health, PDBs

    # --------------------------------------------------------------------------- syncing
    def sync(self, now: float) -> View:
        """Apply what the stores saw since the last sync; the pass's view."""
        pods, nodes, pdbs = (s.drain() for s in self._sources)
        self._cluster.apply_nodes(nodes)
        self._cluster.apply_pdbs(pdbs)
        self._apply_pods(pods, now)
        self._apply_podgroups(now)
        self._retime(now)
        self._finish()
        pending = sorted(self._pending.values(), key=attrgetter("seq"))
        annotated = sorted(self._annotated.values(), key=attrgetter("seq"))
        return View(by_uid=self._live, nodes=self._cluster.node_infos,
                    pdbs=self._cluster.pdb_infos(), podgroups=self._groups,
                    pending=tuple(e.info for e in pending),
                    terminating=frozenset(self._terminating),
                    plan_annotated=tuple(e.info for e in annotated))

    def _apply_pods(self, ch: Changes, now: float) -> None:
        if ch.relist is not None:
            old = self._pods
            for key, e in list(old.items()):
                self._unindex(key, e)
            self._pods, self._pod_tuple = {}, None
            for key, info in ch.relist:
                prev = old.get(key)
                self._put_pod(key, info, True, now, reuse=prev)
            return
        for key, info, moved in ch.changed:
            if info is None:
                e = self._pods.pop(key, None)
                if e is not None:
                    self._unindex(key, e)
                    self._pod_tuple = None
            else:
                self._put_pod(key, info, moved, now)

    def _put_pod(self, key: str, info: PodInfo, moved: bool, now: float,
                 reuse: _PodEntry | None = None, *, force: bool = False) -> None:
        old = self._pods.get(key)
        if old is not None:
            self._unindex(key, old)
            if moved:
                del self._pods[key]
        self._pod_tuple = None
        if old is None or moved:
            self._seq += 1
            seq = self._seq
        else:
            seq = old.seq
        e = _PodEntry(info, seq)
        reuse = reuse or old
        if not force and reuse is not None and _inputs(reuse.info) == _inputs(info) and \
                min(reuse.converted_at, now) >= reuse.checkpoint_at:
            e.pod, e.problems, e.converted_at = reuse.pod, reuse.problems, reuse.converted_at
        else:
            self._convert(e, now)
        self._pods[key] = e
        self._index(key, e)

    def _convert(self, e: _PodEntry, now: float) -> None:
        info = e.info
        e.converted_at = now
        if info.done:
            e.pod, e.problems = None, ()
            return
        pod, problems = convert.to_pod(info, now, self.limits, self.scope.covers(info),
                                       self._groups)
        e.pod, e.problems = pod, tuple(problems)

    def _index(self, key: str, e: _PodEntry) -> None:
        p, info = e.pod, e.info
        if info.pod_group is not None:
            self._by_group.setdefault(f"{info.namespace}/{info.pod_group}", set()).add(key)
        if e.checkpoint_at > e.converted_at:
            self._future.add(key)
        if p is None:
            return
        self._live[p.uid] = info
        self._model[p.uid] = p
        if e.problems:
            self._problems[p.uid] = e.problems
        if p.node is not None:
            self._on_node.setdefault(p.node, {})[key] = (e.seq, p)
            self._dirty_nodes.add(p.node)
            r, held = p.requests, self._held_sum.setdefault(p.node, [0, 0, 0, 0])
            held[0] += r.cpu_milli
            held[1] += r.memory_mib
            held[2] += r.gpus
            held[3] += r.gpu_milli
            self._add_workload_gpus(p, 1)
            if self._median and p.last_checkpoint is not None:
                bisect.insort(self._ages, _age_base(p))
        if p.gang is not None:
            self._in_gang.setdefault(p.gang, {})[key] = (e.seq, p)
            self._dirty_gangs.add(p.gang)
        if info.deleting:
            self._terminating.add(p.uid)
        elif info.node is None:
            self._pending[key] = e
        if plan_record.PLAN_ANNOTATION in info.annotations:
            self._annotated[key] = e

    def _add_workload_gpus(self, p: Pod, sign: int) -> None:
        m = gpu_milli(p)
        if not m:
            return
        w = p.workload
        total = self._workload_milli.get(w, 0) + sign * m
        if total:
            self._workload_milli[w] = total
            self._workload_gpus[w] = total / MILLI_PER_GPU
        else:
            del self._workload_milli[w]
            del self._workload_gpus[w]

    def _unindex(self, key: str, e: _PodEntry) -> None:
        p = e.pod
        self._future.discard(key)
        if e.info.pod_group is not None:
            group = f"{e.info.namespace}/{e.info.pod_group}"
            named = self._by_group.get(group)
            if named is not None:
                named.discard(key)
                if not named:
                    del self._by_group[group]
        if p is None:
            return
        self._live.pop(p.uid, None)
        self._model.pop(p.uid, None)
        self._problems.pop(p.uid, None)
        if p.node is not None:
            self._on_node[p.node].pop(key, None)
            self._dirty_nodes.add(p.node)
            r, held = p.requests, self._held_sum[p.node]
            held[0] -= r.cpu_milli
            held[1] -= r.memory_mib
            held[2] -= r.gpus
            held[3] -= r.gpu_milli
            self._add_workload_gpus(p, -1)
            if self._median and p.last_checkpoint is not None:
                i = bisect.bisect_left(self._ages, _age_base(p))
                del self._ages[i]
        if p.gang is not None:
            self._in_gang[p.gang].pop(key, None)
            self._dirty_gangs.add(p.gang)
        self._terminating.discard(p.uid)
        self._pending.pop(key, None)
        self._annotated.pop(key, None)

    def _apply_podgroups(self, now: float) -> None:
        if self._podgroup_source is None:
            return
        ch = self._podgroup_source.drain()
        if ch.relist is not None:
            touched = set(self._groups) | {k for k, _ in ch.relist}
            self._groups = {k: g for k, g in ch.relist}
        else:
            touched = set()
            for key, group, _ in ch.changed:
                touched.add(key)
                if group is None:
                    self._groups.pop(key, None)
                else:
                    self._groups[key] = group
        for group_key in touched:
            for key in list(self._by_group.get(group_key, ())):
                e = self._pods[key]
                self._put_pod(key, e.info, False, now, force=True)

    def _retime(self, now: float) -> None:
        """Re-convert the pods whose conversion at ``now`` differs from the one kept."""
        back = self._now is not None and now < self._now
        self._now = now
        keys = (list(self._future) if not back else
                [k for k, e in self._pods.items() if e.checkpoint_at > now])
        for key in keys:
            e = self._pods[key]
            if min(e.converted_at, now) >= e.checkpoint_at:
                continue
            self._unindex(key, e)
            self._convert(e, now)
            self._index(key, e)
            self._pod_tuple = None

    def _finish(self) -> None:
        """Rebuild the per-node and per-gang entries that changed, in the cache's order."""
        self._cluster.mark_changed(self._dirty_nodes)
        for name in self._dirty_nodes:
            on = self._on_node.get(name)
            if not on:
                self._on_node.pop(name, None)
                self._held_sum.pop(name, None)
                self._pods_on_node.pop(name, None)
                self._held.pop(name, None)
            else:
                self._pods_on_node[name] = tuple(p for _, p in sorted(on.values()))
                c, m, g, f = self._held_sum[name]
                self._held[name] = Resources(cpu_milli=c, memory_mib=m, gpus=g, gpu_milli=f)
            self._cluster.set_free(name)
        self._dirty_nodes.clear()
        for gang in self._dirty_gangs:
            members = self._in_gang.get(gang)
            if not members:
                self._in_gang.pop(gang, None)
                self._gang_pods.pop(gang, None)
                self._gangs.pop(gang, None)
            else:
                ps = [p for _, p in sorted(members.values())]
                # one member's change changes its whole unit
                self._cluster.mark_changed(p.node for p in ps)
                self._gang_pods[gang] = ps
                self._gangs[gang] = Gang(key=gang, members=tuple(sorted(p.uid for p in ps)))
        self._dirty_gangs.clear()

    # -------------------------------------------------------------------------- snapshot
    def snapshot(self, *, now: float, recent_preemptions: Mapping[str, int] | None = None,
                 health: Mapping[str, Health] | None = None,
                 preemption_history: Mapping[str, int] | None = None,
                 preempted_gpus: Mapping[str, float] | None = None) -> convert.Converted:
        """The Converted ``convert.snapshot()`` would build from the cache as of the last
        sync, for ``now`` (the sync's own: pods are converted for it)."""
        if now != self._now:
            self._retime(now)
            self._finish()
        self._cluster.set_health(health or {})
        if self._pod_tuple is None:
            self._pod_tuple = tuple(filter(None, map(_POD, self._pods.values())))
        cluster = self._cluster
        pdbs, index = cluster.pdb_view()
        recent, history = convert.attributed(recent_preemptions, preemption_history,
                                             preempted_gpus, self._workload_gpus)
        snap = Snapshot(now=now, nodes=cluster.node_tuple(), pods=self._pod_tuple, pdbs=pdbs,
                        recent_preemptions=recent,
                        unknown_checkpoint=self.limits.unknown_checkpoint,
                        preemption_history=history).with_gpus_by_workload(self._workload_gpus)
        snap = snap.with_indexes(
            node_by_name=cluster.nodes, pod_by_uid=self._model, pods_on_node=self._pods_on_node,
            held=self._held, pods_by_gang=self._gang_pods, free_by_node=cluster.free,
            free_gpus_index=cluster.free_gpus, largest_allocatable=cluster.largest_allocatable(),
            gangs=self._gangs, pdbs_by_namespace=index.pdbs_by_namespace,
            unknown_checkpoint_age=_median_age(self._ages, now) if self._median else LAZY)
        return convert.Converted(snapshot=snap, problems=self._problems,
                                 node_problems=cluster.problems,
                                 changed_nodes=cluster.take_changed())


def _age_base(p: Pod) -> float:
    """When a bound pod's work was last saved, as ``Snapshot.unknown_checkpoint_age`` counts."""
    assert p.last_checkpoint is not None
    return p.last_checkpoint if p.start_time is None else max(p.last_checkpoint, p.start_time)


def _median_age(bases: list[float], now: float) -> float | None:
    """``Snapshot.unknown_checkpoint_age`` for cluster-median from the sorted save times: the
    same floats as ``statistics.median`` over ``now - base`` (ages sort in reverse order)."""
    n = len(bases)
    if not n:
        return None
    if n % 2:
        median = now - bases[n - 1 - n // 2]
    else:
        i = n // 2
        median = ((now - bases[n - i]) + (now - bases[n - 1 - i])) / 2
    return max(0.0, median)
