"""Run the preemption controller: watch, plan, drain, evict, steer.

Exactly one replica acts at a time (a coordination/v1 Lease). Logs are JSON lines on stderr;
/metrics, /healthz and /readyz are served on --listen.
"""

from __future__ import annotations

import argparse
import socket
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

NAME = "run"
HELP = "run the preemption controller against a cluster"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_cluster_flags(p)
    p.add_argument("--config", type=readable_file, help="controller config file (YAML or JSON)")
    p.add_argument("--dry-run", action="store_true", help="plan and emit Events; evict nothing")
    p.add_argument("--listen", type=argtypes.host_port_or_any, metavar="HOST:PORT",
                   default=f"{DEFAULT_LISTEN_HOST}:8080",
                   help="where to serve /metrics, /healthz and /readyz; port 0: any free one "
                        "(default %(default)s)")
    p.add_argument("--identity", help="leader-election identity (default: host-pid-random)")
    logs.add_level_flag(p)


def _can_listen(host: str, port: int) -> None:
    """OSError now, with one line, rather than a traceback once the watches have started."""
    with socket.create_server((host, port)):
        pass


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ckpt_preempt.cli.output import one_line
    from ckpt_preempt.controller.app.runner import Controller

    logs.setup(args.log_level)
    cfg = load_config(args, "ckpt-preempt run")
    if cfg is None:
        return 2
    if args.dry_run:
        cfg = replace(cfg, dry_run=True)
    host, port = args.listen
    host = host or DEFAULT_LISTEN_HOST
    try:
        _can_listen(host, port)
    except OSError as e:
        print(f"ckpt-preempt run: cannot listen on {host}:{port}: {one_line(e)}", file=sys.stderr)
        return 2
    api = connect(args, "ckpt-preempt run")
    if api is None:
        return 2
    stop = stop_on_signals()
    Controller(api, cfg, identity=args.identity, listen=(host, port)).run(stop)
    return 0


if __name__ == "__main__":  # lets tests start it as `python -m controller.app.cmd_run`
    _p = argtypes.Parser(prog="ckpt-preempt run")
    add_arguments(_p)
    sys.exit(run(_p.parse_args()))
