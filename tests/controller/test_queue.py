"""Queue order of preemptors: priority, then gang size, then age, then uid."""

from __future__ import annotations

import gc
from dataclasses import replace

import pytest

from ckpt_preempt.controller.kube import records
from ckpt_preempt.controller.planning.preemptors import Candidate, queued_gpus
from ckpt_preempt.controller.planning.reconcile import cycle_objects_frozen
from ckpt_preempt.policies.lifecycle.plan_record import Mode
from ckpt_preempt.policies.model.model import Resources
from tests.controller.test_convert import pod_json
from tests.policies.builders import make_pod


def cand(name, *, priority=0, size=1, created="2027-01-15T08:00:00Z") -> Candidate:
    members = []
    for i in range(size):
        d = pod_json(f"{name}-{i}", priority=priority)
        d["metadata"]["creationTimestamp"] = created
        members.append(records.pod_info(d))
    return Candidate(mode=Mode.NOMINATE, key=name, members=tuple(members))


@pytest.mark.parametrize(("first", "second"), [
    pytest.param(cand("hi", priority=10), cand("lo", priority=5, size=8),
                 id="higher priority first, even against a bigger gang"),
    pytest.param(cand("big", size=4), cand("small", size=1), id="larger gang first"),
    pytest.param(cand("old", created="2027-01-15T07:00:00Z"), cand("new"), id="older first"),
    pytest.param(cand("a"), cand("b"), id="uid breaks ties"),
])
def test_queue_order(first, second):
    assert sorted([second, first], key=Candidate.order) == [first, second]


def test_planning_runs_with_the_cycle_frozen_and_hands_it_back_even_on_error():
    """The queue is planned with live objects out of the cyclic GC's reach (no full collection
    inside a plan); afterwards, error or not, nothing stays frozen."""
    assert gc.get_freeze_count() == 0
    with cycle_objects_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), cycle_objects_frozen():
        raise RuntimeError("plan failed")
    assert gc.get_freeze_count() == 0


def test_each_preemptor_sees_the_gpus_the_others_at_its_priority_or_above_ask_for():
    """Snapshot.queued_gpus, for the end-aware victim choice (policies.planner.timing.end_rate):
    a preemptor's own ask and those below its priority are not counted."""
    queue = [cand("hi", priority=10), cand("gang", priority=10, size=3), cand("lo", priority=5)]
    model = {p.uid: replace(make_pod(p.name), uid=p.uid,
                            requests=Resources(cpu_milli=0, memory_mib=0, gpus=2))
             for c in queue for p in c.members}
    assert queued_gpus(queue, model) == [6.0, 2.0, 8.0]
    # a member the model lacks asks for nothing
    assert queued_gpus(queue, {}) == [0.0, 0.0, 0.0]
