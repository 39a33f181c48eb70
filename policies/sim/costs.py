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
- ``restore_job_gpu_seconds`` 300: an assumption, no source. The part of a restart that does
  not grow with the job's GPU count (the controller's and scheduler's round trip, image and
  framework start-up of the first pod, a failed first attempt), charged once per evicted job on
  top of ``restore_seconds`` on every GPU; 300 GPU-seconds is one GPU's worth of the per-GPU
  figure above. With it a 1-GPU victim costs 600 GPU-seconds to restart and an 8-GPU one 2,700,
  instead of 300 and 2,400. Our planners are given both terms as the controller's two knobs
  would say them (``restartCostSeconds`` per GPU, ``restartCostGpuSecondsPerWorkload`` once per
  evicted gang or pod; ``SimConfig.planner_restart``).
- ``report_lag_seconds`` 30 and ``report_jitter_seconds`` 30: assumptions. The training process
  publishes ``last-checkpoint`` after the checkpoint is durable (one API write); the jitter
  stands for scripts that stamp the step's start rather than the save's end.
- ``drain_failure_share`` 0.02, ``drain_overrun_share`` 0.05, ``drain_overrun_factor`` 2:
  assumptions ("a few per cent" of on-request checkpoints fail or run long); the controller's
  behaviour on either is the real one: it evicts at the plan's checkpoint deadline.
"""

from __future__ import annotations

import math
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


def restore_factor(*, seed: int, job_id: int, spread: float) -> float:
    """Job ``job_id``'s restore time as a multiple of the configured one: log-uniform in
    [1/``spread``, ``spread``], drawn once per job (1 when ``spread`` is 1)."""
    if spread <= 1.0:
        return 1.0
    return math.exp(random.Random(f"restore-{seed}-{job_id}").uniform(
        -math.log(spread), math.log(spread)))


def restart_gpu_seconds(*, gpu_share: float, per_gpu_seconds: float,
                        per_job_gpu_seconds: float) -> float:
    """What restarting one evicted job costs: the fixed per-job term plus the per-GPU term on
    each GPU it holds (a fractional share is charged at its fraction)."""
    return per_job_gpu_seconds + gpu_share * per_gpu_seconds


def split_at(start: float, end: float, window_start: float) -> tuple[float, float]:
    """Seconds of [start, end) inside the measured window (from ``window_start`` on) and before
    it: unsaved work a victim loses, split into what is charged by default and prior work."""
    span = max(0.0, end - start)
    inside = max(0.0, end - max(start, window_start))
    return inside, span - inside


class Ledger:
    """Losses, restarts, drain delays and evictions, counted from ``warmup`` seconds on.

    An eviction is measured by the time its plan was made: what happens before the warm-up still
    happens (and shapes the rest of the run) but is not charged. Of a measured victim's unsaved
    work, only the part done after the warm-up (inside the measured window) is charged by default
    (``work``); the part done before it (``prior``: by a job running when the replay began, or
    during the warm-up) is kept apart and charged only with ``charge_prior``.

    The total a policy is charged is lost work + restarts + the preemptor's extra wait for drains
    (``delay``); each stays visible as a part.
    """

    def __init__(self, warmup: float, *, charge_prior: bool = False) -> None:
        self.warmup = warmup
        self.charge_prior = charge_prior
        self.work = 0.0  # GPU-seconds of unsaved work lost, done inside the measured window
        self.prior = 0.0  # GPU-seconds of unsaved work lost, done before the measured window
        self.restart = 0.0  # GPU-seconds idle while evicted jobs restart
        self.delay = 0.0  # preemptor GPU-seconds spent waiting for drains
        self.evictions: list[float] = []  # GPU-hours charged per evicted job (work + restart)
        self.series: list[tuple[float, float]] = []  # (time s, cumulative total GPU-h)

    def measured(self, t: float) -> bool:
        return t >= self.warmup

    def evicted(self, t: float, work: float, restart: float, prior: float = 0.0) -> None:
        """One victim job's charge, in GPU-seconds, for a plan made at ``t``: ``work`` done
        inside the measured window, ``prior`` before it."""
        if not self.measured(t):
            return
        self.work += work
        self.prior += prior
        self.restart += restart
        charged = work + restart + (prior if self.charge_prior else 0.0)
        self.evictions.append(charged / 3600)
        self.series.append((t, self.total / 3600))

    def restarted(self, t: float, gpu_seconds: float) -> None:
        """GPU-seconds idle while a job re-forms without being evicted (an elastic job
        growing back, ``policies.sim.elastic``)."""
        if self.measured(t):
            self.restart += gpu_seconds
            self.series.append((t, self.total / 3600))

    def delayed(self, t: float, gpu_seconds: float) -> None:
        if self.measured(t) and gpu_seconds > 0:
            self.delay += gpu_seconds
            self.series.append((t, self.total / 3600))

    @property
    def lost_work(self) -> float:
        """Unsaved work charged: in-window, plus prior work when that is charged."""
        return self.work + (self.prior if self.charge_prior else 0.0)

    @property
    def total(self) -> float:
        """What a policy is charged: lost work + restarts + preemptor delay."""
        return self.lost_work + self.restart + self.delay

    @property
    def total_with_prior(self) -> float:
        """The same, always counting work done before the measured window."""
        return self.work + self.prior + self.restart + self.delay
