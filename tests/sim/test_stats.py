"""Medians, percentiles and bootstrap intervals: exact values and invariants."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.sim import stats

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
samples = st.lists(finite, min_size=1, max_size=12)


def test_median_and_percentile_on_known_values():
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([4, 1, 3, 2]) == 2.5
    xs = [10, 20, 30, 40, 50]
    assert stats.percentile(xs, 0) == 10 and stats.percentile(xs, 100) == 50
    assert stats.percentile(xs, 50) == 30
    assert stats.percentile(xs, 90) == pytest.approx(46.0)  # numpy.percentile gives 46.0
    assert stats.percentile([7], 99) == 7


@pytest.mark.parametrize("call", [
    lambda: stats.median([]), lambda: stats.percentile([], 50),
    lambda: stats.percentile([1], 101), lambda: stats.bootstrap_median([]),
    lambda: stats.paired_ratios([1, 2], [1]),
])
def test_no_values_or_bad_arguments_raise_value_error(call):
    with pytest.raises(ValueError):
        call()


@given(samples)
def test_percentile_is_monotone_and_bounded(xs):
    qs = [0, 1, 25, 50, 75, 99, 100]
    ps = [stats.percentile(xs, q) for q in qs]
    assert ps == sorted(ps)
    assert ps[0] == min(xs) and ps[-1] == max(xs)
    assert stats.percentile(xs, 50) == pytest.approx(stats.median(xs))


@settings(max_examples=60, deadline=None)
@given(samples, st.integers(0, 2**32))
def test_interval_contains_the_median_and_is_deterministic_per_seed(xs, seed):
    a = stats.bootstrap_median(xs, seed=seed, resamples=2000)
    b = stats.bootstrap_median(xs, seed=seed, resamples=2000)
    assert a == b
    assert a.median == stats.median(xs) and a.n == len(xs)
    assert min(xs) <= a.low <= a.median <= a.high <= max(xs)


@settings(max_examples=40, deadline=None)
@given(st.lists(finite, min_size=3, max_size=6, unique=True), st.integers(0, 2**32))
def test_interval_narrows_with_more_seeds(xs, seed):
    """The same values seen 8 times as often: the median is better known."""
    small = stats.bootstrap_median(xs, seed=seed, resamples=4000)
    big = stats.bootstrap_median(xs * 8, seed=seed, resamples=4000)
    assert big.median == small.median
    assert big.high - big.low <= small.high - small.low


def test_interval_of_spread_values_shrinks_inside_with_16_times_the_seeds():
    rng = random.Random(1)
    xs = [rng.gauss(0, 1) for _ in range(5)]
    small = stats.bootstrap_median(xs, seed=1)
    big = stats.bootstrap_median(xs * 16, seed=1)
    assert (small.low, small.high) == (min(xs), max(xs))
    s = sorted(xs)
    assert (big.low, big.high) == (s[1], s[3])  # the medians of resamples cluster in the middle


def test_interval_of_identical_values_is_a_point():
    e = stats.bootstrap_median([2.5] * 7)
    assert (e.low, e.median, e.high) == (2.5, 2.5, 2.5)


def test_ratio_is_median_of_paired_ratios_and_skips_zero_denominators():
    e = stats.bootstrap_ratio([1, 2, 9, 5], [2, 4, 10, 0], seed=3, resamples=500)
    assert e is not None and e.n == 3
    assert e.median == 0.5  # ratios 0.5, 0.5, 0.9
    assert e.low == 0.5 and e.high <= 0.9
    assert stats.bootstrap_ratio([1], [0]) is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e4), st.floats(0.1, 1e4)), min_size=1, max_size=10),
       st.integers(0, 1000))
def test_ratio_interval_lies_within_the_per_seed_ratios(pairs, seed):
    num, den = [a for a, _ in pairs], [b for _, b in pairs]
    e = stats.bootstrap_ratio(num, den, seed=seed, resamples=1000)
    ratios = [a / b for a, b in pairs]
    assert e is not None
    assert min(ratios) <= e.low <= e.median <= e.high <= max(ratios)
    assert e.median == stats.median(ratios)
