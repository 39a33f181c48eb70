"""Command-line entry point ``hwprobe``.

Exit codes: 0 success (verify: matches), 1 verify found differences, 2 NVML unavailable or a
usage/spec/publish error. Errors are one line on stderr, never a traceback; the whole command
line is checked before NVML is touched: bad flag values by their argparse types
(``cli.argtypes``; ``--expect``'s spec is loaded as its value), ``--node`` by ``check``.
Results go to stdout through ``emit``, so ``hwprobe verify | head -1`` keeps verify's exit code.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata

from ckpt_preempt.cli import argtypes
from ckpt_preempt.cli.output import emit
from ckpt_preempt.hwprobe.errors import HwprobeError, NvmlUnavailable, SpecError
from ckpt_preempt.hwprobe.verify import reference_names
from ckpt_preempt.policies.model import topology
from ckpt_preempt.policies.model.gpu_use import ANNOTATION as GPU_USE_ANNOTATION

EXIT_OK, EXIT_DIFF, EXIT_ERROR = 0, 1, 2
PROG = "hwprobe"
DISTRIBUTION = "ckpt-preempt"  # pyproject.toml [project] name
DEFAULT_METRICS_PORT = 9402


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def spec_argument(text: str):
    """argparse ``type=`` of ``--expect``: the loaded ``Spec``, so an unknown or broken one is a
    usage error before anything is probed."""
    from ckpt_preempt.hwprobe.verify import load_spec

    try:
        return load_spec(text)
    except SpecError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _add_verify(sub) -> None:
    verify = sub.add_parser("verify", help="compare with a reference topology; exit 0/1")
    verify.add_argument("--expect", metavar="SPEC", required=True, type=spec_argument,
                        help=f"one of {', '.join(reference_names())}, or a YAML file")
    verify.add_argument("--samples", type=argtypes.positive_int, default=1,
                        help="probe this many times to catch rising error counters "
                             "(default %(default)s)")
    verify.add_argument("--interval", type=argtypes.non_negative_float, default=1.0,
                        help="seconds between samples (default %(default)s)")
    from ckpt_preempt.hwprobe import dcgm_check  # --with-prometheus URL, --node, its timeout

    dcgm_check.add_arguments(verify)


def _add_pod_resources(parser, publishes: bool = True) -> None:
    from ckpt_preempt.hwprobe.gpu_use import GPU_RESOURCE
    from ckpt_preempt.hwprobe.podresources import DEFAULT_SOCKET, SOCKET_ENV

    parser.add_argument("--pod-resources-socket", metavar="PATH",
                        default=os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET,
                        help="the kubelet's PodResources API socket" + (
                            "; without it the gpu-use annotation is removed" if publishes
                            else "") + f" (default: ${SOCKET_ENV}, else %(default)s)")
    parser.add_argument("--gpu-resource", default=GPU_RESOURCE,
                        help="the device plugin's resource name (default %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, every subcommand included; builds nothing else."""
    p = argtypes.Parser(prog=PROG, description="NVML topology probe for GPU nodes")
    p.add_argument("--version", action="version", version=f"{PROG} {version()}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands",
                           help="what to do, one of:")
    sub.add_parser("show", help="topo -m style matrix and a summary")
    report = sub.add_parser("report", help="the full hwprobe/v1 report")
    report.add_argument("--json", action="store_true", help="JSON (the only format; default)")
    report.add_argument("--expect", metavar="SPEC", type=spec_argument,
                        help="verify and record the result")
    report.add_argument("--compact", action="store_true", help="the Node annotation value")
    _add_verify(sub)
    use = sub.add_parser("gpu-use", help="the GPUs in use from the kubelet's PodResources API: "
                                         "the gpu-use annotation value")
    _add_pod_resources(use, publishes=False)
    publish = sub.add_parser("publish", help="write the annotation and labels onto a Node")
    publish.add_argument("--node", default=os.environ.get("NODE_NAME"),
                         help="the Node to write (default: $NODE_NAME)")
    publish.add_argument("--expect", metavar="SPEC", type=spec_argument,
                         help="verify first; labels say the result")
    publish.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                         help="kubeconfig file (default: $KUBECONFIG, else in-cluster, else "
                              "~/.kube/config)")
    _add_pod_resources(publish)
    serve = sub.add_parser("serve", help="re-probe, publish on change, Prometheus metrics")
    serve.add_argument("--node", default=os.environ.get("NODE_NAME"),
                       help="the Node to write (default: $NODE_NAME)")
    serve.add_argument("--expect", metavar="SPEC", type=spec_argument,
                       help="verify each probe against SPEC")
    serve.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                       help="kubeconfig file (default: $KUBECONFIG, else in-cluster, else "
                            "~/.kube/config)")
    serve.add_argument("--interval", type=argtypes.positive_float, default=60.0,
                       help="seconds between probes (default %(default)s)")
    serve.add_argument("--metrics-port", type=argtypes.port, default=DEFAULT_METRICS_PORT,
                       help="port of /metrics (default %(default)s)")
    serve.add_argument("--metrics-address", default="0.0.0.0",
                       help="address /metrics listens on (default %(default)s)")
    serve.add_argument("--no-publish", action="store_true",
                       help="probe and serve metrics only; write nothing to the Node")
    _add_pod_resources(serve)
    serve.add_argument("--gpu-use-refresh", type=argtypes.positive_float, default=300.0,
                       help="rewrite the gpu-use annotation after this many seconds even when "
                            "unchanged, so its time stays recent (default %(default)s)")
    bench = sub.add_parser("bench", help="CUDA copy/P2P bandwidth and integrity (torch or cupy)")
    bench.add_argument("--size-mib", type=argtypes.positive_int, default=256,
                       help="buffer size per copy in MiB (default %(default)s)")
    bench.add_argument("--repeats", type=argtypes.positive_int, default=5,
                       help="timed copies per pair (default %(default)s)")
    return p


