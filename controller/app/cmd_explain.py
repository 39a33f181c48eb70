"""Explain the plan ckpt-preempt would make: victims, lost GPU-hours, and why every other node
lost; for a snapshot file, or for a pending pod on a live cluster.

The snapshot file (JSON or YAML) holds ``now``, ``nodes``, ``pods``, optional ``pdbs``,
preemption counts and ``preemptor`` (a pod name, or a list of names for a gang); see
``policies.model.snapshot_io``. Workloads whose ``preemption_history`` reached the starvation
bound (``--max-preemptions-per-window``) are held, as the controller holds them.
Exit code 0 with a plan, 1 without, 2 on bad input. ``-o json|yaml`` prints one document shape
(controller/explain/explain_format.py) with or without ``--compare``.
"""

from __future__ import annotations

import argparse
import json
import sys

import yaml

from ckpt_preempt.cli import argtypes
from ckpt_preempt.cli.files import readable_file
from ckpt_preempt.cli.output import emit, one_line
from ckpt_preempt.controller.core import documents
from ckpt_preempt.controller.explain import explain_format as fmt
from ckpt_preempt.policies.baselines import kube_default
from ckpt_preempt.policies.model import snapshot_io
from ckpt_preempt.policies.model.model import Plan, PodHold
from ckpt_preempt.policies.planner import bound, preemption

NAME = "explain"
HELP = "explain the preemption plan for a pending pod or a snapshot file"
OUTPUTS = ("text", "json", "yaml")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pod", nargs="?", metavar="POD",
                   help="NAMESPACE/NAME of a pod on a live cluster (instead of --snapshot)")
    p.add_argument("--kubeconfig", help="with POD: kubeconfig file (default: $KUBECONFIG)")
    p.add_argument("--snapshot", type=readable_file, help="snapshot file (JSON or YAML)")
    p.add_argument("--no-drain", action="store_true", help="plan without draining victims")
    p.add_argument("--max-checkpoint-seconds", type=argtypes.non_negative_float, default=None,
                   help="cap on a victim's checkpoint time (default: the config's, 600)")
    p.add_argument("--max-preemptions-per-window", type=argtypes.non_negative_int,
                   default=bound.MAX_PREEMPTIONS_PER_WINDOW, metavar="N",
                   help="with --snapshot: the starvation bound; a workload whose "
                        "preemption_history reached N is no victim (default %(default)s, the "
                        "controller's; 0: off)")
    p.add_argument("--config", type=readable_file,
                   help="with POD: the controller's config file (scope, limits, planNamespace), "
                        "so the answer is the one the controller would give")
    p.add_argument("--compare", action="store_true",
                   help="also show kube-default's choice (always shown for POD)")
    p.add_argument("-o", "--output", choices=OUTPUTS, default="text",
                   help=f"one of {', '.join(OUTPUTS)} (default %(default)s)")


def print_document(doc: dict, output: str) -> None:
    emit(json.dumps(doc, indent=2) if output == "json" else yaml.safe_dump(doc, sort_keys=False))


def run(args: argparse.Namespace) -> int:
    if (args.pod is None) == (args.snapshot is None):
        print("ckpt-preempt explain: give either POD or --snapshot FILE", file=sys.stderr)
        return 2
    if args.pod is not None:
        return _run_live(args)
    try:
        snap, preemptor, problems = snapshot_io.from_dict(documents.load(args.snapshot))
    except documents.DocumentError as e:  # names the file (and the line and column)
        print(f"ckpt-preempt explain: {e}", file=sys.stderr)
        return 2
    except snapshot_io.SnapshotError as e:
        print(f"ckpt-preempt explain: {args.snapshot}: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    at_bound = bound.pods_at_bound(snap, bound.Bound(
        max_preemptions=args.max_preemptions_per_window))
    if at_bound:  # as the controller holds them (controller.kube.convert.for_preemptor)
        snap = snap.restricted(held=dict.fromkeys(at_bound, PodHold.AT_PREEMPTION_BOUND))
    cfg = preemption.PlannerConfig(drain=not args.no_drain) \
        if args.max_checkpoint_seconds is None else preemption.PlannerConfig(
            drain=not args.no_drain, max_checkpoint_seconds=args.max_checkpoint_seconds)
    ours = preemption.plan(snap, preemptor, cfg)
    theirs = kube_default.plan(snap, preemptor) if args.compare else None
    health = fmt.health_summary((n.name, n.health, ()) for n in snap.nodes)
    if args.output == "text":
        emit("\n\n".join(render(p, snap.now) for p in (ours, theirs) if p is not None)
             + "\n" + "\n".join(fmt.health_lines(health)))
    else:
        keys = [p.key for p in preemptor]
        print_document(fmt.document(now=snap.now, ours=ours, kube_default=theirs,
                                    pod=keys[0] if keys else None, members=keys,
                                    warnings=problems, health=health), args.output)
    return 0 if ours.feasible else 1


