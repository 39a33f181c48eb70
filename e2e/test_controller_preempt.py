"""Controller scenarios on the local control plane: victim choice, gangs, drains, deadlines."""

from __future__ import annotations

import time

import pytest

from e2e import kube
from e2e.test_controller_support import (
    HIGH_KUBE,
    HIGH_NEVER,
    LOW,
    LOWER,
    config_for,
    exists,
    priority_classes,
    reasons,
    rfc3339,
    running_controller,
)

pytestmark = pytest.mark.e2e


def test_scenario1_freshest_checkpoint_is_preempted_where_kube_default_picks_lowest_priority(
        cluster, namespace, pool, gpu_nodes):
    """Two 8-GPU nodes: `fresh` (priority 100, checkpointed just now) and `stale` (priority 50,
    never checkpointed). kube-scheduler's DefaultPreemption evicts the lowest priority
    (`stale`, losing all its work); ckpt-preempt evicts `fresh`, which loses nothing."""
    priority_classes(cluster)
    ours = gpu_nodes(2)
    other_pool = pool + "k"
    theirs = kube.create_gpu_nodes(cluster, 2, prefix=f"{pool}-k", pool=other_pool)
    try:
        for p, nodes in ((pool, ours), (other_pool, theirs)):
            kube.create_pod(cluster, namespace, f"stale-{p}", gpus=8, pool=p,
                            priority_class=LOWER, node_name=nodes[0])
            kube.create_pod(cluster, namespace, f"fresh-{p}", gpus=8, pool=p,
                            priority_class=LOW, node_name=nodes[1])
        for p in (pool, other_pool):
            kube.wait_pod_running(cluster, namespace, f"stale-{p}")
            kube.wait_pod_running(cluster, namespace, f"fresh-{p}")
        time.sleep(3)  # both run a while; then `fresh` saves a checkpoint (as its agent would)
        for p in (pool, other_pool):
            cluster.core.patch_namespaced_pod(f"fresh-{p}", namespace, {"metadata": {
                "annotations": {"ckpt-preempt.io/last-checkpoint": rfc3339()}}})

        # kube-scheduler's own preemption in the other pool
        kube.create_pod(cluster, namespace, "big-kube", gpus=8, pool=other_pool,
                        priority_class=HIGH_KUBE)
        kube.wait_pod_gone(cluster, namespace, f"stale-{other_pool}", timeout=60)
        kube.wait_pod_running(cluster, namespace, "big-kube", timeout=60)
        assert exists(cluster, namespace, f"fresh-{other_pool}")

        # ours
        with running_controller(cluster, config_for(namespace)):
            kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool,
                            priority_class=HIGH_NEVER)
            pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
        assert pod.spec.node_name == ours[1]
        assert not exists(cluster, namespace, f"fresh-{pool}")
        assert exists(cluster, namespace, f"stale-{pool}")
        assert reasons(cluster, namespace, "big")[0] == "PreemptionPlanned"
        assert reasons(cluster, namespace, f"fresh-{pool}") == ["Evicted"]
    finally:
        kube.delete_nodes(cluster, theirs)
