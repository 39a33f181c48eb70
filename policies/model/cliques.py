"""Multi-node NVLink domains: the fabric cliques of GB200/GB300 NVL72 racks. Pure.

On rack-scale NVLink systems the GPUs of several nodes share one NVLink fabric; NVML reports
each GPU's cluster UUID and clique id (nvmlGpuFabricInfo_t), hwprobe publishes the node's
clique in its topology report (``policies.model.topology.CLIQUE_KEY``) in GPU Feature Discovery's
``nvidia.com/gpu.clique`` form, and the planner's ``Node.clique`` holds it. Nodes of one clique
reach each other's GPUs over NVLink; nodes of two cliques do not (NVIDIA DRA driver,
ComputeDomains: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/dra-cds.html).

The rule (``gang_cliques``): a gang any of whose members declares ``nvlink: required`` and that
has more than one member (pending or running) is placed, and preempted for, inside ONE clique:
every member on nodes of the same clique, each member still under the within-node rule
(``search.nvlink_gpus``). Running members fix the clique; with none, every clique is a
candidate and the planner keeps the one whose plan loses least (``preemption._place_members``).
A single pod, even of many GPUs, stays within one node as before. When no node of the snapshot
has a clique, nothing changes: the rule needs clique information to mean anything, and a cluster
without rack-scale NVLink keeps its behaviour exactly. Where some nodes have a clique, a
constrained gang never uses a node without one (no NVLink reaches it from another node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ckpt_preempt.policies.model.model import NodeRejection, NvlinkNeed, Pod, RejectReason
from ckpt_preempt.policies.model.snapshot import Snapshot


def constrained(members: Sequence[Pod]) -> bool:
    """Does any member ask for NVLink (``nvlink: required``)? Then the whole gang needs one
    NVLink domain: its collectives span every member."""
    return any(p.nvlink is NvlinkNeed.REQUIRED for p in members)


def running_members(snapshot: Snapshot, members: Sequence[Pod]) -> list[Pod]:
    """The gang's members already on a node (not being placed, not terminating)."""
    gang = next((p.gang for p in members if p.gang is not None), None)
    if gang is None:
        return []
    placing = {p.uid for p in members}
    return [p for p in snapshot.gang_pods(gang)
            if p.node is not None and not p.terminating and p.uid not in placing]


def _groups(snapshot: Snapshot, memo: dict) -> dict[str, tuple]:
    """Per clique: (its nodes in snapshot order, its (free GPUs, node) index). Built once per
    plan (``memo`` is the plan's), in one pass over the nodes and one over the GPU index."""
    got = memo.get(("cliques",))
    if got is None:
        nodes: dict[str, list] = {}
        for n in snapshot.nodes:
            if n.clique is not None:
                nodes.setdefault(n.clique, []).append(n)
        of = {n.name: n.clique for ns in nodes.values() for n in ns}
        index: dict[str, list] = {c: [] for c in nodes}
        for entry in snapshot.free_gpus_index:
            c = of.get(entry[1])
            if c is not None:
                index[c].append(entry)
        got = memo[("cliques",)] = {c: (tuple(ns), index[c]) for c, ns in nodes.items()}
    return got


@dataclass(frozen=True, kw_only=True, slots=True)
class CliqueGpus:
    """A clique's GPUs on its open nodes (those not ``Node.closed``)."""

    allocatable: int
    free: int


def rank(cliques: Mapping[str, CliqueGpus], need: int) -> tuple[str, ...]:
    """The cliques whose open nodes have allocatable GPUs enough for ``need``, best first:
    those with free GPUs enough before the others, each by fewest free GPUs (the tightest fit,
    so the first that needs no preemption leaves the larger cliques whole), then by name. The
    planner (``gang_cliques``) and the extender's filter (``controller.extender.extender_cliques``)
    both rank by it."""
    ranked = sorted((g.free < need, g.free, c) for c, g in cliques.items()
                    if g.allocatable >= need)
    return tuple(c for *_, c in ranked)


def gang_cliques(snapshot: Snapshot, members: Sequence[Pod], memo: dict,
                 ) -> tuple[str, ...] | None:
    """The cliques the members may be placed in, best candidates first; None when the clique
    rule does not apply (no ``nvlink: required`` member, a gang of one, or no node with a
    clique); empty when it applies and no clique can host the gang (its running members are
    on no clique or on two, or no clique has GPUs enough).

    Order: the clique its running members use; else ``rank``'s order of the cliques whose
    schedulable nodes have GPUs enough."""
    running = running_members(snapshot, members)
    if len(members) + len(running) < 2 or not constrained([*members, *running]):
        return None
    groups = _groups(snapshot, memo)
    if not groups:
        return None
    if running:
        by_name = snapshot.node_by_name
        used = {by_name[p.node].clique if p.node in by_name else None for p in running}
        return tuple(used) if len(used) == 1 and None not in used else ()
    gpus = {}
    for clique, (nodes, _) in groups.items():
        open_nodes = [n for n in nodes if n.closed is None]
        gpus[clique] = CliqueGpus(allocatable=sum(n.allocatable.gpus for n in open_nodes),
                                  free=sum(snapshot.free(n.name).gpus for n in open_nodes))
    return rank(gpus, sum(p.gpus for p in members))


def clique_view(snapshot: Snapshot, clique: str, memo: dict) -> Snapshot:
    """``snapshot`` with only the nodes of ``clique``: the same pods, PDBs and indices (shared,
    not rebuilt), so a search on it places nothing outside the clique."""
    key = ("clique-view", clique)
    view = memo.get(key)
    if view is not None:
        return view
    nodes, index = _groups(snapshot, memo)[clique]
    view = memo[key] = snapshot.with_nodes(nodes, index)
    return view


def outside(snapshot: Snapshot, cliques: Sequence[str], members: Sequence[Pod],
            ) -> list[NodeRejection]:
    """A rejection for every node in none of ``cliques``: why the gang may not use it."""
    running = running_members(snapshot, members)
    if running:
        used = sorted({p.node for p in running})
        detail = f"the gang's running members are on {', '.join(used)}"
    else:
        detail = "in no NVLink clique that can hold the gang"
    tried = set(cliques)
    return [NodeRejection(node=n.name, reason=RejectReason.NVLINK_OTHER_CLIQUE,
                          detail=f"{members[0].name}: {detail}")
            for n in snapshot.nodes if n.clique is None or n.clique not in tried]
