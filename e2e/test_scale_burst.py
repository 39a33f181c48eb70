"""A burst of preemptors onto full nodes (bench/scale_kwok.py's burst, small): every preemptor
is bound, and the pods evicted are exactly the victims of the plans the controller stored.
The bench reports the time; this test asserts no timing."""

from __future__ import annotations

import pytest

from bench.scale_kwok import burst
from e2e import kube

pytestmark = pytest.mark.e2e
NODES, PREEMPTORS = 8, 5


def test_a_burst_of_preemptors_all_bind_and_evict_only_planned_victims(cluster, namespace, pool):
    try:
        result = burst(cluster, namespace, pool, nodes=NODES, preemptors=PREEMPTORS,
                       timeout=120)
    finally:
        kube.delete_nodes(cluster, [f"{pool}-b{i}" for i in range(NODES)])
    assert result["evicted"] == result["planned_victims"]
    assert result["evictions"] == PREEMPTORS  # one full 8-GPU node freed per preemptor
    assert result["plans"] == PREEMPTORS
