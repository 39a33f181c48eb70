"""Queue order of preemptors: priority, then gang size, then age, then uid."""

from __future__ import annotations

import gc

import pytest

from ckpt_preempt.controller.kube import records
from ckpt_preempt.controller.planning.preemptors import Candidate
from ckpt_preempt.controller.planning.reconcile import cycle_objects_frozen
from ckpt_preempt.policies.lifecycle.plan_record import Mode
from tests.controller.test_convert import pod_json


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
