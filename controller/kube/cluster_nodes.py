"""The node and PDB half of the incremental cluster model (``controller.kube.cluster_model``).

``NodesAndPdbs`` keeps every node's converted record, the free capacity per node and its GPU
index, the nodes' GPU health and the PDB records, patched per watch change. ``ClusterModel``
owns one beside its pod half: this state changes on its own schedule (node and PDB events,
health) and meets the pod half in two places only, both through methods: ``held`` (what bound
pods hold per node, which ``set_free`` subtracts; the pod half's, read here) and the nodes the
pods changed (``mark_changed``), which ``take_changed`` hands to the planner's caches.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.informer import Changes
from ckpt_preempt.controller.kube.records import NodeInfo, PdbInfo
from ckpt_preempt.policies.model.health import Health
from ckpt_preempt.policies.model.model import ZERO, Node, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot


class NodesAndPdbs:
    """Nodes, free capacity, GPU health and PDBs of the cluster model. ``ClusterModel`` owns
    one and hands it ``held`` (what bound pods hold per node, which the pod half keeps and this
    half only reads) and tells it which nodes its pods changed (``mark_changed``)."""

    def __init__(self, held: Mapping[str, Resources]) -> None:
        self._held = held  # node -> resources its bound pods hold: the pod half's, read here
        # nodes changed since the last snapshot (None: all of them), for the planner's caches
        self._changed: set[str] | None = None
        # nodes, keyed by name in the cache's order
        self.node_infos: dict[str, NodeInfo] = {}
        self.nodes: dict[str, Node] = {}
        self.problems: dict[str, str] = {}
        self._health: dict[str, Health] = {}
        self.free: dict[str, Resources] = {}
        self.free_gpus: list[tuple[int, str]] = []
        self._node_tuple: tuple[Node, ...] | None = ()
        self._largest: Resources | None = None
        # PDBs
        self._pdb_infos: dict[str, PdbInfo] = {}
        self._pdb_view: tuple[tuple[PdbInfo, ...], Snapshot] | None = None

    # ------------------------------------------------------------------------- changes
    def mark_changed(self, names: Iterable[str | None]) -> None:
        """Nodes whose pods changed: they count as changed for the planner's caches."""
        if self._changed is not None:
            self._changed.update(n for n in names if n is not None)

    def take_changed(self) -> frozenset[str] | None:
        """The nodes changed since the last call (None: all of them); starts a new record."""
        changed, self._changed = self._changed, set()
        return None if changed is None else frozenset(changed)

    # ----------------------------------------------------------------------------- nodes
    def apply_nodes(self, ch: Changes) -> None:
        if ch.relist is not None:
            for name in list(self.node_infos):
                self._drop_node(name)
            for name, info in ch.relist:
                self._put_node(name, info)
            return
        for name, info, moved in ch.changed:
            if info is None:
                self._drop_node(name)
            else:
                if moved:
                    self._drop_node(name)
                self._put_node(name, info)

    def _put_node(self, name: str, info: NodeInfo) -> None:
        """Add (at the end) or replace (in place) a node; ``free`` keeps the same order."""
        node, problem = convert.to_node(info, self._health.get(name, Health.UNKNOWN))
        if self._changed is not None:
            self._changed.add(name)
        self.node_infos[name] = info
        self.nodes[name] = node
        self.problems.pop(name, None)
        if problem:
            self.problems[name] = problem
        self._node_tuple, self._largest = None, None
        self.set_free(name)

    def _drop_node(self, name: str) -> None:
        if self.node_infos.pop(name, None) is None:
            return
        if self._changed is not None:
            self._changed.add(name)
        del self.nodes[name]
        self.problems.pop(name, None)
        self._node_tuple, self._largest = None, None
        self.set_free(name)

    def set_free(self, name: str) -> None:
        """Recompute a node's free capacity after its node or its pods changed."""
        old = self.free.get(name)
        node = self.nodes.get(name)
        new = None if node is None else node.allocatable - self._held.get(name, ZERO)
        if old == new:
            return
        if old is not None and old.gpus > 0:
            del self.free_gpus[bisect.bisect_left(self.free_gpus, (old.gpus, name))]
        if new is None:
            self.free.pop(name, None)
            return
        self.free[name] = new
        if new.gpus > 0:
            bisect.insort(self.free_gpus, (new.gpus, name))

    def set_health(self, health: Mapping[str, Health]) -> None:
        if health == self._health:
            return
        old, self._health = self._health, dict(health)
        for name in set(old) | set(health):
            if old.get(name, Health.UNKNOWN) != health.get(name, Health.UNKNOWN) and \
                    name in self.node_infos:
                self._put_node(name, self.node_infos[name])

    def node_tuple(self) -> tuple[Node, ...]:
        if self._node_tuple is None:
            self._node_tuple = tuple(self.nodes.values())
        return self._node_tuple

    def largest_allocatable(self) -> Resources | None:
        if self._largest is None:
            self._largest = Snapshot(now=0.0, nodes=self.node_tuple(), pods=()).largest_allocatable
        return self._largest

    # ------------------------------------------------------------------------------ PDBs
    def apply_pdbs(self, ch: Changes) -> None:
        if ch.relist is not None:
            self._pdb_infos = dict(ch.relist)
        else:
            for key, info, moved in ch.changed:
                if info is None or moved:
                    self._pdb_infos.pop(key, None)
                if info is not None:
                    self._pdb_infos[key] = info
        if ch.relist is not None or ch.changed:
            self._pdb_view = None

    def pdb_infos(self) -> tuple[PdbInfo, ...]:
        return tuple(self._pdb_infos.values())

    def pdb_view(self) -> tuple[tuple, Snapshot]:
        """The converted PDBs and a Snapshot holding only them, its by-namespace index built
        once per change of the PDBs."""
        if self._pdb_view is None:
            pdbs = tuple(convert.to_pdb(b) for b in self._pdb_infos.values())
            index = Snapshot(now=0.0, nodes=(), pods=(), pdbs=pdbs)
            index.pdbs_by_namespace  # noqa: B018 -- computed once per change of the PDBs
            self._pdb_view = (pdbs, index)
        return self._pdb_view