def render(plan: Plan, now: float) -> str:
    lines = [f"[{plan.policy}] {'PLAN' if plan.feasible else 'NO PLAN'}: {plan.reason}"]
    for pl in plan.placements:
        lines.append(f"  place {pl.pod_uid} on {pl.node}")
    for g in plan.victim_groups:
        label = f"gang {fmt.gang_text(g.gang)}" if g.gang else "pod"
        lines.append(f"  evict {label}: {fmt.gpu_hours(g.lost_gpu_seconds):.2f} GPU-h lost "
                     f"({g.reason})")
        for v in g.victims:
            how = f"drain {v.checkpoint_seconds:.0f}s then evict" if v.drain else "evict"
            lines.append(
                f"    {v.namespace}/{v.name} on {v.node}: {v.gpus} GPU(s), priority "
                f"{v.priority}, {fmt.gpu_hours(v.lost_gpu_seconds):.2f} GPU-h, {how}"
            )
    if plan.drain_deadline is not None and plan.victim_groups:
        lines.append(f"  drain deadline: {fmt.rfc3339(plan.drain_deadline)} "
                     f"(now + {plan.drain_deadline - now:.0f}s)")
    lines.extend(fmt.timing_lines(plan, "  "))
    if plan.pdb_violations:
        lines.append(f"  PDB violations: {plan.pdb_violations}")
    if plan.rejections:
        lines.append("  other nodes:")
        for r in plan.rejections:
            detail = f" ({r.detail})" if r.detail else ""
            lines.append(f"    {r.node}: {r.reason}{detail}")
    return "\n".join(lines)


def _run_live(args: argparse.Namespace) -> int:
    """`explain POD` on a live cluster: see controller/explain/explain_live.py."""
    import dataclasses

    from ckpt_preempt.controller.app.cmd_common import api_client
    from ckpt_preempt.controller.core import config as config_file
    from ckpt_preempt.controller.explain import explain_live

    namespace, _, name = args.pod.rpartition("/")
    if not name:
        print(f"ckpt-preempt explain: POD must be NAMESPACE/NAME, got {args.pod!r}",
              file=sys.stderr)
        return 2
    try:
        cfg = config_file.load(args.config)
    except config_file.ConfigError as e:
        print(f"ckpt-preempt explain: {e}", file=sys.stderr)
        return 2
    if args.no_drain:
        cfg = dataclasses.replace(cfg, drain=False)
    if args.max_checkpoint_seconds is not None:
        cfg = dataclasses.replace(cfg, max_checkpoint_seconds=args.max_checkpoint_seconds)
    try:
        api = api_client(args.kubeconfig, False)
    except Exception as e:  # no kubeconfig, a broken one: the loader's own exception types
        print(f"ckpt-preempt explain: cannot load Kubernetes credentials: {one_line(e)}",
              file=sys.stderr)
        return 2
    try:
        result = explain_live.explain(api, namespace or "default", name, cfg)
    except explain_live.PodNotFound as e:
        print(f"ckpt-preempt explain: {e}", file=sys.stderr)
        return 2
    except explain_live.ClusterUnreachable as e:
        print(f"ckpt-preempt explain: {e}", file=sys.stderr)
        return 2
    if args.output == "text":
        emit(explain_live.render(result))
    else:
        print_document(explain_live.document(result), args.output)
    return 0 if result.plan.feasible else 1
