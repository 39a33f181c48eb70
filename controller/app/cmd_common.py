"""What the ``ckpt-preempt`` commands that talk to a cluster share: the ``--kubeconfig`` /
``--in-cluster`` flags, the API client they name (with one clear line when the credentials are
missing or broken, and urllib3's per-request noise quieted), the controller config file, the
webhooks' TLS files, and the default listen host."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading

from ckpt_preempt.cli.files import file_problem, readable_file

DEFAULT_LISTEN_HOST = "0.0.0.0"
PEM_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----")  # PKCS#8, RSA, EC
log = logging.getLogger("ckpt_preempt.client")


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
    from ckpt_preempt.controller.core import documents

    try:
        doc = documents.load(path)
    except documents.DocumentError as e:
        return f"kubeconfig {e}"
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
    """The API client of every command that talks to a cluster: the one place it is made."""
    from kubernetes import client, config

    if in_cluster:
        config.load_incluster_config()
        api = client.ApiClient()
    else:
        for path in _kubeconfig_files(kubeconfig):
            if problem := kubeconfig_problem(path):
                raise ValueError(problem)
        api = config.new_client_from_config(config_file=kubeconfig)
    _quiet_transport(api.configuration)
    return api


def _quiet_transport(configuration) -> None:
    """urllib3's noise, said once instead: its connection-pool retry WARNINGs (every caller
    retries with its own backoff and one line per step, or stops with one line), and, where the
    kubeconfig turned TLS verification off, the InsecureRequestWarning of every request (the
    user chose it: one warning now)."""
    import warnings

    from urllib3.exceptions import InsecureRequestWarning

    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    if not configuration.verify_ssl and configuration.host.startswith("https:"):
        warnings.simplefilter("ignore", InsecureRequestWarning)
        log.warning("TLS certificate verification is off for the API server %s "
                    "(insecure-skip-tls-verify): its identity is not checked",
                    configuration.host)


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


def add_tls_flags(p: argparse.ArgumentParser) -> None:
    """An admission webhook's ``--tls-cert`` and ``--tls-key`` (read by ``webhook_tls``)."""
    p.add_argument("--tls-cert", required=True, type=readable_file, metavar="FILE",
                   help="serving certificate (PEM), chain first")
    p.add_argument("--tls-key", required=True, type=readable_file, metavar="FILE",
                   help="its private key (PEM)")


def tls_problem(cert: str | os.PathLike, key: str | os.PathLike, error: Exception) -> str:
    """Which of --tls-cert and --tls-key is wrong, and how, when loading them raised ``error``
    (OpenSSL says only "PEM lib", naming neither)."""
    import ssl

    try:
        ssl.create_default_context(cafile=cert)  # parses every certificate in the file
    except ssl.SSLError:  # no certificate in it, or a broken one
        return f"--tls-cert {os.fspath(cert)}: not a PEM certificate"
    except OSError as e:
        return f"--tls-cert {file_problem(cert, e)}"
    try:
        with open(key, encoding="ascii", errors="replace") as f:
            key_text = f.read()
    except OSError as e:
        return f"--tls-key {file_problem(key, e)}"
    if not PEM_PRIVATE_KEY.search(key_text):
        return f"--tls-key {os.fspath(key)}: not a PEM private key"
    if getattr(error, "reason", None) == "KEY_VALUES_MISMATCH":
        return (f"--tls-key {os.fspath(key)} does not match the certificate in --tls-cert "
                f"{os.fspath(cert)}")
    return f"--tls-key {os.fspath(key)}: not a usable PEM private key"


def webhook_tls(args: argparse.Namespace, prog: str):
    """The TLS context from --tls-cert/--tls-key for an admission webhook, or None after one
    line on stderr naming the file and what is wrong with it (the caller exits 2)."""
    import ssl

    from ckpt_preempt.controller.gate import gate_server

    try:
        return gate_server.tls_context(args.tls_cert, args.tls_key)
    except (OSError, ssl.SSLError) as e:
        print(f"{prog}: cannot load the TLS certificate and key: "
              f"{tls_problem(args.tls_cert, args.tls_key, e)}", file=sys.stderr)
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
