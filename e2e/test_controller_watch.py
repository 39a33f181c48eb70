"""The watch cache against a real API server: sync, updates and deletes.

(Relist on 410 needs an etcd compaction, which the local control plane does not do on demand;
that path is covered by code review only.)
"""

from __future__ import annotations

import pytest

from ckpt_preempt.controller.kube.watch import ClusterCache
from e2e.harness import kube

pytestmark = pytest.mark.e2e


def test_cache_follows_adds_updates_and_deletes(cluster, namespace):
    cache = ClusterCache(kube.client_copy(cluster.api), plan_namespace=namespace)
    cache.start()
    try:
        assert cache.wait_synced(30)
        kube.create_pod(cluster, namespace, "w", gpus=2,
                        annotations={"ckpt-preempt.io/checkpoint": "periodic"})
        key = f"{namespace}/w"
        got = kube.wait_for("the pod in the cache", lambda: cache.pods.get(key), timeout=30)
        assert got.requests.gpus == 2 and got.annotations == {
            "ckpt-preempt.io/checkpoint": "periodic"}
        cluster.core.patch_namespaced_pod("w", namespace, {"metadata": {"annotations": {
            "ckpt-preempt.io/checkpoint": "none"}}})
        kube.wait_for("the update", lambda: cache.pods.get(key).annotations.get(
            "ckpt-preempt.io/checkpoint") == "none", timeout=30)
        cluster.core.delete_namespaced_pod("w", namespace, grace_period_seconds=0)
        kube.wait_for("the delete", lambda: cache.pods.get(key) is None, timeout=30)
    finally:
        cache.stop()

