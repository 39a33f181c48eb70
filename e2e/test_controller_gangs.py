"""Controller scenarios: gated gangs admitted whole or not at all; a PDB-blocked victim."""

from __future__ import annotations

import time

import pytest

from ckpt_preempt.controller.kube.records import ADMISSION_GATE
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    exists,
    pod_events,
    priority_classes,
    reasons,
    rfc3339,
    running_controller,
)

pytestmark = pytest.mark.e2e


def _gated(c, ns, names):
    return {n: ADMISSION_GATE in [g.name for g in c.core.read_namespaced_pod(n, ns)
                                  .spec.scheduling_gates or []] for n in names}


def test_scenario8_gated_gang_is_pinned_and_admitted_all_at_once(
        cluster, namespace, pool, gpu_nodes):
    priority_classes(cluster)
    nodes = gpu_nodes(4)
    kube.create_pod(cluster, namespace, "occupant", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[3])
    kube.wait_pod_running(cluster, namespace, "occupant")
    members = [p.metadata.name for p in kube.create_gang(
        cluster, namespace, "train", 4, gpus=8, pool=pool, priority_class=HIGH_NEVER,
        scheduling_gates=[ADMISSION_GATE])]
    time.sleep(1)
    assert all(_gated(cluster, namespace, members).values())
    with running_controller(cluster, config_for(namespace)):
        pods = [kube.wait_pod_running(cluster, namespace, m, timeout=90) for m in members]
        kube.wait_for("the reservation on the freed node to be lifted", lambda: not any(
            t.key == "ckpt-preempt.io/reserved"
            for t in cluster.core.read_node(nodes[3]).spec.taints or []), timeout=30)
    assert sorted(p.spec.node_name for p in pods) == sorted(nodes)
    for p in pods:  # each member was pinned to the node it runs on before its gate went
        terms = p.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        fields = [f for t in terms.node_selector_terms for f in t.match_fields or []]
        assert [(f.key, f.values) for f in fields] == [("metadata.name", [p.spec.node_name])]
    assert not exists(cluster, namespace, "occupant")
    assert reasons(cluster, namespace, "occupant") == ["Evicted"]
    anchor = min(members)  # Events about the whole plan go to its lowest-named member
    for m in members:
        assert reasons(cluster, namespace, m) == ["PreemptionPlanned", "GangAdmitted"] + (
            ["PreemptionDone"] if m == anchor else [])


def test_scenario8_gang_that_cannot_fit_stays_gated_whole(cluster, namespace, pool, gpu_nodes):
    """Three 8-GPU members, two nodes (one held by a higher-priority pod): nothing is admitted.
    A gang whose declared total disagrees with its members is not admitted either."""
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    kube.create_pod(cluster, namespace, "vip", gpus=8, pool=pool, priority_class=HIGH_NEVER,
                    node_name=nodes[1])
    kube.wait_pod_running(cluster, namespace, "vip")
    big = [p.metadata.name for p in kube.create_gang(
        cluster, namespace, "big", 3, gpus=8, pool=pool, priority_class=HIGH_NEVER,
        scheduling_gates=[ADMISSION_GATE])]
    odd = [p.metadata.name for p in kube.create_gang(
        cluster, namespace, "odd", 2, gpus=1, pool=pool, priority_class=HIGH_NEVER,
        scheduling_gates=[ADMISSION_GATE])]
    kube.create_pod(cluster, namespace, "odd-2", gpus=1, pool=pool, priority_class=HIGH_NEVER,
                    gang="odd", gang_total=2, scheduling_gates=[ADMISSION_GATE])
    with running_controller(cluster, config_for(namespace, gang_timeout_seconds=2.0)):
        kube.wait_event(cluster, namespace, "PreemptionNotPossible", timeout=30)
        kube.wait_event(cluster, namespace, "GangTotalMismatch", timeout=30)
        kube.wait_event(cluster, namespace, "GangTimedOut", timeout=30)
        time.sleep(3)
        assert all(_gated(cluster, namespace, big + odd + ["odd-2"]).values())
    assert exists(cluster, namespace, "vip")
    assert not [e for e in pod_events(cluster, namespace) if e.reason == "Evicted"]


def test_scenario5_pdb_blocked_victim_is_waited_for_then_planned_around(
        cluster, namespace, pool, gpu_nodes):
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    kube.create_pod(cluster, namespace, "plain", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[0])
    kube.create_pod(cluster, namespace, "guarded", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[1], labels={"app": "guarded"})
    cluster.policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    kube.wait_pod_running(cluster, namespace, "plain")
    kube.wait_pod_running(cluster, namespace, "guarded")
    kube.wait_for("the PDB to be observed", lambda: cluster.policy.
                  read_namespaced_pod_disruption_budget("guarded", namespace).status.
                  observed_generation, timeout=30)
    time.sleep(3)  # `guarded` checkpoints now, so it is the cheapest victim by lost work
    cluster.core.patch_namespaced_pod("guarded", namespace, {"metadata": {"annotations": {
        "ckpt-preempt.io/last-checkpoint": rfc3339()}}})
    cfg = config_for(namespace, eviction_timeout_seconds=4.0)
    with running_controller(cluster, cfg):
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
    assert pod.spec.node_name == nodes[0]
    assert exists(cluster, namespace, "guarded")
    got = reasons(cluster, namespace, "big")
    assert got[:2] == ["PreemptionPlanned", "EvictionBlocked"], got
    assert "PreemptionAborted" in got and got.count("PreemptionPlanned") == 2, got
    assert reasons(cluster, namespace, "plain") == ["Evicted"]


def test_mode_a_pending_gang_is_planned_whole(cluster, namespace, pool, gpu_nodes):
    """A 2-member gang of preemptionPolicy-Never pods needs both nodes: one plan frees both,
    and each member is nominated (and reserved) for its own node."""
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    for i, node in enumerate(nodes):
        kube.create_pod(cluster, namespace, f"low-{i}", gpus=8, pool=pool, priority_class=LOW,
                        node_name=node)
        kube.wait_pod_running(cluster, namespace, f"low-{i}")
    with running_controller(cluster, config_for(namespace)):
        members = [p.metadata.name for p in kube.create_gang(
            cluster, namespace, "pair", 2, gpus=8, pool=pool, priority_class=HIGH_NEVER)]
        pods = [kube.wait_pod_running(cluster, namespace, m, timeout=90) for m in members]
    assert sorted(p.spec.node_name for p in pods) == sorted(nodes)
    planned = [e for e in pod_events(cluster, namespace) if e.reason == "PreemptionPlanned"]
    assert len(planned) == 2 and len({e.message.split(":")[0] for e in planned}) == 1
