"""How ``ckpt-preempt explain`` shows a plan: one document shape, GPU-hours, RFC 3339 UTC times
and gangs by the name of the convention that formed them.

The planner works in GPU-seconds, epoch seconds and gang keys ``<namespace>/<convention id>/
<name>`` (``policies.model.gangs``); this module converts at the edge and nowhere else. Both
``explain --snapshot`` (controller/app/cmd_explain.py) and ``explain POD``
(controller/explain/explain_live.py)
print ``document(...)`` for ``-o json|yaml``; every key is always present (``kube_default`` is null
unless kube-default's choice was computed, ``stored_plan`` null unless one exists, ``node_health``
the summary of ``health_summary``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ckpt_preempt.policies.model import gangs
from ckpt_preempt.policies.model.health import Health
from ckpt_preempt.policies.model.model import Plan, Timing, VictimGroup
from ckpt_preempt.policies.model.times import rfc3339

SECONDS_PER_HOUR = 3600.0
HOURS_DIGITS = 4  # GPU-hours in documents: to 0.36 GPU-seconds

# What users call each gang convention of policies.model.gangs.CONVENTIONS (keyed by its id).
CONVENTION_NAMES = {
    "seed": "scheduling.ai gang labels",
    "kueue": "Kueue pod group",
    "volcano": "Volcano PodGroup",
    "coscheduling": "scheduler-plugins PodGroup",
    "lws": "LeaderWorkerSet group",
    "jobset": "JobSet",
}
_CONVENTION_KEYS = {c.id: c.name_key for c in gangs.CONVENTIONS}


def gpu_hours(gpu_seconds: float) -> float:
    return round(gpu_seconds / SECONDS_PER_HOUR, HOURS_DIGITS)


def gang(key: str | None) -> dict | None:
    """``{"namespace", "name", "convention"}`` for a gang key; None for no gang."""
    if key is None:
        return None
    parts = key.split("/", 2)
    if len(parts) != 3 or parts[1] not in _CONVENTION_KEYS:
        return {"namespace": "", "name": key, "convention": ""}  # a key from elsewhere: as is
    namespace, conv, name = parts
    label = CONVENTION_NAMES.get(conv, _CONVENTION_KEYS[conv])
    return {"namespace": namespace, "name": name, "convention": label}


def gang_text(key: str) -> str:
    """``ml/llm (scheduling.ai gang labels)``."""
    g = gang(key) or {}
    where = f"{g['namespace']}/{g['name']}" if g["namespace"] else g["name"]
    return f"{where} ({g['convention']})" if g["convention"] else where


def _workload(value: str) -> str:
    """A victim's fairness key: a gang key is shown as the gang, an owner's or pod's key as is
    (``<namespace>/owner/<uid>``, ``<namespace>/pod/<uid>``)."""
    parts = value.split("/", 2)
    return gang_text(value) if len(parts) == 3 and parts[1] in _CONVENTION_KEYS else value


def _group(g: VictimGroup) -> dict:
    return {
        "gang": gang(g.gang),
        "reason": g.reason,
        "lost_gpu_hours": gpu_hours(g.lost_gpu_seconds),
        "penalty_gpu_hours": gpu_hours(g.penalty_gpu_seconds),
        "victims": [{
            "uid": v.uid, "namespace": v.namespace, "name": v.name, "node": v.node,
            "gpus": v.gpus, "priority": v.priority, "lost_gpu_hours": gpu_hours(v.lost_gpu_seconds),
            "drain": v.drain, "checkpoint_seconds": v.checkpoint_seconds,
            "workload": _workload(v.workload),
        } for v in g.victims],
    }


def plan(p: Plan) -> dict:
    """One plan as data: GPU-hours, RFC 3339 times, human gang names."""
    return {
        "policy": p.policy,
        "preemptor": list(p.preemptor),
        "feasible": p.feasible,
        "reason": p.reason,
        "lost_gpu_hours": gpu_hours(p.lost_gpu_seconds),
        "placements": [{"pod_uid": pl.pod_uid, "node": pl.node} for pl in p.placements],
        "victim_groups": [_group(g) for g in p.victim_groups],
        "pdb_violations": p.pdb_violations,
        "drain_deadline": None if p.drain_deadline is None else rfc3339(p.drain_deadline),
        "rejections": [{"node": r.node, "reason": r.reason.value, "detail": r.detail}
                       for r in p.rejections],
        "nodes_evaluated": p.nodes_evaluated,
        "timing": timing(p.timing),
    }


def timing(t: Timing | None) -> dict | None:
    """When the plan evicts and why (``policies.planner.timing``); None when timing was not
    decided."""
    if t is None:
        return None
    return {
        "when": t.when.value,
        "deadline": rfc3339(t.deadline),
        "waits": [{"uid": w.uid, "for": w.when.value, "expected": rfc3339(w.expected)}
                  for w in t.waits],
        "expected_gpu_hours": gpu_hours(t.expected_gpu_seconds),
        "now_gpu_hours": gpu_hours(t.now_gpu_seconds),
        "delay_gpu_hours": gpu_hours(t.delay_gpu_seconds),
        "reason": t.reason,
    }


def timing_lines(p: Plan, indent: str) -> list[str]:
    """The plan's timing as text for ``explain``: which was chosen and why."""
    t = p.timing
    if t is None or not p.victim_groups:
        return []
    out = [f"{indent}timing: {t.when.value}, evict by {rfc3339(t.deadline)} ({t.reason})"]
    out.extend(f"{indent}  waits for {w.uid}: {w.when.value} expected {rfc3339(w.expected)}"
               for w in t.waits)
    return out


