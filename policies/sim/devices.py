"""Free capacity per node for the engine's own placement, shared GPUs, and the GPU models a
pod may use.

Placement is best fit: the node with the fewest free GPUs that still fits the pod (the lowest
index among equals), found through buckets of nodes by free whole-GPU count. A member whose
``gpu_spec`` names GPU models ("|"-separated, as openb writes them) only goes to nodes whose
model is one of them; the planner's snapshot closes the other nodes to that preemptor
(``exclusions``).

Fractional GPUs (openb's ``gpu_milli`` below 1000 on a 1-GPU pod) are shared. Each node's GPUs
are split once, at the start, into whole devices and at most one shared device
(``shared_split``: as many shared devices as the workload's fractional share of GPU demand
asks for, on the smallest nodes first, keeping one node whole for the largest whole-GPU pod;
fewer when there are fewer nodes), as MIG or a sharing device plugin configures a node. (On
the largest nodes first, every 8-GPU node of a small openb stress run lost a GPU to sharing
and no 8-GPU pod could run.) A fractional pod takes its share of one shared
device: the one, on an allowed node, with the least room that still holds it (the tightest fit,
so shares pack onto few devices); a whole-GPU pod takes whole devices only.

What the planner is shown (``exclusions`` builds the nodes, ``requests`` the pods) is the same
split, in the model's MIG terms (``policies.model.model.Resources``): a fractional pod asks for
``gpu_milli`` (thousandths of a GPU), each node's allocatable is ``gpus`` = its whole devices and
``gpu_milli`` = 1000 × its shared devices. So fit, victims and the loss charge (``Pod.gpu_share``,
at the fraction) agree with the engine's. They would not with two shared devices on a node: the
planner sums a node's free shares, while the engine needs a share's room on one device (two
devices with 300 free each hold no 500 share); with two per node, 6 of 7 plans of
checkpoint-aware-drain were of that kind on a small openb stress run (scale 0.05, 2 h, seed
2). ``Capacity`` still takes any split; a plan that relies on the sum is carried out anyway
(the share goes on the least-used device, over-committing it) and counted in
``plans_invalid``.

Asks that cannot fit are not worked out again while nothing they depend on changed
(``Capacity.place``, ``_Failure``): the engine asks for every pending job at every event, and
most asks fail as they did at the previous one. The answer is the same as working it out: a
failed ask is retried in full once any capacity was taken or given since, except where its first
member (the largest, placed first on the state as it is) fitted nowhere, or where its members
are equal whole-GPU pods and the nodes had fewer slots for one than there are members (best fit
fills slots one by one, so that is exactly when it fails). Either stays so until capacity is
given back, and then only the nodes given to need checking, since every other node has only lost
room since.

Against a cluster that shares GPUs dynamically (a device serves whole or shared pods as they
come, as the trace's own cluster did), the static split wastes capacity: an idle shared device
cannot take a whole-GPU pod, nor an idle whole one a share. It is the price of a planner's view
that matches the engine: the planner's model cannot say that evicting every share on a device
frees a whole GPU.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ckpt_preempt.policies.model.model import MILLI_PER_GPU, Node, RejectReason, Resources
from ckpt_preempt.policies.sim.workload import Job, Member

SPEC_SEPARATOR = "|"


def requests(m: Member) -> Resources:
    """What the pod asks for: its share of one GPU in ``gpu_milli``, else whole GPUs."""
    if m.gpu_milli:
        return Resources(cpu_milli=m.cpu_milli, memory_mib=m.memory_mib, gpu_milli=m.gpu_milli)
    return Resources(cpu_milli=m.cpu_milli, memory_mib=m.memory_mib, gpus=m.gpus)


def whole_gpus(m: Member) -> int:
    """Whole GPUs the member needs free on one node (0 for a share of one)."""
    return requests(m).gpus


def fractional_demand_share(jobs: Iterable[Job]) -> float:
    """Of the jobs' GPU demand (share × duration), the part from fractional pods."""
    frac = total = 0.0
    for j in jobs:
        for m in j.members:
            d = m.gpu_share * j.duration
            total += d
            frac += d if m.gpu_milli else 0.0
    return frac / total if total > 0 else 0.0


