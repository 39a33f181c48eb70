"""A tiny SDK for training code: learn that a checkpoint is wanted or withdrawn, say when saved,
and turn the eviction's SIGTERM into "checkpoint now, then exit".

Standard library only, so it drops into any training image next to the agent sidecar::

    import ckpt_preempt_sdk as sdk

    ckpt = sdk.Checkpointer()              # talks to the agent on 127.0.0.1:8471
    ckpt.install_signal_handlers()         # with `ckpt-preempt agent --signal-pidfile ...`
    stop = ckpt.install_stop_handler()     # SIGTERM: a flag, read at the loop's safe point
    for step in range(start, steps):
        train_step()
        if stop:                           # the pod is being deleted (preempted, evicted)
            save()                         # atomically: sdk.atomic_write / sdk.atomic_writer
            return ckpt.saved_on_stop()    # reports it; sys.exit(sdk.EXIT_CHECKPOINTED)
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

A checkpoint request never means "stop": keep training until the pod is evicted (SIGTERM).

**The SIGTERM contract.** Whoever stops the pod (our controller's eviction, kube-scheduler's
preemption, Kueue, Volcano, KAI, a drain, ``kubectl delete``), the kubelet sends SIGTERM, waits
``terminationGracePeriodSeconds``, then sends SIGKILL. With ``install_stop_handler()`` (or a
``StopRequest`` of your own) SIGTERM only sets a flag: the handler does no I/O and takes no
lock, so it is safe whatever the loop was doing. At its next safe point (the end of a step) the
loop sees ``stop`` true, saves, calls ``saved_on_stop()`` (reports the checkpoint to the agent as
its final one, like ``checkpointed()``) and exits with ``EXIT_CHECKPOINTED`` (75). Exit codes:

- ``0``: all the work is done;
- ``EXIT_CHECKPOINTED`` = 75 (``EX_TEMPFAIL``: "try again later"): stopped by a signal **after**
  a complete checkpoint of the step it stopped at; started again it resumes from there;
- ``EXIT_NOT_SAVED`` = 143 (128 + SIGTERM, what a shell reports for a process that SIGTERM
  killed): stopped **without** a new checkpoint (the save failed, or SIGTERM's default action).

Both are non-zero, so a Job never counts a preempted run as Succeeded; a Job's
``podFailurePolicy`` can match 75 (``onExitCodes``, action ``Ignore``) so that a saved stop
does not count against ``backoffLimit``. The save must end within the grace period (the step in
progress, plus the save, plus the report), or SIGKILL ends it half-way: that is why every write
is atomic. ``atomic_write(path, data)`` / ``atomic_writer(path)`` write a temporary file in the
same directory, fsync it, ``os.replace`` it over ``path`` and fsync the directory, so a SIGKILL at
any moment leaves the old checkpoint or the new one, never a torn one. A checkpoint that is a
directory (``torch.distributed.checkpoint``, one shard per rank) is written to a new directory,
``fsync_tree``-d, then named by a small pointer file written with ``atomic_write``; a restart
reads the pointer. Further SIGTERMs during the save are counted (``StopRequest.count``), never
fatal, so they cannot abort it. Signal handlers run in the main thread only: install the handler
there, and let the loop's main thread reach its safe points (the flag is readable from any
thread).

- ``events(timeout=0)``: what happened since the last call, oldest first; with a timeout it
  blocks (long-polls the agent) until something happens or the timeout passes.
- ``status()``: where the pod stands now: ``idle``, ``requested`` / ``acked`` (with the plan id
  and its deadline) or ``cancelled`` (the plan whose request was withdrawn last).
- ``done(plan)``: acknowledge that plan's request once the checkpoint is durable. False when
  that plan's request is not standing (cancelled, replaced, or acked already): the agent never
  writes a late acknowledgement.
- ``checkpointed()``: report a periodic checkpoint (the agent writes last-checkpoint).
- ``install_stop_handler()`` / ``stop_requested`` / ``saved_on_stop()``: the SIGTERM contract
  above. Once installed, every call to the agent says so, and the agent (which gets its own
  SIGTERM at the same moment) keeps serving until this final report is written.

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

import contextlib
import enum
import json
import os
import secrets
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

AGENT_HOST = "127.0.0.1"
AGENT_PORT = 8471
DEFAULT_URL = f"http://{AGENT_HOST}:{AGENT_PORT}"
URL_ENV = "CKPT_PREEMPT_AGENT_URL"
REQUEST_SIGNAL = signal.SIGUSR1  # the agent's SignalHook sends these by default
CANCEL_SIGNAL = signal.SIGUSR2
PROGRESS_SECONDS = 5.0  # progress() reaches the agent at most this often (and when done)
MAX_WAIT_SECONDS = 30.0  # one long poll lasts at most this long; the agent enforces it too
HTTP_TIMEOUT_SECONDS = 5.0
STOP_SIGNALS = (signal.SIGTERM,)  # what the kubelet sends a pod it deletes
EXIT_CHECKPOINTED = 75  # stopped after a complete checkpoint (sysexits' EX_TEMPFAIL): resume
EXIT_NOT_SAVED = 128 + signal.SIGTERM  # 143: stopped without one (what SIGTERM's kill reports)
STOP_HEADER = "X-Ckpt-Preempt-Stop"  # on every call once the loop saves on SIGTERM
STOP_SAVES = "checkpoint"  # its value: the agent waits for the final report on its own SIGTERM


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


# ------------------------------------------------------------------------------ stop on SIGTERM
class StopRequest:
    """SIGTERM (or any of ``signals``) as a request to checkpoint and exit, read as a flag.

    The handler only counts: no I/O, no lock, nothing that could deadlock or fail inside a
    signal handler, and a second signal during the save changes nothing but ``count``.
    ``bool(stop)`` is true from the first signal on. Works without an agent (every rank of a
    distributed job installs one; only rank 0 usually talks to the agent)."""

    def __init__(self) -> None:
        self.count = 0  # signals received
        self.first_at: float | None = None  # time.monotonic() of the first
        self._previous: dict[int, object] = {}

    def install(self, signals: Iterable[int] = STOP_SIGNALS) -> StopRequest:
        """Handle ``signals`` from now on (main thread only: Python's rule for handlers)."""
        for signum in signals:
            previous = signal.signal(signum, self._handle)
            self._previous.setdefault(signum, previous)
        return self

    def _handle(self, _signum: int, _frame: object) -> None:
        self.count += 1
        if self.first_at is None:
            self.first_at = time.monotonic()

    @property
    def requested(self) -> bool:
        return self.count > 0

    def __bool__(self) -> bool:
        return self.count > 0

    def elapsed(self) -> float:
        """Seconds since the first signal (0 before it): how much of the grace period is gone."""
        return 0.0 if self.first_at is None else time.monotonic() - self.first_at

    def restore(self) -> None:
        """Put back the handlers that were there before ``install``."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()


# ------------------------------------------------------------------------------ atomic writes
def fsync_dir(path: str | os.PathLike) -> None:
    """Make the directory's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str | os.PathLike) -> None:
    """fsync every file and directory under ``path`` (a checkpoint written as a directory),
    before a pointer names it."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(root)


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """A file object whose contents replace ``path`` all at once when the block ends.

    It writes ``.<name>.<random>.tmp`` in ``path``'s directory (same filesystem, so the rename is
    atomic), fsyncs it, ``os.replace``-s it over ``path`` and fsyncs the directory. A SIGKILL at
    any moment leaves the old ``path`` or the new one (and perhaps a stale ``.tmp`` file, never
    read); an exception in the block removes the temporary file and leaves ``path`` as it was.
    ``mode``: ``"wb"`` (``torch.save(obj, f)``) or ``"w"`` (UTF-8 text)."""
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', not {mode!r}")
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` atomically and durably (see ``atomic_writer``)."""
    with atomic_writer(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


class Checkpointer:
    def __init__(self, url: str | None = None, *, poll_seconds: float = 1.0) -> None:
        self.url = (url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        self.poll_seconds = poll_seconds
        self._poll_now = threading.Event()
        self._last_poll = -float("inf")
        self._agent: str | None = None  # the agent run whose events we follow
        self._seq = 0  # the last event number delivered
        self._last_progress = -float("inf")
        self.stop: StopRequest | None = None  # set by install_stop_handler

    def install_signal_handlers(self, request: int = REQUEST_SIGNAL,
                                cancel: int | None = CANCEL_SIGNAL) -> None:
        for signum in (request, cancel):
            if signum is not None:
                signal.signal(signum, lambda *_: self._poll_now.set())

    def install_stop_handler(self, signals: Iterable[int] = STOP_SIGNALS) -> StopRequest:
        """Turn SIGTERM into a flag (``StopRequest``; also ``stop_requested``) and tell the
        agent, on every call from now on, that this loop saves on SIGTERM and reports it with
        ``saved_on_stop()``. Without it SIGTERM keeps its default action (the process ends)."""
        self.stop = StopRequest().install(signals)
        return self.stop

    @property
    def stop_requested(self) -> bool:
        """Whether a stop signal came (always False without ``install_stop_handler``)."""
        return self.stop is not None and self.stop.requested

    def saved_on_stop(self) -> int:
        """The checkpoint saved after a stop signal is durable: report it to the agent as the
        final one (as ``checkpointed()`` does; an agent that does not answer is ignored, the
        process is leaving) and return ``EXIT_CHECKPOINTED``, the code to exit with."""
        with contextlib.suppress(AgentUnavailable):
            self.checkpointed(final=True)
        return EXIT_CHECKPOINTED

    def _call(self, method: str, path: str, body: dict | None = None,
              timeout: float = HTTP_TIMEOUT_SECONDS) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.stop is not None:
            headers[STOP_HEADER] = STOP_SAVES
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
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

    def checkpointed(self, *, final: bool = False) -> None:
        """Report a periodic checkpoint (the agent refreshes last-checkpoint). ``final``: the
        last one before this process exits (``saved_on_stop`` sends it)."""
        code, d = self._call("POST", "/checkpointed", {"final": True} if final else {})
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
