"""The checkpoint agent: a sidecar that answers drain requests for its own pod.

It watches only its own pod (RBAC: get/watch/patch on that one pod) and writes only
``ckpt-preempt.io/checkpoint-done=<plan>``, ``ckpt-preempt.io/last-checkpoint`` and
``ckpt-preempt.io/expected-end`` on it.

- **Request**: the controller writes ``ckpt-preempt.io/drain`` naming a plan. The agent runs the
  workload's hook (``Hook.checkpoint``) once per plan; when the checkpoint is saved (the hook says
  so, or the workload calls ``POST /done`` through the ``ckpt_preempt_sdk`` module) it acknowledges.
- **Cancel**: when a plan aborts, the controller removes the annotation, or replaces it with
  another plan's. The agent then reports the old plan as cancelled (SDK state ``cancelled``) and
  calls ``Hook.cancel`` if that plan's checkpoint hook had started. A cancelled plan is never
  acknowledged: the ack is a JSON patch that first tests that the pod still carries the exact
  request being acknowledged, so the API server refuses an ack that lost a race with the cancel.
- Repeated and malformed drain annotations are ignored (a malformed one is logged once).

An elastic gang's shrink (``policies.planner.shrink``) is a drain request whose ``leaving`` names
the gang's members that go (this pod among them); the hooks and the SDK pass the names on, so the
job lets exactly those go and the rest re-form without them (only those are evicted).

- **Stop**: the kubelet sends SIGTERM to every container of a pod it deletes at once, the agent
  included. A workload that saves on SIGTERM (``ckpt_preempt_sdk``'s ``install_stop_handler``;
  its calls then carry ``X-Ckpt-Preempt-Stop: checkpoint``) reports that last checkpoint with
  ``POST /checkpointed`` ``{"final": true}``; so the agent, on its own SIGTERM, keeps serving
  until that final report has come and been written (``finish``), or the workload is gone, or
  ``final_seconds`` pass. A report whose write failed is written once more then. A workload
  that never said it saves on SIGTERM is not waited for.
- **Progress**: a loop that knows its length reports ``POST /progress`` ``{"done", "total"}``
  through the SDK; the agent estimates the job's end from the rate and writes it as
  ``expected-end`` when it has moved enough (``controller/agent/progress.py``), so the planner
  can choose a pod minutes from its end and wait for it instead of evicting a job mid-way.

Hooks: ``ExecHook`` (run a command; exit 0 = saved; ``cancel_command`` on cancel; both get
``CKPT_PREEMPT_ACTION``/``_PLAN``/``_DEADLINE``/``_LEAVING``, the last comma-separated and empty
unless a shrink), ``HttpHook`` (POST ``{"action", "plan", "deadline"}``, plus ``"leaving"`` on a
shrink; 2xx = saved; cancels go to ``cancel_url``), ``SignalHook`` (signal the workload,
SIGUSR1 for a request and SIGUSR2 for a cancel by default, and only if the process handles that
signal, so a cancel never kills it; the workload acks through the SDK). Hooks run one at a time,
in order, on the agent's hook thread.

This module holds the decisions and the hooks; the process plumbing (the API writer of the pod,
the watch, the SDK's local endpoint and the threads) is ``controller/agent/agent_process.py``.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shlex
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from ckpt_preempt.controller.agent import progress
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.times import rfc3339
from ckpt_preempt_sdk import MAX_WAIT_SECONDS, Event, State, Status

log = logging.getLogger("ckpt_preempt.agent")
CANCEL_HOOK_TIMEOUT_SECONDS = 30.0
EVENT_HISTORY = 256  # events kept for the SDK's long polls
# How long the agent, on its own SIGTERM, waits for a workload that saves on SIGTERM to report
# its final checkpoint. Inside a pod the kubelet's SIGKILL at the end of
# terminationGracePeriodSeconds ends the wait sooner; this bounds it everywhere else.
FINAL_REPORT_SECONDS = 300.0
GONE_POLL_SECONDS = 0.2  # how often the wait looks whether the signalled process still runs


# ------------------------------------------------------------------------------------ hooks
class Hook:
    """How the workload hears of requests and cancels."""

    def checkpoint(self, request: plan_record.DrainRequest) -> bool:
        """Start a checkpoint. True: it is saved already (the agent acks). False: the workload
        acks itself through the SDK. Raises on failure (no ack)."""
        raise NotImplementedError

    def cancel(self, request: plan_record.DrainRequest) -> None:
        """The request was withdrawn: no eviction is coming for this plan."""

    def workload_gone(self) -> bool:
        """Whether the workload process has certainly exited (False: running, or unknown)."""
        return False


def _env(action: str, request: plan_record.DrainRequest) -> dict[str, str]:
    return {**os.environ, "CKPT_PREEMPT_ACTION": action, "CKPT_PREEMPT_PLAN": request.plan,
            "CKPT_PREEMPT_DEADLINE": rfc3339(request.deadline),
            "CKPT_PREEMPT_LEAVING": ",".join(request.leaving)}


@dataclass(frozen=True)
class ExecHook(Hook):
    command: str
    cancel_command: str | None = None

    def checkpoint(self, request: plan_record.DrainRequest) -> bool:
        timeout = max(1.0, request.deadline - time.time())
        r = subprocess.run(shlex.split(self.command), env=_env("checkpoint", request),
                           timeout=timeout, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"checkpoint command exited {r.returncode}")
        return True

    def cancel(self, request: plan_record.DrainRequest) -> None:
        if self.cancel_command is None:
            return
        r = subprocess.run(shlex.split(self.cancel_command), env=_env("cancel", request),
                           timeout=CANCEL_HOOK_TIMEOUT_SECONDS, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"cancel command exited {r.returncode}")


def _post(url: str, body: dict, timeout: float) -> bool:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # raises on 4xx/5xx
        return 200 <= resp.status < 300


@dataclass(frozen=True)
class HttpHook(Hook):
    url: str
    cancel_url: str | None = None

    def checkpoint(self, request: plan_record.DrainRequest) -> bool:
        return _post(self.url, {"action": "checkpoint", "plan": request.plan,
                                "deadline": rfc3339(request.deadline),
                                **({"leaving": list(request.leaving)} if request.leaving else {})},
                     timeout=max(1.0, request.deadline - time.time()))

    def cancel(self, request: plan_record.DrainRequest) -> None:
        if self.cancel_url is not None:
            _post(self.cancel_url, {"action": "cancel", "plan": request.plan},
                  timeout=CANCEL_HOOK_TIMEOUT_SECONDS)


def handles(pid: int, signum: int) -> bool:
    """Whether process ``pid`` catches ``signum`` (Linux ``SigCgt``); one it does not catch
    would terminate it. False when that cannot be read."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an exited child not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


