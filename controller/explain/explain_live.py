"""``explain POD`` on a live cluster: the plan the controller would make for it right now.

One-shot lists (no watch), the same conversion, the same restriction step (nodes and victims
held by stored plans still running; ``controller.planning.plans.restriction``) and the same planner
as the controller, plus kube-scheduler's DefaultPreemption on the same snapshot for comparison.
Nothing is written. For the CLI (controller/app/cmd_explain.py)::

    from ckpt_preempt.controller.explain import explain_live
    result = explain_live.explain(api, "team-a", "big-job")   # or "team-a/big-job"
    print(explain_live.render(result))
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from kubernetes import client

from ckpt_preempt.controller.core import api_connection, gpu_resources
from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.explain import explain_format as fmt
from ckpt_preempt.controller.health.health import explain_health
from ckpt_preempt.controller.kube import convert, podgroups, records
from ckpt_preempt.controller.kube import resource_claims as rc
from ckpt_preempt.controller.kube.records import MANAGED_BY
from ckpt_preempt.controller.kube.watch import stored_plan
from ckpt_preempt.controller.planning.plans import history, load_all, restriction
from ckpt_preempt.policies.baselines import kube_default
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.health import NodeHealth
from ckpt_preempt.policies.model.model import Plan
from ckpt_preempt.policies.planner import bound, preemption


class PodNotFound(LookupError):
    """The named pod does not exist."""


class ClusterUnreachable(RuntimeError):
    """The API server refused a list or could not be reached: one line for the CLI."""


@dataclass(frozen=True, kw_only=True)
class Explanation:
    pod: str
    members: tuple[str, ...]  # the whole gang when the pod belongs to one
    plan: Plan
    kube_default: Plan
    persisted: plan_record.PlanRecord | None  # the newest stored plan for this pod, if any
    warnings: tuple[str, ...]
    now: float
    health: tuple[NodeHealth, ...] = ()  # every node's GPU health, as the controller sees it


def _list(fn, timeout: float = 30.0) -> list[dict]:
    try:
        return json.loads(fn(_preload_content=False, _request_timeout=timeout).data).get(
            "items") or []
    except client.ApiException as e:
        raise ClusterUnreachable(f"the API server answered {e.status} {e.reason}") from e
    except api_connection.CONNECTION_FAILURES as e:
        raise ClusterUnreachable(api_connection.cannot_reach(e)) from e


def explain(api: client.ApiClient, namespace: str, name: str, cfg: Config | None = None,
            *, now: float | None = None) -> Explanation:
    cfg = cfg or Config()
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    now = time.time() if now is None else now
    gpus = gpu_resources.from_config(cfg)
    pods = [records.pod_info(d, gpus) for d in _list(core.list_pod_for_all_namespaces)]
    nodes = [records.node_info(d, gpus) for d in _list(core.list_node)]
    if gpus.dra:
        dra, off = client.ResourceV1Api(api), threading.Event()
        off.set()  # an API not served reads as empty at once
        pods, nodes = rc.with_dra(
            pods, nodes,
            [rc.claim_info(d, gpus) for d in _list(rc.tolerant(
                dra.list_resource_claim_for_all_namespaces, off))],
            [rc.slice_info(d, gpus) for d in _list(rc.tolerant(dra.list_resource_slice, off))])
    pdbs = [records.pdb_info(d) for d in
            _list(policy.list_pod_disruption_budget_for_all_namespaces)]
    target = next((p for p in pods if p.namespace == namespace and p.name == name), None)
    if target is None:
        raise PodNotFound(f"pod {namespace}/{name} not found")
    scope = convert.scope(cfg)
    stored = load_all(stored_plan(d) for d in _list(
        lambda **kw: core.list_namespaced_config_map(
            cfg.plan_namespace, label_selector=f"{MANAGED_BY[0]}={MANAGED_BY[1]}", **kw)))
    health = tuple(explain_health(cfg, [n.name for n in nodes]))
    native = podgroups.listed(api)
    conv = convert.snapshot(now=now, nodes=nodes, pods=pods, pdbs=pdbs, scope=scope,
                            limits=convert.limits(cfg),
                            health={h.node: h.state for h in health}, podgroups=native,
                            **history(stored, now, cfg))
    model = conv.snapshot.pod_by_uid
    gang = model[target.uid].gang
    members = [p for p in pods if not p.node and not p.done and (
        p.uid == target.uid or (gang is not None and model.get(p.uid) is not None
                                and model[p.uid].gang == gang))]
    mine = [r for r in stored if any(pl.uid in {p.uid for p in members} for pl in r.placements)]
    held = restriction([r for r in stored if not r.state.terminal and r not in mine], {}, now)
    snap = convert.for_preemptor(conv.snapshot, {n.name: n for n in nodes}, members,
                                 reserved_nodes=held.reserved_nodes, busy_pods=held.held_pods,
                                 bounded_pods=bound.pods_at_bound(
                                     conv.snapshot, convert.preemption_bound(cfg)))
    mpods = [model[p.uid] for p in members]
    ours = preemption.plan(snap, mpods, convert.planner_config(cfg))
    theirs = kube_default.plan(snap, mpods, kube_default.KubeDefaultConfig(seed=0))
    persisted = max(mine, key=lambda r: r.created) if mine else None
    warnings = [w for p in members for w in conv.problems.get(p.uid, ())]
    if plan_record.PLAN_ANNOTATION in target.annotations:
        warnings.append(f"{plan_record.PLAN_ANNOTATION} on the pod is ignored: plans are kept in "
                        f"namespace {cfg.plan_namespace}")
    if target.node:
        warnings.append(f"the pod is already bound to {target.node}; shown: a plan as if pending")
    return Explanation(pod=target.key, members=tuple(p.key for p in members), plan=ours,
                       kube_default=theirs, persisted=persisted, warnings=tuple(warnings),
                       now=now, health=health)


def document(e: Explanation) -> dict:
    """The ``-o json|yaml`` document: the same shape as ``explain --snapshot``'s."""
    stored = None
    if e.persisted is not None:
        r = e.persisted
        stored = {"id": r.id, "state": str(r.state), "created": fmt.rfc3339(r.created),
                  "reason": r.reason}
    return fmt.document(now=e.now, ours=e.plan, kube_default=e.kube_default, pod=e.pod,
                        members=e.members, warnings=e.warnings, stored_plan=stored,
                        health=_health(e))


