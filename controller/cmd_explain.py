"""Explain the plan ckpt-preempt would make for a snapshot: victims, lost GPU-hours, and why
every other node lost.

The snapshot file (JSON or YAML) holds ``now``, ``nodes``, ``pods``, optional ``pdbs`` and
``preemptor`` (a pod name, or a list of names for a gang); see ``policies.snapshot_io``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from ckpt_preempt.policies import kube_default, preemption, snapshot_io
from ckpt_preempt.policies.model import Plan

NAME = "explain"
HELP = "explain the preemption plan for a snapshot file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pod", nargs="?", metavar="POD",
                   help="NAMESPACE/NAME of a pod on a live cluster (instead of --snapshot)")
    p.add_argument("--kubeconfig", help="with POD: kubeconfig file (default: $KUBECONFIG)")
    p.add_argument("--snapshot", type=Path, help="snapshot file (JSON or YAML)")
    p.add_argument("--no-drain", action="store_true", help="plan without draining victims")
    p.add_argument("--max-checkpoint-seconds", type=float, default=None,
                   help="cap on a victim's checkpoint time (default: the config's, 600)")
    p.add_argument("--config", type=Path,
                   help="with POD: the controller's config file (scope, limits, planNamespace), "
                        "so the answer is the one the controller would give")
    p.add_argument("--compare", action="store_true", help="also show kube-default's choice")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")


def run(args: argparse.Namespace) -> int:
    if (args.pod is None) == (args.snapshot is None):
        print("ckpt-preempt explain: give either POD or --snapshot FILE", file=sys.stderr)
        return 2
    if args.pod is not None:
        return _run_live(args)
    try:
        doc = yaml.safe_load(args.snapshot.read_text())
        snap, preemptor, problems = snapshot_io.from_dict(doc)
    except (OSError, yaml.YAMLError, snapshot_io.SnapshotError) as e:
        print(f"ckpt-preempt explain: {args.snapshot}: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    cfg = preemption.PlannerConfig(drain=not args.no_drain) \
        if args.max_checkpoint_seconds is None else preemption.PlannerConfig(
            drain=not args.no_drain, max_checkpoint_seconds=args.max_checkpoint_seconds)
    plans = [preemption.plan(snap, preemptor, cfg)]
    if args.compare:
        plans.append(kube_default.plan(snap, preemptor))
    if args.output == "text":
        print("\n\n".join(render(p, snap.now) for p in plans))
    else:
        data = [snapshot_io.plan_to_dict(p) for p in plans]
        out = data[0] if len(data) == 1 else data
        print(json.dumps(out, indent=2) if args.output == "json" else yaml.safe_dump(out))
    return 0 if plans[0].feasible else 1


def render(plan: Plan, now: float) -> str:
    lines = [f"[{plan.policy}] {'PLAN' if plan.feasible else 'NO PLAN'}: {plan.reason}"]
    for pl in plan.placements:
        lines.append(f"  place {pl.pod_uid} on {pl.node}")
    for g in plan.victim_groups:
        label = f"gang {g.gang}" if g.gang else "pod"
        lines.append(f"  evict {label}: {g.lost_gpu_seconds / 3600:.2f} GPU-h lost ({g.reason})")
        for v in g.victims:
            how = f"drain {v.checkpoint_seconds:.0f}s then evict" if v.drain else "evict"
            lines.append(
                f"    {v.namespace}/{v.name} on {v.node}: {v.gpus} GPU(s), priority "
                f"{v.priority}, {v.lost_gpu_seconds / 3600:.2f} GPU-h, {how}"
            )
    if plan.drain_deadline is not None and plan.victim_groups:
        lines.append(f"  drain deadline: now + {plan.drain_deadline - now:.0f}s")
    if plan.pdb_violations:
        lines.append(f"  PDB violations: {plan.pdb_violations}")
    if plan.rejections:
        lines.append("  other nodes:")
        for r in plan.rejections:
            detail = f" ({r.detail})" if r.detail else ""
            lines.append(f"    {r.node}: {r.reason}{detail}")
    return "\n".join(lines)


def _run_live(args: argparse.Namespace) -> int:
    """`explain POD` on a live cluster: see controller/explain_live.py."""
    import dataclasses

    from ckpt_preempt.controller import config as config_file
    from ckpt_preempt.controller import explain_live
    from ckpt_preempt.controller.cmd_run import api_client

    namespace, _, name = args.pod.rpartition("/")
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
        result = explain_live.explain(api_client(args.kubeconfig, False), namespace or "default",
                                      name, cfg)
    except explain_live.PodNotFound as e:
        print(f"ckpt-preempt explain: {e}", file=sys.stderr)
        return 2
    print(explain_live.render(result))
    return 0 if result.plan.feasible else 1
