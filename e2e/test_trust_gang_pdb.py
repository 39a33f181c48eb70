"""A gang covered by a minAvailable PDB that allows fewer disruptions than it has members is
never half-evicted: although it is the cheapest victim, the plan goes around it (or aborts
before its first eviction) and the preemptor gets the other node."""

from __future__ import annotations

import time

import pytest

from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    exists,
    pod_events,
    priority_classes,
    rfc3339,
    running_controller,
)

pytestmark = pytest.mark.e2e


def test_gang_whose_pdb_allows_fewer_disruptions_than_members_is_never_split(
        cluster, namespace, pool, gpu_nodes):
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    members = [p.metadata.name for p in kube.create_gang(
        cluster, namespace, "pair", 2, gpus=4, pool=pool, priority_class=LOW,
        node_name=nodes[0], labels={"app": "pair"})]
    kube.create_pod(cluster, namespace, "single", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[1], last_checkpoint=rfc3339(3600))  # i.e. at its start
    cluster.policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "pair"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "pair"}}}})
    for name in [*members, "single"]:
        kube.wait_pod_running(cluster, namespace, name)
    kube.wait_for("the PDB to allow exactly one disruption", lambda: cluster.policy.
                  read_namespaced_pod_disruption_budget("pair", namespace).status.
                  disruptions_allowed == 1, timeout=30)
    time.sleep(3)  # the gang checkpoints now: by lost work it is the cheaper victim
    for name in members:
        cluster.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {
            "ckpt-preempt.io/last-checkpoint": rfc3339()}}})

    def bound_with_gang_whole():
        gone = [m for m in members if not exists(cluster, namespace, m)]
        assert gone == [], f"gang members evicted: {gone}"
        pod = cluster.core.read_namespaced_pod("big", namespace)
        return pod if pod.spec.node_name else kube.NotYet("big is not bound")

    with running_controller(cluster, config_for(namespace)) as ctl:
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        pod = kube.wait_for("big to be bound, the gang whole", bound_with_gang_whole,
                            timeout=90, interval=0.1)
        assert ctl.metrics.loop_errors._value.get() == 0
    assert pod.spec.node_name == nodes[1]
    assert all(exists(cluster, namespace, m) for m in members)
    assert [e.involved_object.name for e in pod_events(cluster, namespace)
            if e.reason == "Evicted"] == ["single"]
