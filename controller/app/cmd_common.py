"""What the ``ckpt-preempt`` commands that talk to a cluster share: the ``--kubeconfig`` /
``--in-cluster`` flags, the API client they name (with one clear line when the credentials are
missing or broken), the controller config file, and the default listen host."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

DEFAULT_LISTEN_HOST = "0.0.0.0"


def add_cluster_flags(p: argparse.ArgumentParser, *, in_cluster: bool = True) -> None:
    """``--kubeconfig`` and, for the commands that run in a pod, ``--in-cluster`` (exclusive)."""
    where = p.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube)")
    if in_cluster:
        where.add_argument("--in-cluster", action="store_true",
                           help="use the pod's service account")


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


def connect(args: argparse.Namespace, prog: str):
    """An API client from --kubeconfig/--in-cluster, or None after one line on stderr (the
    caller exits 2)."""
    from ckpt_preempt.cli.output import one_line

    try:
        return api_client(args.kubeconfig, getattr(args, "in_cluster", False))
    except Exception as e:  # no kubeconfig, a broken one, no in-cluster environment
        print(f"{prog}: cannot load cluster credentials: {one_line(e)}", file=sys.stderr)
        return None


def load_config(args: argparse.Namespace, prog: str):
    """The config file's Config, or None after one line on stderr (the caller exits 2)."""
    from ckpt_preempt.controller.core import config as cfgmod

    try:
        return cfgmod.load(args.config)
    except cfgmod.ConfigError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None


def webhook_tls(args: argparse.Namespace, prog: str):
    """The TLS context from --tls-cert/--tls-key for an admission webhook, or None after one
    line on stderr (the caller exits 2)."""
    import ssl

    from ckpt_preempt.cli.output import one_line
    from ckpt_preempt.controller.gate import gate_server

    try:
        return gate_server.tls_context(args.tls_cert, args.tls_key)
    except (OSError, ssl.SSLError) as e:
        print(f"{prog}: cannot load the TLS certificate and key: {one_line(e)}", file=sys.stderr)
        return None


def serve_webhook(args: argparse.Namespace, prog: str, handler, ctx, *, path: str,
                  note: str = ""):
    """Serve ``handler``'s AdmissionReviews at ``path`` on --listen over ``ctx`` (the gate's
    HTTPS server), saying where on stderr; the server, or None after one line on stderr (the
    caller exits 2)."""
    from ckpt_preempt.cli.output import one_line
    from ckpt_preempt.controller.gate import gate_server

    host, port = args.listen
    host = host or DEFAULT_LISTEN_HOST
    try:
        server = gate_server.serve(handler, host, port, ctx, path=path)
    except OSError as e:
        print(f"{prog}: cannot listen on {host}:{port}: {one_line(e)}", file=sys.stderr)
        return None
    bound = server.server_address
    print(f"{prog}: listening on {bound[0]}:{bound[1]}{note}", file=sys.stderr, flush=True)
    return server


def stop_on_signals(*wake: threading.Event) -> threading.Event:
    """An Event set on SIGTERM or SIGINT (the kubelet's stop, Ctrl-C), which also sets each of
    ``wake`` (loops that wait on an Event of their own)."""
    stop = threading.Event()

    def handle(*_: object) -> None:
        stop.set()
        for event in wake:
            event.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handle)
    return stop
