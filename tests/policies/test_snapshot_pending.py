"""``Snapshot.with_pending``: one cluster state shared by every waiting preemptor of a moment (the
simulator plans them all on it) must be the snapshot made with all the pods: the same indexes
and the same plan, whatever the cluster and the preemptor."""

from __future__ import annotations

import pytest
from hypothesis import given

from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import preemption
from tests.policies.builders import make_pod
from tests.policies.test_plan_cache import QUEUES, cycles

INDEXES = ("pods_on_node", "free_by_node", "free_gpus_index", "largest_allocatable",
           "node_by_name", "pods_by_gang", "gangs", "pod_by_uid", "pdbs_by_namespace",
           "periodic_positions", "declared_ends")


@QUEUES
@given(cycles())
def test_a_shared_state_plus_the_preemptor_is_the_snapshot_with_all_pods(cycle):
    snap, queue, cfg, _ = cycle
    pending = {p.uid for q in queue for p in q}
    bound = tuple(p for p in snap.pods if p.uid not in pending)
    base = Snapshot(now=snap.now, nodes=snap.nodes, pods=bound, pdbs=snap.pdbs,
                    recent_preemptions=snap.recent_preemptions,
                    preemption_history=snap.preemption_history)
    for pods in queue:
        view = base.with_pending(pods, snap.queued_gpus)
        whole = Snapshot(now=snap.now, nodes=snap.nodes, pods=bound + pods, pdbs=snap.pdbs,
                         recent_preemptions=snap.recent_preemptions,
                         preemption_history=snap.preemption_history,
                         queued_gpus=snap.queued_gpus)
        assert view == whole
        for name in INDEXES:
            assert getattr(view, name) == getattr(whole, name), name
        assert preemption.plan(view, pods, cfg) == preemption.plan(whole, pods, cfg)
    # the base is untouched: no preemptor's gang leaked into its gang index
    assert all(p.uid not in pending for ps in base.pods_by_gang.values() for p in ps)


def test_a_bound_pod_is_refused():
    base = Snapshot(now=0.0, nodes=(), pods=())
    with pytest.raises(ValueError, match="bound to no node"):
        base.with_pending([make_pod("p", node="n0")], 0.0)