def health_summary(nodes: Iterable[tuple[str, Health, Iterable[str]]]) -> dict:
    """``node_health``: failing and degraded nodes with their reasons, worst first; unknown ones
    counted (with the reason when they share one); the number of nodes looked at."""
    seen = list(nodes)
    bad = sorted(((n, st, list(r)) for n, st, r in seen if st in (Health.FAILING, Health.DEGRADED)),
                 key=lambda t: (-t[1].rank, t[0]))
    unknown = [list(r) for _, st, r in seen if st is Health.UNKNOWN]
    notes = {line for r in unknown for line in r}
    return {
        "nodes": len(seen),
        "unhealthy": [{"node": n, "state": st.value, "reasons": r} for n, st, r in bad],
        "unknown": len(unknown),
        "unknown_reason": notes.pop() if len(notes) == 1 else None,
    }


def health_lines(summary: dict) -> list[str]:
    """``health_summary`` as text for ``explain``."""
    out = ["  node health:"]
    for e in summary["unhealthy"]:
        out.append(f"    {e['node']}: {e['state']}")
        out.extend(f"      {r}" for r in e["reasons"])
    if summary["unknown"]:
        why = f" ({summary['unknown_reason']})" if summary["unknown_reason"] else ""
        out.append(f"    unknown on {summary['unknown']} of {summary['nodes']} node(s){why}")
    if len(out) == 1:
        out.append(f"    healthy on all {summary['nodes']} node(s)")
    return out


def document(*, now: float, ours: Plan, kube_default: Plan | None, pod: str | None = None,
             members: Iterable[str] = (), warnings: Iterable[str] = (),
             stored_plan: dict | None = None, health: dict | None = None) -> dict:
    """The one ``explain -o json|yaml`` shape, live or from a snapshot; ``health`` is a
    ``health_summary``."""
    return {
        "now": rfc3339(now),
        "pod": pod,
        "members": list(members),
        "warnings": list(warnings),
        "stored_plan": stored_plan,
        "plan": plan(ours),
        "kube_default": None if kube_default is None else plan(kube_default),
        "node_health": health if health is not None else health_summary(()),
    }
