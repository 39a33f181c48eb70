"""Controller scenarios on the local control plane: victim choice, gangs, drains, deadlines."""

from __future__ import annotations

import json
import time

import pytest

from ckpt_preempt.controller.kube.records import TOPOLOGY_ANNOTATION as TOPOLOGY
from ckpt_preempt.policies.model.topology import SCHEMA
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_KUBE,
    HIGH_NEVER,
    LOW,
    LOWER,
    config_for,
    event_time,
    exists,
    pod_events,
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


def test_scenario2_a_gang_is_evicted_whole(cluster, namespace, pool, gpu_nodes):
    """A 4-pod gang (2 per node, 4 GPUs each) checkpointed just now; `solo` on a third node has
    not. An 8-GPU preemptor frees one node; the gang's members on *both* nodes go, together."""
    priority_classes(cluster)
    nodes = gpu_nodes(3)
    for i in range(4):
        kube.create_pod(cluster, namespace, f"g-{i}", gpus=4, pool=pool, priority_class=LOW,
                        gang="g", gang_total=4, node_name=nodes[i // 2])
    kube.create_pod(cluster, namespace, "solo", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[2])
    for name in ("g-0", "g-1", "g-2", "g-3", "solo"):
        kube.wait_pod_running(cluster, namespace, name)
    time.sleep(3)
    for i in range(4):
        cluster.core.patch_namespaced_pod(f"g-{i}", namespace, {"metadata": {"annotations": {
            "ckpt-preempt.io/last-checkpoint": rfc3339()}}})
    with running_controller(cluster, config_for(namespace)):
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
    assert pod.spec.node_name in nodes[:2]
    for i in range(4):
        assert not exists(cluster, namespace, f"g-{i}")
        assert reasons(cluster, namespace, f"g-{i}") == ["Evicted"]
    assert exists(cluster, namespace, "solo")


def test_scenario4_a_victim_that_never_acks_is_evicted_at_its_deadline(
        cluster, namespace, pool, gpu_nodes):
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "mute", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node, checkpoint="on-request", checkpoint_seconds=3)
    kube.wait_pod_running(cluster, namespace, "mute")
    time.sleep(6)  # draining must beat losing its work so far: 8 GPUs x 3 s < 8 GPUs x 6 s
    with running_controller(cluster, config_for(namespace)):
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        kube.wait_pod_running(cluster, namespace, "big", timeout=90)
    events = {e.reason: e for e in pod_events(cluster, namespace)
              if e.involved_object.name == "mute"}
    assert list(events) == ["CheckpointRequested", "CheckpointDeadlineExceeded", "Evicted"]
    waited = event_time(events["Evicted"]) - event_time(events["CheckpointRequested"])
    assert 2 <= waited <= 10, waited  # deadline 3 s; event times have 1 s resolution


def test_nvlink_required_preemptor_is_planned_only_onto_known_topology(
        cluster, namespace, pool, gpu_nodes):
    """Three nodes: hwprobe says `split` has two 4-GPU NVLink domains and `hgx` one 8-GPU
    domain; `bare` has no topology annotation. An 8-GPU NVLink-required preemptor goes to `hgx`
    even though the victims on `split` and `bare` lose less work."""
    priority_classes(cluster)

    def topo(domains):
        return json.dumps({"schema": SCHEMA, "gpu_count": 8, "nvlink_domains": domains})
    (hgx,) = gpu_nodes(1, annotations={TOPOLOGY: topo([list(range(8))])})
    (split,) = gpu_nodes(1, annotations={TOPOLOGY: topo([[0, 1, 2, 3], [4, 5, 6, 7]])})
    (bare,) = gpu_nodes(1)
    for name, node in (("on-hgx", hgx), ("on-split", split), ("on-bare", bare)):
        kube.create_pod(cluster, namespace, name, gpus=8, pool=pool, priority_class=LOW,
                        node_name=node)
        kube.wait_pod_running(cluster, namespace, name)
    time.sleep(3)
    for name in ("on-split", "on-bare"):
        cluster.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {
            "ckpt-preempt.io/last-checkpoint": rfc3339()}}})
    with running_controller(cluster, config_for(namespace)):
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER,
                        annotations={"ckpt-preempt.io/nvlink": "required"})
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
    assert pod.spec.node_name == hgx
    assert not exists(cluster, namespace, "on-hgx")
    assert exists(cluster, namespace, "on-split") and exists(cluster, namespace, "on-bare")
