"""Run the preemption controller: watch, plan, drain, evict, steer.

Exactly one replica acts at a time (a coordination/v1 Lease). Logs are JSON lines on stderr;
/metrics, /healthz and /readyz are served on --listen.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

NAME = "run"
HELP = "run the preemption controller against a cluster"


def add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube)")
    where.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    p.add_argument("--config", help="controller config file (YAML or JSON)")
    p.add_argument("--dry-run", action="store_true", help="plan and emit Events; evict nothing")
    p.add_argument("--listen", default="0.0.0.0:8080", help="HOST:PORT for metrics and health")
    p.add_argument("--identity", help="leader-election identity (default: host-pid-random)")
    p.add_argument("--log-level", default="INFO")


def api_client(kubeconfig: str | None, in_cluster: bool):
    from kubernetes import client, config

    if in_cluster:
        config.load_incluster_config()
        return client.ApiClient()
    return config.new_client_from_config(config_file=kubeconfig)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ckpt_preempt.controller import config as cfgmod
    from ckpt_preempt.controller import logs
    from ckpt_preempt.controller.runner import Controller

    logs.setup(args.log_level)
    try:
        cfg = cfgmod.load(args.config)
    except cfgmod.ConfigError as e:
        print(f"ckpt-preempt run: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        cfg = replace(cfg, dry_run=True)
    host, _, port = args.listen.rpartition(":")
    try:
        api = api_client(args.kubeconfig, args.in_cluster)
    except Exception as e:
        print(f"ckpt-preempt run: cannot load cluster credentials: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    Controller(api, cfg, identity=args.identity, listen=(host or "0.0.0.0", int(port))).run(stop)
    return 0


if __name__ == "__main__":  # lets tests start it as `python -m controller.cmd_run`
    _p = argparse.ArgumentParser(prog="ckpt-preempt run")
    add_arguments(_p)
    sys.exit(run(_p.parse_args()))
