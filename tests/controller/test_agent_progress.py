"""A job's end estimated from its progress reports (controller/agent/progress.py): the rate, when
the measurement starts over, and when the agent writes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_preempt.controller.agent import progress
from ckpt_preempt.controller.agent.progress import (
    MIN_SPAN_SECONDS,
    MIN_WRITE_INTERVAL_SECONDS,
    RATE_WINDOW_SECONDS,
    EndEstimate,
    ProgressError,
    Report,
)
from ckpt_preempt.policies.model.annotations import END_REDECLARE_MIN_SECONDS

T = 1_800_000_000.0


def _feed(est: EndEstimate, reports) -> list[float | None]:
    """Each report's end to write, written at once (as the agent does when the write works)."""
    got = []
    for at, done, total in reports:
        end = est.report(Report(at=T + at, done=done, total=total))
        if end is not None:
            est.wrote(end, T + at)
        got.append(end)
    return got


def test_a_steady_loop_gets_its_end_once_the_reports_span_long_enough():
    est = EndEstimate()
    got = _feed(est, [(0, 0, 1000), (MIN_SPAN_SECONDS / 2, 5, 1000), (MIN_SPAN_SECONDS, 10, 1000)])
    assert got == [None, None, T + MIN_SPAN_SECONDS + 990 * MIN_SPAN_SECONDS / 10]


def test_an_end_is_written_again_only_when_it_moved_enough_and_not_too_often():
    est = EndEstimate()
    _feed(est, [(0, 0, 100), (60, 10, 100)])  # 10 a minute: ends at 600
    assert est.written == T + 600
    # slower by a little: the end moves by 30 s, under a minute: not written
    assert _feed(est, [(120, 19.5, 100)]) == [None]
    # much slower: the end moves by more than 10 % of what is left, but only 31 s after
    # the last write is the write allowed
    assert _feed(est, [(60 + MIN_WRITE_INTERVAL_SECONDS - 1, 10.5, 100)]) == [None]
    (end,) = _feed(est, [(200, 20, 100)])
    assert end == pytest.approx(T + 200 + 80 * 200 / 20)
    assert abs(end - (T + 600)) > END_REDECLARE_MIN_SECONDS


def test_progress_going_back_or_a_new_total_starts_the_measurement_over():
    est = EndEstimate()
    _feed(est, [(0, 0, 100), (60, 50, 100)])
    assert _feed(est, [(120, 10, 100)]) == [None]  # restarted from a checkpoint
    assert est.end() is None
    _feed(est, [(180, 20, 100)])
    assert est.end() == pytest.approx(T + 180 + 80 * 6)
    assert _feed(est, [(240, 30, 200)]) == [None]  # re-planned: a new total


def test_a_finished_loop_ends_now_and_a_stalled_one_has_no_end():
    est = EndEstimate()
    _feed(est, [(0, 10, 100), (30, 10, 100)])
    assert est.end() is None  # no progress in the window
    assert _feed(est, [(60, 100, 100)]) == [T + 60]


def test_old_reports_leave_the_window():
    est = EndEstimate()
    _feed(est, [(0, 0, 1000), (60, 600, 1000)])  # fast at first
    _feed(est, [(60 + RATE_WINDOW_SECONDS + 1, 610, 1000),
                (60 + RATE_WINDOW_SECONDS + 61, 620, 1000)])  # then 10 a minute
    assert est.end() == pytest.approx(T + 60 + RATE_WINDOW_SECONDS + 61 + 380 * 6)


@pytest.mark.parametrize("body", [None, [], {"done": 1}, {"done": "1", "total": 2},
                                  {"done": 1, "total": float("inf")}, {"done": 3, "total": 2},
                                  {"done": -1, "total": 2}, {"done": 0, "total": 0},
                                  {"done": True, "total": 2}])
def test_malformed_reports_are_refused_with_the_reason(body):
    with pytest.raises(ProgressError):
        progress.parse(body, T)


@given(rate=st.floats(0.01, 1000), total=st.floats(1, 1e6),
       times=st.lists(st.floats(1, 120), min_size=2, max_size=30))
def test_at_a_constant_rate_every_end_written_is_the_true_end(rate, total, times):
    """Whatever the report times, a loop at a constant rate is told its true end while it
    runs, and no two writes come closer than the write interval."""
    est, at, writes = EndEstimate(), 0.0, []
    for dt in times:
        done = rate * at
        if done >= total:
            break
        end = est.report(Report(at=T + at, done=done, total=total))
        if end is not None:
            est.wrote(end, T + at)
            assert end == pytest.approx(T + total / rate, rel=1e-6, abs=1e-3)
            assert not writes or at - writes[-1] >= MIN_WRITE_INTERVAL_SECONDS
            writes.append(at)
        at += dt