def _probe():
    from ckpt_preempt.hwprobe.nvml import probe

    return probe()


def _verdict(topo, expected, samples=1, interval=0.0):
    import time

    from ckpt_preempt.hwprobe.verify import verify

    earlier = None
    for _ in range(samples - 1):
        earlier = topo
        time.sleep(interval)
        topo = _probe()
    return topo, verify(topo, expected, earlier=earlier)


def check(parser: argtypes.Parser, args: argparse.Namespace) -> None:
    """The rules between flags argparse cannot state, as usage errors (exit 2), before NVML."""
    if args.command == "publish" and not args.node:
        parser.command_error("publish", "publish needs --node NAME (or NODE_NAME)")
    if args.command == "serve" and not args.node and not args.no_publish:
        parser.command_error("serve", "serve needs --node NAME (or NODE_NAME), or --no-publish")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_command(argv)
    check(parser, args)
    logging.basicConfig(level=logging.INFO, format="hwprobe: %(message)s")
    try:
        return _dispatch(args)
    except NvmlUnavailable as err:
        print(f"hwprobe: {err}", file=sys.stderr)
        return EXIT_ERROR
    except HwprobeError as err:
        print(f"hwprobe: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_OK


def _dispatch(args: argparse.Namespace) -> int:
    from ckpt_preempt.hwprobe import render, report

    if args.command == "bench":
        from ckpt_preempt.hwprobe import bench

        result = bench.run(_probe(), size_mib=args.size_mib, repeats=args.repeats)
        emit(json.dumps(result.as_dict(), indent=2))
        return EXIT_OK
    if args.command == "serve":
        return _serve(args)
    topo = _probe()
    if args.command == "show":
        emit(render.show(topo))
        return EXIT_OK
    verdict = None
    if getattr(args, "expect", None):
        topo, verdict = _verdict(topo, args.expect, getattr(args, "samples", 1),
                                 getattr(args, "interval", 0.0))
    verified = verdict.ok if verdict else None
    spec = verdict.spec if verdict else None
    if args.command == "report":
        if args.compact:
            emit(report.annotation(topo, verified=verified, spec=spec))
        else:
            findings = list(verdict.findings) if verdict else None
            doc = report.full_report(topo, verified=verified, spec=spec, findings=findings)
            emit(json.dumps(doc, indent=2))
        return EXIT_OK
    if args.command == "verify":
        emit(render.verdict_text(verdict))
        if args.with_prometheus:  # NVML's error counters against DCGM's (hwprobe/dcgm_check.py)
            from ckpt_preempt.hwprobe import dcgm_check

            checks = dcgm_check.run(topo, args.with_prometheus, args.node or topo.hostname,
                                    timeout_s=args.prometheus_timeout)
            emit(dcgm_check.render(checks))
            return EXIT_OK if verdict.ok and dcgm_check.passed(checks) else EXIT_DIFF
        return EXIT_OK if verdict.ok else EXIT_DIFF
    if args.command == "gpu-use":
        seen = _observe(args)(topo)
        if seen.body is None:
            raise HwprobeError(seen.message)
        from ckpt_preempt.hwprobe import gpu_use

        emit(gpu_use.annotation(seen.body, datetime.now(UTC)))
        return EXIT_OK
    if args.command == "publish":
        from ckpt_preempt.hwprobe import gpu_use
        from ckpt_preempt.hwprobe.publish import api_client, publish

        api = api_client(args.kubeconfig)  # no configuration: that one line, nothing before it
        seen = _observe(args)(topo)
        logging.getLogger(PROG).log(logging.WARNING if seen.problem else logging.INFO, "%s",
                                    seen.message)
        use = None if seen.body is None else gpu_use.annotation(seen.body, datetime.now(UTC))
        publish(api, args.node, topo, verified=verified, spec=spec, gpu_use=use)
        emit(f"published {topology.ANNOTATION} on node {args.node}"
             + (f" (verified={str(verified).lower()})" if verdict else "")
             + (f" and {GPU_USE_ANNOTATION}" if use else ""))
        return EXIT_OK
    raise HwprobeError(f"unknown command {args.command}")


def _observe(args: argparse.Namespace):
    from ckpt_preempt.hwprobe.podresources import observe

    return lambda topo: observe(topo, args.pod_resources_socket, args.gpu_resource)


def _serve(args: argparse.Namespace) -> int:
    from prometheus_client import REGISTRY

    from ckpt_preempt.hwprobe import serve

    expected = args.expect  # a Spec (--expect's type), or None
    publisher = None
    if not args.no_publish:
        from ckpt_preempt.hwprobe.publish import api_client, publish

        api = api_client(args.kubeconfig)

        def publisher(topo, verified, gpu_use):
            publish(api, args.node, topo, verified=verified,
                    spec=expected.name if expected else None, gpu_use=gpu_use)

    _probe()  # fail fast (exit 2) when there is no NVML at all
    health = serve.Health(publishing=publisher is not None)
    try:
        serve.start_server(args.metrics_port, args.metrics_address, REGISTRY, health)
    except OSError as err:  # the port is taken, the address is not this host's
        raise HwprobeError(f"cannot serve metrics on {args.metrics_address}:{args.metrics_port}: "
                           f"{err.strerror or err}") from err
    serve.run(probe=_probe, publish=publisher, spec=expected,
              metrics=serve.Metrics.create(REGISTRY), interval=args.interval, health=health,
              observe_use=_observe(args), refresh=args.gpu_use_refresh)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
