"""Serve the grace webhook: a mutating admission webhook on pod CREATE that sets
``spec.terminationGracePeriodSeconds`` to the pod's ``ckpt-preempt.io/checkpoint-seconds``
(capped by ``maxCheckpointSeconds``) plus a margin, never lowering the pod's own value, so a
preemption that deletes the pod with its grace period (Kueue, Volcano, KAI, kube-scheduler)
leaves time for the checkpoint on SIGTERM. It never rejects a pod and needs no API access. See
controller/README.md, "The grace webhook".
"""

from __future__ import annotations

import argparse
import sys

from ckpt_preempt.cli import argtypes
from ckpt_preempt.cli.files import readable_file
from ckpt_preempt.controller.app import logs
from ckpt_preempt.controller.app.cmd_common import (
    add_tls_flags,
    load_config,
    serve_webhook,
    stop_on_signals,
    webhook_tls,
)
from ckpt_preempt.policies.disruption.grace_period import (
    ALWAYS_EXCLUDED,
    DEFAULT_MARGIN_SECONDS,
    GraceLimits,
)

NAME = "grace-webhook"
HELP = ("serve the grace webhook (mutating admission webhook on pod CREATE, HTTPS): a grace "
        "period sized to the checkpoint")
DEFAULT_LISTEN = "0.0.0.0:8443"
PROG = "ckpt-preempt grace-webhook"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=readable_file,
                   help="controller config file (YAML or JSON): its "
                        "maxCheckpointSeconds caps the declared checkpoint time")
    p.add_argument("--margin-seconds", type=argtypes.non_negative_int, metavar="SECONDS",
                   default=DEFAULT_MARGIN_SECONDS,
                   help="added to the declared checkpoint time (default %(default)s)")
    p.add_argument("--exclude-namespace", action="append", default=[], metavar="NAMESPACE",
                   help=f"never change pods here ({', '.join(sorted(ALWAYS_EXCLUDED))} always); "
                        "repeatable")
    add_tls_flags(p)
    p.add_argument("--listen", type=argtypes.host_port_or_any, metavar="HOST:PORT",
                   default=DEFAULT_LISTEN,
                   help="where to serve POST /mutate and GET /healthz; port 0: any free one, "
                        "printed on stderr (default %(default)s)")
    logs.add_level_flag(p)


def limits(cfg, args: argparse.Namespace) -> GraceLimits:
    return GraceLimits(max_checkpoint_seconds=cfg.max_checkpoint_seconds,
                       margin_seconds=args.margin_seconds,
                       excluded_namespaces=frozenset(args.exclude_namespace))


def run(args: argparse.Namespace) -> int:
    from ckpt_preempt.controller.grace.grace import PATH, GraceWebhook

    logs.setup(args.log_level)
    cfg = load_config(args, PROG)
    if cfg is None:
        return 2
    ctx = webhook_tls(args, PROG)
    if ctx is None:
        return 2
    webhook = GraceWebhook(limits(cfg, args))
    server = serve_webhook(args, PROG, webhook, ctx, path=PATH,
                           note=f" (cap {webhook.limits.cap_seconds} s)")
    if server is None:
        return 2
    stop = stop_on_signals()
    try:
        stop.wait()
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    _p = argtypes.Parser(prog=PROG)
    add_arguments(_p)
    sys.exit(run(_p.parse_args()))
