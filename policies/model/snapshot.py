"""``Snapshot``: the whole cluster at one instant, and the indexes every policy reads from it.

Apart from the record types it holds (``policies.model.model``) because it is the one model class
with behaviour of its own: lazily built indexes (pods per node, free resources, gangs, PDBs per
namespace) and ``restricted``, the per-preemptor view a controller cycle derives without
re-indexing. It imports ``policies.model.model``, never the reverse.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from ckpt_preempt.policies.model.model import (
    MILLI_PER_GPU,
    ZERO,
    Gang,
    Node,
    Pod,
    PodDisruptionBudget,
    PodHold,
    RejectReason,
    Resources,
    UnknownCheckpoint,
)

LAZY = object()  # Snapshot.with_indexes: leave this cached value to be computed when asked


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The whole cluster at one instant. Index properties are computed once, lazily.

    ``recent_preemptions`` counts, per ``Pod.workload``, how often that workload was preempted
    within the fairness window (the planner charges a penalty for each); ``unknown_checkpoint``
    is the policy for pods that report no checkpoint.
    """

    now: float
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    pdbs: tuple[PodDisruptionBudget, ...] = ()
    recent_preemptions: Mapping[str, int] = field(default_factory=dict)
    unknown_checkpoint: UnknownCheckpoint = UnknownCheckpoint()
    # per Pod.workload: preemptions within the bound's longer window (policies.planner.bound), for
    # the fairness penalty that doubles with each; empty: the penalty counts recent ones only
    preemption_history: Mapping[str, int] = field(default_factory=dict)
    # GPUs (shares) that pending pods other than the preemptor, at its priority or above, ask
    # for: they would take what a victim's end frees (policies.planner.timing, end-aware choice)
    queued_gpus: float = 0.0

    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def pod_by_uid(self) -> dict[str, Pod]:
        if self._held_over is not None:  # restricted: the parent's, with the held pods swapped
            by_uid, swapped = self._held_over
            return {**by_uid, **swapped}
        return {p.uid: p for p in self.pods}

    def pod_on(self, node: str | None, uid: str) -> Pod | None:
        """The pod ``uid`` bound to ``node``, or None: read from that node's pods, so no index
        of every pod is built (a restricted view builds its own ``pod_by_uid`` when asked,
        a copy of its parent's)."""
        return next((p for p in self.pods_on_node.get(node, ()) if p.uid == uid), None)

    @cached_property
    def _held_over(self) -> tuple[dict[str, Pod], dict[str, Pod]] | None:
        """For a snapshot ``restricted`` made with pods held: (the parent's ``pod_by_uid``,
        the held pods by uid), to build its own only when asked; None otherwise."""
        return None

    @cached_property
    def _index(self) -> tuple[dict[str, tuple[Pod, ...]], dict[str, Resources], dict]:
        """One pass over the pods: pods per node, resources held per node, gang members."""
        on_node: dict[str, list[Pod]] = {}
        held: dict[str, list[int]] = {}
        gang_pods: dict[str, list[Pod]] = {}
        for p in self.pods:
            if p.node is not None:
                on_node.setdefault(p.node, []).append(p)
                r = p.requests
                h = held.get(p.node)
                if h is None:
                    held[p.node] = [r.cpu_milli, r.memory_mib, r.gpus, r.gpu_milli]
                else:
                    h[0] += r.cpu_milli
                    h[1] += r.memory_mib
                    h[2] += r.gpus
                    h[3] += r.gpu_milli
            if p.gang is not None:
                gang_pods.setdefault(p.gang, []).append(p)
        return (
            {k: tuple(v) for k, v in on_node.items()},
            {k: Resources(cpu_milli=c, memory_mib=m, gpus=g, gpu_milli=f)
             for k, (c, m, g, f) in held.items()},
            gang_pods,
        )

    @property
    def pods_on_node(self) -> dict[str, tuple[Pod, ...]]:
        return self._index[0]

    @cached_property
    def pdbs_by_namespace(self) -> dict[str, list[tuple[int, PodDisruptionBudget]]]:
        """(index in ``pdbs``, PDB) per namespace: a PDB covers pods of its own only."""
        out: dict[str, list[tuple[int, PodDisruptionBudget]]] = {}
        for i, b in enumerate(self.pdbs):
            out.setdefault(b.namespace, []).append((i, b))
        return out

    @cached_property
    def unknown_checkpoint_age(self) -> float | None:
        """How old an unreported checkpoint is assumed to be, in seconds; None: as old as the
        pod. For ``cluster-median``, the median over bound pods that report a checkpoint."""
        policy = self.unknown_checkpoint
        if policy.kind != "cluster-median":
            return policy.seconds
        now = self.now
        ages = [
            now - (p.last_checkpoint if p.start_time is None
                   else max(p.last_checkpoint, p.start_time))
            for p in self.pods if p.node is not None and p.last_checkpoint is not None
        ]
        return max(0.0, statistics.median(ages)) if ages else None

    def with_indexes(self, *, node_by_name: dict[str, Node], pod_by_uid: dict[str, Pod],
                     pods_on_node: dict[str, tuple[Pod, ...]], held: dict[str, Resources],
                     pods_by_gang: dict[str, list[Pod]], free_by_node: dict[str, Resources],
                     free_gpus_index: list[tuple[int, str]], largest_allocatable: Resources,
                     gangs: dict[str, Gang],
                     pdbs_by_namespace: dict[str, list[tuple[int, PodDisruptionBudget]]],
                     unknown_checkpoint_age: object = LAZY) -> Snapshot:
        """This snapshot with its indexes handed in instead of computed from its nodes and
        pods (the controller's incremental cluster model keeps them current), shared, not
        copied. The caller vouches that each equals what the property would compute
        (tests/controller/test_cluster_model_props.py checks it after every random change).
        ``unknown_checkpoint_age`` is computed when asked unless given (``LAZY``)."""
        if unknown_checkpoint_age is not LAZY:
            self.__dict__["unknown_checkpoint_age"] = unknown_checkpoint_age
        self.__dict__.update(
            node_by_name=node_by_name, pod_by_uid=pod_by_uid,
            _index=(pods_on_node, held, pods_by_gang), free_by_node=free_by_node,
            free_gpus_index=free_gpus_index, largest_allocatable=largest_allocatable,
            gangs=gangs, pdbs_by_namespace=pdbs_by_namespace)
        return self

    def with_nodes(self, nodes: tuple[Node, ...],
                   free_gpus_index: list[tuple[int, str]]) -> Snapshot:
        """This snapshot with only ``nodes`` (some of its own; ``free_gpus_index``: the part of
        its GPU index on them), sharing every index that depends on the pods, not rebuilt
        (``policies.model.cliques``: one NVLink clique's view). Per-node tables keep the parent's
        entries; they are looked up by the view's node names only."""
        view = Snapshot(now=self.now, nodes=nodes, pods=self.pods, pdbs=self.pdbs,
                        recent_preemptions=self.recent_preemptions,
                       preemption_history=self.preemption_history,
                        unknown_checkpoint=self.unknown_checkpoint)
        alloc = [n.allocatable for n in nodes] or [ZERO]
        view.__dict__.update(
            _index=self._index, free_by_node=self.free_by_node, free_gpus_index=free_gpus_index,
            largest_allocatable=Resources(
                cpu_milli=max(a.cpu_milli for a in alloc),
                memory_mib=max(a.memory_mib for a in alloc),
                gpus=max(a.gpus for a in alloc), gpu_milli=max(a.gpu_milli for a in alloc)),
            gangs=self.gangs, unknown_checkpoint_age=self.unknown_checkpoint_age,
            pdbs_by_namespace=self.pdbs_by_namespace, pod_by_uid=self.pod_by_uid,
            _pod_positions=self._pod_positions, declared_ends=self.declared_ends,
        )
        return view

    def with_pending(self, pending: Iterable[Pod], queued_gpus: float) -> Snapshot:
        """This snapshot plus pods bound to no node (a preemptor's), sharing every index that
        depends only on bound pods (pods and room per node, the GPU index, the largest node,
        periodic reporters, declared ends),
        built once for many preemptors instead of once each: the simulator plans every waiting
        preemptor of a moment on one cluster state. The result equals a snapshot made with all
        the pods; ValueError for a bound pod."""
        added = tuple(pending)
        if any(p.node is not None for p in added):
            raise ValueError("with_pending takes pods bound to no node")
        view = replace(self, pods=self.pods + added, queued_gpus=queued_gpus)
        on_node, held, gang_pods = self._index
        if any(p.gang is not None for p in added):
            gang_pods = {k: list(v) for k, v in gang_pods.items()}
            for p in added:
                if p.gang is not None:
                    gang_pods.setdefault(p.gang, []).append(p)
        view.__dict__.update(
            _index=(on_node, held, gang_pods), free_by_node=self.free_by_node,
            free_gpus_index=self.free_gpus_index, largest_allocatable=self.largest_allocatable,
            node_by_name=self.node_by_name, pdbs_by_namespace=self.pdbs_by_namespace,
            # of bound pods only, at positions the added pods (appended) do not move
            periodic_positions=self.periodic_positions, declared_ends=self.declared_ends)
        return view

    def restricted(
        self, *, closed: Mapping[str, RejectReason] | None = None,
        held: Mapping[str, PodHold] | None = None, queued_gpus: float | None = None,
    ) -> Snapshot:
        """This snapshot as one preemptor sees it while other plans hold nodes and victims:
        the nodes in ``closed`` are excluded for the reason given, the pods in ``held`` are
        no candidates for the reason given; ``queued_gpus`` replaces this snapshot's. The
        index is carried over and patched where those pods sit, not rebuilt, so a controller
        cycle indexes the cluster once for its whole queue. Names and uids the snapshot lacks,
        nodes already closed and pods already terminating or held are left as they are."""
        by_name = self.node_by_name
        shut = {n: why for n, why in (closed or {}).items()
                if n in by_name and by_name[n].closed is None}
        by_uid = self.pod_by_uid
        swapped = {
            u: replace(by_uid[u], held=why) for u, why in (held or {}).items()
            if u in by_uid and not by_uid[u].terminating and by_uid[u].held is None
        }
        nodes = self.nodes
        node_at = self._node_positions
        if shut and node_at is None:  # repeated names: replace each of them
            nodes = tuple(replace(n, excluded=shut[n.name]) if n.name in shut else n
                          for n in nodes)
        elif shut:  # patch a copy where the closed nodes sit
            patched_nodes = list(nodes)
            for name, why in shut.items():
                patched_nodes[node_at[name]] = replace(by_name[name], excluded=why)
            nodes = tuple(patched_nodes)
        on_node, held_resources, gang_pods = self._index
        pods = self.pods
        if swapped:
            at = self._pod_positions
            if at is None:  # repeated uids: swap each of them
                pods = tuple(swapped.get(p.uid, p) for p in pods)
            else:  # patch a copy where the held pods sit instead of walking every pod
                patched = list(pods)
                for u, p in swapped.items():
                    patched[at[u]] = p
                pods = tuple(patched)
            on_node = dict(on_node)
            for node in {p.node for p in swapped.values() if p.node is not None}:
                on_node[node] = tuple(swapped.get(p.uid, p) for p in on_node[node])
            gang_pods = dict(gang_pods)
            for gang in {p.gang for p in swapped.values() if p.gang is not None}:
                gang_pods[gang] = [swapped.get(p.uid, p) for p in gang_pods[gang]]
        out = Snapshot(now=self.now, nodes=nodes, pods=pods, pdbs=self.pdbs,
                       recent_preemptions=self.recent_preemptions,
                       preemption_history=self.preemption_history,
                       unknown_checkpoint=self.unknown_checkpoint,
                       queued_gpus=self.queued_gpus if queued_gpus is None else queued_gpus)
        # Neither a closed node nor a held pod changes what is held or free (such pods still
        # hold their resources), who belongs to which gang or what checkpoints pods report:
        # share those as they are.
        out.__dict__.update(
            _index=(on_node, held_resources, gang_pods),
            free_by_node=self.free_by_node,
            largest_allocatable=self.largest_allocatable,
            free_gpus_index=self.free_gpus_index,
            gangs=self.gangs,
            unknown_checkpoint_age=self.unknown_checkpoint_age,
            pdbs_by_namespace=self.pdbs_by_namespace,
            _pod_positions=self._pod_positions,
            _node_positions=node_at,
            declared_ends=self.declared_ends,
            restriction=(self, frozenset(shut), frozenset(swapped)),
        )
        if swapped:
            out.__dict__["_held_over"] = (by_uid, swapped)  # pod_by_uid, built if asked for
        else:
            out.__dict__["pod_by_uid"] = by_uid
        if not shut:
            out.__dict__["node_by_name"] = by_name
        elif node_at is not None:
            out.__dict__["node_by_name"] = {**by_name, **{n: nodes[node_at[n]] for n in shut}}
        return out

    @cached_property
    def gpus_by_workload(self) -> dict[str, float]:
        """GPUs (shares) each workload (``Pod.workload``) holds on nodes: what a plan records
        for a victim's workload, against which its preemptions are later attributed
        (``policies.planner.bound.attributable``)."""
        return workload_gpus(self.pods)

    def with_gpus_by_workload(self, holding: dict[str, float]) -> Snapshot:
        """This snapshot with ``gpus_by_workload`` handed in (kept by the controller's
        incremental model, or computed to attribute the snapshot's preemption counts), shared,
        not copied. The caller vouches it equals ``workload_gpus(self.pods)``
        (tests/controller/test_cluster_model_props.py checks it after every random change)."""
        self.__dict__["gpus_by_workload"] = holding
        return self

    @cached_property
    def declared_ends(self) -> tuple[Pod, ...]:
        """The running pods that declare an end (``Pod.expected_end``), for the end-aware
        charge (``policies.planner.timing.end_rate``): few in most clusters, so a plan reads
        these instead of every pod. Views (``restricted``, ``with_nodes``) share their
        parent's: holding a pod or closing a node changes no pod's end."""
        return tuple(p for p in self.pods if p.node is not None and p.expected_end is not None)

    @cached_property
    def periodic_positions(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Positions in ``pods`` of the bound pods declaring ``checkpoint: periodic`` without a
        malformed report: (those reporting no checkpoint, fewest ``preemption_history`` first;
        those reporting one, most first), for report parity (``policies.planner.parity``),
        which then reads a few pods instead of every pod per plan. A ``restricted`` view
        shares its base's: it keeps every pod at its position, and holding a pod changes
        none of these fields (read the view's pod at the position for its hold)."""
        if self.restriction is not None:
            return self.restriction[0].periodic_positions
        history = self.preemption_history
        silent, reporting = [], []
        for i, p in enumerate(self.pods):
            if p.node is not None and (reports := p.reports_periodic) is not None:
                (reporting if reports else silent).append((history.get(p.workload, 0), i))
        silent.sort()
        reporting.sort(key=lambda c: (-c[0], c[1]))
        return tuple(i for _, i in silent), tuple(i for _, i in reporting)

    @cached_property
    def restriction(self) -> tuple[Snapshot, frozenset[str], frozenset[str]] | None:
        """For a snapshot ``restricted`` made: (the snapshot it restricts, the nodes it closed,
        the pods it held); None for one built whole."""
        return None

    @cached_property
    def _node_positions(self) -> dict[str, int] | None:
        """Each node's index in ``nodes`` by name, or None when a name repeats."""
        at = {n.name: i for i, n in enumerate(self.nodes)}
        return at if len(at) == len(self.nodes) else None

    @cached_property
    def _pod_positions(self) -> dict[str, int] | None:
        """Each pod's index in ``pods`` by uid, or None when a uid repeats."""
        at = {p.uid: i for i, p in enumerate(self.pods)}
        return at if len(at) == len(self.pods) else None

    @cached_property
    def free_by_node(self) -> dict[str, Resources]:
        """Allocatable minus what bound pods hold, for every node."""
        held = self._index[1]
        return {n.name: n.allocatable - held.get(n.name, ZERO) for n in self.nodes}

    @cached_property
    def free_gpus_index(self) -> list[tuple[int, str]]:
        """(free GPUs, node) for every node with a GPU free, ascending: where a GPU pod might
        fit without preemption, found by bisection instead of a scan of every node."""
        return sorted((f.gpus, name) for name, f in self.free_by_node.items() if f.gpus > 0)

    @cached_property
    def request_counts(self) -> dict[Resources, int]:
        """How many pods (bound or pending) ask for each distinct request: the workload a
        placement scorer targets (``policies.placement.admission``). A ``restricted`` view
        shares its base's, computed once and only when asked for."""
        if self.restriction is not None:
            return self.restriction[0].request_counts
        return dict(Counter(p.requests for p in self.pods))

    @cached_property
    def largest_allocatable(self) -> Resources:
        """The most any one node has of each resource: a request beyond it fits nowhere."""
        alloc = [n.allocatable for n in self.nodes] or [ZERO]
        return Resources(
            cpu_milli=max(a.cpu_milli for a in alloc),
            memory_mib=max(a.memory_mib for a in alloc),
            gpus=max(a.gpus for a in alloc),
            gpu_milli=max(a.gpu_milli for a in alloc),
        )

    def free(self, node: str) -> Resources:
        return self.free_by_node[node]

    @property
    def pods_by_gang(self) -> dict[str, list[Pod]]:
        """Every gang's pods, bound or pending; ``restricted`` replaces the lists it changes."""
        return self._index[2]

    def gang_pods(self, key: str) -> list[Pod]:
        """Every pod of gang ``key`` in the snapshot, bound or pending."""
        return self._index[2].get(key, [])

    @cached_property
    def gangs(self) -> dict[str, Gang]:
        return {key: Gang(key=key, members=tuple(sorted(p.uid for p in ps)))
                for key, ps in self._index[2].items()}


def gpu_milli(p: Pod) -> int:
    """The GPUs ``p`` asks for in thousandths (whole GPUs and MIG slices): summed exactly, in
    any order, by ``workload_gpus`` and the controller's incremental model."""
    return p.requests.gpus * MILLI_PER_GPU + p.requests.gpu_milli


def workload_gpus(pods: Iterable[Pod]) -> dict[str, float]:
    """GPUs (shares) held on nodes per ``Pod.workload``, over ``pods``; workloads holding
    none are absent."""
    milli: dict[str, int] = {}
    for p in pods:
        if p.node is not None:
            m = gpu_milli(p)
            if m:
                milli[p.workload] = milli.get(p.workload, 0) + m
    return {w: m / MILLI_PER_GPU for w, m in milli.items()}
