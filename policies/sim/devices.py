"""Free capacity per node for the engine's own placement, and the GPU models a pod may use.

Placement is best fit: the node with the fewest free GPUs that still fits the pod (the lowest
index among equals), found through buckets of nodes by free GPU count. A member whose
``gpu_spec`` names GPU models ("|"-separated, as openb writes them) only goes to nodes whose
model is one of them; the planner's snapshot closes the other nodes to that preemptor
(``exclusions``).

Limitation: fractional GPUs (openb's ``gpu_milli`` below 1000) are not shared here; such a pod
takes a whole GPU, in the engine's placement and in the planner's view alike, so fractional
pods pack less densely than on a GPU-sharing cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from ckpt_preempt.policies.model import Node, RejectReason, Resources
from ckpt_preempt.policies.sim.workload import Member

SPEC_SEPARATOR = "|"


def requests(m: Member) -> Resources:
    return Resources(cpu_milli=m.cpu_milli, memory_mib=m.memory_mib, gpus=m.gpus)


class Capacity:
    def __init__(self, nodes: Sequence[Node], models: Sequence[str]) -> None:
        self.nodes = tuple(nodes)
        self.models = tuple(models)
        self.free = [n.allocatable for n in self.nodes]
        self.maxg = max(n.allocatable.gpus for n in self.nodes)
        self.buckets: list[set[int]] = [set() for _ in range(self.maxg + 1)]
        for i, n in enumerate(self.nodes):
            self.buckets[n.allocatable.gpus].add(i)
        self._allowed: dict[str, frozenset[int] | None] = {}
        self._closed: dict[frozenset[int], tuple[Node, ...]] = {}

    # -- free capacity -------------------------------------------------------------------
    def take(self, i: int, r: Resources) -> None:
        self._move(i, self.free[i] - r)

    def give(self, i: int, r: Resources) -> None:
        self._move(i, self.free[i] + r)

    def _move(self, i: int, free: Resources) -> None:
        self.buckets[self.free[i].gpus].discard(i)
        self.free[i] = free
        self.buckets[free.gpus].add(i)

    def fits(self, i: int, r: Resources) -> bool:
        return r.fits_in(self.free[i])

    def room_for(self, gpus: int) -> bool:
        """Some node has at least ``gpus`` free GPUs."""
        return any(self.buckets[g] for g in range(gpus, self.maxg + 1))

    # -- GPU models ------------------------------------------------------------------------
    def allowed(self, spec: str) -> frozenset[int] | None:
        """Nodes whose GPU model ``spec`` names; None when it names none (any model)."""
        if spec not in self._allowed:
            wanted = {s.strip() for s in spec.split(SPEC_SEPARATOR) if s.strip()}
            self._allowed[spec] = frozenset(
                i for i, model in enumerate(self.models) if model in wanted) if wanted else None
        return self._allowed[spec]

    def allowed_for(self, members: Iterable[Member]) -> frozenset[int] | None:
        """Nodes every member may use (None: any)."""
        out: frozenset[int] | None = None
        for m in members:
            a = self.allowed(m.gpu_spec)
            if a is not None:
                out = a if out is None else out & a
        return out

    def exclusions(self, members: Iterable[Member]) -> tuple[Node, ...]:
        """The nodes as the planner sees them for a preemptor with these members: nodes of
        another GPU model are closed to it, as a node selector would close them."""
        allowed = self.allowed_for(members)
        if allowed is None:
            return self.nodes
        if allowed not in self._closed:
            self._closed[allowed] = tuple(
                n if i in allowed else replace(n, excluded=RejectReason.NODE_SELECTOR)
                for i, n in enumerate(self.nodes))
        return self._closed[allowed]

    # -- placement -----------------------------------------------------------------------
    def best_fit(self, r: Resources, allowed: frozenset[int] | None = None) -> int | None:
        for g in range(r.gpus, self.maxg + 1):
            fits = [i for i in self.buckets[g]
                    if (allowed is None or i in allowed) and r.fits_in(self.free[i])]
            if fits:
                return min(fits)
        return None

    def place(self, members: Sequence[Member]) -> list[int] | None:
        """Take room for every member (largest first) and return each one's node, in member
        order; None, taking nothing, when some member does not fit."""
        order = sorted(range(len(members)), key=lambda k: -members[k].gpus)
        out = [0] * len(members)
        taken: list[tuple[int, Resources]] = []
        for k in order:
            r = requests(members[k])
            i = self.best_fit(r, self.allowed(members[k].gpu_spec))
            if i is None:
                for j, rr in taken:
                    self.give(j, rr)
                return None
            self.take(i, r)
            taken.append((i, r))
            out[k] = i
        return out
