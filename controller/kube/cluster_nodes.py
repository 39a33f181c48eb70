"""The node and PDB half of the incremental cluster model (``controller.kube.cluster_model``).

``NodesAndPdbs`` keeps every node's converted record, the free capacity per node and its GPU
index, the nodes' GPU health and the PDB records, patched per watch change. It is apart from
``ClusterModel`` (which inherits it and adds the pods, gangs and the snapshot) because this
state changes on its own schedule (node and PDB events, health) and touches the pod half only
through ``_held`` (what bound pods hold per node, which ``_set_free`` subtracts) and
``_changed`` (the nodes changed since the last snapshot, for the planner's caches).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.informer import Changes
from ckpt_preempt.controller.kube.records import NodeInfo, PdbInfo
from ckpt_preempt.policies.model.health import Health
from ckpt_preempt.policies.model.model import ZERO, Node, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot


class NodesAndPdbs:
    """Nodes, free capacity, GPU health and PDBs of the cluster model (a mixin of
    ``ClusterModel``, which owns the two fields below)."""

    _held: dict[str, Resources]  # node -> resources its bound pods hold (the pod half's)
    _changed: set[str] | None  # nodes changed since the last snapshot (None: all of them)

    def _init_nodes_and_pdbs(self) -> None:
        # nodes, keyed by name in the cache's order
        self._node_infos: dict[str, NodeInfo] = {}
        self._nodes: dict[str, Node] = {}
        self._node_problems: dict[str, str] = {}
        self._health: dict[str, Health] = {}
        self._free: dict[str, Resources] = {}
        self._free_gpus: list[tuple[int, str]] = []
        self._node_tuple: tuple[Node, ...] | None = ()
        self._largest: Resources | None = None
        # PDBs
        self._pdb_infos: dict[str, PdbInfo] = {}
        self._pdb_view: tuple[tuple[PdbInfo, ...], Snapshot] | None = None

    # ----------------------------------------------------------------------------- nodes
    def _apply_nodes(self, ch: Changes) -> None:
        if ch.relist is not None:
            for name in list(self._node_infos):
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
        self._node_infos[name] = info
        self._nodes[name] = node
        self._node_problems.pop(name, None)
        if problem:
            self._node_problems[name] = problem
        self._node_tuple, self._largest = None, None
        self._set_free(name)

    def _drop_node(self, name: str) -> None:
        if self._node_infos.pop(name, None) is None:
            return
        if self._changed is not None:
            self._changed.add(name)
        del self._nodes[name]
        self._node_problems.pop(name, None)
        self._node_tuple, self._largest = None, None
        self._set_free(name)

    def _set_free(self, name: str) -> None:
        old = self._free.get(name)
        node = self._nodes.get(name)
        new = None if node is None else node.allocatable - self._held.get(name, ZERO)
        if old == new:
            return
        if old is not None and old.gpus > 0:
            del self._free_gpus[bisect.bisect_left(self._free_gpus, (old.gpus, name))]
        if new is None:
            self._free.pop(name, None)
            return
        self._free[name] = new
        if new.gpus > 0:
            bisect.insort(self._free_gpus, (new.gpus, name))

    def _set_health(self, health: Mapping[str, Health]) -> None:
        if health == self._health:
            return
        old, self._health = self._health, dict(health)
        for name in set(old) | set(health):
            if old.get(name, Health.UNKNOWN) != health.get(name, Health.UNKNOWN) and \
                    name in self._node_infos:
                self._put_node(name, self._node_infos[name])

    # ------------------------------------------------------------------------------ PDBs
    def _apply_pdbs(self, ch: Changes) -> None:
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
