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
- the exact within-node covers (``cover.min_cover``), which the members of a gang and the
  tries of a gang plan ask for again and again.

Correctness under restrictions: everything is computed on the cycle's base snapshot and used
for a view only on nodes the view has exactly as the base has them. A view is one that
``Snapshot.restricted`` made from the base (or from a view of it), which records what it
closed and held (``Snapshot.restriction``); a closed node, the node of a held pod, and every
node of a gang with a held member (one held member protects the whole gang) are "unshared":
computed afresh for that plan and never stored, as are the nodes the plan itself changed
(earlier members' placements and victims). Any other snapshot (another time, other PDBs,
fairness counts or pods) is planned without the caches.

Across cycles (``PlanCache.carried``): the next cycle's snapshot differs from this one in the
nodes the caller says changed (``changed``: nodes whose Node or pods differ, and every node of a
gang one of whose members differs; ``changed_nodes`` computes it by comparing two snapshots, the
controller's incremental model records it as it patches) and in time. The next cycle's cache
keeps the evictable pods and the judgments of every other node, and drops the exact covers.
Kept entries were computed at an earlier ``now``; they stay sound because every unit's cost
only grows with time while its pods do not change (work since a checkpoint grows, a drain's
checkpoint time and a restart are constant), so an old bound is still a lower bound and the
planner still evaluates every node that could win (its stop rule is "bound above the best").
What would break that, and so drops entries:

- a pod's min-runtime ending (it becomes a victim): the node's entries are kept only until the
  earliest such end among its pods and their gangs' (``Evictable.stale_after``);
- a pod's end-aware charge (``units.EndWait``: the preemptor's wait for its declared end), which
  falls as its end nears: under such a key, the node's entries are kept only until the first of
  its pods' ends comes within the wait (``Evictable.stale_after``);
- a workload preempted less often than before (its fairness penalty falls), or more often
  within the bound's window (report parity, keyed by its floor, may hold its reporter now,
  ``policies.planner.parity``): the nodes of its pods;
- other PDBs in a namespace: the nodes of every gang with a member there (a PDB decides
  whether a gang may go);
- nodes that came or went: nothing but their own entries (the judgments move to the new
  positions);
- time going back, another unknown-checkpoint basis or other pod priorities (the bands):
  everything.

Pure and single-threaded: one cache per cycle; the next cycle's is carried from it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from ckpt_preempt.policies.model.model import RejectReason, UnknownCheckpoint
from ckpt_preempt.policies.model.snapshot import Snapshot

CARRIED_RINGS = 64  # request shapes whose judgments a cycle hands on (the most recently used)


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
        self._rings: dict[tuple, Ring] = {}
        self._cycle = 0  # how many cycles this cache's entries were carried through
        self._used: dict[tuple, int] = {}  # ring key -> the last cycle that used it
        self._basis = _Basis.of(base)
        self.carried_nodes = 0  # nodes whose entries came from the previous cycle (reported)

    @classmethod
    def carried(cls, previous: PlanCache | None, base: Snapshot,
                changed: Collection[str] | None) -> PlanCache:
        """The cache for a new cycle on ``base``, keeping what ``previous`` knows of every node
        not in ``changed`` (None: unknown, keep nothing) that is still sound (module
        docstring)."""
        fresh = cls(base)
        if previous is None or changed is None:
            return fresh
        old, new = previous._basis, fresh._basis
        if (new.now < old.now or new.unknown != old.unknown
                or new.unknown_base != old.unknown_base or fresh.bands() != previous.bands()):
            return fresh
        drop = set(changed) | _recounted(old, new, base) | _pdbs_changed(old, new, base)
        for key, table in previous._tables.items():
            if key[0] == "evictable":
                drop.update(n for n, ev in table.items() if ev.stale_after <= new.now)
        fresh._cycle = previous._cycle + 1
        for key, table in previous._tables.items():
            if key[0] == "evictable":
                kept = {n: ev for n, ev in table.items() if n not in drop}
                fresh._tables[key] = kept
                fresh.carried_nodes = max(fresh.carried_nodes, len(kept))
        was = previous.node_index
        if new.names == old.names:
            fresh._node_index = was
            moved = [was[n] for n in drop if n in was]
        else:  # nodes came or went: each new position takes its node's old one, if any
            moved = [was.get(n, -1) if n not in drop else -1 for n in new.names]
        recent = sorted(previous._rings, key=lambda k: previous._used.get(k, -1))
        for key in recent[-CARRIED_RINGS:]:
            ring = previous._rings[key]
            fresh._rings[key] = (ring.without(moved) if new.names == old.names
                                 else ring.remapped(moved))
            fresh._used[key] = previous._used.get(key, -1)
        return fresh

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

    def bands(self) -> list[int]:
        """The distinct pod priorities, ascending: the bands' edges."""
        if self._bands is None:
            self._bands = sorted({p.priority for p in self.base.pods})
        return self._bands

    def band(self, priority: int) -> int:
        """The preemptor's priority band: how many distinct pod priorities lie below it."""
        return bisect.bisect_left(self.bands(), priority)

    @property
    def node_index(self) -> dict[str, int]:
        """Each node's position in the base snapshot's node order (a view's is the same)."""
        if self._node_index is None:
            self._node_index = {n.name: i for i, n in enumerate(self.base.nodes)}
        return self._node_index

    def ring(self, *key) -> Ring:
        """The judgments of one request shape under ``key``, by node position (created empty)."""
        got = self._rings.get(key)
        if got is None:
            got = self._rings[key] = Ring(len(self.base.nodes))
        self._used[key] = self._cycle
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