def _health(e: Explanation) -> dict:
    return fmt.health_summary((h.node, h.state, h.reasons) for h in e.health)


def render(e: Explanation) -> str:
    out = [f"pod {e.pod}" + (f" (gang of {len(e.members)})" if len(e.members) > 1 else "")
           + f" at {fmt.rfc3339(e.now)}"]
    for w in e.warnings:
        out.append(f"  warning: {w}")
    if e.persisted is not None:
        out.append(f"  stored plan {e.persisted.id} (created {fmt.rfc3339(e.persisted.created)})"
                   f": {e.persisted.state}"
                   + (f" ({e.persisted.reason})" if e.persisted.reason else ""))
    p = e.plan
    out.append(f"  ckpt-preempt: {p.reason}")
    for pl in p.placements:
        out.append(f"    place {pl.pod_uid} on {pl.node}")
    for g in p.victim_groups:
        out.append(f"    evict {'gang ' + fmt.gang_text(g.gang) if g.gang else 'pod'}: "
                   f"{fmt.gpu_hours(g.lost_gpu_seconds):.2f} GPU-h ({g.reason})")
        for v in g.victims:
            how = f"drain {v.checkpoint_seconds:g}s first" if v.drain else "no checkpoint request"
            out.append(f"      {v.namespace}/{v.name} on {v.node}: {v.gpus} GPU, "
                       f"loses {fmt.gpu_hours(v.lost_gpu_seconds):.2f} GPU-h, {how}")
    if p.drain_deadline is not None and p.victim_groups:
        out.append(f"    drain deadline: {fmt.rfc3339(p.drain_deadline)}")
    out.extend(fmt.timing_lines(p, "    "))
    k = e.kube_default
    out.append(f"  kube-default: {k.reason}"
               + (f", losing {fmt.gpu_hours(k.lost_gpu_seconds):.2f} GPU-h" if k.feasible else ""))
    for v in k.victims:
        out.append(f"    {v.namespace}/{v.name} on {v.node}: loses "
                   f"{fmt.gpu_hours(v.lost_gpu_seconds):.2f} GPU-h")
    if p.rejections:
        out.append("  why other nodes lost:")
        for r in p.rejections:
            out.append(f"    {r.node}: {r.reason}" + (f" ({r.detail})" if r.detail else ""))
    out.extend(fmt.health_lines(_health(e)))
    return "\n".join(out)
