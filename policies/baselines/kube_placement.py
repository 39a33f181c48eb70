"""Where kube-scheduler's default profile puts a pod: resource fit, then node scores.

``policies.baselines.kube_workload`` needs this to follow workload-aware preemption, which
schedules a pending PodGroup on the cluster with every potential victim removed and keeps the
victims that fit back next to it: the node each member lands on decides which victims go. Mirrors
kubernetes/kubernetes@v1.37.2:

- ``pkg/scheduler/schedule_one_podgroup.go`` ``podGroupSchedulingDefaultAlgorithm``: the
  group's pending members are scheduled one after the other, each with the previous ones
  assumed on their nodes (``assumeAndReserveWithRevert``), in the queue's member order
  (``pkg/scheduler/framework/types.go`` ``PodGroupMemberPodsOrderingFunc``: priority, then
  attempts, then the time it was queued);
- each member's node is the ordinary scheduling algorithm's (``schedule_one.go``
  ``schedulePod``): Filter (here: resources fit) over the node list walked from
  ``nextStartNodeIndex`` until ``numFeasibleNodesToFind`` nodes fit (all of them below 100
  nodes), Score, then the top of a heap of the scores (``framework/sorted_nodes.go``), where
  equal scores are told apart by a ``Randomizer`` that is set only when a scheduler extender
  scores (``prioritizeNodes``), so without one by the heap's layout of the walk order
  (usually the first node of top score in the walk); ``nextStartNodeIndex`` then moves on by
  the nodes walked, so below 100 nodes it never moves;
- of the default plugins (``pkg/scheduler/apis/config/v1/default_plugins.go``) only two score
  nodes apart on a cluster of plain bare pods: ``NodeResourcesFit`` (weight 1, strategy
  LeastAllocated over cpu and memory, weights 1: ``apis/config/v1/defaults.go``
  ``defaultResourceSpec``) and ``NodeResourcesBalancedAllocation`` (weight 1, cpu and memory).
  GPUs (an extended resource) are not scored at all. TaintToleration, NodeAffinity,
  ImageLocality, PodTopologySpread and InterPodAffinity give every node the same score here
  (no taints, preferences, image lists, spread constraints or affinities), so they are left
  out; a cluster that has them scores nodes apart in ways this module does not see.

``framework/plugins/noderesources/least_allocated.go``: per resource
``(allocatable - requested) * 100 / allocatable`` (integer division; 0 when over), averaged
over the resources with non-zero allocatable (integer division); "requested" is the node's
non-zero requests (a container without a cpu or memory request counts 100m / 200 MiB:
``pkg/scheduler/util`` ``DefaultMilliCPURequest``, ``DefaultMemoryRequest``) plus the pod's.
``balanced_allocation.go``: with the actual requests, ``score(x) = int((1 - |f_cpu - f_mem| / 2)
* 100)`` for fractions ``f = requested / allocatable`` capped at 1 (one resource: 100), and the
plugin scores ``50 + (50 + score(with pod) - score(without)) / 2``; a pod requesting neither
scores 0. Memory ratios are the same in MiB as in bytes, so MiB are used.
"""

from __future__ import annotations

from collections.abc import Sequence

from ckpt_preempt.policies.model.model import Placement, Pod, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot

MAX_NODE_SCORE = 100  # fwk.MaxNodeScore
DEFAULT_MILLI_CPU_REQUEST = 100  # pkg/scheduler/util DefaultMilliCPURequest
DEFAULT_MEMORY_REQUEST_MIB = 200  # pkg/scheduler/util DefaultMemoryRequest (200 MiB)
MIN_FEASIBLE_NODES_TO_FIND = 100  # schedule_one.go minFeasibleNodesToFind
MIN_FEASIBLE_NODES_PERCENTAGE = 5  # schedule_one.go minFeasibleNodesPercentageToFind


def non_zero(r: Resources) -> tuple[int, int]:
    """(cpu milli, memory MiB) as LeastAllocated counts a pod: a missing request is a default."""
    return (r.cpu_milli or DEFAULT_MILLI_CPU_REQUEST, r.memory_mib or DEFAULT_MEMORY_REQUEST_MIB)


