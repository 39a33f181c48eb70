"""The reconciler works ahead while no preemptor is due (``Reconciler._warm``): its planner
caches learn the nodes' evictable pods, and the plan made afterwards is the one a reconciler
that never warmed makes."""

from __future__ import annotations

from ckpt_preempt.controller.planning import reconcile
from ckpt_preempt.policies.lifecycle import plan_record
from tests.controller.fakes import T0, FakeCache, Rig, node, pod


def _cluster() -> FakeCache:
    return FakeCache(nodes=[node(f"n{i}") for i in range(3)], pods=[
        pod("young", node="n0", started=T0 - 600),
        pod("old", node="n1", started=T0 - 7200),
        pod("older", node="n2", started=T0 - 9000)])


def _evictable(rig: Rig) -> set[str]:
    cache = rig.reconciler.plan_cache
    assert cache is not None
    tables = [t for k, t in cache._tables.items() if k[0] == "evictable"]
    return set().union(*tables)


def test_idle_passes_fill_the_caches_and_the_next_plan_is_the_same(monkeypatch):
    monkeypatch.setattr(reconcile, "WARM_NODES_PER_PASS", 2)
    warm, cold = Rig(_cluster()), Rig(_cluster())
    assert warm.tick(T0) == []  # nothing due: nothing written
    assert _evictable(warm) == {"n0", "n1"}
    warm.tick(T0 + 0.5)  # within the second: not again
    assert _evictable(warm) == {"n0", "n1"}
    warm.tick(T0 + 1.0)
    assert _evictable(warm) == {"n0", "n1", "n2"}
    for rig in (warm, cold):
        rig.cache.pods.put(pod("hi", priority=1000, pending=True))
        rig.tick(T0 + 2.0)
    (a,), (b,) = ([plan_record.plan_from_annotation(s.raw) for s in rig.cache.plans.items()]
                  for rig in (warm, cold))
    assert [v.name for v in a.victims] == [v.name for v in b.victims] == ["young"]
    assert [p.node for p in a.placements] == [p.node for p in b.placements] == ["n0"]
