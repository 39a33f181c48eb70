"""Keep each Kueue Workload's priority-boost from its pods' unsaved work.

Kueue v0.17 with its alpha ``PriorityBoost`` gate on adds the Workload annotation
``kueue.x-k8s.io/priority-boost`` to the Workload's priority when it chooses preemption victims.
This command writes that annotation on admitted Workloads: the more GPU-hours their pods would
lose (the planner's cost, checkpoint annotations included), the higher, in log-scale buckets,
never reaching the next priority in use, with a dead band against flapping
(policies/kueue/boost.py). Whether the gate is on cannot be read from the API: say so with
--kueue-priority-boost on; off (the default) only logs what it would write, as --dry-run does.
Without Kueue's Workload CRD it logs one line and does nothing.
"""

from __future__ import annotations

import argparse
import sys
import threading

from ckpt_preempt.cli import argtypes
from ckpt_preempt.cli.files import readable_file
from ckpt_preempt.controller.app import logs
from ckpt_preempt.controller.app.cmd_common import (
    add_cluster_flags,
    connect,
    load_config,
    stop_on_signals,
)

NAME = "kueue-boost"
HELP = "keep Kueue Workloads' priority-boost from their pods' unsaved work"
GATE = ("off", "on")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_cluster_flags(p)
    p.add_argument("--config", type=readable_file,
                   help="controller config file (YAML or JSON): its namespaces "
                        "(the Workloads it may write), unknownCheckpoint, checkpoint "
                        "limits, GPU resources and dryRun")
    p.add_argument("--kueue-priority-boost", choices=GATE, default="off",
                   help="whether Kueue runs with its PriorityBoost feature gate; off: only log "
                        "the boosts (default %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="log the boosts; write nothing")
    p.add_argument("--interval", type=argtypes.positive_float, metavar="SECONDS",
                   default=30.0, help="decide again at least this often (default %(default)s)")
    logs.add_level_flag(p)


def run(args: argparse.Namespace) -> int:
    from kubernetes import client

    from ckpt_preempt.controller.core import gpu_resources
    from ckpt_preempt.controller.kube import convert, records
    from ckpt_preempt.controller.kube.informer import Informer
    from ckpt_preempt.controller.kueue import booster, workloads
    from ckpt_preempt.controller.writes.actions import Actions, WriteGuard
    from ckpt_preempt.policies.kueue import boost

    logs.setup(args.log_level)
    prog = f"ckpt-preempt {NAME}"
    cfg = load_config(args, prog)
    if cfg is None:
        return 2
    api = connect(args, prog)
    if api is None:
        return 2
    settings = booster.BoostSettings(
        namespaces=frozenset(cfg.namespaces), gate_on=args.kueue_priority_boost == "on",
        dry_run=args.dry_run or cfg.dry_run, limits=convert.limits(cfg),
        interval_seconds=args.interval)
    actions = Actions(api, plan_namespace=cfg.plan_namespace, guard=WriteGuard(
        dry_run=not settings.writes, request_timeout=cfg.request_timeout_seconds))
    if not settings.gate_on:
        print(f"{prog}: --kueue-priority-boost off: logging the boosts, writing none",
              file=sys.stderr)
    changed = threading.Event()
    gpus = gpu_resources.from_config(cfg)
    loop = booster.BoostLoop(
        booster.Booster(actions, settings),
        workloads=workloads.KueueInformer(api, boost.WORKLOADS, workloads.workload_info,
                                          changed),
        # the Workloads' informer says once that Kueue is absent; this one stays quiet
        classes=workloads.KueueInformer(
            api, workloads.PRIORITY_CLASSES, workloads.class_value, changed,
            discover=lambda api, plural, report: workloads.served_version(api, plural,
                                                                          report=False)),
        priority_classes=workloads.priority_class_informer(api, changed),
        pods=Informer("pods", client.CoreV1Api(api).list_pod_for_all_namespaces,
                      booster.safe_pod_info(lambda d: records.pod_info(d, gpus)),
                      workloads.object_key, changed),
        changed=changed)
    stop = stop_on_signals(changed)
    loop.run(stop)
    return 0


if __name__ == "__main__":
    _p = argtypes.Parser(prog=f"ckpt-preempt {NAME}")
    add_arguments(_p)
    sys.exit(run(_p.parse_args()))
