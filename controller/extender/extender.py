"""The kube-scheduler extender's HTTP server (stdlib ``ThreadingHTTPServer``).

kube-scheduler POSTs JSON to ``<urlPrefix>/<verb>`` and treats anything but 200 as an error
(kubernetes@v1.37.2 pkg/scheduler/extender.go ``send``). Routes, whatever the prefix:

- ``POST .../filter``, ``.../prioritize``, ``.../preempt``: the verbs
  (``controller.extender.extender_verbs``); a body that is not JSON, or not the verb's arguments,
  is a 400 with one line of text;
- ``GET /healthz`` (the server answers), ``/readyz`` (the watch cache has synced),
  ``/metrics`` (Prometheus text).

``Extender(view, ...).serve(host, port)`` starts it in a daemon thread; ``stop()`` ends it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from ckpt_preempt.controller.extender import extender_verbs as verbs

log = logging.getLogger("ckpt_preempt.extender")
VERBS = ("filter", "prioritize", "preempt")
MAX_BODY_BYTES = 64 * 2**20  # a 5,000-node request with full Node objects stays well below
DEFAULT_PRIORITIZE_BUDGET_SECONDS = 0.005


class ExtenderMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("ckpt_preempt_extender_requests_total",
                                "Extender requests by verb and HTTP status", ["verb", "code"],
                                registry=r)
        self.latency = Histogram(
            "ckpt_preempt_extender_request_seconds", "Time to answer one extender request",
            ["verb"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1),
            registry=r)
        self.score_fallbacks = Counter(
            "ckpt_preempt_extender_score_fallbacks_total",
            "Prioritize requests whose scoring ran past its time budget and were scored by "
            "BestFit instead", registry=r)
        self.filtered_nodes = Counter(
            "ckpt_preempt_extender_filtered_nodes_total",
            "Nodes the filter verb turned away (NVLink), by whether preemption could help",
            ["resolvable"], registry=r)
        self.preempt_dropped = Counter(
            "ckpt_preempt_extender_preempt_dropped_nodes_total",
            "Candidate nodes the preempt verb dropped from kube-scheduler's choice", registry=r)


class Extender:
    """``view``: an object with ``current() -> ClusterView`` and ``synced() -> bool``
    (``extender_model.CachedView``; tests use ``e2e.harness.offline.StaticView``)."""

    def __init__(self, view, *, budget_seconds: float = DEFAULT_PRIORITIZE_BUDGET_SECONDS,
                 settings: verbs.PreemptSettings | None = None) -> None:
        self.view = view
        self.metrics = ExtenderMetrics()
        self.scorer = verbs.Scorer(budget_seconds, self.metrics.score_fallbacks.inc)
        self.settings = settings or verbs.PreemptSettings()
        self.server: ThreadingHTTPServer | None = None
        self._learned = None

    # -- the verbs on parsed JSON ---------------------------------------------------------------
    def handle(self, verb: str, args) -> object:
        if not isinstance(args, dict):
            raise verbs.BadRequest("body is not a JSON object")
        view = self.view.current()
        if verb == "filter":
            out = verbs.filter_nodes(view, args)
            self.metrics.filtered_nodes.labels("true").inc(len(out["FailedNodes"]))
            self.metrics.filtered_nodes.labels("false").inc(
                len(out["FailedAndUnresolvableNodes"]))
            return out
        if verb == "prioritize":
            if self._learned is not view:  # learn the workload once per cache change
                self.scorer.learn(view)
                self._learned = view
            return verbs.prioritize(view, args, self.scorer)
        out, dropped = verbs.preempt(view, args, self.settings)
        self.metrics.preempt_dropped.inc(len(dropped))
        log.info("preempt", extra={"kept": sorted(out["NodeNameToMetaVictims"]),
                                   "dropped": dropped})
        return out

    # -- HTTP -----------------------------------------------------------------------------------
    def serve(self, host: str, port: int) -> tuple[str, int]:
        ext = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: kube-scheduler reuses connections
            # headers and body go out as two writes: without TCP_NODELAY the body waits for
            # the client's delayed ACK (~40 ms on Linux)
            disable_nagle_algorithm = True

            def log_message(self, fmt, *a) -> None:  # requests are counted, not logged
                pass

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    self._send(200, b"ok\n", "text/plain")
                elif path == "/readyz":
                    ok = ext.view.synced()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"cache not synced\n",
                               "text/plain")
                elif path == "/metrics":
                    self._send(200, generate_latest(ext.metrics.registry), CONTENT_TYPE_LATEST)
                else:
                    self._send(404, b"not found\n", "text/plain")

            def do_POST(self) -> None:
                verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                if verb not in VERBS:
                    self._send(404, f"unknown verb {verb!r}\n".encode(), "text/plain")
                    return
                start = time.perf_counter()
                code, body = ext.answer(verb, self._body())
                self._send(code, body, "application/json" if code == 200 else "text/plain")
                ext.metrics.requests.labels(verb, str(code)).inc()
                ext.metrics.latency.labels(verb).observe(time.perf_counter() - start)

            def _body(self) -> bytes | None:
                try:
                    n = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    return None
                if not 0 < n <= MAX_BODY_BYTES:
                    return None
                return self.rfile.read(n)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="extender-http",
                         daemon=True).start()
        return self.server.server_address[:2]

    def answer(self, verb: str, body: bytes | None) -> tuple[int, bytes]:
        """(HTTP status, body) for one verb request: 400 with one line for bad input."""
        if body is None:
            return 400, b"request body missing, empty or over the size limit\n"
        try:
            args = json.loads(body)
        except ValueError as e:
            return 400, f"body is not JSON: {e}\n".encode()
        try:
            return 200, json.dumps(self.handle(verb, args)).encode()
        except verbs.BadRequest as e:
            return 400, f"{verb}: {e}\n".encode()
        except Exception as e:  # a bug must not kill the server; the scheduler sees an error
            log.exception("extender %s failed", verb)
            return 500, f"{verb}: internal error: {type(e).__name__}\n".encode()

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()
