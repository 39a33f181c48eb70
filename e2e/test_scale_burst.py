"""A burst of preemptors onto full nodes (e2e/harness/kwok_scale.py's burst, small;
`python -m bench.scale_kwok` runs it big): every preemptor is bound, and the pods evicted are
exactly the victims of the plans the controller stored, each evicted once, while the plans'
writes are sent side by side (writeConcurrency, default 8). The bench reports the time; this
test asserts no timing."""

from __future__ import annotations

import pytest

from ckpt_preempt.controller.core.config import Config
from e2e.harness import kube
from e2e.harness.kwok_scale import burst

pytestmark = pytest.mark.e2e
NODES, PREEMPTORS = 8, 5


def test_a_burst_of_preemptors_all_bind_and_evict_only_planned_victims_once(cluster, namespace,
                                                                            pool):
    try:
        result = burst(cluster, namespace, pool, nodes=NODES, preemptors=PREEMPTORS,
                       timeout=120)
    finally:
        kube.delete_nodes(cluster, [f"{pool}-b{i}" for i in range(NODES)])
    assert result["write_concurrency"] == Config().write_concurrency > 1
    assert result["evicted"] == result["planned_victims"]
    assert result["evictions"] == PREEMPTORS  # one full 8-GPU node freed per preemptor
    assert result["plans"] == PREEMPTORS
    # every Eviction call the controller sent (its audit log), less retries after 429/5xx, is
    # one pod gone: a victim evicted twice (by two plans, or twice by one) would count twice
    assert result["evictions_sent"] - result["eviction_retries"] == PREEMPTORS
