"""Benchmark: the eviction gate's latency under a burst of Evictions through the real API server.

Usage: python -m bench.eviction_gate [--pods 250] [--evictions 1000] [--workers 32] [--seed 1]
[--kubeconfig PATH] [--no-watch-cache]
Target: p99 at the webhook <= 20 ms.

A local control plane (e2e/harness/localcluster.py) or an existing one (``--kubeconfig``);
``--pods`` pods that checkpoint on request in a fresh namespace; the gate
(``controller.gate.gate`` behind its HTTPS server) in this process, and a
ValidatingWebhookConfiguration pointing the API server at it. Then ``--evictions`` Evictions at
once from ``--workers`` threads of a separate process (so the senders do not share this
process' interpreter with the gate): every pod is evicted ``evictions / pods`` times, in an
order shuffled with ``--seed``. The first Eviction of a pod meets no request: the gate reads the
pod, writes the drain request (a conditional patch) and refuses; the later ones read it and
refuse (``checkpoint-seconds`` is far away). No pod is evicted. The burst itself is
e2e/harness/gate_burst.py's.

``at_webhook_ms``: the gate's own time per AdmissionReview (its read of the pod, from its watch
cache or, with ``--no-watch-cache``, a GET; the decision; and on a first refusal the PATCH; the
HTTP parsing and TLS are not in it), overall and by answer; ``request_write_ms``: the drain
requests' writes, made after the answer on the gate's writer threads; ``client_ms``: the
Eviction's round trip as the sender saw it (API server, webhook call and all).

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from kubernetes import config

from e2e.harness import kube
from e2e.harness.gate_burst import CREATE_WORKERS, burst
from e2e.harness.localcluster import LocalCluster, find_testbin


def main(argv: list[str] | None = None) -> int:
    from ckpt_preempt.cli import argtypes

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pods", type=argtypes.positive_int, default=250)
    p.add_argument("--evictions", type=argtypes.positive_int, default=1000)
    p.add_argument("--workers", type=argtypes.positive_int, default=32)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kubeconfig", help="an existing cluster (default: a local control plane)")
    p.add_argument("--no-watch-cache", action="store_true",
                   help="the gate reads each pod with a GET (as `gate --no-watch-cache`)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gate-bench-") as tmp:
        work = Path(tmp)
        if args.kubeconfig:
            api = config.new_client_from_config(config_file=args.kubeconfig)
            result = burst(kube.Cluster("existing", Path(args.kubeconfig), api),
                           pods=args.pods, evictions=args.evictions, workers=args.workers,
                           seed=args.seed, workdir=work,
                           watch_cache=not args.no_watch_cache)
        else:
            with LocalCluster(find_testbin(), work / "cluster") as lc:
                api = config.new_client_from_config(config_file=str(lc.kubeconfig))
                api.configuration.connection_pool_maxsize = CREATE_WORKERS
                result = burst(kube.Cluster("local", lc.kubeconfig, api, local=lc),
                               pods=args.pods, evictions=args.evictions, workers=args.workers,
                               seed=args.seed, workdir=work,
                               watch_cache=not args.no_watch_cache)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
