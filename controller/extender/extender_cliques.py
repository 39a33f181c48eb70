"""The extender's NVLink clique rule: where a member of an ``nvlink: required`` gang may go on
a cluster with rack-scale NVLink cliques (GB200/GB300 NVL72, ``policies.model.cliques``).

kube-scheduler places a gang's members one at a time, and the extender sees one pod per
request. A member follows the clique its gang's bound members use, else the one its nominated
members use. A first member (none bound or nominated) is held to ONE clique, the one the
planner would rank first for the whole gang (``policies.model.cliques.rank``): the same view gives
every member the same answer, including a second member filtered before the watch cache has
seen the first member's binding.
"""

from __future__ import annotations

from dataclasses import dataclass

from ckpt_preempt.controller.extender.extender_model import ClusterView, PendingPod
from ckpt_preempt.controller.kube import convert
from ckpt_preempt.policies.model import cliques
from ckpt_preempt.policies.model.model import NvlinkNeed, RejectReason


@dataclass(frozen=True, kw_only=True)
class CliqueRule:
    """Where a member of an ``nvlink: required`` gang may go on a cluster with NVLink cliques:
    a node of ``cliques``. Every other node is ruled out with ``why`` (preemption cannot move a
    node into another clique, so the filter reports them unresolvable)."""

    cliques: frozenset[str]
    why: str  # for the nodes it rules out

    def problem(self, clique: str | None) -> str | None:
        return None if clique is not None and clique in self.cliques else self.why


def clique_rule(view: ClusterView, pod: PendingPod) -> CliqueRule | None:
    """The clique rule for ``pod``, or None when it does not apply: the pod is no member of a
    gang (of more than one), asks no NVLink, or no node of the view has a clique.

    The clique is the one the gang's other members use: bound ones (their node), else pending
    ones kube-scheduler nominated (their nominated node). With neither, ``first_member_rule``.
    Members in two cliques, or on a node in none, leave no clique."""
    m = pod.model
    size = m.gang_total or m.gang_minimum  # a native gang's minCount is its minimum
    if m.nvlink is not NvlinkNeed.REQUIRED or m.gang is None or size == 1:
        return None
    if not any(nv.node.clique is not None for nv in view.nodes.values()):
        return None
    hosts = [view.pods[u].node for u in view.gang_members.get(m.gang, ())
             if u != pod.info.uid and u in view.pods]
    pending = [view.pods[u] for u in view.gang_pending.get(m.gang, ()) if u != pod.info.uid]
    if not hosts:  # no bound member: nominated ones, the pending pods' only placement
        hosts = [info.nominated for info in pending if info.nominated]
    if not hosts:
        known = [m.gpus] + [i.requests.gpus if i.requests else 0 for i in pending]
        unseen = max((size or 0) - len(known), 0)  # counted at this pod's GPUs
        return first_member_rule(view, pod, sum(known) + unseen * m.gpus)
    used = {view.nodes[h].node.clique if h in view.nodes else None for h in hosts}
    if len(used) == 1 and None not in used:
        (clique,) = used
        return CliqueRule(cliques=frozenset(used),
                          why=f"{RejectReason.NVLINK_OTHER_CLIQUE.value} (the gang's members "
                              f"use clique {clique})")
    return CliqueRule(cliques=frozenset(),
                      why=f"{RejectReason.NVLINK_NO_CLIQUE.value} (the gang's members are on "
                          f"{', '.join(sorted(set(hosts)))}, in no single clique)")


def first_member_rule(view: ClusterView, pod: PendingPod, need: int) -> CliqueRule:
    """The rule for a member none of whose gang is bound or nominated: the one clique
    ``policies.model.cliques.rank`` puts first for ``need`` GPUs (the whole gang still to place),
    counted, like the planner's gated admission (``convert.for_preemptor``), on the clique's
    open nodes: schedulable ones ``pod`` may use (its selector, affinity and taints).

    Exactly one clique, not every one that fits: a second member filtered before the watch
    cache shows the first one's binding sees the same free GPUs and the same need (the first
    member still pending, or not yet seen and counted at this pod's GPUs), so it gets the same
    clique. When that clique has allocatable GPUs enough but not free GPUs enough, its nodes
    stay resolvable (the within-node check reports the busy ones in ``FailedNodes``):
    kube-scheduler may preempt there, which is where the gang has to go, and the preempt verb
    drops candidates in other cliques. No clique with allocatable GPUs enough: every node is
    ruled out, since no preemption can grow a clique."""
    gpus = clique_gpus(view, pod)
    ranked = cliques.rank(gpus, need)
    if not ranked:
        largest = max(g.allocatable for g in gpus.values())
        return CliqueRule(cliques=frozenset(),
                          why=f"{RejectReason.NVLINK_NO_CLIQUE.value} (the gang needs {need} "
                              f"GPUs, the largest clique has {largest} on nodes it may use)")
    chosen = ranked[0]
    return CliqueRule(cliques=frozenset({chosen}),
                      why=f"{RejectReason.NVLINK_OTHER_CLIQUE.value} (the gang's {need} GPUs "
                          f"go to clique {chosen}, the tightest that holds them)")


def clique_gpus(view: ClusterView, pod: PendingPod) -> dict[str, cliques.CliqueGpus]:
    """Per clique, the GPUs of its nodes open to ``pod``: not cordoned and allowed by its node
    selector, required affinity and tolerations (``convert.node_exclusion``). A gang's members
    share these, so the sums are kept per view and per such constraints (every node is walked
    once per view, not once per request)."""
    info = pod.info
    key = ("clique-gpus", repr((sorted(info.node_selector.items()), info.required_terms,
                                info.tolerations, sorted(info.mig))))
    got = view.memo.get(key)
    if got is None:
        plain = not (info.node_selector or info.required_terms or info.mig)
        sums: dict[str, list[int]] = {}
        for nv in view.nodes.values():
            clique = nv.node.clique
            if clique is None:
                continue
            room = sums.setdefault(clique, [0, 0])
            if nv.node.closed is None and ((plain and not nv.info.taints)
                                           or convert.node_exclusion(nv.info, [info]) is None):
                room[0] += nv.node.allocatable.gpus
                room[1] += nv.free_gpus
        got = view.memo[key] = {c: cliques.CliqueGpus(allocatable=a, free=f)
                                for c, (a, f) in sums.items()}
    return got
