"""A tiny SDK for training code: learn that a checkpoint is wanted, say when one is saved.

Standard library only, so it drops into any training image next to the agent sidecar::

    from controller import sdk

    ckpt = sdk.Checkpointer()              # talks to the agent on 127.0.0.1:8471
    ckpt.install_signal_handler()          # with `ckpt-preempt agent --signal-pidfile ...`
    for step in range(start, steps):
        train_step()
        if step % 500 == 0:
            save(); ckpt.checkpointed()    # periodic checkpoint: refreshes last-checkpoint
        if ckpt.requested():               # the controller wants this pod's GPUs
            save(); ckpt.done(); break     # acknowledged: eviction may proceed at once

``requested()`` is true after the agent's signal arrived, or when the agent reports a pending
drain request (polled at most every ``poll_seconds``). Errors talking to the agent raise
``AgentUnavailable``; training code can ignore it and carry on.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8471"


class AgentUnavailable(RuntimeError):
    """The agent's local endpoint did not answer."""


class Checkpointer:
    def __init__(self, url: str | None = None, *, poll_seconds: float = 1.0) -> None:
        self.url = (url or os.environ.get("CKPT_PREEMPT_AGENT_URL") or DEFAULT_URL).rstrip("/")
        self.poll_seconds = poll_seconds
        self._signalled = threading.Event()
        self._plan: str | None = None
        self._last_poll = 0.0

    def install_signal_handler(self, signum: int = signal.SIGUSR1) -> None:
        signal.signal(signum, lambda *_: self._signalled.set())

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"{}")
        except (urllib.error.URLError, OSError) as e:
            raise AgentUnavailable(f"checkpoint agent at {self.url}: {e}") from e

    def requested(self) -> bool:
        now = time.monotonic()
        if self._signalled.is_set() or now - self._last_poll >= self.poll_seconds:
            self._last_poll = now
            try:
                self._plan = self._call("GET", "/drain").get("plan")
            except AgentUnavailable:
                self._plan = None
        return self._signalled.is_set() or self._plan is not None

    def done(self) -> bool:
        """Acknowledge the pending request (after the checkpoint is durable)."""
        ok = bool(self._call("POST", "/done", {"plan": self._plan} if self._plan else {})
                  .get("acked"))
        self._signalled.clear()
        return ok

    def checkpointed(self) -> None:
        self._call("POST", "/checkpointed", {})
