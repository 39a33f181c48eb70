"""Cost-aware: our search and gang handling, blind to checkpoints.

The baseline that separates what checkpoints buy from what weighing GPUs × time buys: the same
planner (``policies.planner.preemption``: candidate walk, exact within-node search, whole gangs,
PDBs, fairness penalty) with every pod's cost taken as GPUs × time since it started. It is the
planner run on a copy of the snapshot with every checkpoint fact removed (no mode, no last
checkpoint, no checkpoint time, nothing malformed; unknown checkpoints count from the start)
and without draining. The victims' ``lost_gpu_seconds`` in its plans are therefore GPU × age,
what it believed; the simulator charges what victims really lose from its own ground truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ckpt_preempt.policies.model.model import CheckpointMode, Plan, Pod, UnknownCheckpoint
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import preemption

POLICY = "cost-aware"


_NO_CHECKPOINT = dict(checkpoint=CheckpointMode.NONE, last_checkpoint=None,
                      checkpoint_seconds=None, checkpoint_malformed=False)


def _blind(p: Pod) -> Pod:
    """``p`` without its checkpoint fields. A field-for-field copy: ``dataclasses.replace``
    re-runs ``__init__`` and, over every pod of every plan, tripled a replay's run time."""
    if (p.checkpoint is CheckpointMode.NONE and p.last_checkpoint is None
            and p.checkpoint_seconds is None and not p.checkpoint_malformed):
        return p
    out = object.__new__(Pod)
    out.__dict__.update(p.__dict__, **_NO_CHECKPOINT)
    return out


def without_checkpoints(snapshot: Snapshot) -> Snapshot:
    """The snapshot as a planner that knows nothing of checkpoints sees it."""
    return Snapshot(
        now=snapshot.now, nodes=snapshot.nodes, pods=tuple(_blind(p) for p in snapshot.pods),
        pdbs=snapshot.pdbs, recent_preemptions=snapshot.recent_preemptions,
        preemption_history=snapshot.preemption_history,
        unknown_checkpoint=UnknownCheckpoint(),
    )


def plan(
    snapshot: Snapshot, preemptor: Sequence[Pod],
    config: preemption.PlannerConfig = preemption.PlannerConfig(drain=False),
) -> Plan:
    """The planner's plan on the checkpoint-blind snapshot, never draining."""
    blind = [_blind(p) for p in preemptor]
    got = preemption.plan(without_checkpoints(snapshot), blind, replace(config, drain=False))
    return replace(got, policy=POLICY)