@dataclass(frozen=True, kw_only=True)
class _Basis:
    """What every entry of a cache was computed under, besides the nodes and their pods."""

    now: float
    names: tuple[str, ...]  # the nodes, in order (the rings' positions)
    pdbs: tuple
    recent: Mapping[str, int]
    unknown: UnknownCheckpoint
    unknown_base: float | None  # for cluster-median: when the median pod last saved
    history: Mapping[str, int] = field(default_factory=dict)  # Snapshot.preemption_history

    @classmethod
    def of(cls, s: Snapshot) -> _Basis:
        base = None
        if s.unknown_checkpoint.kind == "cluster-median" and s.unknown_checkpoint_age is not None:
            base = s.now - s.unknown_checkpoint_age
        return cls(now=s.now, names=tuple(n.name for n in s.nodes), pdbs=s.pdbs,
                   recent=dict(s.recent_preemptions), unknown=s.unknown_checkpoint,
                   unknown_base=base, history=dict(s.preemption_history))


def _recounted(old: _Basis, new: _Basis, base: Snapshot) -> set[str]:
    """The nodes of the pods whose workload was preempted less often in ``new`` than in
    ``old``, recently or within the bound's window (their fairness penalty fell), or more
    often within the window (report parity's hold depends on that count)."""
    moved = {w for w, n in old.recent.items() if new.recent.get(w, 0) < n}
    moved |= {w for w in old.history.keys() | new.history.keys()
              if new.history.get(w, 0) != old.history.get(w, 0)}
    if not moved:
        return set()
    return {p.node for p in base.pods if p.node is not None and p.workload in moved}


def _pdbs_changed(old: _Basis, new: _Basis, base: Snapshot) -> set[str]:
    """The nodes whose pods' eligibility other PDBs may change: a PDB decides only whether a
    gang may go (``units.UnitBuilder.why_not``), and covers pods of its own namespace, so the
    nodes of every gang with a member in a namespace whose PDBs differ."""
    if new.pdbs == old.pdbs:
        return set()
    by_ns: dict[str, list[list]] = {}
    for k, pdbs in enumerate((old.pdbs, new.pdbs)):
        for b in pdbs:
            by_ns.setdefault(b.namespace, [[], []])[k].append(b)
    spaces = {ns for ns, (a, b) in by_ns.items() if a != b}
    gangs = {p.gang for p in base.pods if p.gang is not None and p.namespace in spaces}
    members = base.pods_by_gang
    return {p.node for g in gangs for p in members.get(g, ()) if p.node is not None}


def changed_nodes(old: Snapshot, new: Snapshot) -> frozenset[str]:
    """The nodes ``new`` has otherwise than ``old`` (their Node, or the pods on them; nodes
    that came or went), and every node of a gang whose members differ."""
    was = old.node_by_name
    out = {n.name for n in new.nodes if was.get(n.name) != n}
    out.update(set(was) - set(new.node_by_name))
    was, now = old.pods_on_node, new.pods_on_node
    out.update(name for name in set(was) | set(now) if was.get(name, ()) != now.get(name, ()))
    gangs_was, gangs_now = old.pods_by_gang, new.pods_by_gang
    for gang in set(gangs_was) | set(gangs_now):
        a, b = gangs_was.get(gang, []), gangs_now.get(gang, [])
        if a != b:
            out.update(p.node for p in (*a, *b) if p.node is not None)
    return frozenset(out)


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
    (``policies.planner.candidates``) need not visit them one by one."""

    def __init__(self, nodes: int) -> None:
        self.judged: list = [None] * nodes
        # _next[i] == i: position i is not skipped; None: to be rebuilt from ``judged``
        self._next: list[int] | None = list(range(nodes + 1))

    def without(self, positions: Sequence[int]) -> Ring:
        """A copy that forgets what it knew of ``positions`` (its links rebuilt when used)."""
        out = Ring.__new__(Ring)
        out.judged = list(self.judged)
        for i in positions:
            out.judged[i] = None
        out._next = None
        return out

    def remapped(self, old_positions: Sequence[int]) -> Ring:
        """A copy for another node list: position ``i`` takes what this ring knew of
        position ``old_positions[i]`` (-1: nothing)."""
        out = Ring.__new__(Ring)
        judged = self.judged
        out.judged = [None if k < 0 else judged[k] for k in old_positions]
        out._next = None
        return out

    def _links(self) -> list[int]:
        nxt = self._next
        if nxt is None:
            nxt = self._next = [
                i + 1 if got is not None and isinstance(got[0], RejectReason) else i
                for i, got in enumerate(self.judged)]
            nxt.append(len(self.judged))
        return nxt

    def store(self, i: int, got, candidate: bool) -> None:
        self.judged[i] = got
        if not candidate:
            self._links()[i] = i + 1

    def next_open(self, i: int) -> int:
        """The first position from ``i`` on not known to yield no candidate (the number of
        nodes when there is none)."""
        nxt = self._links()
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
