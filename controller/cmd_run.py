"""Run the preemption controller: watch, plan, drain, evict, steer.

Exactly one replica acts at a time (a coordination/v1 Lease). Logs are JSON lines on stderr;
/metrics, /healthz and /readyz are served on --listen.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading

from ckpt_preempt.cli import argtypes
from ckpt_preempt.controller import logs

NAME = "run"
HELP = "run the preemption controller against a cluster"
DEFAULT_LISTEN_HOST = "0.0.0.0"


def add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube)")
    where.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    p.add_argument("--config", help="controller config file (YAML or JSON)")
    p.add_argument("--dry-run", action="store_true", help="plan and emit Events; evict nothing")
    p.add_argument("--listen", type=argtypes.host_port_or_any, metavar="HOST:PORT",
                   default=f"{DEFAULT_LISTEN_HOST}:8080",
                   help="where to serve /metrics, /healthz and /readyz; port 0: any free one "
                        "(default %(default)s)")
    p.add_argument("--identity", help="leader-election identity (default: host-pid-random)")
    logs.add_level_flag(p)


def kubeconfig_problem(path: str) -> str | None:
    """Why the file at ``path`` is not a kubeconfig, or None. The client's loader reports a file
    that is YAML but not a mapping (``/etc/passwd``, say) as "'str' object does not support item
    assignment"; this names the file and what it lacks instead."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        return f"kubeconfig {path}: {e.strerror or e}"
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        return f"kubeconfig {path}: not YAML ({type(e).__name__})"
    if not isinstance(doc, dict) or not any(k in doc for k in ("clusters", "contexts", "users")):
        return f"kubeconfig {path}: not a kubeconfig (no clusters, contexts or users)"
    return None


def _kubeconfig_files(kubeconfig: str | None) -> list[str]:
    """The files the client's loader would read: the flag, else $KUBECONFIG's existing entries,
    else ~/.kube/config where it exists."""
    if kubeconfig:
        return [kubeconfig]
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return [p for p in listed if os.path.exists(p)]
    default = os.path.expanduser("~/.kube/config")
    return [default] if os.path.exists(default) else []


def api_client(kubeconfig: str | None, in_cluster: bool):
    from kubernetes import client, config

    if in_cluster:
        config.load_incluster_config()
        return client.ApiClient()
    for path in _kubeconfig_files(kubeconfig):
        if problem := kubeconfig_problem(path):
            raise ValueError(problem)
    return config.new_client_from_config(config_file=kubeconfig)


def load_config(args: argparse.Namespace, prog: str):
    """The config file's Config, or None after one line on stderr (the caller exits 2)."""
    from ckpt_preempt.controller import config as cfgmod

    try:
        return cfgmod.load(args.config)
    except cfgmod.ConfigError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None


def connect(args: argparse.Namespace, prog: str):
    """An API client from --kubeconfig/--in-cluster, or None after one line on stderr."""
    from ckpt_preempt.cli.output import one_line

    try:
        return api_client(args.kubeconfig, args.in_cluster)
    except Exception as e:  # no kubeconfig, a broken one, no in-cluster environment
        print(f"{prog}: cannot load cluster credentials: {one_line(e)}", file=sys.stderr)
        return None


def _can_listen(host: str, port: int) -> None:
    """OSError now, with one line, rather than a traceback once the watches have started."""
    with socket.create_server((host, port)):
        pass


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ckpt_preempt.cli.output import one_line
    from ckpt_preempt.controller.runner import Controller

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
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    Controller(api, cfg, identity=args.identity, listen=(host, port)).run(stop)
    return 0


if __name__ == "__main__":  # lets tests start it as `python -m controller.cmd_run`
    _p = argtypes.Parser(prog="ckpt-preempt run")
    add_arguments(_p)
    sys.exit(run(_p.parse_args()))