def shared_split(gpus: Sequence[int], share: float, whole: int = 0) -> list[int]:
    """Shared devices per node: ``share`` of all GPUs (at least one when ``share`` > 0, none
    when it is 0), at most one per node, on the nodes with the fewest GPUs first (then the
    lowest index), keeping whole the largest node that can hold a ``whole``-GPU pod (the
    largest whole-GPU request), so that pod still has a node (unless it is the only node).
    One shared device per node is what keeps the planner's per-node sum of free shares that
    device's room; fewer nodes than the share asks for give fewer shared devices."""
    total_gpus = sum(gpus)
    if share <= 0 or total_gpus == 0:
        return [0] * len(gpus)
    target = max(1, round(share * total_gpus))
    order = sorted((i for i, g in enumerate(gpus) if g > 0), key=lambda i: (gpus[i], i))
    big = [i for i in order if gpus[i] >= whole] if whole > 0 else []
    if big and len(order) > 1:  # a lone node shares a GPU whatever it must hold
        order.remove(big[-1])
    out = [0] * len(gpus)
    for i in order[:target]:
        out[i] = 1
    return out


def largest_whole_request(jobs: Iterable[Job]) -> int:
    """The most whole GPUs any one pod of the jobs asks for."""
    return max((whole_gpus(m) for j in jobs for m in j.members), default=0)


