"""The one line for an API server this process cannot reach, for a command's last line and the
controller's retry log: ``cannot reach the API server at 127.0.0.1:6443: connection refused``,
not urllib3's ``MaxRetryError`` text (its pool, the URL and nested exception reprs).

``cannot_reach(e, server)`` says it for a connection failure (refused, unresolved, timed out,
TLS, cut off mid-request) and returns None for anything else, such as the API server's own
answer (an ``ApiException``) or a bug, which the caller reports as it did before.
"""

from __future__ import annotations

import socket
import ssl
from urllib.parse import urlsplit

from urllib3 import exceptions as u3

from ckpt_preempt.cli.files import os_problem

CONNECTION_FAILURES = (u3.HTTPError, OSError)  # what a request raises when it gets no answer


def _tls_reason(e: BaseException) -> str:
    inner = next((a for a in e.args if isinstance(a, ssl.SSLError)), e)
    detail = getattr(inner, "verify_message", None) or getattr(inner, "reason", None)
    return f"TLS handshake failed ({detail or ' '.join(str(inner).split())})"


def _reason(e: BaseException) -> str:
    """Why a request got no answer, in words."""
    while isinstance(e, u3.MaxRetryError) and e.reason is not None:
        e = e.reason
    if isinstance(e, u3.NewConnectionError) and e.__cause__ is not None:
        e = e.__cause__  # the socket's error: refused, unresolved, unreachable
    if isinstance(e, socket.gaierror):
        return f"host name not resolved ({(e.strerror or str(e)).lower()})"
    if isinstance(e, u3.SSLError | ssl.SSLError):
        return _tls_reason(e)
    if isinstance(e, u3.TimeoutError | TimeoutError):
        return "timed out"
    if isinstance(e, u3.ProtocolError):
        return "the connection was closed mid-request"
    if isinstance(e, OSError) and e.errno is not None:
        return os_problem(e)
    return " ".join(str(e).split()) or type(e).__name__


def _address(e: BaseException, server: str) -> str:
    pool = getattr(e, "pool", None)  # MaxRetryError names the pool it gave up on
    if pool is not None and getattr(pool, "host", None):
        return f"{pool.host}:{pool.port}"
    parts = urlsplit(server)
    if parts.hostname:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"{parts.hostname}:{port}"
    return ""


def cannot_reach(e: BaseException, server: str = "") -> str | None:
    """``cannot reach the API server at HOST:PORT: why`` when ``e`` is a connection failure
    (``server``: the client's URL, for errors that do not name one), else None."""
    if not isinstance(e, CONNECTION_FAILURES):
        return None
    address = _address(e, server)
    at = f" at {address}" if address else ""
    return f"cannot reach the API server{at}: {_reason(e)}"