@dataclass(frozen=True)
class SignalHook(Hook):
    pid: int | None = None
    pidfile: str | None = None
    signum: int = signal.SIGUSR1
    cancel_signum: int | None = signal.SIGUSR2

    def _send(self, signum: int, request: plan_record.DrainRequest) -> None:
        pid = self.pid if self.pid is not None else int(Path(self.pidfile).read_text().strip())
        if not handles(pid, signum):
            log.warning("process %d does not handle %s: not signalled (the SDK still sees the "
                        "change)", pid, signal.Signals(signum).name, extra={"plan": request.plan})
            return
        os.kill(pid, signum)

    def checkpoint(self, request: plan_record.DrainRequest) -> bool:
        self._send(self.signum, request)
        return False

    def workload_gone(self) -> bool:
        try:
            pid = self.pid if self.pid is not None else int(Path(self.pidfile).read_text())
        except (OSError, ValueError):
            return False  # no pidfile yet, or a half-written one: not known to be gone
        return not running(pid)

    def cancel(self, request: plan_record.DrainRequest) -> None:
        if self.cancel_signum is not None:
            self._send(self.cancel_signum, request)


# ------------------------------------------------------------------------------------ writes
class PodWriter(Protocol):
    """Everything the agent writes, all on its own pod (``agent_process.KubePodWriter``)."""

    def ack(self, *, plan: str, drain_raw: str, at: float) -> bool:
        """Write checkpoint-done=plan and last-checkpoint=at, only if the pod's drain annotation
        still reads exactly ``drain_raw``. False (nothing written) when it does not."""

    def checkpointed(self, *, at: float) -> None:
        """Write last-checkpoint=at."""

    def expected_end(self, *, at: float) -> None:
        """Write expected-end=at."""


# ------------------------------------------------------------------------------------ the agent
@dataclass(frozen=True, kw_only=True)
class Standing:
    """The drain request on the pod as last seen; ``raw`` is the annotation's exact text."""

    request: plan_record.DrainRequest
    raw: str
    acked: bool


