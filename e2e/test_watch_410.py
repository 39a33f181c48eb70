"""A real 410 Gone: etcd compacted while the controller's watches were away, on an API server
with its watch cache off (so watches are served from etcd, whose history is really gone).

The controller's ClusterCache (Nodes, Pods, PDBs and its plan ConfigMaps) talks to the API
server through e2e/harness/faultproxy.py, which can cut its watch streams and hold new ones off.
While they are off, one object of each kind is added and one deleted, and etcd is compacted past the
cache's resourceVersions; when the watches come back from those resourceVersions the API server
answers 410, the cache relists, and it must then hold exactly what the API server holds.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import config

from ckpt_preempt.controller.kube.records import MANAGED_BY
from ckpt_preempt.controller.kube.watch import ClusterCache
from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.faultproxy import FaultProxy
from e2e.harness.localcluster import ADMIN_TOKEN

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kube.own_local_cluster(tmp_path_factory.mktemp("nowatchcache"),
                                      watch_cache=False)


def _pdb(name: str, app: str) -> dict:
    return {"metadata": {"name": name},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}}


def _plan_cm(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {MANAGED_BY[0]: MANAGED_BY[1]}},
            "data": {plan_record.PLAN_DATA_KEY: "{}"}}


def _raw_watch_status(c: kube.Cluster, namespace: str, rv: str) -> int:
    """What the API server answers a watch of pods from `rv`: 410 for a compacted one (as an
    HTTP status or as the code of an ERROR event), else 200."""
    resp = c.core.list_namespaced_pod(namespace, watch=True, resource_version=rv,
                                      timeout_seconds=1, _preload_content=False)
    try:
        first = next(iter(resp.stream(65536)), b"").split(b"\n", 1)[0]
    finally:
        resp.release_conn()
    ev = json.loads(first) if first.strip() else {}
    return int(ev["object"]["code"]) if ev.get("type") == "ERROR" else 200


def test_cache_relists_after_a_real_410(cluster, namespace, pool, gpu_nodes, tmp_path):
    (keep_node, gone_node) = gpu_nodes(2)
    kube.create_pod(cluster, namespace, "kept", pool=pool)
    kube.create_pod(cluster, namespace, "deleted-in-gap", pool=pool)
    cluster.policy.create_namespaced_pod_disruption_budget(namespace, _pdb("pdb-deleted", "a"))
    cluster.core.create_namespaced_config_map(namespace, _plan_cm("ckpt-plan-deleted"))
    with FaultProxy(cluster.local.server) as proxy:
        api = config.new_client_from_config(
            config_file=str(proxy.kubeconfig(tmp_path / "kubeconfig", ADMIN_TOKEN)))
        cache = ClusterCache(api, plan_namespace=namespace)
        cache.start()
        try:
            assert cache.wait_synced(30)
            key = f"{namespace}/deleted-in-gap"
            kube.wait_for("the first pods in the cache", lambda: cache.pods.get(key), timeout=30)
            watching = [i for i in cache.informers  # PodGroups are not served here
                        if getattr(i, "served", True) is not False]
            before = {i.kind: i.relists for i in watching}
            stale_rv = cluster.core.list_namespaced_pod(namespace).metadata.resource_version

            kinds = len(watching)
            kube.wait_for(f"the cache's {kinds} watches", lambda: proxy.open_watches() >= kinds,
                          timeout=30)
            proxy.block_watches(True)  # new watches get 503 (the cache backs off and retries)
            assert proxy.drop_watches() == kinds
            kube.create_pod(cluster, namespace, "added-in-gap", pool=pool)
            cluster.core.delete_namespaced_pod("deleted-in-gap", namespace, grace_period_seconds=0)
            kube.wait_pod_gone(cluster, namespace, "deleted-in-gap", timeout=30)
            cluster.policy.delete_namespaced_pod_disruption_budget("pdb-deleted", namespace)
            cluster.policy.create_namespaced_pod_disruption_budget(namespace,
                                                                   _pdb("pdb-added", "b"))
            cluster.core.delete_namespaced_config_map("ckpt-plan-deleted", namespace)
            cluster.core.create_namespaced_config_map(namespace, _plan_cm("ckpt-plan-added"))
            kube.delete_nodes(cluster, [gone_node])
            kube.wait_for(f"node {gone_node} to be gone",
                          lambda: gone_node not in {n.metadata.name for n in
                                                    cluster.core.list_node().items})
            compacted = cluster.local.compact_etcd()
            assert compacted > int(stale_rv) + 1  # past where a watch from stale_rv starts
            assert _raw_watch_status(cluster, namespace, stale_rv) == 410  # really gone
            proxy.block_watches(False)

            def relisted():
                now = {i.kind: i.relists for i in cache.informers}
                return all(now[k] > before[k] for k in before) or kube.NotYet(
                    f"relists before {before}, now {now}")
            kube.wait_for("every informer to relist", relisted, timeout=60)
            gone = [r for r in proxy.records if r.gone]
            assert {r.target.split("?")[0].rsplit("/", 1)[-1] for r in gone} >= {
                "nodes", "pods", "poddisruptionbudgets", "configmaps"}, proxy.records[-10:]

            def pods_in_cache():
                return sorted(p.name for p in cache.pods.items() if p.namespace == namespace)
            kube.wait_for("the cache to show the gap's pods",
                          lambda: pods_in_cache() == ["added-in-gap", "kept"]
                          or kube.NotYet(str(pods_in_cache())), timeout=30)
            live = {p.metadata.name for p in cluster.core.list_pod_for_all_namespaces().items}
            assert {p.name for p in cache.pods.items()} == live
            assert {n.name for n in cache.nodes.items()} == {
                n.metadata.name for n in cluster.core.list_node().items}
            assert keep_node in {n.name for n in cache.nodes.items()}
            assert sorted(p.name for p in cache.pdbs.items() if p.namespace == namespace) == [
                "pdb-added"]
            assert sorted(p.name for p in cache.plans.items()) == ["ckpt-plan-added"]

            # After the relist the watches follow changes again, from the new resourceVersion.
            kube.create_pod(cluster, namespace, "after", pool=pool)
            kube.wait_for("a pod created after the relist",
                          lambda: cache.pods.get(f"{namespace}/after"), timeout=30)
        finally:
            cache.stop()


def test_watch_from_a_compacted_resource_version_is_gone(cluster, namespace):
    """The bench itself: with the watch cache off, compaction makes an old resourceVersion 410
    and leaves a current one watchable."""
    rv = cluster.core.list_namespaced_pod(namespace).metadata.resource_version
    assert _raw_watch_status(cluster, namespace, rv) == 200
    # A watch from rv starts at revision rv + 1, which compaction at rv + 1 still keeps: two
    # writes put the compaction past it.
    for name in ("bump-1", "bump-2"):
        cluster.core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    assert cluster.local.compact_etcd() > int(rv) + 1
    assert _raw_watch_status(cluster, namespace, rv) == 410
    fresh = cluster.core.list_namespaced_pod(namespace).metadata.resource_version
    assert _raw_watch_status(cluster, namespace, fresh) == 200

