"""What a chaos run reports (`Report`): its figures (one JSON object: drains, plans by state,
evictions, acks, kills, preemptors and how they ended, the violation counts, the faults the
proxy injected) and the `Invariants` with every violation."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ckpt_preempt.policies.lifecycle.plan_record import PlanRecord, State
from e2e.harness.chaos.checks import Invariants, PlanVersion, evictions
from e2e.harness.chaos.config import VICTIM, Group, Made
from e2e.harness.chaos.faults import Replicas
from e2e.harness.faultproxy import FaultProxy
from e2e.harness.localcluster import AuditEvent


@dataclass(frozen=True, kw_only=True)
class Report:
    figures: dict
    invariants: Invariants


def figures(*, seed: int, final: list[PlanRecord], versions: list[PlanVersion],
            events: list[AuditEvent], acks: int, replicas: Replicas, kills_mid_plan: int,
            groups: dict[str, Group], made: dict[str, Made], run_seconds: float,
            wall_seconds: float, invariants: Invariants, proxy: FaultProxy | None) -> dict:
    """The run's figures from its final plans, the audit `events` and what the driver counted."""
    states = Counter(str(r.state) for r in final)
    ended = Counter(g.ended or ("running" if g.bound_at else "pending")
                    for g in groups.values())
    out = {
        "seed": seed, "drains": sum(1 for r in final if r.state is State.DONE and r.victims),
        "plans": dict(sorted(states.items())), "plan_versions": len(versions),
        "evictions": len(evictions(events)), "acks": acks,
        "done_by_mode": dict(sorted(Counter(str(r.mode) for r in final
                                            if r.state is State.DONE).items())),
        "drained_victims": sum(v.drain for r in final if r.state is State.DONE
                               for v in r.victims),
        "kills": replicas.kills, "leader_kills": replicas.leader_kills,
        "kills_mid_plan": kills_mid_plan,
        "starts": sum(replicas.starts.values()),
        "preemptors": len(groups),
        "preemptors_bound": sum(1 for g in groups.values() if g.bound_at is not None),
        "preemptors_ended": dict(sorted(ended.items())),
        "victims_made": sum(1 for m in made.values() if m.role == VICTIM),
        "run_seconds": round(run_seconds, 1), "wall_seconds": round(wall_seconds, 1),
        "invariants": invariants.counts(),
    }
    if proxy is not None:
        out["faults"] = {f"{cls}:{what}": n for (cls, what), n in sorted(proxy.counts.items())
                         if what.startswith(("injected", "cut", "gone"))}
    return out