class CheckpointAgent:
    def __init__(self, writer: PodWriter, *, hook: Hook | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.writer, self.hook, self.clock = writer, hook, clock
        self.instance = uuid.uuid4().hex
        self._cond = threading.Condition()
        self._standing: Standing | None = None
        self._cancelled: plan_record.DrainRequest | None = None  # the last withdrawn request
        self._seen: set[str] = set()  # plans ever requested: each is answered once
        self._events: deque[Event] = deque(maxlen=EVENT_HISTORY)
        self._seq = 0
        self._malformed: str | None = None
        self._jobs: queue.SimpleQueue[tuple[State, plan_record.DrainRequest]] = queue.SimpleQueue()
        self._hooked: set[str] = set()  # plans whose checkpoint hook started (hook thread only)
        self._ack_lock = threading.Lock()
        self._progress_lock = threading.Lock()
        self._end = progress.EndEstimate()
        self._report_lock = threading.Lock()  # reports are written one at a time, in order
        self._reported: float | None = None  # the last checkpoint report's time (under _cond)
        self._written: float | None = None  # the last one written to the pod (under _cond)
        self._final = False  # the workload reported its last checkpoint before exiting
        self._saves_on_stop = False  # the workload said it saves on SIGTERM

    # ---------------------------------------------------------------- state (under self._cond)
    def _emit(self, state: State, request: plan_record.DrainRequest) -> None:
        self._seq += 1
        deadline = None if state is State.CANCELLED else request.deadline
        self._events.append(Event(seq=self._seq, state=state, plan=request.plan,
                                  deadline=deadline, leaving=request.leaving))
        self._cond.notify_all()
        log.info("checkpoint %s", state, extra={"plan": request.plan})

    def _status(self) -> Status:
        s, c = self._standing, self._cancelled
        if s is not None:
            return Status(agent=self.instance, seq=self._seq,
                          state=State.ACKED if s.acked else State.REQUESTED,
                          plan=s.request.plan, deadline=s.request.deadline,
                          leaving=s.request.leaving)
        return Status(agent=self.instance, seq=self._seq,
                      state=State.IDLE if c is None else State.CANCELLED,
                      plan=None if c is None else c.plan, deadline=None)

    def status(self) -> Status:
        with self._cond:
            return self._status()

    def observe(self, annotations: Mapping[str, str]) -> None:
        """The pod's annotations as the API server shows them now."""
        raw = annotations.get(plan_record.DRAIN_ANNOTATION)
        request = None
        if raw is not None:
            try:
                request = plan_record.drain_from_annotation(raw)
            except plan_record.DrainFormatError as e:
                if raw != self._malformed:
                    log.warning("ignoring malformed %s: %s", plan_record.DRAIN_ANNOTATION, e)
                self._malformed = raw
                return  # says nothing about the standing request
        with self._cond:
            old = self._standing
            if old is not None and request is not None and request.plan == old.request.plan:
                acked = old.acked or plan_record.acked(annotations, request.plan)
                self._standing = Standing(request=request, raw=raw, acked=acked)
                if acked and not old.acked:
                    self._emit(State.ACKED, request)
                return
            if old is not None:  # removed, or replaced by another plan's request
                self._standing, self._cancelled = None, old.request
                self._emit(State.CANCELLED, old.request)
                self._enqueue(State.CANCELLED, old.request)
            if request is None or request.plan in self._seen:
                return
            self._seen.add(request.plan)
            acked = plan_record.acked(annotations, request.plan)  # e.g. the agent restarted
            self._standing = Standing(request=request, raw=raw, acked=acked)
            self._emit(State.ACKED if acked else State.REQUESTED, request)
            if not acked:
                self._enqueue(State.REQUESTED, request)

    def _enqueue(self, state: State, request: plan_record.DrainRequest) -> None:
        if self.hook is not None:
            self._jobs.put((state, request))

    # ---------------------------------------------------------------- writes
    def ack(self, plan: str) -> bool:
        """Acknowledge ``plan`` if its request is standing and not acked yet."""
        with self._ack_lock:
            with self._cond:
                s = self._standing
                if s is None or s.request.plan != plan or s.acked:
                    return False
            if not self.writer.ack(plan=plan, drain_raw=s.raw, at=self.clock()):
                log.info("not acknowledged: the request changed before the write",
                         extra={"plan": plan})
                return False
            with self._cond:
                now = self._standing
                if now is not None and now.request.plan == plan and not now.acked:
                    self._standing = replace(now, acked=True)
                    self._emit(State.ACKED, now.request)
        return True

    def checkpointed(self, *, final: bool = False) -> None:
        """A checkpoint report (``final``: the workload's last, before it exits). Raises when
        the write fails; ``flush`` (run by ``finish``) tries the last report again."""
        with self._report_lock:  # an older report never overwrites a newer one
            at = self.clock()
            with self._cond:
                self._reported = at
                self._final = self._final or final
                self._cond.notify_all()
            self.writer.checkpointed(at=at)
            with self._cond:
                self._written = at

    def saves_on_stop(self) -> None:
        """The workload said (``X-Ckpt-Preempt-Stop``) that it checkpoints on SIGTERM."""
        with self._cond:
            self._saves_on_stop = True

    def flush(self) -> bool:
        """Write the last checkpoint report if its write failed. True when one was written."""
        with self._report_lock:
            with self._cond:
                at, written = self._reported, self._written
            if at is None or written == at:
                return False
            self.writer.checkpointed(at=at)
            with self._cond:
                self._written = at
        return True

    def finish(self, *, final_seconds: float = FINAL_REPORT_SECONDS) -> str:
        """On the agent's own SIGTERM: wait for a workload that saves on SIGTERM to report its
        final checkpoint (until it has, or its process is gone, or ``final_seconds`` pass),
        then write a report whose write had failed. Returns what ended the wait."""
        gone = self.hook.workload_gone if self.hook is not None else lambda: False
        end = time.monotonic() + final_seconds
        with self._cond:
            while True:
                if not self._saves_on_stop:
                    why = "the workload does not save on SIGTERM"
                    break
                if self._final:
                    why = "the final checkpoint was reported"
                    break
                left = end - time.monotonic()
                if left <= 0:
                    why = f"no final checkpoint report within {final_seconds:g} s"
                    break
                self._cond.release()  # reading /proc needs no lock; reports may come meanwhile
                try:
                    is_gone = gone()
                finally:
                    self._cond.acquire()
                if is_gone and not self._final:
                    why = "the workload exited without a final checkpoint report"
                    break
                self._cond.wait(timeout=min(GONE_POLL_SECONDS, left))
        try:
            if self.flush():
                why += "; the last report written again"
        except Exception as e:
            why += f"; writing the last report failed: {e}"
        log.info("stopping: %s", why)
        return why

    def progress(self, body: object) -> float | None:
        """Take one ``POST /progress`` body; returns the end written, None when nothing was.
        Raises ``progress.ProgressError`` on a malformed body (nothing is kept of it)."""
        with self._progress_lock:
            report = progress.parse(body, self.clock())
            end = self._end.report(report)
            if end is not None:
                self.writer.expected_end(at=end)  # raises when the write fails: not counted
                self._end.wrote(end, report.at)
            return end

    # ---------------------------------------------------------------- hooks
    def process_hooks(self, *, block_seconds: float = 0.0) -> None:
        """Run the queued hook calls in order (waiting up to ``block_seconds`` for the first)."""
        while True:
            try:
                state, request = self._jobs.get(timeout=block_seconds) if block_seconds > 0 \
                    else self._jobs.get_nowait()
            except queue.Empty:
                return
            block_seconds = 0.0
            try:
                self._run_hook(state, request)
            except Exception as e:
                log.warning("%s hook failed: %s", state, e, extra={"plan": request.plan})

    def _run_hook(self, state: State, request: plan_record.DrainRequest) -> None:
        hook = self.hook
        if hook is None:
            return
        if state is State.CANCELLED:
            if request.plan in self._hooked:  # only a workload that heard of it hears the end
                hook.cancel(request)
            return
        with self._cond:
            s = self._standing
            if s is None or s.request.plan != request.plan:
                return  # withdrawn before its turn came
            self._hooked.add(request.plan)
        if hook.checkpoint(request):
            self.ack(request.plan)

    # ---------------------------------------------------------------- SDK long poll
    def changes(self, after: int | None, wait_seconds: float) -> tuple[Status, list[Event] | None]:
        """Events after ``after``, waiting up to ``wait_seconds`` for one; None instead of the
        list when the caller must start from the status (no ``after``, or events dropped)."""
        with self._cond:
            if after is None:
                return self._status(), None
            self._cond.wait_for(lambda: self._seq > after,
                                timeout=min(max(0.0, wait_seconds), MAX_WAIT_SECONDS))
            if after > self._seq or (self._events and self._events[0].seq > after + 1):
                return self._status(), None
            return self._status(), [e for e in self._events if e.seq > after]
