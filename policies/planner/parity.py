"""Report parity: publishing checkpoints does not make a workload a more frequent victim.

A pod that reports its last checkpoint (``Pod.last_checkpoint``) shows what evicting it loses;
one that declares periodic checkpoints but reports none is charged as the unknown-checkpoint
policy says, by default all its work since it started. A planner that evicts where the least
is lost therefore turns to the reporter first, and again after each of its checkpoints: in the
two-job worlds of ``bench.incentive`` the reporter was hit more often than it would have been
silent in 989 of 1,000 worlds (issue 22's rule says: never more likely).

The rule, per preemptor: among the pods that could be its victims (``cost.ineligibility``:
running, lower priority, past min-runtime, not held), let ``floor`` be the fewest preemptions
within the bound's window (``Snapshot.preemption_history``) of any *silent* workload (a pod
declaring ``checkpoint: periodic`` that reports no checkpoint and no malformed one) on a node
that could host one of the preemptor's pods by preemption (``_could_host``: open, large
enough, its free capacity plus its possible victims' requests covering the request; a silent
pod elsewhere cannot go in the reporter's place, so it holds nobody back). Every
*reporting* pod (``checkpoint: periodic`` with a valid last checkpoint) of a workload
preempted ``floor`` times or more is held (``PodHold.REPORT_PARITY``) for that plan. So a
reporter is chosen only while it has been preempted fewer times than every silent
alternative: of two such jobs the silent one is taken first and the two then alternate. A
silent job that is away (evicted, not yet back) is no alternative, so this is not a guarantee
per world; ``bench.incentive`` measures it (the reporter over its twin in 0 of 1,000 worlds).
Loss still decides among the reporters that are not held, and among the silent ones.

``preemption.plan`` looks for the floor first; when there is one it plans with it, the holds
applied by its victim units (``units.UnitBuilder``'s ``parity_floor``), so the plan shares the
cycle's caches with every other plan at the same floor (``policies.planner.plan_cache``) instead
of seeing thousands of held pods as a changed cluster. When that plan finds nothing (only held
reporters would make room: the node test is a necessary condition, and NVLink domains, PDBs, or
a gang's further members can still rule the silent pods' nodes out) it plans again without the
rule: the reporter would have been the victim had it been silent too. Counting only
silent pods on such nodes, rather than every silent pod, moved the cost little on the harsh
world's rows (README, "The starvation bound").

Out of scope, said plainly: a pod declaring ``checkpoint: none`` (or nothing at all, the same)
is charged all its work since it started and is no silent alternative here. That is the
truthful charge for a job that never checkpoints, and holding reporters behind such jobs would
evict the pods that lose the most first. A job that does checkpoint but declares nothing is
therefore still evicted after the reporters, as before; the rule covers the choice the planner
can see, whether a periodic job publishes its checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from ckpt_preempt.policies.model.model import Pod
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import cost


def floor(snapshot: Snapshot, preemptor: Sequence[Pod]) -> int | None:
    """The fewest preemptions (``Snapshot.preemption_history``) of a silent workload that
    could be a victim of ``preemptor`` (one pod or a gang's pending members) on a node that
    could host one of its pods, or None when no silent pod could go: a reporter preempted
    that often or more is held (``holds``). Runs on every plan, so it walks the silent pods
    of the snapshot's index (``_eligible_silent``), fewest preemptions first, only until one
    could go."""
    if not preemptor:
        return None
    priority = min(p.priority for p in preemptor)
    hosts: dict[str, bool] = {}
    for p in _eligible_silent(snapshot, priority):
        if p.node not in hosts:
            hosts[p.node] = _could_host(snapshot, p.node, preemptor, priority)
        if hosts[p.node]:
            return snapshot.preemption_history.get(p.workload, 0)
    return None


def least_preempted_silent(snapshot: Snapshot, priority: int) -> int | None:
    """The fewest preemptions of a silent workload that a preemptor of ``priority`` could take,
    wherever it runs (None: no such pod): the floor of every preemptor that one of those pods'
    nodes could host, and so of most (``floor`` adds that test). ``preemption.warm`` fills the
    caches under it."""
    first = next(_eligible_silent(snapshot, priority), None)
    return None if first is None else snapshot.preemption_history.get(first.workload, 0)


def _eligible_silent(snapshot: Snapshot, priority: int) -> Iterator[Pod]:
    """The silent pods a preemptor of ``priority`` could take, fewest preemptions first, from
    the snapshot's index of periodic pods (``Snapshot.periodic_positions``, built once per
    cycle and shared by its views), so a plan reads a few pods instead of every pod."""
    silent_at, _ = snapshot.periodic_positions
    pods, now = snapshot.pods, snapshot.now
    return (pods[i] for i in silent_at if cost.ineligibility(pods[i], priority, now) is None)


def holds(pod: Pod, floor_: int, history: Mapping[str, int]) -> bool:
    """Whether the rule holds ``pod`` back from a preemptor whose ``floor`` is ``floor_``: it
    reports periodic checkpoints and its workload was preempted ``floor_`` times or more.
    ``units.UnitBuilder`` applies it (with ``parity_floor``) to the pods it finds eligible
    (``PodHold.REPORT_PARITY``)."""
    return pod.reports_periodic is True and history.get(pod.workload, 0) >= floor_


def _could_host(snapshot: Snapshot, node_name: str, preemptor: Sequence[Pod],
                priority: int) -> bool:
    """Whether evicting every possible victim on the node would fit one of the preemptor's
    pods there: a necessary condition only (NVLink domains, PDBs and the bound's holds are the
    search's to judge), so a silent pod it admits may still be no help, never the reverse."""
    node = snapshot.node_by_name.get(node_name)
    if node is None or node.closed is not None:  # bound to a node the snapshot lacks: none
        return False
    room = snapshot.free(node_name)
    for p in snapshot.pods_on_node.get(node_name, ()):
        if cost.ineligibility(p, priority, snapshot.now) is None:
            room = room + p.requests
    return any(m.requests.fits_in(node.allocatable) and m.requests.fits_in(room)
               for m in preemptor)