def least_allocated(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    total = weights = 0
    for req, cap in zip(requested, allocatable, strict=True):
        if cap == 0:
            continue
        total += 0 if req > cap else (cap - req) * MAX_NODE_SCORE // cap
        weights += 1
    return total // weights if weights else 0


def _balance(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    fractions = [min(req / cap, 1.0) for req, cap in zip(requested, allocatable, strict=True)
                 if cap != 0]
    std = abs(fractions[0] - fractions[1]) / 2 if len(fractions) == 2 else 0.0
    return int((1 - std) * MAX_NODE_SCORE)


def balanced_allocation(pod: Resources, allocated: Sequence[int],
                        allocatable: Sequence[int]) -> int:
    if pod.cpu_milli == 0 and pod.memory_mib == 0:
        return 0
    with_pod = (allocated[0] + pod.cpu_milli, allocated[1] + pod.memory_mib)
    half = MAX_NODE_SCORE // 2
    return half + (half + _balance(with_pod, allocatable) - _balance(allocated, allocatable)) // 2


class ClusterLoad:
    """What is requested on each node, changed as pods are removed and assumed (working state
    of one planning call; nothing here crosses a module boundary)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.allocatable = {n.name: n.allocatable for n in snapshot.nodes}
        self.requested = {n.name: Resources() for n in snapshot.nodes}
        self.non_zero = {n.name: (0, 0) for n in snapshot.nodes}
        self.closed = {n.name for n in snapshot.nodes if n.closed is not None}
        for p in snapshot.pods:
            if p.node in self.allocatable:
                self.add(p.requests, p.node)

    def add(self, r: Resources, node: str) -> None:
        self.requested[node] = self.requested[node] + r
        cpu, mem = non_zero(r)
        self.non_zero[node] = (self.non_zero[node][0] + cpu, self.non_zero[node][1] + mem)

    def remove(self, r: Resources, node: str) -> None:
        self.requested[node] = self.requested[node] - r
        cpu, mem = non_zero(r)
        self.non_zero[node] = (self.non_zero[node][0] - cpu, self.non_zero[node][1] - mem)

    def free(self, node: str) -> Resources:
        return self.allocatable[node] - self.requested[node]

    def fits(self, r: Resources, node: str) -> bool:
        return r.fits_in(self.free(node))

    def score(self, r: Resources, node: str) -> int:
        """NodeResourcesFit (LeastAllocated) plus NodeResourcesBalancedAllocation."""
        cap = self.allocatable[node]
        allocatable = (cap.cpu_milli, cap.memory_mib)
        cpu, mem = non_zero(r)
        least = least_allocated((self.non_zero[node][0] + cpu, self.non_zero[node][1] + mem),
                                allocatable)
        used = self.requested[node]
        return least + balanced_allocation(r, (used.cpu_milli, used.memory_mib), allocatable)

    def select_host(self, pod: Pod, nodes: Sequence[str],
                    offset: int = 0) -> tuple[str | None, int]:
        """(the node kube-scheduler would bind ``pod`` to, or None; how many nodes it walked).

        ``nodes``: every node, in the scheduler's list order, walked from ``offset``
        (``nextStartNodeIndex``) until ``feasible_nodes_to_find`` fit (a closed node never
        fits); of those, the root of Go's ``container/heap`` after ``heap.Init`` over their
        scores in walk order (``framework/sorted_nodes.go``: without extenders every
        ``Randomizer`` is 0, so equal scores are never reordered among themselves)."""
        want = feasible_nodes_to_find(len(nodes))
        fits, walked = [], 0
        for i in range(len(nodes)):
            n = nodes[(offset + i) % len(nodes)]
            walked += 1
            if n not in self.closed and self.fits(pod.requests, n):
                fits.append(n)
                if len(fits) == want:
                    break
        if not fits:
            return None, walked
        return fits[heap_root([self.score(pod.requests, n) for n in fits])], walked

    def schedule(self, members: Sequence[Pod], nodes: Sequence[str],
                 offset: int = 0) -> list[Placement] | None:
        """Each member in turn, the earlier ones assumed (left assumed here), the walk going on
        where the last one stopped; None when one fits nowhere."""
        out = []
        for pod in members:
            node, walked = self.select_host(pod, nodes, offset)
            offset = (offset + walked) % len(nodes) if nodes else 0
            if node is None:
                return None
            self.add(pod.requests, node)
            out.append(Placement(pod_uid=pod.uid, node=node))
        return out


def feasible_nodes_to_find(nodes: int) -> int:
    """``numFeasibleNodesToFind`` with the default ``percentageOfNodesToScore`` (0: adaptive):
    every node below 100, else ``50 - nodes / 125`` percent of them (at least 5 %), at least
    100."""
    if nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return nodes
    percentage = max(50 - nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE)
    return max(nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


def heap_root(scores: Sequence[int]) -> int:
    """Index of the element Go's ``heap.Pop`` returns first after ``heap.Init`` on a max-heap of
    ``scores`` (``Less(i, j)``: score i > score j; ties are left where they are)."""
    h = list(range(len(scores)))
    n = len(h)
    for top in range(n // 2 - 1, -1, -1):
        i = top
        while (left := 2 * i + 1) < n:
            j = left
            if left + 1 < n and scores[h[left + 1]] > scores[h[left]]:
                j = left + 1
            if not scores[h[j]] > scores[h[i]]:
                break
            h[i], h[j] = h[j], h[i]
            i = j
    return h[0]


def member_order(members: Sequence[Pod]) -> list[Pod]:
    """The queue's order of a group's pending members: higher priority first, then the one
    queued first; our model does not see queueing times, so by name (the order a controller
    creating ``<job>-0``, ``<job>-1``... creates them, for up to ten members)."""
    return sorted(members, key=lambda p: (-p.priority, p.name, p.uid))
