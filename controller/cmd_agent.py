"""Checkpoint agent sidecar: answers the controller's drain requests for its own pod.

The pod is named by --pod/--namespace or the POD_NAME/POD_NAMESPACE environment (downward API).
Choose one hook: --exec CMD, --http URL, --signal-pid PID / --signal-pidfile FILE (with
--signal NAME), or none (the workload polls through the SDK).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

NAME = "agent"
HELP = "checkpoint agent: run the workload's checkpoint hook when a drain is requested"


def add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig")
    where.add_argument("--in-cluster", action="store_true")
    p.add_argument("--pod", default=os.environ.get("POD_NAME"))
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE"))
    hook = p.add_mutually_exclusive_group()
    hook.add_argument("--exec", dest="exec_", metavar="CMD", help="run CMD; exit 0 = saved")
    hook.add_argument("--http", metavar="URL", help="POST the request to URL; 2xx = saved")
    hook.add_argument("--signal-pid", type=int, metavar="PID")
    hook.add_argument("--signal-pidfile", metavar="FILE")
    p.add_argument("--signal", default="SIGUSR1", help="signal name for --signal-* (SIGUSR1)")
    p.add_argument("--listen", default="127.0.0.1:8471", help="local SDK endpoint HOST:PORT")
    p.add_argument("--log-level", default="INFO")


def run(args: argparse.Namespace) -> int:
    from controller import agent, logs
    from controller.cmd_run import api_client

    logs.setup(args.log_level)
    if not args.pod or not args.namespace:
        print("ckpt-preempt agent: --pod and --namespace (or POD_NAME/POD_NAMESPACE) are needed",
              file=sys.stderr)
        return 2
    try:
        signum = signal.Signals[args.signal.upper()]
    except KeyError:
        print(f"ckpt-preempt agent: unknown signal {args.signal!r}", file=sys.stderr)
        return 2
    hook: agent.Hook | None = None
    if args.exec_:
        hook = agent.ExecHook(args.exec_)
    elif args.http:
        hook = agent.HttpHook(args.http)
    elif args.signal_pid is not None or args.signal_pidfile:
        hook = agent.SignalHook(pid=args.signal_pid, pidfile=args.signal_pidfile, signum=signum)
    host, _, port = args.listen.rpartition(":")
    api = api_client(args.kubeconfig, args.in_cluster)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    agent.CheckpointAgent(api, namespace=args.namespace, name=args.pod, hook=hook,
                          listen=(host or "127.0.0.1", int(port))).run(stop)
    return 0


if __name__ == "__main__":  # `python -m controller.cmd_agent`
    _p = argparse.ArgumentParser(prog="ckpt-preempt agent")
    add_arguments(_p)
    sys.exit(run(_p.parse_args()))
