"""The promises a chaos run checks at its end, from the API server's audit log and API state
(`Invariants`; every field lists violations, one line each):

- double evictions: a pod evicted successfully more than once (audit log);
- evictions outside a plan: each eviction that succeeded, or whose client never learnt the
  outcome (the API server answered 504: the client was killed mid-request, and the pod may be
  gone all the same), must name a victim of a stored plan
  whose newest version written *before* the eviction was `Evicting`, in scope and of lower
  priority than that plan's preemptors (plan versions: the ConfigMap writes in the audit log);
- partial gangs: a victim gang with some members evicted and others still running;
- unfinished plans, drain annotations left on live pods of finished plans, reservation taints
  left on nodes, pods gone without an eviction (one answered 504 counts), Done plans whose
  preemptor is not bound, and
  stored plans that do not parse (the harness and the replicas must run the same code: a
  replica restarted after the plan format changed stores plans the checks cannot read).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from dataclasses import dataclass

from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.lifecycle.plan_record import PlanRecord, State
from ckpt_preempt.policies.model.annotations import RESERVED_TAINT
from e2e.harness.chaos.config import PREEMPTOR, VICTIM, Made
from e2e.harness.localcluster import AuditEvent


@dataclass(frozen=True, kw_only=True)
class Invariants:
    """Each field lists violations, one line each; all empty = every promise held."""

    double_evictions: tuple[str, ...]
    evictions_outside_plan: tuple[str, ...]
    partial_gangs: tuple[str, ...]
    unfinished_plans: tuple[str, ...]
    leftover_drain: tuple[str, ...]
    leftover_taints: tuple[str, ...]
    vanished: tuple[str, ...]
    done_but_unbound: tuple[str, ...]
    unreadable_plans: tuple[str, ...]  # stored plan versions this code cannot parse

    def counts(self) -> dict[str, int]:
        return {f.name: len(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def lines(self) -> list[str]:
        return [f"{f.name}: {v}" for f in dataclasses.fields(self) for v in getattr(self, f.name)]

    @property
    def ok(self) -> bool:
        return not any(self.counts().values())


@dataclass(frozen=True, kw_only=True)
class PlanVersion:
    record: PlanRecord
    written: float  # when the API server completed the write (audit clock)


def plan_versions(events: list[AuditEvent], plan_namespace: str) -> tuple[list[PlanVersion],
                                                                            list[str]]:
    """Every plan version written to a ConfigMap in `plan_namespace`, oldest first, and the
    writes whose plan did not parse (those are violations of their own)."""
    out, bad = [], []
    for e in events:
        if (e.resource != "configmaps" or e.namespace != plan_namespace or not e.ok
                or e.verb not in ("create", "update", "patch") or not e.response):
            continue
        raw = (e.response.get("data") or {}).get(plan_record.PLAN_DATA_KEY)
        if raw is None:
            continue
        try:
            out.append(PlanVersion(record=plan_record.plan_from_annotation(raw),
                                   written=e.completed))
        except plan_record.PlanFormatError as err:
            bad.append(f"{e.name}: {err}")
    return out, bad


# What the API server answers when a request's context ends before it does (a client killed
# mid-request): the eviction may have gone through all the same. Seen in a chaos run: a replica
# killed right after sending an eviction, the API server answered 504 "context canceled", and
# the pod was gone 90 ms later.
OUTCOME_UNKNOWN = 504


def evictions(events: list[AuditEvent], *, maybe: bool = False) -> list[AuditEvent]:
    """The eviction requests the API server granted; with ``maybe``, also those whose client
    never learnt the outcome (``OUTCOME_UNKNOWN``)."""
    return [e for e in events if e.resource == "pods" and e.subresource == "eviction"
            and e.verb == "create" and (e.ok or (maybe and e.code == OUTCOME_UNKNOWN))]


def check_evictions(events: list[AuditEvent], made: dict[str, Made], scope: set[str],
                    versions: list[PlanVersion]) -> tuple[list[str], list[str]]:
    """(double evictions, evictions outside a valid stored plan). An eviction whose outcome
    its client never learnt counts as one for the plan check (it may have gone through), not
    for doubles (a retry after one that did not is no second eviction)."""
    per_pod = Counter((e.namespace, e.name) for e in evictions(events))
    doubles = [f"{ns}/{name} evicted {n} times" for (ns, name), n in sorted(per_pod.items())
               if n > 1]
    outside = []
    for e in evictions(events, maybe=True):
        pod = made.get(f"{e.namespace}/{e.name}")
        if pod is None:
            outside.append(f"{e.namespace}/{e.name}: not a pod of this run")
            continue
        latest: dict[str, PlanRecord] = {}
        for v in versions:
            if v.written < e.received and pod.uid in v.record.victim_uids:
                latest[v.record.id] = v.record
        acting = [r for r in latest.values() if r.state is State.EVICTING]
        if not acting:
            states = ", ".join(f"{r.id}={r.state}" for r in latest.values()) or "none"
            outside.append(f"{e.namespace}/{e.name} ({pod.role}): no Evicting plan names it "
                           f"before the eviction (plans naming it: {states})")
            continue
        if pod.namespace not in scope:
            outside.append(f"{e.namespace}/{e.name}: outside the controller's namespaces")
        for r in acting:
            floor = min((made[f"{p.namespace}/{p.name}"].priority for p in r.placements
                         if f"{p.namespace}/{p.name}" in made), default=None)
            if floor is None or pod.priority >= floor:
                outside.append(f"{e.namespace}/{e.name}: priority {pod.priority} not below "
                               f"plan {r.id}'s preemptors ({floor})")
    return doubles, outside


def check_gangs(events: list[AuditEvent], made: dict[str, Made], alive: set[str]) -> list[str]:
    evicted = {f"{e.namespace}/{e.name}" for e in evictions(events)}
    # a member gone after an eviction whose client never learnt the outcome went by it
    evicted |= {k for e in evictions(events, maybe=True)
                if (k := f"{e.namespace}/{e.name}") not in alive}
    gangs: dict[str, list[Made]] = defaultdict(list)
    for m in made.values():
        if m.role == VICTIM and m.gang:
            gangs[f"{m.namespace}/{m.gang}"].append(m)
    out = []
    for key, members in sorted(gangs.items()):
        gone = [m.name for m in members if f"{m.namespace}/{m.name}" in evicted]
        left = [m.name for m in members if f"{m.namespace}/{m.name}" in alive
                and f"{m.namespace}/{m.name}" not in evicted]
        if gone and left:
            out.append(f"gang {key}: evicted {gone}, still running {left}")
    return out


def check_end_state(made: dict[str, Made], events: list[AuditEvent], final: list[PlanRecord],
                    pods: list, nodes: list) -> dict[str, list[str]]:
    """What API state must look like once everything settled."""
    by_id = {r.id: r for r in final}
    out: dict[str, list[str]] = {k: [] for k in ("unfinished_plans", "leftover_drain",
                                                 "leftover_taints", "vanished",
                                                 "done_but_unbound")}
    out["unfinished_plans"] = [f"plan {r.id} still {r.state}" for r in final
                               if not r.state.terminal]
    live = {f"{p.metadata.namespace}/{p.metadata.name}": p for p in pods}
    for key, p in sorted(live.items()):
        raw = (p.metadata.annotations or {}).get(plan_record.DRAIN_ANNOTATION)
        if raw is None or p.metadata.deletion_timestamp is not None:
            continue
        try:
            plan = plan_record.drain_from_annotation(raw).plan
        except plan_record.DrainFormatError:
            plan = "?"
        r = by_id.get(plan)
        if r is None or r.state.terminal:
            out["leftover_drain"].append(f"{key}: drain request of plan {plan} "
                                         f"({r.state if r else 'no such plan'})")
    for n in nodes:
        for t in n.spec.taints or []:
            if t.key == RESERVED_TAINT:
                r = by_id.get(t.value)
                out["leftover_taints"].append(f"node {n.metadata.name}: reserved for plan "
                                              f"{t.value} ({r.state if r else 'no such plan'})")
    evicted = {f"{e.namespace}/{e.name}" for e in evictions(events, maybe=True)}
    out["vanished"] = [f"{k} ({m.role})" for k, m in sorted(made.items())
                       if m.role != PREEMPTOR and k not in live and k not in evicted]
    for r in final:
        if r.state is not State.DONE:
            continue
        for pl in r.placements:
            p = live.get(f"{pl.namespace}/{pl.name}")
            if p is not None and p.metadata.uid == pl.uid and not p.spec.node_name:
                out["done_but_unbound"].append(f"plan {r.id}: {pl.namespace}/{pl.name}")
    return out



def check_all(events: list[AuditEvent], made: dict[str, Made], scope: set[str],
              plan_namespace: str, final: list[PlanRecord], pods: list,
              nodes: list) -> tuple[Invariants, list[PlanVersion]]:
    """Every check over the audit `events` of the run's namespaces and the API state once it
    settled (`pods` of every namespace the run made, its `nodes`); also the plan versions."""
    versions, malformed = plan_versions(events, plan_namespace)
    doubles, outside = check_evictions(events, made, scope, versions)
    alive = {f"{p.metadata.namespace}/{p.metadata.name}" for p in pods
             if p.metadata.deletion_timestamp is None}
    end = check_end_state(made, events, final, pods, nodes)
    inv = Invariants(double_evictions=tuple(doubles),
                     evictions_outside_plan=tuple(outside),
                     unreadable_plans=tuple(malformed),
                     partial_gangs=tuple(check_gangs(events, made, alive)),
                     **{k: tuple(v) for k, v in end.items()})
    return inv, versions
