"""A fault-injecting HTTP proxy between a client (the controller) and a real kube-apiserver.

    faults = Faults(seed=7, rates={"write": 0.15, "watch": 0.5})
    with FaultProxy(lc.server, faults) as proxy:
        proxy.kubeconfig(path, token)      # a kubeconfig that talks to the API via the proxy
        proxy.counts                       # Counter of (request class, outcome)
        proxy.block_watches(True)          # new watches are answered 503 until unblocked
        proxy.drop_watches()               # cut every open watch stream now
        proxy.records                      # [Record]: class, status, injected, 410 seen

The client speaks plain HTTP to 127.0.0.1; the proxy speaks TLS to the API server (its serving
certificate is self-signed, so it is not verified), one upstream connection per request, and
answers every request with `Connection: close`, so it never has to parse a response body: it
relays bytes until the API server closes. Each request falls in one class:

    watch     GET with watch=true             fault: the stream is cut after a random delay
    read      any other GET                   fault: 429, 500 or 503
    eviction  POST .../pods/NAME/eviction     fault: 429, 500 or 503
    lease     writes to coordination leases   fault: 409, 429, 500 or 503
    event     writes to events                fault: 429, 500 or 503
    write     any other POST/PUT/PATCH/DELETE fault: 409, 429, 500 or 503

A class without its own rate uses its family's (`write` for eviction/lease/event); `paths` fails
every request whose path contains a fragment with a fixed status (a targeted outage). An injected
status never reaches the API server (the write did not happen) and carries a Status body as the
API server writes it, plus `Retry-After: 1` on 429 and 503. Decisions come from one seeded
random stream per class, so a given sequence of requests meets the same faults on every run.
Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

WATCH, READ, EVICTION, LEASE, EVENT, WRITE = "watch", "read", "eviction", "lease", "event", "write"
FAMILY = {EVICTION: WRITE, LEASE: WRITE, EVENT: WRITE, WRITE: WRITE, READ: READ, WATCH: WATCH}
# A real 409 to an eviction means its uid precondition failed (another pod has the name now);
# faking one for the same pod would test a case the API server does not produce.
CODES = {READ: (429, 500, 503), WRITE: (409, 429, 500, 503), EVICTION: (429, 500, 503),
         LEASE: (409, 429, 500, 503), EVENT: (429, 500, 503)}
REASONS = {409: ("Conflict", "Conflict"), 429: ("TooManyRequests", "Too Many Requests"),
           500: ("InternalError", "Internal Server Error"),
           503: ("ServiceUnavailable", "Service Unavailable")}
HEADER_LIMIT = 1 << 20
POLL_SECONDS = 0.2
PEEK_BYTES = 4096  # how much of a watch stream is searched for a 410 Gone
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "upgrade"}


@dataclass(frozen=True, kw_only=True)
class Faults:
    """What to inject. `rates`: share of requests of a class that fail (0..1)."""

    seed: int = 0
    rates: dict[str, float] = field(default_factory=dict)
    watch_cut_after: tuple[float, float] = (0.5, 5.0)  # seconds a faulted watch stream lasts
    paths: dict[str, int] = field(default_factory=dict)  # path fragment -> always this status

    def rate(self, cls: str) -> float:
        return self.rates.get(cls, self.rates.get(FAMILY[cls], 0.0))


NO_FAULTS = Faults()


def classify(method: str, target: str) -> str:
    """The request class of `method` on `target` (path and query)."""
    url = urlsplit(target)
    parts = [p for p in url.path.split("/") if p]
    if method == "GET":
        watch = parse_qs(url.query).get("watch", [""])[0] in ("true", "1")
        return WATCH if watch or "watch" in parts[:4] else READ
    if parts[-1:] == ["eviction"]:
        return EVICTION
    if "leases" in parts and "coordination.k8s.io" in parts:
        return LEASE
    if "events" in parts:
        return EVENT
    return WRITE


def status_body(code: int, message: str) -> bytes:
    reason, _ = REASONS[code]
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {},
                       "status": "Failure", "message": message, "reason": reason,
                       "code": code}).encode()


@dataclass(frozen=True, kw_only=True)
class Record:
    cls: str
    method: str
    target: str
    status: int  # what the client got (0: the connection failed before a status line)
    injected: bool  # the status (or the cut) came from the proxy
    gone: bool  # a watch answered 410 Gone (HTTP status, or an ERROR event with code 410)


class FaultProxy:
    def __init__(self, upstream: str, faults: Faults = NO_FAULTS) -> None:
        u = urlsplit(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 443)
        self._faults = faults
        self._random: dict[str, random.Random] = {}
        self._lock = threading.Lock()
        self._watches: set[socket.socket] = set()
        self._blocked = False
        self._stop = threading.Event()
        self._tls = ssl.create_default_context()
        self._tls.check_hostname, self._tls.verify_mode = False, ssl.CERT_NONE
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.counts: Counter[tuple[str, str]] = Counter()
        self.records: list[Record] = []
        self._thread = threading.Thread(target=self._accept, name="faultproxy", daemon=True)

    # -------------------------------------------------------------------------------- control
    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.drop_watches()

    def set_faults(self, faults: Faults) -> None:
        """New rates from now on; each class keeps its own seeded stream."""
        with self._lock:
            if faults.seed != self._faults.seed:
                self._random.clear()
            self._faults = faults

    def block_watches(self, blocked: bool) -> None:
        with self._lock:
            self._blocked = blocked

    def open_watches(self) -> int:
        with self._lock:
            return len(self._watches)

    def drop_watches(self) -> int:
        """Cut every watch stream open now; returns how many."""
        with self._lock:
            socks, self._watches = list(self._watches), set()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        return len(socks)

    def kubeconfig(self, path: Path, token: str, user: str = "proxied") -> Path:
        """A kubeconfig that reaches the API server through this proxy with `token`."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "proxied",
            "clusters": [{"name": "proxied", "cluster": {"server": self.url}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "proxied", "context": {"cluster": "proxied", "user": user}}],
        }, indent=1))
        return path

    def decide(self, cls: str, path: str = "") -> int | None:
        """The fault for the next request of `cls` on `path`: a status, 0 for a watch cut, or
        None. A `paths` entry whose fragment `path` contains wins over the rates."""
        with self._lock:
            for fragment, status in self._faults.paths.items():
                if fragment in path:
                    return status
            rate = self._faults.rate(cls)
            rnd = self._random.setdefault(cls, random.Random(f"{self._faults.seed}/{cls}"))
            if rnd.random() >= rate:
                return None
            return 0 if cls == WATCH else rnd.choice(CODES[cls])

    def _cut_after(self) -> float:
        with self._lock:
            lo, hi = self._faults.watch_cut_after
            return self._random.setdefault("cut", random.Random(f"{self._faults.seed}/cut")) \
                .uniform(lo, hi)

    def _record(self, rec: Record, outcome: str) -> None:
        with self._lock:
            self.records.append(rec)
            self.counts[(rec.cls, outcome)] += 1

    # -------------------------------------------------------------------------------- serving
    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            try:
                head, body = _read_request(client)
            except (OSError, ValueError):
                return
            if head is None:
                return
            request_line, headers = head
            method, target, _ = request_line.split(" ", 2)
            cls = classify(method, target)
            fault = self.decide(cls, urlsplit(target).path)
            with self._lock:
                blocked = self._blocked and cls == WATCH
            if blocked:
                fault = 503
            if fault:
                client.sendall(_response(fault, f"injected by the fault proxy ({cls})"))
                self._record(Record(cls=cls, method=method, target=target, status=fault,
                                    injected=True, gone=False), f"injected-{fault}")
                return
            cut_at = time.monotonic() + self._cut_after() if fault == 0 else None
            self._forward(client, request_line, headers, body, cls, method, target, cut_at)

    def _forward(self, client: socket.socket, request_line: str, headers: list[tuple[str, str]],
                 body: bytes, cls: str, method: str, target: str, cut_at: float | None) -> None:
        lines = [request_line, *(f"{k}: {v}" for k, v in headers
                                 if k.lower() not in _HOP_BY_HOP), "Connection: close"]
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        status, seen, cut = 0, b"", False
        try:
            raw = socket.create_connection(self.upstream, timeout=30)
            upstream = self._tls.wrap_socket(raw, server_hostname=self.upstream[0])
        except OSError:
            client.sendall(_response(503, "fault proxy: API server unreachable"))
            self._record(Record(cls=cls, method=method, target=target, status=503,
                                injected=False, gone=False), "upstream-down")
            return
        if cls == WATCH:
            with self._lock:
                self._watches.add(client)
        try:
            with upstream:
                upstream.sendall(data)
                upstream.settimeout(POLL_SECONDS)  # to notice a cut or stop() while idle
                while not self._stop.is_set():
                    dropped = cls == WATCH and client not in self._watches
                    if dropped or (cut_at and time.monotonic() >= cut_at):
                        cut = True
                        break
                    try:
                        chunk = upstream.recv(65536)
                    except TimeoutError:
                        continue
                    if not chunk:
                        break
                    if len(seen) < PEEK_BYTES:
                        seen += chunk[:PEEK_BYTES]
                        status = status or _status_of(seen)
                    client.sendall(chunk)
        except OSError:
            cut = cut or cls == WATCH  # dropped by drop_watches(), or the client went away
        finally:
            with self._lock:
                self._watches.discard(client)
        gone = cls == WATCH and (status == 410 or b'"code":410' in seen)
        outcome = "cut" if cut else ("gone" if gone else f"passed-{status}")
        self._record(Record(cls=cls, method=method, target=target, status=status,
                            injected=cut, gone=gone), outcome)


def _read_request(sock: socket.socket):
    """(request line, [(header, value)]), body; (None, b"") when the client sent nothing."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        buf += chunk
        if len(buf) > HEADER_LIMIT:
            raise ValueError("request head too large")
    head, body = buf.split(b"\r\n\r\n", 1)
    request_line, *rest = head.decode("latin-1").split("\r\n")
    headers = [(k.strip(), v.strip()) for k, _, v in (h.partition(":") for h in rest)]
    length = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ValueError("request body cut short")
        body += chunk
    return (request_line, headers), body


def _response(code: int, message: str) -> bytes:
    body = status_body(code, message)
    extra = "Retry-After: 1\r\n" if code in (429, 503) else ""
    return (f"HTTP/1.1 {code} {REASONS[code][1]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n").encode() + body


def _status_of(head: bytes) -> int:
    line = head.split(b"\r\n", 1)[0].split(b" ")
    return int(line[1]) if len(line) > 1 and line[1].isdigit() else 0
