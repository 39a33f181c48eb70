"""Serve a kube-scheduler extender: filter (NVLink), prioritize (placement), preempt (least
lost work).

It keeps its own watch cache of Nodes, Pods and PDBs (``nodeCacheCapable: true``: the scheduler
sends node names only) and answers on --listen; configure kube-scheduler with
deploy/scheduler/scheduler-config.yaml. The preempt verb only reshapes kube-scheduler's own
victim choice: kube-scheduler deletes the victims itself, with no drain and no checkpoint
request. See docs/extender.md.
"""

from __future__ import annotations

import argparse
import sys

from ckpt_preempt.cli import argtypes
from ckpt_preempt.cli.files import readable_file
from ckpt_preempt.controller.app import logs
from ckpt_preempt.controller.app.cmd_common import (
    DEFAULT_LISTEN_HOST,
    add_cluster_flags,
    connect,
    load_config,
    stop_on_signals,
)

NAME = "extender"
HELP = "serve a kube-scheduler extender (filter, prioritize, preempt)"
DEFAULT_LISTEN = "0.0.0.0:8888"
DEFAULT_BUDGET_MS = 5.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_cluster_flags(p)
    p.add_argument("--config", type=readable_file,
                   help="controller config file (YAML or JSON): its checkpoint "
                        "limits and restart cost price the preempt verb's victims")
    p.add_argument("--listen", type=argtypes.host_port_or_any, metavar="HOST:PORT",
                   default=DEFAULT_LISTEN,
                   help="where to serve the verbs, /metrics, /healthz and /readyz; port 0: any "
                        "free one, printed on stderr (default %(default)s)")
    p.add_argument("--prioritize-budget-ms", type=argtypes.positive_float,
                   default=DEFAULT_BUDGET_MS, metavar="MS",
                   help="time budget for scoring one prioritize request; past it the nodes are "
                        "scored by BestFit and ckpt_preempt_extender_score_fallbacks_total "
                        "counts it (default %(default)s)")
    logs.add_level_flag(p)


def run(args: argparse.Namespace) -> int:
    from ckpt_preempt.cli.output import one_line
    from ckpt_preempt.controller.core import gpu_resources
    from ckpt_preempt.controller.extender.extender import Extender
    from ckpt_preempt.controller.extender.extender_model import CachedView
    from ckpt_preempt.controller.extender.extender_verbs import PreemptSettings
    from ckpt_preempt.controller.kube import convert
    from ckpt_preempt.controller.kube.watch import ClusterCache

    logs.setup(args.log_level)
    cfg = load_config(args, "ckpt-preempt extender")
    if cfg is None:
        return 2
    host, port = args.listen
    host = host or DEFAULT_LISTEN_HOST
    api = connect(args, "ckpt-preempt extender")
    if api is None:
        return 2
    cache = ClusterCache(api, plan_namespace=cfg.plan_namespace,
                         gpus=gpu_resources.from_config(cfg))
    view = CachedView(cache)
    ext = Extender(view, budget_seconds=args.prioritize_budget_ms / 1000,
                   settings=PreemptSettings(limits=convert.limits(cfg),
                                            restart_seconds=cfg.restart_cost_seconds))
    try:
        bound = ext.serve(host, port)
    except OSError as e:
        print(f"ckpt-preempt extender: cannot listen on {host}:{port}: {one_line(e)}",
              file=sys.stderr)
        return 2
    print(f"ckpt-preempt extender: listening on {bound[0]}:{bound[1]}", file=sys.stderr,
          flush=True)
    stop = stop_on_signals()
    cache.start()
    view.start(stop)
    try:
        stop.wait()
    finally:
        cache.stop()
        ext.stop()
    return 0


if __name__ == "__main__":
    _p = argtypes.Parser(prog="ckpt-preempt extender")
    add_arguments(_p)
    sys.exit(run(_p.parse_args()))
