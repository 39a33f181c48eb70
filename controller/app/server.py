"""``/metrics``, ``/healthz`` and ``/readyz`` on one small threaded HTTP server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def serve(host: str, port: int, registry: CollectorRegistry, *, healthy: Callable[[], bool],
          ready: Callable[[], bool],
          detail: Callable[[], str] | None = None) -> ThreadingHTTPServer:
    """``detail``: a line /readyz adds to its body (the GPU health source's state)."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body, ctype, code = generate_latest(registry), CONTENT_TYPE_LATEST, 200
            elif self.path in ("/healthz", "/readyz"):
                ok = (healthy if self.path == "/healthz" else ready)()
                body, ctype, code = (b"ok\n" if ok else b"not ready\n"), "text/plain", \
                    200 if ok else 503
                if detail is not None and self.path == "/readyz":
                    body += detail().encode() + b"\n"
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
