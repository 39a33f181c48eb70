"""A burst of Evictions through the real API server at the eviction gate, run in this process
behind its HTTPS server (`burst`): ``pods`` pods that checkpoint on request in a fresh
namespace, a ValidatingWebhookConfiguration pointing the API server at the gate, then
``evictions`` Evictions at once from ``workers`` threads of a separate process, in an order
shuffled with ``seed``. Every Eviction is refused (``checkpoint-seconds`` is far away), so no pod
is evicted. Returns the gate's own time per AdmissionReview, its drain-request writes and the
senders' round trips as percentiles (bench/eviction_gate.py says each figure);
e2e/test_eviction_gate_replicas.py runs it short.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.gate import gate_server
from ckpt_preempt.controller.gate.gate import Gate, GateSettings
from ckpt_preempt.controller.gate.gate_cache import PodCache
from ckpt_preempt.policies.disruption.eviction_gate import GateLimits
from e2e.harness import kube
from e2e.harness.eviction_gate_run import (
    SCOPE_LABEL,
    make_certs,
    wait_webhook_active,
    webhook_configuration,
)
from e2e.harness.localcluster import free_port

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
