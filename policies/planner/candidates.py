"""One candidate driver for every preemption policy, and the plugin interface it drives.

The split follows kube-scheduler's preemption framework
(kubernetes/kubernetes ``pkg/scheduler/framework/preemption/preemption.go``: the ``Evaluator``
and the ``Interface`` its plugins implement; ``findCandidates`` then ``DryRunPreemption`` then
``SelectCandidate``). The driver owns what every policy shares:

1. filter the potential nodes (``Sampler.potential``, upstream's "nodes where preemption might
   help"), in node order;
2. compute how many candidates to look for (``num_candidates``: ``max(10 % of the potential
   nodes, 100)``, never more than there are; the one definition in this package);
3. draw the offset into the potential nodes (``Sampler.offset``: kube-default draws it from a
   seeded random source as upstream's ``rand.Int31n`` does, the planner hashes the pod);
4. walk the potential nodes from the offset, wrapping around, and ask the plugin for victims on
   each (``Sampler.select_victims``; None: no candidate there);
5. stop once at least one candidate breaks no PodDisruptionBudget and enough were found.

The plugin chooses the victims on one node and orders or picks among the candidates
(``Plugin.pick``). Nodes are walked one at a time, not by upstream's parallel workers, so the
early stop is deterministic. The driver records nothing itself: a plugin that explains its
decisions records why a node was filtered or yielded no candidate, and may name the nodes the
walk never reached (``Walk.unvisited``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from ckpt_preempt.policies.model.model import Node

# kube-scheduler's DefaultPreemptionArgs defaults: minCandidateNodesPercentage and
# minCandidateNodesAbsolute.
MIN_CANDIDATE_NODES_PERCENTAGE = 10
MIN_CANDIDATE_NODES_ABSOLUTE = 100

C = TypeVar("C")


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """How many candidate nodes a walk looks for (DefaultPreemptionArgs)."""

    min_candidate_nodes_percentage: int = MIN_CANDIDATE_NODES_PERCENTAGE
    min_candidate_nodes_absolute: int = MIN_CANDIDATE_NODES_ABSOLUTE


def num_candidates(nodes: int, sampling: Sampling = Sampling()) -> int:
    """Candidates to look for among ``nodes`` potential nodes: the percentage of them, at
    least the absolute minimum, at most all of them."""
    n = nodes * sampling.min_candidate_nodes_percentage // 100
    return min(max(n, sampling.min_candidate_nodes_absolute), nodes)


class Sampler(Protocol[C]):
    """What the walk asks of a policy (upstream's ``Interface``, the parts a walk needs)."""

    def potential(self, node: Node) -> bool:
        """May preempting on ``node`` help at all? (False: it is left out before the walk.)"""
        ...

    def offset(self, nodes: int) -> int:
        """Where among ``nodes`` potential nodes the walk starts, in [0, nodes)."""
        ...

    def select_victims(self, node: Node, step: int, index: int) -> C | None:
        """The candidate on ``node`` (the ``step``-th visited, at ``index`` among the potential
        nodes), or None when preempting there does not make room."""
        ...

    def violates_pdb(self, candidate: C) -> bool:
        """Does the candidate break a PodDisruptionBudget? (Such ones alone never stop a walk.)"""
        ...


class Plugin(Sampler[C], Protocol[C]):
    """A whole preemption policy: victims on a node, and the choice among candidates."""

    def pick(self, candidates: Sequence[C]) -> C | None:
        """The best candidate (upstream's ``SelectCandidate``), None when none will do."""
        ...


@dataclass(frozen=True, kw_only=True)
class Walk(Generic[C]):
    """What a walk found: the candidates in walk order, and the potential nodes it never
    reached because it had found enough."""

    candidates: tuple[C, ...]
    potential: Sequence[Node]  # the nodes that passed the filter, in node order
    wanted: int  # how many candidates the walk looked for
    offset: int = 0  # where the walk started among ``potential``
    visited: int = 0  # how many it visited

    @property
    def unvisited(self) -> tuple[Node, ...]:
        """The potential nodes the walk never reached, in walk order."""
        n = len(self.potential)
        return tuple(self.potential[(self.offset + k) % n] for k in range(self.visited, n))


def find_candidates(
    sampler: Sampler[C], nodes: Sequence[Node], sampling: Sampling = Sampling()
) -> Walk[C]:
    """Filter ``nodes``, then walk the potential ones from the sampler's offset until enough
    candidates were found (``findCandidates`` and ``DryRunPreemption`` upstream)."""
    potential = [n for n in nodes if sampler.potential(n)]
    total = len(potential)
    if not total:
        return Walk(candidates=(), potential=(), wanted=0)
    offset = sampler.offset(total)
    if not 0 <= offset < total:
        raise ValueError(f"offset {offset} outside [0, {total})")
    want = num_candidates(total, sampling)
    found: list[C] = []
    clean = 0  # candidates that break no PDB
    visited = 0
    for step in range(total):
        visited = step + 1
        index = (offset + step) % total
        got = sampler.select_victims(potential[index], step, index)
        if got is None:
            continue
        found.append(got)
        clean += not sampler.violates_pdb(got)
        if clean and len(found) >= want:
            break
    return Walk(candidates=tuple(found), potential=potential, wanted=want, offset=offset,
                visited=visited)


def preempt(
    plugin: Plugin[C], nodes: Sequence[Node], sampling: Sampling = Sampling()
) -> tuple[C | None, Walk[C]]:
    """Find the candidates and let the plugin pick one (``Evaluator.Preempt``, without the
    API calls): (the chosen candidate or None, the walk)."""
    walk = find_candidates(plugin, nodes, sampling)
    return (plugin.pick(walk.candidates) if walk.candidates else None), walk
