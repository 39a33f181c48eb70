"""Serve the eviction gate: a validating admission webhook on ``pods/eviction`` that asks a
pod which checkpoints on request to checkpoint before any eviction takes it (``kubectl
drain``, autoscalers, the descheduler), refusing the Eviction with 429 until the pod
acknowledges or its deadline (``checkpoint-seconds``, capped by ``maxCheckpointSeconds``)
passes. Its own process, apart from ``run``: see controller/README.md, "The eviction gate".
"""

from __future__ import annotations

import argparse
import sys

from ckpt_preempt.cli import argtypes
from ckpt_preempt.cli.files import readable_file
from ckpt_preempt.controller.app import logs
from ckpt_preempt.controller.app.cmd_common import (
    add_cluster_flags,
    add_tls_flags,
    connect,
    load_config,
    serve_webhook,
    stop_on_signals,
    webhook_tls,
)

NAME = "gate"
HELP = "serve the eviction gate (admission webhook on pods/eviction, HTTPS)"
DEFAULT_LISTEN = "0.0.0.0:8443"
PROG = "ckpt-preempt gate"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_cluster_flags(p)
    p.add_argument("--config", type=readable_file,
                   help="controller config file (YAML or JSON): its "
                        "maxCheckpointSeconds caps every hold")
    p.add_argument("--exempt-user", action="append", default=[], metavar="USERNAME",
                   help="Evictions by this user pass straight through (the controller's "
                        "ServiceAccount, system:serviceaccount:NS:NAME, after its own drain); "
                        "repeatable")
    p.add_argument("--exclude-namespace", action="append", default=[], metavar="NAMESPACE",
                   help="never delay evictions here ('*': anywhere); repeatable")
    p.add_argument("--exclude-priority-class", action="append", default=[], metavar="NAME",
                   help="never delay evictions of pods of this priority class; repeatable")
    add_tls_flags(p)
    p.add_argument("--listen", type=argtypes.host_port_or_any, metavar="HOST:PORT",
                   default=DEFAULT_LISTEN,
                   help="where to serve POST /validate and GET /healthz; port 0: any free one, "
                        "printed on stderr (default %(default)s)")
    p.add_argument("--no-watch-cache", action="store_true",
                   help="read each pod with a GET instead of from a watch of all pods (less "
                        "memory and RBAC: no list/watch of pods; slower answers)")
    logs.add_level_flag(p)


def settings(cfg, args: argparse.Namespace):
    """The gate's settings: the cap from the controller's Config, the rest from the flags."""
    from ckpt_preempt.controller.gate.gate import API_TIMEOUT_SECONDS, GateSettings
    from ckpt_preempt.policies.disruption.eviction_gate import GateLimits

    return GateSettings(
        limits=GateLimits(
            max_checkpoint_seconds=cfg.max_checkpoint_seconds,
            excluded_namespaces=frozenset(args.exclude_namespace),
            excluded_priority_classes=frozenset(args.exclude_priority_class)),
        exempt_users=frozenset(args.exempt_user),
        request_timeout=min(cfg.request_timeout_seconds, API_TIMEOUT_SECONDS))


def run(args: argparse.Namespace) -> int:
    from ckpt_preempt.controller.gate import gate_server
    from ckpt_preempt.controller.gate.gate import Gate
    from ckpt_preempt.controller.gate.gate_cache import PodCache

    logs.setup(args.log_level)
    cfg = load_config(args, PROG)
    if cfg is None:
        return 2
    ctx = webhook_tls(args, PROG)
    if ctx is None:
        return 2
    api = connect(args, PROG)
    if api is None:
        return 2
    cache = None if args.no_watch_cache else PodCache(api)
    server = serve_webhook(args, PROG, Gate(api, settings(cfg, args), cache=cache), ctx,
                           path=gate_server.PATH)
    if server is None:
        return 2
    if cache is not None:
        cache.start()
    stop = stop_on_signals()
    try:
        stop.wait()
    finally:
        server.shutdown()
        if cache is not None:
            cache.stop()
    return 0


if __name__ == "__main__":
    _p = argtypes.Parser(prog=PROG)
    add_arguments(_p)
    sys.exit(run(_p.parse_args()))
