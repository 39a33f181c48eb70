"""The one backoff policy for talking to the API server again after a failure.

Waits are tenacity's ``wait_random_exponential`` ("full jitter"): before the n-th retry, a
uniform draw from ``[0, min(cap, RECONNECT_MULTIPLIER_SECONDS × 2^(n-1))]``. Many replicas or
sidecars that lost the API server at the same moment therefore come back spread out, and the
cap bounds how long a healed connection stays unused.

- ``reconnect_wait(cap_seconds=...)``: the wait strategy itself, for a tenacity ``Retrying`` of
  your own (with your own ``retry=`` and ``stop=``).
- ``retrying(stop, what=..., logger=...)``: a ``Retrying`` that calls a function until it
  returns, retrying after any ``Exception`` with a warning per failure, sleeping with
  ``stop.wait`` (a set ``stop`` cuts the wait short) and giving up, returning None, once
  ``stop`` is set. ``retrying(...)(fn, *args)`` returns what ``fn`` returns. When ``stop`` cuts
  a wait short, tenacity still makes that one attempt: check ``stop`` first in ``fn`` if that
  matters (``keep_running`` does).
- ``keep_running(fn, stop, what=..., logger=...)``: calls ``fn()`` again and again until
  ``stop`` is set, for loops such as a watch that ends every few seconds on its own: failures
  are retried with growing waits, and a return resets the waits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_when_event_set,
    wait_random_exponential,
)
from tenacity.wait import wait_base

from ckpt_preempt.controller.core import api_connection

RECONNECT_MULTIPLIER_SECONDS = 0.5  # the first retry waits up to this long
RECONNECT_CAP_SECONDS = 30.0  # no wait is longer than this


def reconnect_wait(*, cap_seconds: float = RECONNECT_CAP_SECONDS) -> wait_base:
    return wait_random_exponential(multiplier=RECONNECT_MULTIPLIER_SECONDS, max=cap_seconds)


def _describe(e: BaseException | None) -> str:
    status = getattr(e, "status", None)  # kubernetes ApiException: the status line, no headers
    if status is not None:
        return f"HTTP {status} {getattr(e, 'reason', '')}".rstrip()
    return api_connection.cannot_reach(e) or f"{type(e).__name__}: {e}"


def retrying(stop: threading.Event, *, what: str, logger: logging.Logger,
             cap_seconds: float = RECONNECT_CAP_SECONDS) -> Retrying:
    def warn(state: RetryCallState) -> None:
        logger.warning("%s failed (attempt %d): %s; retrying in %.1f s", what,
                       state.attempt_number, _describe(state.outcome.exception()),
                       state.next_action.sleep if state.next_action else 0.0)

    return Retrying(retry=retry_if_exception_type(Exception), stop=stop_when_event_set(stop),
                    wait=reconnect_wait(cap_seconds=cap_seconds), sleep=stop.wait,
                    before_sleep=warn, retry_error_callback=lambda _state: None)


def keep_running(fn: Callable[[], Any], stop: threading.Event, *, what: str,
                 logger: logging.Logger, cap_seconds: float = RECONNECT_CAP_SECONDS) -> None:
    def attempt() -> None:
        if not stop.is_set():
            fn()

    policy = retrying(stop, what=what, logger=logger, cap_seconds=cap_seconds)
    while not stop.is_set():
        policy(attempt)  # each call counts attempts afresh: a return resets the waits
