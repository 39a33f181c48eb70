"""Small-sample statistics for comparing policies over seeds: medians and bootstrap intervals.

Everything is pure and seeded: the same values and seed give the same interval. Intervals are
percentile bootstrap intervals of the median, as R's surveyframe::bootstrap_ci defines them
(https://rdrr.io/cran/surveyframe/man/bootstrap_ci.html): resample the values with replacement
``resamples`` times, take each resample's median, and report the 2.5th and 97.5th percentiles of
those medians. A ratio of
two policies is the median of their per-seed ratios (each seed is one paired experiment: both
policies saw the same workload), its interval from resampling seeds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

RESAMPLES = 10_000  # bootstrap resamples per interval
CONFIDENCE = 0.95


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """A median with its bootstrap interval; ``n`` values went into it."""

    median: float
    low: float
    high: float
    n: int

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def as_dict(self, digits: int = 4) -> dict:
        return {"median": round(self.median, digits),
                "ci95": [round(self.low, digits), round(self.high, digits)], "n": self.n}


def median(values: Sequence[float]) -> float:
    """The median; the mean of the two middle values when there is an even number."""
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0 <= q <= 100), interpolating linearly between order statistics.

    numpy's default method, "linear"
    (https://numpy.org/doc/stable/reference/generated/numpy.percentile.html).
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def bootstrap_median(
    values: Sequence[float], *, seed: int = 0, resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """The median of ``values`` and its percentile-bootstrap interval."""
    if not values:
        raise ValueError("bootstrap of no values")
    if resamples < 1 or not 0 < confidence < 1:
        raise ValueError("resamples must be >= 1 and confidence in (0, 1)")
    xs = [float(v) for v in values]
    m = median(xs)
    if len(xs) == 1 or min(xs) == max(xs):
        return Estimate(median=m, low=m, high=m, n=len(xs))
    rng = random.Random(seed)
    n = len(xs)
    medians = [median(rng.choices(xs, k=n)) for _ in range(resamples)]
    tail = (1 - confidence) / 2 * 100
    return Estimate(median=m, low=percentile(medians, tail), high=percentile(medians, 100 - tail),
                    n=n)


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Per-seed ratios; seeds whose denominator is 0 have no ratio and are left out."""
    if len(numerators) != len(denominators):
        raise ValueError("paired values need the same number of seeds")
    return [a / b for a, b in zip(numerators, denominators, strict=True) if b != 0]


def bootstrap_ratio(
    numerators: Sequence[float], denominators: Sequence[float], *, seed: int = 0,
    resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
) -> Estimate | None:
    """Median of the per-seed ratios, with its interval over resampled seeds (None: no ratio)."""
    ratios = paired_ratios(numerators, denominators)
    if not ratios:
        return None
    return bootstrap_median(ratios, seed=seed, resamples=resamples, confidence=confidence)
