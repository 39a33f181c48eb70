"""A job's end, estimated from the progress its training loop reports through the SDK.

The planner chooses victims knowing their declared ends (``ckpt-preempt.io/expected-end``,
``policies.planner.timing``): a pod seen to end within the drain cap costs only the
preemptor's wait. Few jobs know their end when they start, but a loop that knows how many steps
it runs knows it as it goes. ``ckpt_preempt_sdk.Checkpointer.progress(done, total)`` reports
where the loop stands; this module turns those reports into an end, and says when the agent
should write it:

- the rate is measured over the reports of the last ``RATE_WINDOW_SECONDS`` (at least
  ``MIN_SPAN_SECONDS`` apart, so one noisy step decides nothing); the end is the newest report's
  time plus what is left at that rate, or the newest report's time once ``done`` reaches
  ``total``;
- progress that goes back (the job restarted from a checkpoint) or a new ``total`` starts the
  measurement over;
- the agent writes an end when none is written, or when the new one moved by more than
  ``max(END_REDECLARE_MIN_SECONDS, END_REDECLARE_SHARE × the time left)``
  (``policies.model.annotations``, which the simulator's progress-estimated ends share), and
  no sooner than ``MIN_WRITE_INTERVAL_SECONDS`` after its last write: near its end a job's
  annotation is accurate to about a minute, far from it a few writes an hour at most. A write
  that failed is not counted (``wrote`` is called after the write), so the next report tries
  again.

A declared end can only make the declaring pod more likely to be chosen as a victim (never
another pod cheaper), and one that does not come true is found out at the plan's deadline,
where the pod is evicted with all it had not saved, so a wrong estimate costs the job itself.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from ckpt_preempt.policies.model.annotations import END_REDECLARE_MIN_SECONDS, END_REDECLARE_SHARE

RATE_WINDOW_SECONDS = 600.0  # the rate is measured over the last ten minutes of reports
MIN_SPAN_SECONDS = 10.0  # and only once the reports span this long
MIN_WRITE_INTERVAL_SECONDS = 30.0  # between two writes of a still-running job's end


class ProgressError(ValueError):
    """A report the agent refuses (the SDK's endpoint answers 400 with its text)."""


@dataclass(frozen=True, slots=True)
class Report:
    at: float
    done: float
    total: float


def parse(body: object, at: float) -> Report:
    """A ``POST /progress`` body ``{"done": D, "total": T}``: finite numbers, 0 <= D <= T,
    T > 0."""
    if not isinstance(body, dict):
        raise ProgressError('body must be {"done": <number>, "total": <number>}')
    done, total = body.get("done"), body.get("total")
    for name, v in (("done", done), ("total", total)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ProgressError(f"{name} must be a finite number, got {v!r}")
    if total <= 0:
        raise ProgressError(f"total must be above 0, got {total!r}")
    if not 0 <= done <= total:
        raise ProgressError(f"done must be between 0 and total ({total!r}), got {done!r}")
    return Report(at=at, done=float(done), total=float(total))


class EndEstimate:
    """The reports of one job, and the end the agent last wrote for it."""

    def __init__(self) -> None:
        self._reports: deque[Report] = deque()
        self.written: float | None = None  # the end last written
        self._written_at: float | None = None  # when

    def report(self, r: Report) -> float | None:
        """Take one report; return the end to write now, or None (nothing to write). Call
        ``wrote`` once it is written."""
        last = self._reports[-1] if self._reports else None
        if last is not None and (r.done < last.done or r.total != last.total or r.at < last.at):
            self._reports.clear()  # restarted, re-planned, or a clock step: measure anew
        self._reports.append(r)
        while r.at - self._reports[0].at > RATE_WINDOW_SECONDS:
            self._reports.popleft()
        end = self.end()
        if end is None or not self._worth_writing(end, r):
            return None
        return end

    def wrote(self, end: float, at: float) -> None:
        """``end`` was written on the pod at ``at``."""
        self.written, self._written_at = end, at

    def end(self) -> float | None:
        """The estimated end, or None while the reports cannot tell (too short a span, or no
        progress within it)."""
        newest = self._reports[-1]
        if newest.done >= newest.total:
            return newest.at
        oldest = self._reports[0]
        span = newest.at - oldest.at
        if span < MIN_SPAN_SECONDS or newest.done <= oldest.done:
            return None
        rate = (newest.done - oldest.done) / span
        return newest.at + (newest.total - newest.done) / rate

    def _worth_writing(self, end: float, r: Report) -> bool:
        if self.written is None:
            return True
        if r.at - self._written_at < MIN_WRITE_INTERVAL_SECONDS:
            return False
        left = max(0.0, end - r.at)
        return abs(end - self.written) > max(END_REDECLARE_MIN_SECONDS,
                                             END_REDECLARE_SHARE * left)