class Capacity:
    """Free capacity per node: ``free[i].gpus`` counts its free whole devices,
    ``free[i].gpu_milli`` the room left on its shared devices (``shared[i]``: thousandths in
    use on each)."""

    def __init__(self, nodes: Sequence[Node], models: Sequence[str],
                 shared: Sequence[int] | None = None) -> None:
        split = list(shared) if shared is not None else [0] * len(nodes)
        self.nodes = tuple(
            n if not s else replace(n, allocatable=replace(
                n.allocatable, gpus=n.allocatable.gpus - s,
                gpu_milli=n.allocatable.gpu_milli + s * MILLI_PER_GPU))
            for n, s in zip(nodes, split, strict=True))
        self.models = tuple(models)
        self.free = [n.allocatable for n in self.nodes]
        self.maxg = max(n.allocatable.gpus for n in self.nodes)
        self.buckets: list[set[int]] = [set() for _ in range(self.maxg + 1)]
        for i, n in enumerate(self.nodes):
            self.buckets[n.allocatable.gpus].add(i)
        self.shared: list[list[int]] = [[0] * s for s in split]
        self.sharing = [i for i, s in enumerate(split) if s]  # nodes with shared devices
        # every shared device as (room left, node, device), kept sorted: the tightest device
        # that holds a share is the first entry from that share's room up
        self.rooms = sorted((MILLI_PER_GPU, i, d) for i in self.sharing
                            for d in range(len(self.shared[i])))
        self.device_of: dict[str, tuple[int, int]] = {}  # pod key -> (node, shared device)
        self._allowed: dict[str, frozenset[int] | None] = {}
        self._closed: dict[frozenset[int], tuple[Node, ...]] = {}
        # for the failure memo: ``version`` counts committed takes and gives; ``given`` lists
        # the node of each committed give, in order
        self.version = 0
        self.given: list[int] = []
        self._failed: dict[int, tuple[Sequence[Member], _Failure]] = {}

    # -- free capacity -------------------------------------------------------------------
    def take(self, i: int, r: Resources, key: str = "") -> None:
        """Take ``r`` on node ``i``; a share goes on the tightest of its shared devices that
        holds it (the least-used one when none does: an over-committed plan)."""
        self.version += 1
        self._take(i, r, key)

    def give(self, i: int, r: Resources, key: str = "") -> None:
        self.version += 1
        self.given.append(i)
        self._give(i, r, key)

    def set_free(self, i: int, free: Resources) -> None:
        """Set node ``i``'s free room outright (a cordon holds it back, its end returns it)."""
        self.version += 1
        self.given.append(i)  # it may have grown: asks that failed check this node again
        self._move(i, free)

    def _take(self, i: int, r: Resources, key: str) -> None:
        if r.gpu_milli and self.shared[i]:
            devices = self.shared[i]
            room = [(MILLI_PER_GPU - used, d) for d, used in enumerate(devices)
                    if MILLI_PER_GPU - used >= r.gpu_milli]
            dev = min(room)[1] if room else min(range(len(devices)), key=devices.__getitem__)
            self._use_device(i, dev, r.gpu_milli)
            self.device_of[key] = (i, dev)
        self._move(i, self.free[i] - r)

    def _give(self, i: int, r: Resources, key: str) -> None:
        if r.gpu_milli and key in self.device_of:
            node, dev = self.device_of.pop(key)
            self._use_device(node, dev, -r.gpu_milli)
        self._move(i, self.free[i] + r)

    def _use_device(self, i: int, dev: int, milli: int) -> None:
        """Add ``milli`` (negative: give it back) to shared device ``dev`` of node ``i``."""
        used = self.shared[i][dev]
        del self.rooms[bisect.bisect_left(self.rooms, (MILLI_PER_GPU - used, i, dev))]
        self.shared[i][dev] = used + milli
        bisect.insort(self.rooms, (MILLI_PER_GPU - used - milli, i, dev))

    def _move(self, i: int, free: Resources) -> None:
        self.buckets[self.free[i].gpus].discard(i)
        self.free[i] = free
        self.buckets[free.gpus].add(i)

    def _device_room(self, i: int, milli: int) -> int | None:
        """The least room, among node ``i``'s shared devices, that still holds ``milli``."""
        rooms = [MILLI_PER_GPU - used for used in self.shared[i]
                 if MILLI_PER_GPU - used >= milli]
        return min(rooms) if rooms else None

    def fits(self, i: int, r: Resources) -> bool:
        if not r.fits_in(self.free[i]):
            return False
        return not r.gpu_milli or self._device_room(i, r.gpu_milli) is not None

    def room_for(self, gpus: int) -> bool:
        """Some node has at least ``gpus`` free whole GPUs."""
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
        """The nodes as the planner sees them for a preemptor with these members (whole and
        shared devices split as the engine splits them): nodes of another GPU model are closed
        to it, as a node selector would close them."""
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
        if r.gpu_milli:
            return self._best_share(r, allowed)
        for g in range(r.gpus, self.maxg + 1):
            fits = [i for i in self.buckets[g]
                    if (allowed is None or i in allowed) and r.fits_in(self.free[i])]
            if fits:
                return min(fits)
        return None

    def _best_share(self, r: Resources, allowed: frozenset[int] | None) -> int | None:
        """The node of the tightest shared device that holds the share (the lowest node among
        equally tight ones)."""
        for _, i, _ in itertools.islice(self.rooms, bisect.bisect_left(
                self.rooms, (r.gpu_milli, -1, -1)), None):
            if (allowed is None or i in allowed) and r.fits_in(self.free[i]):
                return i
        return None

    def place(self, members: Sequence[Member], keys: Sequence[str] | None = None
              ) -> list[int] | None:
        """Take room for every member (largest first) and return each one's node, in member
        order; None, taking nothing, when some member does not fit. ``keys`` name the pods
        (for the shared device each share goes on)."""
        # keyed by the members' identity (a job's own tuple), held so the id stays theirs
        known = self._failed.get(id(members))
        if known is not None and known[0] is members and self._still_fails(known[1]):
            return None
        names = list(keys) if keys is not None else [m.name for m in members]
        order = sorted(range(len(members)), key=lambda k: -members[k].gpu_share)
        out = [0] * len(members)
        taken: list[tuple[int, Resources, str]] = []
        for k in order:
            r = requests(members[k])
            allowed = self.allowed(members[k].gpu_spec)
            i = self.best_fit(r, allowed)
            if i is None:
                for j, rr, key in taken:  # undone exactly: no change to remember
                    self._give(j, rr, key)
                self._failed[id(members)] = (members, self._failure(members, r, allowed, taken))
                return None
            self._take(i, r, names[k])
            taken.append((i, r, names[k]))
            out[k] = i
        self.version += 1
        self._failed.pop(id(members), None)
        return out

    def _failure(self, members: Sequence[Member], r: Resources,
                 allowed: frozenset[int] | None, taken: list) -> _Failure:
        """What to remember of an ask that just failed (``r``, ``allowed``: the member that
        found no node; ``taken``: the members placed before it)."""
        failure = _Failure(self.version, len(self.given))
        spec = members[0].gpu_spec
        if not r.gpu_milli and all(requests(m) == r and m.gpu_spec == spec for m in members):
            # n equal whole-GPU members: best fit puts each where it fits, taking one of that
            # node's slots, so the ask fits exactly when the nodes have n slots in all (counted
            # when first asked again: most failed asks never are)
            failure.need = len(members)
            failure.request, failure.allowed = r, allowed
        elif not taken:  # the first member fitted nowhere
            failure.request, failure.allowed = r, allowed
        return failure

    def _allowed_nodes(self, allowed: frozenset[int] | None) -> Iterable[int]:
        return range(len(self.nodes)) if allowed is None else allowed

    def _still_fails(self, failure: _Failure) -> bool:
        """Whether an ask that failed as ``failure`` records fails now too, without working
        it out; False when it must be worked out again. Updates the record when it holds."""
        if failure.version == self.version:
            return True
        r, allowed = failure.request, failure.allowed
        if r is None:  # a later member failed: anything may have changed that
            return False
        if failure.need and failure.slots is None:  # first asked again: count them all now
            failure.slots = {i: n for i in self._allowed_nodes(allowed)
                             if (n := _slots(r, self.free[i]))}
            failure.total = sum(failure.slots.values())
            if failure.total >= failure.need:
                return False
        elif failure.need:
            # every node not given to since has only lost slots: the count is at most this
            total = failure.total
            for i in {i for i in self.given[failure.given:] if allowed is None or i in allowed}:
                now = _slots(r, self.free[i])
                total += now - failure.slots.get(i, 0)
                failure.slots[i] = now
            failure.total = total
            if total >= failure.need:
                return False
        elif any(self._fits_as_placed(i, r) for i in set(self.given[failure.given:])
                 if allowed is None or i in allowed):
            return False
        failure.version, failure.given = self.version, len(self.given)
        return True

    def _fits_as_placed(self, i: int, r: Resources) -> bool:
        """Whether ``best_fit`` could choose node ``i`` for ``r``: a share only on a node with
        shared devices, one of which holds it; whole GPUs where the free room holds them."""
        if r.gpu_milli:
            return bool(self.shared[i]) and self.fits(i, r)
        return r.fits_in(self.free[i])


def _slots(r: Resources, free: Resources) -> int:
    """How many pods asking ``r`` (whole GPUs, no share) fit in ``free`` together."""
    counts = [have // want for want, have in ((r.gpus, free.gpus), (r.cpu_milli, free.cpu_milli),
                                              (r.memory_mib, free.memory_mib)) if want > 0]
    return max(0, min(counts)) if counts else _UNBOUNDED


_UNBOUNDED = 1 << 30  # a pod asking for nothing fits any number of times


@dataclass(slots=True)
class _Failure:
    """An ask that did not fit, as last known to fail: ``Capacity.version`` and the length of
    ``Capacity.given`` then. ``request``/``allowed``: the member that fitted nowhere (None when
    a later member failed: only an unchanged version says it fails again); ``need``: for an ask
    of equal whole-GPU members, how many, ``slots`` each allowed node's slots for one member when
    last counted (at least what it has now, unless given to since; None until first counted)
    and ``total`` their sum."""

    version: int
    given: int
    request: Resources | None = None
    allowed: frozenset[int] | None = None
    slots: dict[int, int] | None = None
    total: int = 0
    need: int = 0
