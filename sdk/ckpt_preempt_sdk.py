"""A tiny SDK for training code: learn that a checkpoint is wanted or withdrawn, say when saved.

Standard library only, so it drops into any training image next to the agent sidecar::

    import ckpt_preempt_sdk as sdk

    ckpt = sdk.Checkpointer()              # talks to the agent on 127.0.0.1:8471
    ckpt.install_signal_handlers()         # with `ckpt-preempt agent --signal-pidfile ...`
    for step in range(start, steps):
        train_step()
        if step % 500 == 0:
            save(); ckpt.checkpointed()    # periodic checkpoint: refreshes last-checkpoint
        ckpt.progress(step, steps)         # optional: the agent declares the job's end from it
        for event in ckpt.events():        # non-blocking; asks the agent at most once a second
            if event.state is sdk.State.REQUESTED:
                save(); ckpt.done(event.plan)  # eviction may proceed at once; keep training
            elif event.state is sdk.State.CANCELLED:
                pass                       # the plan was aborted: nobody will evict this pod

An elastic job (``ckpt-preempt.io/min-members``, or a native PodGroup's ``minCount``) may be
asked to shrink: then ``event.leaving`` names the gang's pods that leave (this one among them)
and only those are evicted; the rest keep running and re-form without them. Empty ``leaving``:
the whole workload goes.

A checkpoint request never means "stop": keep training until the pod is evicted (SIGTERM), and
then exit non-zero, so that a Job is never marked Succeeded by a preemption.

- ``events(timeout=0)``: what happened since the last call, oldest first; with a timeout it
  blocks (long-polls the agent) until something happens or the timeout passes.
- ``status()``: where the pod stands now: ``idle``, ``requested`` / ``acked`` (with the plan id
  and its deadline) or ``cancelled`` (the plan whose request was withdrawn last).
- ``done(plan)``: acknowledge that plan's request once the checkpoint is durable. False when
  that plan's request is not standing (cancelled, replaced, or acked already): the agent never
  writes a late acknowledgement.

- ``progress(done, total)``: where a loop that knows its length stands (steps, samples, epochs:
  any unit). The agent estimates the job's end from the rate over the last minutes and declares
  it on the pod (``ckpt-preempt.io/expected-end``), so a job minutes from its end can be waited
  for instead of evicted. Call it as often as you like; the agent writes only when the end
  moved. A job that reports an end it does not keep is evicted at the plan's deadline with
  all it had not saved, so report real progress or none. Returns the end written (seconds since
  the epoch), or None.

Errors talking to the agent raise ``AgentUnavailable``; training code can ignore it and go on.
The agent's signals (``install_signal_handlers``) only make the next ``events()`` ask at once.
"""

from __future__ import annotations

import enum
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

AGENT_HOST = "127.0.0.1"
AGENT_PORT = 8471
DEFAULT_URL = f"http://{AGENT_HOST}:{AGENT_PORT}"
URL_ENV = "CKPT_PREEMPT_AGENT_URL"
REQUEST_SIGNAL = signal.SIGUSR1  # the agent's SignalHook sends these by default
CANCEL_SIGNAL = signal.SIGUSR2
PROGRESS_SECONDS = 5.0  # progress() reaches the agent at most this often (and when done)
MAX_WAIT_SECONDS = 30.0  # one long poll lasts at most this long; the agent enforces it too
HTTP_TIMEOUT_SECONDS = 5.0


class AgentUnavailable(RuntimeError):
    """The agent's local endpoint did not answer."""


class State(enum.StrEnum):
    IDLE = "idle"  # no request seen yet
    REQUESTED = "requested"  # the controller asks for a checkpoint before `deadline`
    ACKED = "acked"  # acknowledged; the pod may be evicted any moment now
    CANCELLED = "cancelled"  # the request was withdrawn: the plan aborted or another replaced it


@dataclass(frozen=True, kw_only=True)
class Status:
    """The agent's view of its pod. ``seq`` numbers the agent's events; ``agent`` names this run
    of the agent (a restarted agent starts counting again)."""

    agent: str
    seq: int
    state: State
    plan: str | None
    deadline: float | None  # epoch seconds, while requested or acked
    leaving: tuple[str, ...] = ()  # on an elastic shrink: the gang's pods that leave

    @classmethod
    def from_json(cls, d: dict) -> Status:
        return cls(agent=str(d["agent"]), seq=int(d["seq"]), state=State(d["state"]),
                   plan=d.get("plan"), deadline=d.get("deadline"),
                   leaving=_names(d.get("leaving")))


