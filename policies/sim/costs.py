"""What an eviction costs beyond unsaved work, and what the planner is shown: the replay's
cost knobs, the seeded draws behind them and the ledger that sums them after the warm-up.

Everything here is deterministic given the workload seed: each draw comes from its own
``random.Random`` keyed by the seed, the job and the event, so two policies that evict the same
job for the same time see the same outcome.

Defaults. None of these figures is measured on this project's clusters; each is stated with what
it rests on, and ``SimConfig.without_costs()`` turns them all off (the engine then behaves as it
did before they existed).

- ``restore_seconds`` 300: an evicted job waits for its pods to be recreated and scheduled,
  reloads its checkpoint and warms up before it trains again. The figure is an assumption in the
  range of what we read: J. T. Daly, "A higher order estimate of the optimum checkpoint interval
  for restart dumps", Future Generation Computer Systems (doi:10.1016/j.future.2004.11.016),
  Fig. 3 models a restart time R of 10 min; a production training platform reports resuming
  "within 3 minutes" only after building a dedicated checkpoint system
  (https://deepiix.com/blog/smart-checkpointing-failed-training-runs.html).
- ``report_lag_seconds`` 30 and ``report_jitter_seconds`` 30: assumptions. The training process
  publishes ``last-checkpoint`` after the checkpoint is durable (one API write); the jitter
  stands for scripts that stamp the step's start rather than the save's end.
- ``drain_failure_share`` 0.02, ``drain_overrun_share`` 0.05, ``drain_overrun_factor`` 2:
  assumptions ("a few per cent" of on-request checkpoints fail or run long); the controller's
  behaviour on either is the real one: it evicts at the plan's checkpoint deadline.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class DrainOutcome:
    """How one drained victim's on-request checkpoint went."""

    saved: bool  # the checkpoint finished before the deadline
    seconds: float  # how long the checkpoint took (the estimate unless it overran)
    failed: bool  # the drain ended with no checkpoint at all
    overran: bool  # the checkpoint took longer than its estimate


def drain_outcome(
    *, seed: int, job_id: int, nth: int, estimate: float, deadline: float,
    failure_share: float, overrun_share: float, overrun_factor: float,
) -> DrainOutcome:
    """The seeded outcome of draining job ``job_id`` for the ``nth`` time (0-based).

    ``deadline``: seconds from the drain request until the controller evicts anyway. A failed
    drain saves nothing; an overrun checkpoint takes ``estimate × overrun_factor`` and saves only
    if that still ends by the deadline.
    """
    if failure_share <= 0 and overrun_share <= 0:
        return DrainOutcome(saved=True, seconds=estimate, failed=False, overran=False)
    u = random.Random(f"drain-{seed}-{job_id}-{nth}").random()
    if u < failure_share:
        return DrainOutcome(saved=False, seconds=deadline, failed=True, overran=False)
    if u < failure_share + overrun_share:
        took = estimate * overrun_factor
        return DrainOutcome(saved=took <= deadline, seconds=min(took, deadline), failed=False,
                            overran=True)
    return DrainOutcome(saved=True, seconds=estimate, failed=False, overran=False)


def report_error(*, seed: int, job_id: int, checkpoint: float, jitter: float) -> float:
    """The seeded error (uniform in ±``jitter`` seconds) of one published checkpoint time."""
    if jitter <= 0:
        return 0.0
    return random.Random(f"report-jitter-{seed}-{job_id}-{checkpoint!r}").uniform(-jitter, jitter)


class Ledger:
    """Losses, restarts, drain delays and evictions, counted from ``warmup`` seconds on.

    An eviction is measured by the time its plan was made: what happens before the warm-up still
    happens (and shapes the rest of the run) but is not charged.
    """

    def __init__(self, warmup: float) -> None:
        self.warmup = warmup
        self.work = 0.0  # GPU-seconds of unsaved work lost
        self.restart = 0.0  # GPU-seconds idle while evicted jobs restart
        self.delay = 0.0  # preemptor GPU-seconds spent waiting for drains
        self.evictions: list[float] = []  # GPU-hours per evicted job
        self.series: list[tuple[float, float]] = []  # (time s, cumulative lost GPU-h)

    def measured(self, t: float) -> bool:
        return t >= self.warmup

    def evicted(self, t: float, work: float, restart: float) -> None:
        """One victim job's charge, in GPU-seconds, for a plan made at ``t``."""
        if not self.measured(t):
            return
        self.work += work
        self.restart += restart
        self.evictions.append((work + restart) / 3600)
        self.series.append((t, self.total / 3600))

    def restarted(self, t: float, gpu_seconds: float) -> None:
        """GPU-seconds idle while a job re-forms without being evicted (an elastic job
        growing back, ``policies.sim.elastic``)."""
        if self.measured(t):
            self.restart += gpu_seconds
            self.series.append((t, self.total / 3600))

    def delayed(self, t: float, gpu_seconds: float) -> None:
        if self.measured(t):
            self.delay += gpu_seconds

    @property
    def total(self) -> float:
        return self.work + self.restart
