"""The worlds the simulator replays: what jobs really do, and what the planner is told about it.

``REALISTIC`` is the default of ``ckpt-preempt simulate`` (and so of ``make run``) and of the
evidence run. ``OPTIMISTIC`` is the engine's own defaults (``SimConfig()``, ``WorkloadParams()``),
the world every result before 2026-12-07 was measured in, kept as an ablation: every job declares
its exact end, none is silent, periodic checkpoints are exact, instant and never fail, every job
restores in the same time, and no victim saves on SIGTERM.

The realistic world, change by change (none is measured on a production cluster; each says what
it rests on):

- **Ends are declared as the checkpoint agent declares them**, from the loop's progress
  (``controller/agent/progress.py``: the rate of steps so far, projected to the last step), by
  half of the jobs, each estimate off by up to 25 % of the time left (a misjudged rate: warm-up
  steps, evaluation passes, a changing batch). Assumption: the share and the error are ours;
  the example loops report steady steps, so they would flatter the estimate.
- **A quarter of the jobs that checkpoint never report it** (they do not run the SDK or its
  agent). Assumption.
- **Periodic checkpoints take time, drift and fail** (``policies/sim/checkpoint_schedule.py``):
  a checkpoint is durable its checkpoint time (30-180 s, the generator's range) after the step it
  saves; each job's real interval is its declared one ± up to 20 %; 3 % of checkpoints fail and
  the previous one stays the last. Assumptions ("a few per cent", the drain failure share's order).
- **Restore times differ per job**: the configured 300 s times a factor log-uniform in [1/3, 3]
  (100 s to 15 min; J. T. Daly's model restart of 10 min, doi:10.1016/j.future.2004.11.016, lies
  inside), while our planner still charges 300 s: it sees an estimate, not the truth.
- **Victims save on SIGTERM where the job can** (``policies/sim/sigterm.py``, the default 30 s
  grace), under every policy, kube-default included: a job that runs the SDK saves when told to
  stop (``sdk``: ``Checkpointer.install_stop_handler``) if its checkpoint fits the grace period.

Not modelled yet: a latency cost of the preemptor's wait beyond its GPU time (the wait's p95 is
reported next to every total instead), and stops other than preemptions saving on SIGTERM.
"""

from __future__ import annotations

from dataclasses import replace

from ckpt_preempt.policies.sim import sigterm
from ckpt_preempt.policies.sim.engine import SimConfig
from ckpt_preempt.policies.sim.workload import WorkloadParams

REALISTIC = "realistic"
OPTIMISTIC = "optimistic"
NAMES = (REALISTIC, OPTIMISTIC)
DEFAULT = REALISTIC

# the SimConfig and WorkloadParams fields a world sets: the realistic world's values; the
# optimistic world sets the same fields to the engine's and generator's defaults, so either
# world can be put on any configuration
_REALISTIC_SIM: dict[str, object] = {
    "declared_end_share": 0.5, "declared_end_error": 0.25, "declared_end_from_progress": True,
    "checkpoint_drift": 0.2, "periodic_save_seconds": True, "checkpoint_failure_share": 0.03,
    "restore_spread": 3.0, "sigterm_save": sigterm.DEFAULT_GRACE,
}
_REALISTIC_WORKLOAD: dict[str, object] = {"share_silent": 0.25}
SIM_CHANGES: dict[str, dict[str, object]] = {
    REALISTIC: _REALISTIC_SIM,
    OPTIMISTIC: {k: getattr(SimConfig(), k) for k in _REALISTIC_SIM},
}
WORKLOAD_CHANGES: dict[str, dict[str, object]] = {
    REALISTIC: _REALISTIC_WORKLOAD,
    OPTIMISTIC: {k: getattr(WorkloadParams(), k) for k in _REALISTIC_WORKLOAD},
}


def _known(name: str) -> None:
    if name not in NAMES:
        raise ValueError(f"unknown world {name!r}; choose from {', '.join(NAMES)}")


def config(name: str, base: SimConfig = SimConfig()) -> SimConfig:
    """``base`` with world ``name``'s simulator settings."""
    _known(name)
    return replace(base, **SIM_CHANGES[name])


def params(name: str, base: WorkloadParams | None = None) -> WorkloadParams:
    """``base`` (the generator's defaults when None) with world ``name``'s generator settings."""
    _known(name)
    return replace(base or WorkloadParams(), **WORKLOAD_CHANGES[name])
