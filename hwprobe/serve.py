"""``hwprobe serve``: re-probe periodically, publish on change, export Prometheus metrics.

The loop is injectable (probe, publish, sleep and the metrics registry are arguments) so it
runs in tests without NVML, a cluster or waiting. ``start_server`` serves, on one port,
``/metrics``, ``/healthz`` (the process answers) and ``/readyz`` (the last probe succeeded and,
when publishing, the last publish did too): the DaemonSet's liveness and readiness probes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from ckpt_preempt.hwprobe import gpu_use
from ckpt_preempt.hwprobe.errors import HwprobeError
from ckpt_preempt.hwprobe.model import Topology
from ckpt_preempt.hwprobe.podresources import Observation
from ckpt_preempt.hwprobe.report import annotation
from ckpt_preempt.hwprobe.verify import Spec, verify

log = logging.getLogger("ckpt_preempt.hwprobe.serve")
# The gpu-use annotation is written again after this many seconds even when nothing changed,
# so its time says the report is current (policies.model.gpu_use.MAX_AGE_SECONDS is three of these).
DEFAULT_GPU_USE_REFRESH = 300.0


@dataclass(frozen=True, kw_only=True)
class Metrics:
    gpus: Gauge
    domain_size: Gauge
    active_links: Gauge
    link_errors: Gauge
    verified: Gauge
    findings: Gauge
    probe_seconds: Histogram
    probe_failures: Counter
    publishes: Counter
    gpus_in_use: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> Metrics:
        return cls(
            gpus=Gauge("hwprobe_gpus", "GPUs NVML reports", registry=registry),
            domain_size=Gauge("hwprobe_nvlink_domain_size_max", "Largest NVLink domain",
                              registry=registry),
            active_links=Gauge("hwprobe_nvlink_active_links", "Active NVLinks per GPU",
                               ["gpu"], registry=registry),
            link_errors=Gauge("hwprobe_nvlink_errors", "NVLink error counter values",
                              ["gpu", "link", "counter"], registry=registry),
            verified=Gauge("hwprobe_verified",
                           "1 matches the spec, 0 does not, -1 no spec", registry=registry),
            findings=Gauge("hwprobe_verify_findings", "Differences from the spec",
                           registry=registry),
            probe_seconds=Histogram("hwprobe_probe_seconds", "Full probe duration",
                                    buckets=(0.01, 0.05, 0.1, 0.2, 0.5, 1, 5),
                                    registry=registry),
            probe_failures=Counter("hwprobe_probe_failures", "Probes that failed",
                                   registry=registry),
            publishes=Counter("hwprobe_publishes", "Annotation updates written",
                              registry=registry),
            gpus_in_use=Gauge("hwprobe_gpus_in_use", "GPUs the kubelet gave to pods "
                              "(PodResources API); -1 when not known", registry=registry),
        )

    def observe(self, topo: Topology, verified: bool | None, findings: int) -> None:
        self.gpus.set(topo.gpu_count)
        self.domain_size.set(max((len(d) for d in topo.nvlink_domains), default=0))
        for gpu in topo.gpus:
            self.active_links.labels(str(gpu.index)).set(len(gpu.active_links))
            for link in gpu.links:
                for counter, value in link.errors.items():
                    self.link_errors.labels(str(gpu.index), str(link.link), counter).set(value)
        self.verified.set(-1 if verified is None else int(verified))
        self.findings.set(findings)


class Health:
    """What ``/readyz`` answers: written by the loop, read by the HTTP server's threads."""

    def __init__(self, *, publishing: bool) -> None:
        self._lock = threading.Lock()
        self._publishing = publishing
        self._probe: str | None = "no probe yet"  # None: the last one succeeded
        self._publish: str | None = "not published yet" if publishing else None

    def probed(self, error: str | None) -> None:
        with self._lock:
            self._probe = error

    def published(self, error: str | None) -> None:
        with self._lock:
            self._publish = error

    def not_ready(self) -> str | None:
        """Why the pod is not ready (None: ready)."""
        with self._lock:
            if self._probe is not None:
                return f"probe: {self._probe}"
            if self._publishing and self._publish is not None:
                return f"publish: {self._publish}"
            return None


HEALTH_PATHS = ("/healthz", "/readyz")


def wsgi_app(registry: CollectorRegistry, health: Health) -> Callable:
    """``/healthz``, ``/readyz``, and Prometheus metrics on every other path."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in HEALTH_PATHS:
            return metrics_app(environ, start_response)
        reason = health.not_ready() if path == "/readyz" else None
        status = "200 OK" if reason is None else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [(reason or "ok").encode() + b"\n"]

    return app


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Probes every few seconds would flood the log."""


def start_server(port: int, addr: str, registry: CollectorRegistry, health: Health) -> WSGIServer:
    """Serve ``wsgi_app`` on a daemon thread; returns the server (``server_port``,
    ``shutdown()``). Raises OSError when the port cannot be bound."""
    server = make_server(addr, port, wsgi_app(registry, health), _ThreadingServer,
                         handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="hwprobe-http", daemon=True).start()
    return server


def run(*, probe: Callable[[], Topology],
        publish: Callable[[Topology, bool | None, str | None], None] | None,
        spec: Spec | None, metrics: Metrics, interval: float, iterations: int | None = None,
        sleep: Callable[[float], None] = time.sleep, health: Health | None = None,
        observe_use: Callable[[Topology], Observation] | None = None,
        refresh: float = DEFAULT_GPU_USE_REFRESH,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> int:
    """The serve loop. Returns how many times it published (for tests; forever returns never).

    ``observe_use``: the GPUs in use (``podresources.observe``), published as the gpu-use
    annotation when they change and at least every ``refresh`` seconds; its log line is
    written when it changes, not every round."""
    health = health or Health(publishing=publish is not None)
    last_state, previous, published, done = None, None, 0, 0
    last_message, use_written = None, None
    while iterations is None or done < iterations:
        done += 1
        start = time.perf_counter()
        try:
            topo = probe()
        except HwprobeError as err:
            metrics.probe_failures.inc()
            health.probed(str(err))
            log.warning("probe failed: %s", err)
            sleep(interval)
            continue
        health.probed(None)
        metrics.probe_seconds.observe(time.perf_counter() - start)
        verdict = verify(topo, spec, earlier=previous) if spec is not None else None
        verified = verdict.ok if verdict is not None else None
        metrics.observe(topo, verified, len(verdict.findings) if verdict else 0)
        if verdict is not None and not verdict.ok:
            log.warning("verify %s: %s", spec.name, "; ".join(verdict.findings))
        seen = observe_use(topo) if observe_use is not None else None
        body = seen.body if seen is not None else None
        if seen is not None and seen.message != last_message:
            log.log(logging.WARNING if seen.problem else logging.INFO, "%s", seen.message)
            last_message = seen.message
        metrics.gpus_in_use.set(-1 if body is None else
                                sum(len(p["gpus"]) for p in body["pods"]))
        value = annotation(topo, verified=verified, spec=spec.name if spec else None)
        state = (value, None if body is None else json.dumps(body, sort_keys=True))
        now = clock()
        due = body is not None and (
            use_written is None or (now - use_written).total_seconds() >= refresh)
        if publish is not None and (state != last_state or due):
            try:
                publish(topo, verified, None if body is None else gpu_use.annotation(body, now))
                published += 1
                metrics.publishes.inc()
                health.published(None)
                last_state = state
                use_written = now if body is not None else None
            except HwprobeError as err:
                health.published(str(err))
                log.warning("publish failed: %s", err)
        previous = topo
        if iterations is None or done < iterations:
            sleep(interval)
    return published
