"""Elastic shrink: an elastic gang gives up only the members above its minimum.

A gang whose members declare a minimum below its size (``Pod.gang_minimum``: a native PodGroup's
``minCount``, or ``ckpt-preempt.io/min-members`` for torchrun-elastic style jobs) runs on with
fewer workers when some leave. Evicting k of its bound members, while at least the minimum stay,
loses no checkpointed progress: the job re-forms its rendezvous on the rest, and every GPU that
stays waits for that. So such an eviction costs ``rendezvous_seconds`` × the gang's GPUs (plus
the fairness penalty of the members that leave), and frees only the leaving members' resources.
The charge is on every GPU the gang held, the leaving ones included (they stop at the same
barrier), rather than on the GPUs that remain only: a charge that fell as more members leave
would make the search evict more of them than the node needs; as it is, the fewest victims win
the tie. Evicting below the minimum is the whole gang, exactly as for any gang.

``shrink_units`` builds, for one node, the options "the j members of the gang here that free the
most GPUs leave" (j = 1 .. the members above the minimum), each a ``units.Unit`` with
``shrink=True``. The options of one gang, and its whole-gang unit, exclude each other: a cover
takes at most one of them (``policies.planner.cover.min_cover``), and once a plan took one, no other
node offers the gang again (one shrink per gang per plan: the cost of a second shrink on another
node would depend on the first, which a per-node cover cannot see).

A gang is elastic only when every bound member declares a minimum (the largest one counts), so
a member that says nothing keeps the whole gang as one unit: never cheaper than without shrink.
"""

from __future__ import annotations

from collections.abc import Sequence

from ckpt_preempt.policies.model.model import ZERO, Pod

# Assumption, not a measurement: the GPU-seconds each GPU that stays loses while an elastic job
# re-forms its rendezvous. torch.distributed.elastic's dynamic rendezvous waits a ``last_call``
# of 30 s for late joiners by default (torch/distributed/elastic/rendezvous/
# dynamic_rendezvous.py, RendezvousTimeout); we add 30 s for the workers' restart and reload.
RENDEZVOUS_SECONDS = 60.0


def gang_minimum(members: Sequence[Pod]) -> int | None:
    """The fewest members the gang runs with: the largest minimum its members declare; None
    (not elastic) when any member declares none."""
    if not members or any(p.gang_minimum is None for p in members):
        return None
    return max(p.gang_minimum for p in members)  # type: ignore[type-var]


def spare(members: Sequence[Pod]) -> int:
    """How many of the bound ``members`` may leave while the gang runs on (0: not elastic)."""
    minimum = gang_minimum(members)
    return 0 if minimum is None else max(0, len(members) - minimum)


def leaving_order(pods: Sequence[Pod]) -> list[Pod]:
    """Members in the order they are asked to leave: most GPUs first, then by uid."""
    return sorted(pods, key=lambda p: (-p.gpu_share, p.uid))


def shrink_cost(members: Sequence[Pod], rendezvous_seconds: float) -> float:
    """GPU-seconds lost when some of ``members`` leave and the rest re-form (the same for any
    number leaving: see the module's docstring)."""
    return rendezvous_seconds * sum(p.gpu_share for p in members)


def rate_bound(members: Sequence[Pod], rendezvous_seconds: float) -> float:
    """A lower bound on any shrink's cost per GPU it frees (inf: the gang cannot shrink): the
    most GPUs its spare members can free, for the least rendezvous cost."""
    k = spare(members)
    if k == 0:
        return float("inf")
    most = leaving_order(members)[:k]
    freed = sum(p.gpu_share for p in most)
    if freed <= 0:
        return float("inf")
    return shrink_cost(members, rendezvous_seconds) / freed


def options(members: Sequence[Pod], node: str) -> list[tuple[Pod, ...]]:
    """The sets of members on ``node`` a shrink may evict: the first j in leaving order, for
    j = 1 .. min(members there, spare)."""
    k = spare(members)
    here = leaving_order([p for p in members if p.node == node])
    return [tuple(here[:j]) for j in range(1, min(k, len(here)) + 1)]


def unit_id(gang: str, node: str, leaving: int) -> str:
    return f"{gang}#shrink:{node}:{leaving}"


def release(leaving: Sequence[Pod]):
    """What the leaving members free on their node."""
    out = ZERO
    for p in leaving:
        out = out + p.requests
    return out
