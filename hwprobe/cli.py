"""Command-line entry point ``hwprobe``.

Exit codes: 0 success (verify: matches), 1 verify found differences, 2 NVML unavailable or a
usage/spec/publish error. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from ckpt_preempt.hwprobe.errors import HwprobeError, NvmlUnavailable
from ckpt_preempt.hwprobe.verify import reference_names

EXIT_OK, EXIT_DIFF, EXIT_ERROR = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hwprobe", description="NVML topology probe for GPU nodes")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("show", help="topo -m style matrix and a summary")
    report = sub.add_parser("report", help="the full hwprobe/v1 report")
    report.add_argument("--json", action="store_true", help="JSON (the only format; default)")
    report.add_argument("--expect", metavar="SPEC", help="verify and record the result")
    report.add_argument("--compact", action="store_true", help="the Node annotation value")
    verify = sub.add_parser("verify", help="compare with a reference topology; exit 0/1")
    verify.add_argument("--expect", metavar="SPEC", required=True,
                        help=f"one of {', '.join(reference_names())}, or a YAML file")
    verify.add_argument("--samples", type=int, default=1,
                        help="probe this many times to catch rising error counters")
    verify.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    publish = sub.add_parser("publish", help="write the annotation and labels onto a Node")
    publish.add_argument("--node", default=os.environ.get("NODE_NAME"), required=False)
    publish.add_argument("--expect", metavar="SPEC", help="verify first; labels say the result")
    publish.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    serve = sub.add_parser("serve", help="re-probe, publish on change, Prometheus metrics")
    serve.add_argument("--node", default=os.environ.get("NODE_NAME"))
    serve.add_argument("--expect", metavar="SPEC")
    serve.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    serve.add_argument("--interval", type=float, default=60.0)
    serve.add_argument("--metrics-port", type=int, default=9402)
    serve.add_argument("--metrics-address", default="0.0.0.0")
    serve.add_argument("--no-publish", action="store_true")
    bench = sub.add_parser("bench", help="CUDA copy/P2P bandwidth and integrity (torch or cupy)")
    bench.add_argument("--size-mib", type=int, default=256)
    bench.add_argument("--repeats", type=int, default=5)
    return p


def _probe():
    from ckpt_preempt.hwprobe.nvml import probe

    return probe()


def _verdict(topo, spec_name, samples=1, interval=0.0):
    import time

    from ckpt_preempt.hwprobe.verify import load_spec, verify

    spec = load_spec(spec_name)
    earlier = None
    for _ in range(samples - 1):
        earlier = topo
        time.sleep(interval)
        topo = _probe()
    return topo, verify(topo, spec, earlier=earlier)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
    except BrokenPipeError:  # `hwprobe show | head`
        sys.stderr.close()
        return EXIT_OK


def _dispatch(args: argparse.Namespace) -> int:
    from ckpt_preempt.hwprobe import render, report

    if args.command == "bench":
        from ckpt_preempt.hwprobe import bench

        result = bench.run(_probe(), size_mib=args.size_mib, repeats=args.repeats)
        print(json.dumps(result.as_dict(), indent=2))
        return EXIT_OK
    if args.command == "serve":
        return _serve(args)
    topo = _probe()
    if args.command == "show":
        print(render.show(topo))
        return EXIT_OK
    verdict = None
    if getattr(args, "expect", None):
        topo, verdict = _verdict(topo, args.expect, getattr(args, "samples", 1),
                                 getattr(args, "interval", 0.0))
    verified = verdict.ok if verdict else None
    spec = verdict.spec if verdict else None
    if args.command == "report":
        if args.compact:
            print(report.annotation(topo, verified=verified, spec=spec))
        else:
            findings = list(verdict.findings) if verdict else None
            doc = report.full_report(topo, verified=verified, spec=spec, findings=findings)
            print(json.dumps(doc, indent=2))
        return EXIT_OK
    if args.command == "verify":
        print(render.verdict_text(verdict))
        return EXIT_OK if verdict.ok else EXIT_DIFF
    if args.command == "publish":
        from ckpt_preempt.hwprobe.publish import api_client, publish

        if not args.node:
            raise HwprobeError("publish needs --node NAME (or NODE_NAME)")
        publish(api_client(args.kubeconfig), args.node, topo, verified=verified, spec=spec)
        print(f"published {report.ANNOTATION} on node {args.node}"
              + (f" (verified={str(verified).lower()})" if verdict else ""))
        return EXIT_OK
    raise HwprobeError(f"unknown command {args.command}")


def _serve(args: argparse.Namespace) -> int:
    from prometheus_client import REGISTRY

    from ckpt_preempt.hwprobe import serve
    from ckpt_preempt.hwprobe.verify import load_spec

    spec = load_spec(args.expect) if args.expect else None
    publisher = None
    if not args.no_publish:
        from ckpt_preempt.hwprobe.publish import api_client, publish

        if not args.node:
            raise HwprobeError("serve needs --node NAME (or NODE_NAME), or --no-publish")
        api = api_client(args.kubeconfig)

        def publisher(topo, verified):
            publish(api, args.node, topo, verified=verified, spec=spec.name if spec else None)

    _probe()  # fail fast (exit 2) when there is no NVML at all
    health = serve.Health(publishing=publisher is not None)
    serve.start_server(args.metrics_port, args.metrics_address, REGISTRY, health)
    serve.run(probe=_probe, publish=publisher, spec=spec,
              metrics=serve.Metrics.create(REGISTRY), interval=args.interval, health=health)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
