"""The incremental cluster model fed by real watches (controller/kube/watch.py Informers against
the local control plane) equals a full rebuild of the same cache, after the initial list and
after deletions, new pods (a pending gang among them), an annotation change and a node that
goes with its pods still bound to it."""

from __future__ import annotations

import pytest

from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.cluster_model import ClusterModel
from ckpt_preempt.controller.kube.watch import ClusterCache
from ckpt_preempt.policies.model import annotations as ann
from e2e.harness import kube
from e2e.harness.kwok_scale import create_nodes, fill

pytestmark = pytest.mark.e2e
NODES, PER_NODE = 12, 4


def _equal(cache: ClusterCache, model: ClusterModel, scope: convert.Scope, now: float,
           settled=lambda snap: True):
    """The model's snapshot once it equals a rebuild and ``settled`` holds for it."""
    view = model.sync(now)
    got = model.snapshot(now=now)
    live = [p for p in cache.pods.items() if not p.done]
    want = convert.snapshot(now=now, nodes=cache.nodes.items(), pods=live,
                            pdbs=cache.pdbs.items(), scope=scope, limits=ann.Limits())
    if got != want or dict(view.by_uid) != {p.uid: p for p in live}:
        return kube.NotYet(f"{len(got.snapshot.pods)} pods in the model, {len(live)} cached")
    return got if settled(got.snapshot) else kube.NotYet("the changes are not all seen yet")


def test_the_model_fed_by_real_watches_equals_a_full_rebuild(cluster, namespace, pool):
    names = [f"{pool}-m{i}" for i in range(NODES)]
    scope = convert.Scope(namespaces=frozenset({namespace}))
    cache = ClusterCache(kube.client_copy(cluster.api), plan_namespace=namespace)
    try:
        create_nodes(cluster, names, pool, workers=4)
        fill(cluster, namespace, pool, names, PER_NODE, workers=4, checkpoint="periodic")
        cache.start()
        assert cache.wait_synced(60)
        model = ClusterModel(pods=cache.pods, nodes=cache.nodes, pdbs=cache.pdbs, scope=scope,
                             limits=ann.Limits())
        first = kube.wait_for("model == rebuild after the list",
                              lambda: _equal(cache, model, scope, 1.0), timeout=30)
        assert sum(1 for p in first.snapshot.pods if p.namespace == namespace) == \
            NODES * PER_NODE
        for i in range(3):
            cluster.core.delete_namespaced_pod(f"{names[i]}-0", namespace)
        kube.create_gang(cluster, namespace, "llm", 3, gpus=2, pool=pool)
        cluster.core.patch_namespaced_pod(f"{names[4]}-1", namespace, {"metadata": {
            "annotations": {ann.LAST_CHECKPOINT: "2026-01-01T00:00:00Z"}}})
        cluster.core.delete_node(names[-1])
        gang = f"{namespace}/seed/llm"

        def settled(snap) -> bool:  # every change above has reached the cache
            return (names[-1] not in snap.node_by_name and gang in snap.gangs
                    and len(snap.gangs[gang].members) == 3
                    and all(f"{n}-0" not in {p.name for p in snap.pods} for n in names[:3])
                    and any(p.last_checkpoint is not None for p in snap.pods))
        kube.wait_for("model == rebuild after the changes",
                      lambda: _equal(cache, model, scope, 2e9, settled), timeout=30)
    finally:
        cache.stop()
        kube.delete_nodes(cluster, names)
