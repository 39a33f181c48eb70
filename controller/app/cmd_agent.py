"""Checkpoint agent sidecar: answers the controller's drain requests for its own pod.

The pod is named by --pod/--namespace or the POD_NAME/POD_NAMESPACE environment (downward API).
Choose one hook, or none (the workload follows requests and cancels through the SDK):

  --exec CMD [--cancel-exec CMD]     run CMD (exit 0 = saved); CKPT_PREEMPT_ACTION, _PLAN and
                                     _DEADLINE are set; --cancel-exec runs when a plan aborts
  --http URL [--http-cancel URL]     POST {"action", "plan", "deadline"}; 2xx = saved
  --signal-pid PID | --signal-pidfile FILE
                                     send --signal (SIGUSR1) for a request and --cancel-signal
                                     (SIGUSR2, or "none") for a cancel, each only if the
                                     process handles it; the workload acks through the SDK
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import urllib.parse

from ckpt_preempt.cli import argtypes
from ckpt_preempt.controller.app import logs
from ckpt_preempt.controller.app.cmd_common import add_cluster_flags, api_client, stop_on_signals
from ckpt_preempt_sdk import AGENT_HOST, AGENT_PORT

NAME = "agent"
HELP = "checkpoint agent: run the workload's checkpoint hook when a drain is requested"
NO_SIGNAL = "none"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_cluster_flags(p)
    p.add_argument("--pod", default=os.environ.get("POD_NAME"),
                   help="this pod's name (default: $POD_NAME, from the downward API)")
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE"),
                   help="this pod's namespace (default: $POD_NAMESPACE)")
    hook = p.add_mutually_exclusive_group()
    hook.add_argument("--exec", dest="exec_", metavar="CMD", help="run CMD; exit 0 = saved")
    hook.add_argument("--http", metavar="URL", type=http_url,
                      help="POST the request to URL; 2xx = saved")
    hook.add_argument("--signal-pid", type=argtypes.positive_int, metavar="PID",
                      help="signal this process (see --signal, --cancel-signal)")
    hook.add_argument("--signal-pidfile", metavar="FILE",
                      help="signal the process whose PID this file holds, read at each request")
    p.add_argument("--cancel-exec", metavar="CMD", help="with --exec: run CMD on a cancel")
    p.add_argument("--http-cancel", metavar="URL", type=http_url,
                   help="with --http: POST cancels to URL")
    p.add_argument("--signal", default="SIGUSR1", help="request signal for --signal-* (SIGUSR1)")
    p.add_argument("--cancel-signal", default="SIGUSR2",
                   help=f"cancel signal for --signal-* (SIGUSR2; {NO_SIGNAL!r}: none)")
    p.add_argument("--listen", type=argtypes.host_port, default=f"{AGENT_HOST}:{AGENT_PORT}",
                   metavar="HOST:PORT", help="local SDK endpoint (default %(default)s)")
    logs.add_level_flag(p)


def http_url(text: str) -> str:
    """argparse ``type=``: an http:// or https:// URL with a host."""
    url = urllib.parse.urlsplit(text.strip())
    if url.scheme not in ("http", "https") or not url.hostname:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text.strip()


class UsageError(ValueError):
    """Bad command-line input: one line, exit code 2."""


def _signal(name: str) -> int:
    try:
        return signal.Signals[name.upper()]
    except KeyError:
        raise UsageError(f"unknown signal {name!r}") from None


def _command(flag: str, cmd: str) -> str:
    try:
        if shlex.split(cmd):
            return cmd
    except ValueError as e:
        raise UsageError(f"{flag}: {e}") from None
    raise UsageError(f"{flag}: empty command")


def build_hook(args: argparse.Namespace):
    from ckpt_preempt.controller.agent import agent

    if args.cancel_exec and not args.exec_:
        raise UsageError("--cancel-exec needs --exec")
    if args.http_cancel and not args.http:
        raise UsageError("--http-cancel needs --http")
    if args.exec_:
        cancel = _command("--cancel-exec", args.cancel_exec) if args.cancel_exec else None
        return agent.ExecHook(_command("--exec", args.exec_), cancel_command=cancel)
    if args.http:
        return agent.HttpHook(args.http, cancel_url=args.http_cancel)
    signum = _signal(args.signal)
    cancel_signum = None if args.cancel_signal.lower() == NO_SIGNAL else _signal(
        args.cancel_signal)
    if args.signal_pid is not None or args.signal_pidfile:
        return agent.SignalHook(pid=args.signal_pid, pidfile=args.signal_pidfile, signum=signum,
                                cancel_signum=cancel_signum)
    return None


def run(args: argparse.Namespace) -> int:
    from ckpt_preempt.cli.output import one_line
    from ckpt_preempt.controller.agent import agent, agent_process

    try:
        if not args.pod or not args.namespace:
            raise UsageError("--pod and --namespace (or POD_NAME/POD_NAMESPACE) are needed")
        hook = build_hook(args)
        host, port = args.listen
        host = host or AGENT_HOST
        logs.setup(args.log_level)
    except (UsageError, ValueError) as e:
        print(f"ckpt-preempt agent: {e}", file=sys.stderr)
        return 2
    try:
        api = api_client(args.kubeconfig, args.in_cluster)
    except Exception as e:  # a missing or broken kubeconfig, no in-cluster environment
        print(f"ckpt-preempt agent: cannot load Kubernetes credentials: {one_line(e)}",
              file=sys.stderr)
        return 2
    checkpointer = agent.CheckpointAgent(
        agent_process.KubePodWriter(api, namespace=args.namespace, name=args.pod), hook=hook)
    try:
        server = agent_process.serve(checkpointer, host, port)
    except OSError as e:
        print(f"ckpt-preempt agent: cannot listen on {host}:{port}: {one_line(e)}",
              file=sys.stderr)
        return 2
    stop = stop_on_signals()
    agent_process.run(checkpointer, api, namespace=args.namespace, name=args.pod, server=server,
                      stop=stop)
    return 0


if __name__ == "__main__":  # `python -m controller.app.cmd_agent`
    _p = argtypes.Parser(prog="ckpt-preempt agent")
    add_arguments(_p)
    sys.exit(run(_p.parse_args()))
