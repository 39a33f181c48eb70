"""Benchmark: the eviction gate's latency under a burst of Evictions through the real API server.

A local control plane (e2e/localcluster.py) or an existing one (``--kubeconfig``); ``--pods``
pods that checkpoint on request in a fresh namespace; the gate (``controller.gate.gate`` behind its
HTTPS server) in this process, and a ValidatingWebhookConfiguration pointing the API server at
it. Then ``--evictions`` Evictions at once from ``--workers`` threads of a separate process (so
the senders do not share this process' interpreter with the gate): every pod is evicted
``evictions / pods`` times, in an order shuffled with ``--seed``. The first Eviction of a pod
meets no request: the gate reads the pod, writes the drain request (a conditional patch) and
refuses; the later ones read it and refuse (``checkpoint-seconds`` is far away). No pod is
evicted.

``at_webhook_ms``: the gate's own time per AdmissionReview (its read of the pod, from its watch
cache or, with ``--no-watch-cache``, a GET; the decision; and on a first refusal the PATCH; the
HTTP parsing and TLS are not in it), overall and by answer; ``request_write_ms``: the drain
requests' writes, made after the answer on the gate's writer threads; ``client_ms``: the Eviction's
round trip as the sender saw it (API server, webhook call and all).
Target: p99 at the webhook <= 20 ms.

Prints one JSON line. Usage: python bench/eviction_gate.py [--pods 250] [--evictions 1000]
[--workers 32] [--seed 1] [--kubeconfig PATH] [--no-watch-cache]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import random
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kubernetes import client, config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from ckpt_preempt.controller.gate import gate_server  # noqa: E402
from ckpt_preempt.controller.gate.gate import Gate, GateSettings  # noqa: E402
from ckpt_preempt.controller.gate.gate_cache import PodCache  # noqa: E402
from ckpt_preempt.policies.disruption.eviction_gate import GateLimits  # noqa: E402
from e2e import kube  # noqa: E402
from e2e.localcluster import LocalCluster, find_testbin, free_port  # noqa: E402
from e2e.test_eviction_gate_support import (  # noqa: E402
    SCOPE_LABEL,
    make_certs,
    wait_webhook_active,
    webhook_configuration,
)

TARGET_P99_MS = 20.0
CAP_SECONDS = 3600.0  # far away: every Eviction of the burst is refused
CREATE_WORKERS = 16


def percentiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    s = sorted(xs)

    def q(p: float) -> float:
        return round(s[min(len(s) - 1, int(p * len(s)))] * 1000, 2)
    return {"n": len(s), "p50": q(0.50), "p90": q(0.90), "p99": q(0.99),
            "max": round(s[-1] * 1000, 2)}


def _send(kubeconfig: str, namespace: str, names: list[str], workers: int, out) -> None:
    """In a process of its own: evict each name (in this order) from `workers` threads; puts
    [(seconds, status)] on `out`."""
    api = config.new_client_from_config(config_file=kubeconfig)
    api.configuration.connection_pool_maxsize = workers
    core = client.CoreV1Api(api)

    def one(name: str) -> tuple[float, int]:
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        start = time.perf_counter()
        try:
            core.create_namespaced_pod_eviction(name, namespace, body)
            status = 201
        except ApiException as e:
            status = e.status
        return time.perf_counter() - start, status
    with ThreadPoolExecutor(workers) as pool:
        out.put(list(pool.map(one, names)))


def burst(c: kube.Cluster, *, pods: int, evictions: int, workers: int, seed: int,
          workdir: Path, watch_cache: bool = True) -> dict:
    """The whole measurement on cluster `c`; returns the result (see the module docstring)."""
    namespace = f"gate-bench-{uuid.uuid4().hex[:6]}"
    c.core.create_namespace({"metadata": {"name": namespace,
                                          "labels": {SCOPE_LABEL: namespace}}})
    admission = client.AdmissionregistrationV1Api(c.api)
    hook = f"gate-bench-{uuid.uuid4().hex[:6]}"
    server = cache = None
    try:
        names = [f"train-{i}" for i in range(pods)]
        started = time.monotonic()
        with ThreadPoolExecutor(CREATE_WORKERS) as pool:
            list(pool.map(lambda n: kube.create_pod(c, namespace, n, checkpoint="on-request",
                                                    checkpoint_seconds=int(CAP_SECONDS)), names))
        created_s = time.monotonic() - started
        cert, key, ca = make_certs(workdir)
        api = client.ApiClient(c.api.configuration)
        cache = PodCache(api) if watch_cache else None
        if cache is not None:
            cache.start()
            kube.wait_for("the gate's watch cache", lambda: cache.synced, timeout=60)
        gate = Gate(api, GateSettings(limits=GateLimits(max_checkpoint_seconds=CAP_SECONDS)),
                    cache=cache)
        port = free_port()
        server = gate_server.serve(gate, "127.0.0.1", port,
                                   gate_server.tls_context(str(cert), str(key)))
        admission.create_validating_webhook_configuration(
            webhook_configuration(hook, port, ca, namespace))
        order = [n for n in names for _ in range(max(1, evictions // pods))][:evictions]
        wait_webhook_active(c, namespace)
        gate.handled.clear()
        gate.counts.clear()
        random.Random(seed).shuffle(order)
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        sender = ctx.Process(target=_send, args=(str(c.kubeconfig), namespace, order, workers,
                                                 out))
        started = time.monotonic()
        sender.start()
        sent = out.get(timeout=600)
        wall = time.monotonic() - started
        sender.join()
        gate.flush()
        statuses: dict[int, int] = {}
        for _, status in sent:
            statuses[status] = statuses.get(status, 0) + 1
        at_webhook = percentiles([t for _, t in gate.handled])
        by_kind = {k: percentiles([t for kind, t in gate.handled if kind == k])
                   for k in sorted({kind for kind, _ in gate.handled})}
        return {
            "bench": "eviction_gate", "pods": pods, "evictions": len(order), "workers": workers,
            "seed": seed, "pods_created_s": round(created_s, 1),
            "watch_cache": cache is not None, "at_webhook_ms": at_webhook,
            "at_webhook_ms_by_answer": by_kind,
            "request_write_ms": percentiles(gate.write_seconds),
            "client_ms": percentiles([s for s, _ in sent]),
            "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "answers": dict(sorted(gate.counts.items())), "burst_wall_s": round(wall, 2),
            "target_p99_ms": TARGET_P99_MS,
            "met": bool(at_webhook) and at_webhook["p99"] <= TARGET_P99_MS,
        }
    finally:
        with contextlib.suppress(ApiException):
            admission.delete_validating_webhook_configuration(hook)
        if server is not None:
            server.shutdown()
        if cache is not None:
            cache.stop()
        c.core.delete_namespace(namespace)


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
