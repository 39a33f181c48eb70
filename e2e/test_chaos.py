"""Chaos, short and seeded: two controller replicas, one SIGKILLed at random points (the Lease
holder 3 times in 4) and restarted, while preemptors keep coming. The driver and the checks
are e2e/harness/chaos/'s (the full run: `python -m bench.chaos`, in `make bench`); the promises are
checked from the API server's audit log and API state, not from what the controller says about
itself.

CKPT_CHAOS_SEED picks another seed (default 1).
"""

from __future__ import annotations

import os

import pytest

from e2e.harness import kube
from e2e.harness.chaos import Chaos, ChaosConfig

pytestmark = pytest.mark.e2e
DRAINS, KILLS = 12, 5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kube.own_local_cluster(tmp_path_factory.mktemp("audited"), audit=True)


def test_replicas_killed_at_random_keep_every_promise(cluster, namespace, pool, tmp_path):
    seed = int(os.environ.get("CKPT_CHAOS_SEED", "1"))
    cfg = ChaosConfig(seed=seed, drains=DRAINS, min_kills=KILLS, max_seconds=75.0, nodes=6,
                      kill_every=(2.0, 6.0), settle_seconds=30.0)
    chaos = Chaos(cluster, namespace, pool, cfg, tmp_path)
    try:
        report = chaos.run()
    finally:
        chaos.teardown()
    figures, inv = report.figures, report.invariants
    detail = f"{figures}\n" + "\n".join(inv.lines()) + "\n" + chaos.replicas.logs_tail()
    assert inv.ok, detail
    assert figures["drains"] >= DRAINS, detail
    assert figures["kills"] >= KILLS and figures["leader_kills"] >= 1, detail
    # The checks saw the run: every Done plan evicted someone, each eviction under a plan.
    assert figures["evictions"] >= figures["drains"] and figures["plan_versions"] > DRAINS, detail
