"""Planner caches that live for one controller cycle (one snapshot, a queue of preemptors).

A cycle plans its preemptors one after another on views of one snapshot
(``Snapshot.restricted``): each view closes the nodes and holds the victims of the plans made
before it. Most of what one plan computes does not depend on those restrictions, so it is kept
here, keyed by what it does depend on, and reused by every later plan of the cycle:

- the evictable pods on each node for each *priority band* (``Evictable``): a preemptor of
  priority ``p`` may evict exactly the pods of priority below ``p``, so preemptors whose
  priorities fall between the same two pod priorities see the same victims;
- each node's judgment for each request shape (why no preemptor of that shape fits there, or
  a lower bound on the cost of making room and what is missing);
- the exact within-node covers (``units.min_cover``), which the members of a gang and the
  tries of a gang plan ask for again and again.

Correctness under restrictions: everything is computed on the cycle's base snapshot and used
for a view only on nodes the view has exactly as the base has them. A view is one that
``Snapshot.restricted`` made from the base (or from a view of it), which records what it
closed and held (``Snapshot.restriction``); a closed node, the node of a held pod, and every
node of a gang with a held member (one held member protects the whole gang) are "unshared":
computed afresh for that plan and never stored, as are the nodes the plan itself changed
(earlier members' placements and victims). Any other snapshot (another time, other PDBs,
fairness counts or pods) is planned without the caches.

Pure and single-threaded: one cache per cycle, dropped at its end (it holds the snapshot).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ckpt_preempt.policies.model import Snapshot


@dataclass(frozen=True, kw_only=True)
class ViewDelta:
    """Where one view of the base snapshot differs from it: the nodes it closed, and the nodes
    whose evictable pods may differ (a pod there is held, or a member of a gang with a pod
    there is)."""

    nodes: frozenset[str]
    pods: frozenset[str]

    def unclean(self) -> frozenset[str]:
        return self.nodes | self.pods


class PlanCache:
    """What plans of one cycle on views of ``base`` share (see the module docstring)."""

    def __init__(self, base: Snapshot) -> None:
        self.base = base
        self._bands: list[int] | None = None
        self._node_index: dict[str, int] | None = None
        self._tables: dict[tuple, dict] = {}

    # ------------------------------------------------------------------------- views
    def delta(self, view: Snapshot) -> ViewDelta | None:
        """Where ``view`` differs from the base, or None when it cannot share the caches."""
        base = self.base
        if view is base:
            return ViewDelta(nodes=frozenset(), pods=frozenset())
        nodes: set[str] = set()
        pods: set[str] = set()
        if not _recorded(view, base, nodes, pods):
            return None
        return ViewDelta(nodes=frozenset(nodes), pods=frozenset(pods))

    def share(self, view: Snapshot, priority: int, *, search_budget: int,
              cost_settings: tuple) -> Share | None:
        """The caches as a plan of a preemptor of ``priority`` on ``view`` uses them, None when
        ``view`` cannot share them. ``cost_settings``: every planner setting a unit's cost or
        a node's evictable pods depend on."""
        delta = self.delta(view)
        if delta is None:
            return None
        key = (self.band(priority), *cost_settings)
        return Share(cache=self, key=key, unshared=delta.unclean(),
                     covers=self.table("cover", search_budget, *key))

    def band(self, priority: int) -> int:
        """The preemptor's priority band: how many distinct pod priorities lie below it."""
        if self._bands is None:
            self._bands = sorted({p.priority for p in self.base.pods})
        return bisect.bisect_left(self._bands, priority)

    @property
    def node_index(self) -> dict[str, int]:
        """Each node's position in the base snapshot's node order (a view's is the same)."""
        if self._node_index is None:
            self._node_index = {n.name: i for i, n in enumerate(self.base.nodes)}
        return self._node_index

    def ring(self, *key) -> Ring:
        """The judgments of one request shape under ``key``, by node position (created empty)."""
        got = self._tables.get(key)
        if got is None:
            got = self._tables[key] = Ring(len(self.base.nodes))
        return got

    def table(self, *key) -> dict:
        """The node -> value store for one kind of entry under ``key`` (created empty)."""
        got = self._tables.get(key)
        if got is None:
            got = self._tables[key] = {}
        return got


@dataclass(frozen=True, kw_only=True)
class Share:
    """The cycle's caches as one plan uses them: the stores for its priority band and cost
    settings, and the nodes where its view differs from the base (``unshared``)."""

    cache: PlanCache
    key: tuple  # (priority band, *cost settings)
    unshared: frozenset[str]
    covers: dict  # (node, gap, PDB state) -> the exact cover there, and the units there

    def evictable(self) -> dict:
        return self.cache.table("evictable", *self.key)

    def judged(self, requests, nvlink) -> Ring:
        return self.cache.ring("judged", requests, nvlink, *self.key)


def _recorded(view: Snapshot, base: Snapshot, nodes: set[str], pods: set[str]) -> bool:
    """Where ``view`` differs from ``base`` by the record ``Snapshot.restricted`` keeps, at the
    cost of what it changed; False when ``view`` was not restricted from ``base``."""
    closed: set[str] = set()
    held: set[str] = set()
    cur = view
    while cur is not base:
        if cur.restriction is None:
            return False
        cur, shut, swapped = cur.restriction
        closed |= shut
        held |= swapped
    nodes |= closed
    by_uid, gangs = base.pod_by_uid, base.pods_by_gang
    for uid in held:
        pod = by_uid[uid]
        if pod.node is not None:
            pods.add(pod.node)
        if pod.gang is not None:  # a held member protects its whole gang, on every node
            pods.update(p.node for p in gangs[pod.gang] if p.node is not None)
    return True


class Ring:
    """What one request shape yields on each node of the base, by node position, and links
    that skip the nodes known to yield no candidate, so a walk over the nodes in order
    (``policies.candidates``) need not visit them one by one."""

    def __init__(self, nodes: int) -> None:
        self.judged: list = [None] * nodes
        self._next = list(range(nodes + 1))  # _next[i] == i: position i is not skipped

    def store(self, i: int, got, candidate: bool) -> None:
        self.judged[i] = got
        if not candidate:
            self._next[i] = i + 1

    def next_open(self, i: int) -> int:
        """The first position from ``i`` on not known to yield no candidate (the number of
        nodes when there is none)."""
        nxt = self._next
        root = i
        while nxt[root] != root:
            root = nxt[root]
        while nxt[i] != root:  # shorten the path for the next walk
            nxt[i], i = root, nxt[i]
        return root

    def walk(self, start: int, want: int, fresh: Sequence[int],
             visit: Callable[[int, object], object]) -> list:
        """What a walk over every position from ``start``, wrapping around, finds until
        ``want`` candidates are found (``candidates.find_candidates``), visiting only the
        positions that may yield one: ``visit(position, stored)`` gets what is stored for a
        position not in ``fresh`` (None when nothing is), and None for one in ``fresh`` (whose
        node the plan sees otherwise than the base), and returns the candidate or None."""
        n = len(self.judged)
        others = sorted(fresh)
        judged, fresh_set, count = self.judged, set(others), len(others)
        found: list = []
        for lo, hi in ((start, n), (0, start)):
            i, e = lo, bisect.bisect_left(others, lo)
            while True:
                k = self.next_open(i)
                if e < count and others[e] <= k:
                    k = others[e]
                    e += 1
                if k >= hi:
                    break
                got = visit(k, None if k in fresh_set else judged[k])
                if got is not None:
                    found.append(got)
                    if len(found) >= want:
                        return found
                i = k + 1
        return found
