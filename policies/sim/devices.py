"""Free capacity per node for the engine's own placement, shared GPUs, and the GPU models a
pod may use.

Placement is best fit: the node with the fewest free GPUs that still fits the pod (the lowest
index among equals), found through buckets of nodes by free whole-GPU count. A member whose
``gpu_spec`` names GPU models ("|"-separated, as openb writes them) only goes to nodes whose
model is one of them; the planner's snapshot closes the other nodes to that preemptor
(``exclusions``).

Fractional GPUs (openb's ``gpu_milli`` below 1000 on a 1-GPU pod) are shared: such a pod takes
its share of one device. It goes to the shared device, on an allowed node, with the least room
that still holds it (the tightest fit, so shares pack as the trace's GPU-sharing cluster packs
them); only when none does it open a whole free GPU (best-fit node) as a new shared device. A
shared device becomes a whole free GPU again when its last share leaves.

What the planner is shown (``exclusions`` builds the nodes, ``requests`` the pods): a fractional
pod asks for ``gpu_milli`` (the model's thousandths of a GPU); each node's allocatable is its
devices split as they are now: ``gpus`` = devices not shared, ``gpu_milli`` = 1000 × shared
devices. So fit and the loss charge (``Pod.gpu_share``, at the fraction) agree with the engine's,
with two differences, both documented here: (1) the planner sums a node's free shares, while the
engine needs them on one device (two devices with 300 free each hold no 500 share); a plan that
relies on that sum is carried out anyway and counted in ``plans_invalid``; (2) the split is the
one at planning time: the planner cannot free a shared device for a whole-GPU preemptor by
evicting all its shares, nor give a fractional preemptor a whole GPU by evicting a whole-GPU pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from ckpt_preempt.policies.model import MILLI_PER_GPU, Node, RejectReason, Resources
from ckpt_preempt.policies.sim.workload import Member

SPEC_SEPARATOR = "|"


def requests(m: Member) -> Resources:
    """What the pod asks for: its share of one GPU in ``gpu_milli``, else whole GPUs."""
    if m.gpu_milli:
        return Resources(cpu_milli=m.cpu_milli, memory_mib=m.memory_mib, gpu_milli=m.gpu_milli)
    return Resources(cpu_milli=m.cpu_milli, memory_mib=m.memory_mib, gpus=m.gpus)


def whole_gpus(m: Member) -> int:
    """Whole GPUs the member needs free on one node (0 for a share of one)."""
    return requests(m).gpus


class Capacity:
    """Free capacity per node: ``free[i].gpus`` counts whole free devices, ``free[i].gpu_milli``
    the room left on its shared devices (``shared[i]``: device -> thousandths in use)."""

    def __init__(self, nodes: Sequence[Node], models: Sequence[str]) -> None:
        self.nodes = tuple(nodes)
        self.models = tuple(models)
        self.free = [n.allocatable for n in self.nodes]
        self.maxg = max(n.allocatable.gpus for n in self.nodes)
        self.buckets: list[set[int]] = [set() for _ in range(self.maxg + 1)]
        for i, n in enumerate(self.nodes):
            self.buckets[n.allocatable.gpus].add(i)
        self.shared: list[dict[int, int]] = [{} for _ in self.nodes]
        self.device_of: dict[str, tuple[int, int]] = {}  # pod key -> (node, shared device)
        self._next_device = 0
        self._allowed: dict[str, frozenset[int] | None] = {}
        self._closed: dict[frozenset[int], tuple[Node, ...]] = {}
        self._shown: dict[tuple[int, int, bool], Node] = {}

    # -- free capacity -------------------------------------------------------------------
    def take(self, i: int, r: Resources, key: str = "") -> None:
        """Take ``r`` on node ``i``; a share goes on the tightest shared device that holds it,
        else a new one (the least-used device when neither is there: an over-committed plan)."""
        if r.gpu_milli:
            devices = self.shared[i]
            room = [(MILLI_PER_GPU - used, d) for d, used in devices.items()
                    if MILLI_PER_GPU - used >= r.gpu_milli]
            opened = 0
            if room:
                dev = min(room)[1]
            elif self.free[i].gpus > 0 or not devices:
                dev, opened = self._next_device, 1
                self._next_device += 1
                devices[dev] = 0
            else:
                dev = min(devices, key=lambda d: (devices[d], d))
            devices[dev] += r.gpu_milli
            self.device_of[key] = (i, dev)
            r = replace(r, gpus=opened, gpu_milli=r.gpu_milli - opened * MILLI_PER_GPU)
        self._move(i, self.free[i] - r)

    def give(self, i: int, r: Resources, key: str = "") -> None:
        if r.gpu_milli:
            node, dev = self.device_of.pop(key, (i, None))
            devices = self.shared[node]
            closed = 0
            if dev in devices:
                devices[dev] -= r.gpu_milli
                if devices[dev] <= 0:
                    del devices[dev]
                    closed = 1
            r = replace(r, gpus=closed, gpu_milli=r.gpu_milli - closed * MILLI_PER_GPU)
        self._move(i, self.free[i] + r)

    def _move(self, i: int, free: Resources) -> None:
        self.buckets[self.free[i].gpus].discard(i)
        self.free[i] = free
        self.buckets[free.gpus].add(i)

    def fits(self, i: int, r: Resources) -> bool:
        if not r.gpu_milli:
            return r.fits_in(self.free[i])
        rest = replace(r, gpu_milli=0)
        return rest.fits_in(self.free[i]) and (self.free[i].gpus > 0 or any(
            MILLI_PER_GPU - used >= r.gpu_milli for used in self.shared[i].values()))

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
        another GPU model are closed to it, as a node selector would close them, and each
        node's GPUs split into whole and shared devices as they are now."""
        allowed = self.allowed_for(members)
        if allowed is None and not any(self.shared):
            return self.nodes
        return tuple(self._shown_node(i, allowed is None or i in allowed)
                     for i in range(len(self.nodes)))

    def _shown_node(self, i: int, open_: bool) -> Node:
        shared = len(self.shared[i])
        key = (i, shared, open_)
        if key not in self._shown:
            n = self.nodes[i]
            if shared:
                n = replace(n, allocatable=replace(
                    n.allocatable, gpus=n.allocatable.gpus - shared,
                    gpu_milli=n.allocatable.gpu_milli + shared * MILLI_PER_GPU))
            if not open_:
                n = replace(n, excluded=RejectReason.NODE_SELECTOR)
            self._shown[key] = n
        return self._shown[key]

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
        """The node of the tightest shared device that holds the share, else the best-fit
        node with a whole free GPU to open."""
        rest = replace(r, gpu_milli=0)
        best: tuple[int, int] | None = None
        for i, devices in enumerate(self.shared):
            if not devices or (allowed is not None and i not in allowed) or not rest.fits_in(
                    self.free[i]):
                continue
            for used in devices.values():
                room = MILLI_PER_GPU - used
                if room >= r.gpu_milli and (best is None or (room, i) < best):
                    best = (room, i)
        if best is not None:
            return best[1]
        return self.best_fit(replace(rest, gpus=1), allowed)

    def place(self, members: Sequence[Member], keys: Sequence[str] | None = None
              ) -> list[int] | None:
        """Take room for every member (largest first) and return each one's node, in member
        order; None, taking nothing, when some member does not fit. ``keys`` name the pods
        (for the shared device each share goes on)."""
        names = list(keys) if keys is not None else [m.name for m in members]
        order = sorted(range(len(members)), key=lambda k: -members[k].gpu_share)
        out = [0] * len(members)
        taken: list[tuple[int, Resources, str]] = []
        for k in order:
            r = requests(members[k])
            i = self.best_fit(r, self.allowed(members[k].gpu_spec))
            if i is None:
                for j, rr, key in taken:
                    self.give(j, rr, key)
                return None
            self.take(i, r, names[k])
            taken.append((i, r, names[k]))
            out[k] = i
        return out
