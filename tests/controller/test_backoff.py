"""The one backoff policy: jittered exponential waits under a cap, retries until stopped."""

from __future__ import annotations

import errno
import logging
import threading

from hypothesis import given
from hypothesis import strategies as st
from tenacity import RetryCallState

from ckpt_preempt.controller.core import backoff

log = logging.getLogger("test.backoff")


@given(st.integers(min_value=1, max_value=60), st.floats(min_value=0.01, max_value=300))
def test_waits_grow_exponentially_up_to_the_cap(attempt, cap):
    state = RetryCallState(None, None, (), {})
    state.attempt_number = attempt
    wait = backoff.reconnect_wait(cap_seconds=cap)(state)
    assert 0 <= wait <= min(cap, backoff.RECONNECT_MULTIPLIER_SECONDS * 2 ** (attempt - 1))


def test_retrying_retries_failures_and_returns_the_result(caplog):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
        return "ok"

    stop = threading.Event()
    with caplog.at_level(logging.WARNING, logger=log.name):
        got = backoff.retrying(stop, what="reading", logger=log, cap_seconds=0.01)(flaky)
    assert got == "ok" and len(calls) == 3
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        "reading failed (attempt 1): cannot reach the API server: connection refused",
        "reading failed (attempt 2): cannot reach the API server: connection refused"]


def test_keep_running_resets_after_a_return_and_ends_when_stopped(caplog):
    stop = threading.Event()
    outcomes = iter([ValueError, None, ValueError, ValueError, None, "stop"])

    def fn():
        outcome = next(outcomes)
        if outcome == "stop":
            stop.set()
        elif outcome is not None:
            raise outcome("boom")

    with caplog.at_level(logging.WARNING, logger=log.name):
        backoff.keep_running(fn, stop, what="watch", logger=log, cap_seconds=0.01)
    attempts = [r.getMessage().split(" (attempt ")[1].split(")")[0] for r in caplog.records]
    assert attempts == ["1", "1", "2"]  # counting restarted after the successful call
    assert next(outcomes, "exhausted") == "exhausted"


def test_a_stop_during_a_call_ends_the_loop_without_another_call():
    stop, calls = threading.Event(), []

    def always_fails():
        calls.append(1)
        if len(calls) == 3:
            stop.set()
        raise OSError("down")

    backoff.keep_running(always_fails, stop, what="x", logger=log, cap_seconds=0.01)
    assert len(calls) == 3


def test_stop_cuts_a_long_wait_short(monkeypatch):
    monkeypatch.setattr(backoff, "RECONNECT_MULTIPLIER_SECONDS", 1000.0)  # waits up to 1000 s
    stop, failed = threading.Event(), threading.Event()
    calls = []

    def always_fails():
        calls.append(1)
        failed.set()
        raise OSError("down")

    runner = threading.Thread(target=backoff.keep_running, args=(always_fails, stop),
                              kwargs={"what": "x", "logger": log, "cap_seconds": 3600})
    runner.start()
    assert failed.wait(60)
    stop.set()
    runner.join(timeout=60)
    assert not runner.is_alive()
    assert len(calls) == 1


def test_api_exceptions_are_described_by_their_status_line():
    class FakeApiError(Exception):
        status, reason = 503, "Service Unavailable"

    assert backoff._describe(FakeApiError("headers...")) == "HTTP 503 Service Unavailable"
