"""The eviction gate's HTTPS server (stdlib ``ThreadingHTTPServer`` behind TLS).

Routes: ``POST /validate`` (an AdmissionReview in, its answer out: ``controller.gate.gate``; a
body that is not one is a 400 with one line of text), ``GET /healthz``. The certificate and key
are read from files once, at start (the chart mounts them from a Secret; restart to rotate).
"""

from __future__ import annotations

import json
import logging
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # any object with review(body) -> dict (the grace webhook's too)
    from ckpt_preempt.controller.gate.gate import Gate

log = logging.getLogger("ckpt_preempt.gate")
PATH = "/validate"
MAX_BODY_BYTES = 4 * 2**20  # an AdmissionReview of an Eviction is a few kB
HANDSHAKE_AND_IDLE_SECONDS = 60.0  # a connection idle this long is closed
# How long a thread may hold the interpreter before another gets it (CPython's default: 5 ms).
# Shorter, so an answer does not wait behind the writer and watch threads (bench/eviction_gate.py)
SWITCH_INTERVAL_SECONDS = 0.0005


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a burst of evictions opens many connections at once


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """OSError / ssl.SSLError when the files are missing or not a certificate and its key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


def serve(gate: Gate, host: str, port: int, ctx: ssl.SSLContext, *,
          path: str = PATH) -> ThreadingHTTPServer:
    """Start serving in a daemon thread, reviews at ``path``; ``shutdown()`` the returned
    server to stop. Sets this process' interpreter switch interval to
    ``SWITCH_INTERVAL_SECONDS``."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections
        timeout = HANDSHAKE_AND_IDLE_SECONDS

        def setup(self) -> None:
            # the TLS handshake happens here, on this connection's own thread, not in accept()
            self.request.settimeout(self.timeout)
            try:
                self.request.do_handshake()
            except (OSError, ssl.SSLError) as e:
                log.debug("TLS handshake failed: %s", e)
                raise
            super().setup()

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._send(200, b"ok\n", "text/plain")
            else:
                self._send(404, b"not found\n", "text/plain")

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != path:
                self._send(404, b"not found\n", "text/plain")
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if not 0 < length <= MAX_BODY_BYTES:
                self._send(400, b"expected a JSON body of a sane size\n", "text/plain")
                return
            try:
                answer = gate.review(json.loads(self.rfile.read(length)))
            except (ValueError, RecursionError) as e:  # not JSON, or not an AdmissionReview
                self._send(400, f"bad request: {e}\n".encode(), "text/plain")
                return
            self._send(200, json.dumps(answer).encode(), "application/json")

        def log_message(self, *args) -> None:
            pass

    server = _Server((host, port), Handler)
    server.socket = ctx.wrap_socket(server.socket, server_side=True,
                                    do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name="gate-https", daemon=True).start()
    return server
