"""When a running job's periodic checkpoints really happen, as opposed to what it declares.

A job declares an interval (its ``checkpoint-interval`` annotation, ``Job.interval``); the
planner is shown that. The engine charges the truth (``SimConfig``, all off by default, and
then this is the exact schedule the engine always used: a checkpoint every declared interval
from the training origin, durable at once, never failing):

- ``checkpoint_drift``: each job's real interval is its declared one times ``1 + e``, ``e``
  drawn once per job, uniform in ±drift (steps slow down and speed up: data loading, evaluation
  passes, a shared file system);
- ``periodic_save_seconds``: a checkpoint of the state at step time ``s`` is durable only at
  ``s`` plus the job's checkpoint time (``Job.checkpoint_seconds``); a stop before that loses it;
- ``checkpoint_failure_share``: each checkpoint fails with this probability (a seeded draw per
  job, run and checkpoint), leaving the previous one as the last.

Draws use a fixed integer hash, not ``random.Random``: the engine asks for the last checkpoint
millions of times a run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

_MASK = (1 << 64) - 1
_ROUNDING_SECONDS = 1e-6
_MOST_TRIES = 64  # failed checkpoints in a row looked past before settling on the origin


@dataclass(frozen=True, slots=True)
class Schedule:
    """One job's periodic checkpoints: every ``interval`` seconds from its training origin,
    durable ``save_seconds`` later, each failing with ``failure_share`` (keyed by ``key``)."""

    interval: float
    save_seconds: float = 0.0
    failure_share: float = 0.0
    key: int = 0

    @property
    def exact(self) -> bool:
        """Durable at once and never failing: the engine's schedule before this module."""
        return self.save_seconds == 0 and self.failure_share <= 0

    def failed(self, origin: float, k: int) -> bool:
        """Whether checkpoint ``k`` (1-based) of the run that began at ``origin`` failed."""
        if self.failure_share <= 0:
            return False
        return _unit(self.key, int(origin * 1000), k) < self.failure_share

    def last(self, origin: float, t: float) -> float:
        """The step time of the newest checkpoint durable by ``t`` (``origin`` when none)."""
        if t <= origin:
            return origin
        if self.exact:  # the engine's formula, to the last bit
            return origin + ((t - origin) // self.interval) * self.interval
        # durable at t counts, whatever the float rounding of step + save
        k = int((t - self.save_seconds - origin + _ROUNDING_SECONDS) // self.interval)
        tries = 0
        while k >= 1 and self.failed(origin, k) and tries < _MOST_TRIES:
            k -= 1
            tries += 1
        if k < 1 or tries == _MOST_TRIES:
            return origin
        return origin + k * self.interval

    def next_durable(self, origin: float, t: float) -> tuple[float, float]:
        """The first checkpoint durable after ``t``: (its step time, when it is durable)."""
        k = 1 if t < origin else int((t - self.save_seconds - origin) // self.interval)
        k = max(k, 1)
        for _ in range(_MOST_TRIES):
            step = origin + k * self.interval
            if step + self.save_seconds > t and not self.failed(origin, k):
                return step, step + self.save_seconds
            k += 1
        step = origin + k * self.interval
        return step, step + self.save_seconds


def schedule_for(interval: float | None, checkpoint_seconds: float | None, *, seed: int,
                 job_id: int, drift: float, save: bool, failure_share: float
                 ) -> Schedule | None:
    """Job ``job_id``'s real schedule for its declared ``interval`` (None: no periodic
    checkpoints)."""
    if interval is None:
        return None
    real = interval
    if drift > 0:
        real = interval * (1.0 + random.Random(f"interval-drift-{seed}-{job_id}").uniform(
            -drift, drift))
    return Schedule(interval=real, save_seconds=(checkpoint_seconds or 0.0) if save else 0.0,
                    failure_share=failure_share, key=(seed * 1_000_003 + job_id) & _MASK)


def _unit(*parts: int) -> float:
    """A uniform draw in [0, 1) from integers (splitmix64 over their mix)."""
    x = 0
    for p in parts:
        x = (x ^ (p & _MASK)) * 0x9E3779B97F4A7C15 & _MASK
        x ^= x >> 30
        x = x * 0xBF58476D1CE4E5B9 & _MASK
        x ^= x >> 27
        x = x * 0x94D049BB133111EB & _MASK
        x ^= x >> 31
    return x / 2.0**64
