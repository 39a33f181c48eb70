"""The Lease elector against a real API server: one holder, takeover after expiry, races."""

from __future__ import annotations

import threading
import time

import pytest

from ckpt_preempt.controller.writes.leader import LeaseElector
from e2e.harness import kube

pytestmark = pytest.mark.e2e


def _elector(cluster, namespace, identity, duration=3.0):
    return LeaseElector(kube.client_copy(cluster.api), name="lead", namespace=namespace,
                        identity=identity, duration=duration)


def test_holder_keeps_it_and_a_crashed_holder_is_replaced_after_the_duration(cluster,
                                                                           namespace):
    a, b = _elector(cluster, namespace, "a"), _elector(cluster, namespace, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()  # renewal
    # `a` crashes: no release, no renewals. `b` must wait a full duration of no change.
    t0 = time.monotonic()
    while not b.try_acquire_or_renew():
        assert time.monotonic() - t0 < 10
        time.sleep(0.2)
    waited = time.monotonic() - t0
    assert waited >= 2.5, waited
    lease = cluster.coordination.read_namespaced_lease("lead", namespace)
    assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions == 1
    assert not a.try_acquire_or_renew()  # the old holder does not get it back


def test_racing_takeovers_have_exactly_one_winner(cluster, namespace):
    first = _elector(cluster, namespace, "gone", duration=1.0)
    assert first.try_acquire_or_renew()
    racers = [_elector(cluster, namespace, f"r{i}", duration=1.0) for i in range(4)]
    for r in racers:  # each sees the Lease once, so each can judge expiry by its own clock
        assert not r.try_acquire_or_renew()
    time.sleep(1.5)
    results: dict[str, bool] = {}
    barrier = threading.Barrier(len(racers))

    def race(r):
        barrier.wait()
        results[r.identity] = r.try_acquire_or_renew()
    threads = [threading.Thread(target=race, args=(r,)) for r in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [k for k, v in results.items() if v]
    assert len(winners) == 1, results
    holder = cluster.coordination.read_namespaced_lease("lead", namespace).spec.holder_identity
    assert holder == winners[0]


def test_a_leader_that_cannot_renew_stops_acting(cluster, namespace):
    a = _elector(cluster, namespace, "a", duration=2.0)
    a.start()
    kube.wait_for("leadership", lambda: a.is_leader, timeout=10)
    a._stop.set()  # renewals stop (as when the API server is unreachable)
    time.sleep(2.2)
    assert not a.is_leader