def _names(value: object) -> tuple[str, ...]:
    """Pod names from the agent's JSON; anything else is no names (an older agent sends none)."""
    if isinstance(value, list | tuple) and all(isinstance(n, str) for n in value):
        return tuple(value)
    return ()


@dataclass(frozen=True, kw_only=True)
class Event:
    """The pod entered ``state`` for ``plan`` (event number ``seq``)."""

    seq: int
    state: State
    plan: str
    deadline: float | None
    leaving: tuple[str, ...] = ()  # on an elastic shrink: the gang's pods that leave

    @classmethod
    def from_json(cls, d: dict) -> Event:
        return cls(seq=int(d["seq"]), state=State(d["state"]), plan=str(d["plan"]),
                   deadline=d.get("deadline"), leaving=_names(d.get("leaving")))


class Checkpointer:
    def __init__(self, url: str | None = None, *, poll_seconds: float = 1.0) -> None:
        self.url = (url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        self.poll_seconds = poll_seconds
        self._poll_now = threading.Event()
        self._last_poll = -float("inf")
        self._agent: str | None = None  # the agent run whose events we follow
        self._seq = 0  # the last event number delivered
        self._last_progress = -float("inf")

    def install_signal_handlers(self, request: int = REQUEST_SIGNAL,
                                cancel: int | None = CANCEL_SIGNAL) -> None:
        for signum in (request, cancel):
            if signum is not None:
                signal.signal(signum, lambda *_: self._poll_now.set())

    def _call(self, method: str, path: str, body: dict | None = None,
              timeout: float = HTTP_TIMEOUT_SECONDS) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise AgentUnavailable(f"checkpoint agent at {self.url}: {e}") from e

    def status(self) -> Status:
        return Status.from_json(self._call("GET", "/status")[1])

    def events(self, timeout: float = 0.0) -> list[Event]:
        """Events since the last call. ``timeout=0`` asks the agent at most every
        ``poll_seconds`` (at once after a signal); a timeout > 0 blocks until an event comes."""
        if timeout <= 0:
            now = time.monotonic()
            if not self._poll_now.is_set() and now - self._last_poll < self.poll_seconds:
                return []
            self._last_poll = now
            self._poll_now.clear()
            return self._fetch(0.0)
        end = time.monotonic() + timeout
        while True:
            got = self._fetch(min(MAX_WAIT_SECONDS, max(0.0, end - time.monotonic())))
            if got or time.monotonic() >= end:
                return got

    def _fetch(self, wait: float) -> list[Event]:
        query = {"wait": f"{wait:.3f}"}
        if self._agent is not None:
            query["after"] = str(self._seq)
        _, d = self._call("GET", "/events?" + urllib.parse.urlencode(query),
                          timeout=wait + HTTP_TIMEOUT_SECONDS)
        status = Status.from_json(d["status"])
        if status.agent != self._agent or d.get("events") is None:
            # first contact, a restarted agent, or events we missed: start from the state now
            self._agent, self._seq = status.agent, status.seq
            if status.state is State.REQUESTED:
                return [Event(seq=status.seq, state=status.state, plan=status.plan,
                              deadline=status.deadline)]
            return []
        got = [Event.from_json(e) for e in d["events"]]
        if got:
            self._seq = got[-1].seq
        return got

    def done(self, plan: str) -> bool:
        """Acknowledge ``plan``'s request (after the checkpoint is durable)."""
        code, d = self._call("POST", "/done", {"plan": plan})
        if code not in (200, 409):
            raise AgentUnavailable(f"checkpoint agent at {self.url}: {d.get('error', code)}")
        return code == 200 and bool(d.get("acked"))

    def checkpointed(self) -> None:
        """Report a periodic checkpoint (the agent refreshes last-checkpoint)."""
        code, d = self._call("POST", "/checkpointed", {})
        if code != 200:
            raise AgentUnavailable(f"checkpoint agent at {self.url}: {d.get('error', code)}")

    def progress(self, done: float, total: float) -> float | None:
        """Report progress (``done`` of ``total``); the end the agent declared, or None (none
        written, or not sent: a report reaches the agent at most every ``PROGRESS_SECONDS``,
        and always once ``done`` reaches ``total``). Raises ``ValueError`` when the agent
        refuses the numbers."""
        now = time.monotonic()
        if now - self._last_progress < PROGRESS_SECONDS and done < total:
            return None
        code, d = self._call("POST", "/progress", {"done": done, "total": total})
        if code == 400:
            raise ValueError(f"checkpoint agent refused the progress report: {d.get('error')}")
        if code != 200:
            raise AgentUnavailable(f"checkpoint agent at {self.url}: {d.get('error', code)}")
        self._last_progress = now  # a refused or lost report does not hold back the next
        return d.get("expected_end")
