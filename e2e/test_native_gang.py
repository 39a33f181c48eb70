"""Native PodGroups (scheduling.k8s.io/v1beta1) on a control plane with GenericWorkload on.

Pods join a gang by `spec.schedulingGroup.podGroupName` only (no gang labels), so every gang
decision here comes from the native convention and the PodGroup's minCount/disruptionMode.
"""

from __future__ import annotations

import contextlib

import pytest
from kubernetes import client

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.explain import explain_live
from ckpt_preempt.controller.kube.records import ADMISSION_GATE
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    exists,
    plan_of,
    priority_classes,
    reasons,
    rfc3339,
    running_controller,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(native_cluster):
    return native_cluster


def create_podgroup(c: kube.Cluster, ns: str, name: str, *, min_count: int, mode: str,
                    priority_class: str) -> None:
    body = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}},
                     "disruptionMode": {mode: {}}, "priorityClassName": priority_class}}
    client.CustomObjectsApi(c.api).create_namespaced_custom_object(
        "scheduling.k8s.io", "v1beta1", ns, "podgroups", body)


def create_member(c: kube.Cluster, ns: str, name: str, group: str, **kwargs) -> None:
    body = kube.pod_body(name, **kwargs)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    c.core.create_namespaced_pod(ns, body)


def _two_full_nodes(cluster, namespace, pool, gpu_nodes) -> list[str]:
    """Two 8-GPU nodes, each full with one running low-priority pod (low-0, low-1)."""
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    for i, n in enumerate(nodes):
        kube.create_pod(cluster, namespace, f"low-{i}", gpus=8, pool=pool, priority_class=LOW,
                        node_name=n)
        kube.wait_pod_running(cluster, namespace, f"low-{i}")
    return nodes


def test_native_preemptor_gang_is_admitted_whole(cluster, namespace, pool, gpu_nodes):
    """Two gated 8-GPU members of a PodGroup (minCount 2), two full nodes: one plan places
    both, both victims go, and both members run (the native plugin binds them together)."""
    nodes = _two_full_nodes(cluster, namespace, pool, gpu_nodes)
    create_podgroup(cluster, namespace, "train", min_count=2, mode="all",
                    priority_class=HIGH_NEVER)
    members = ["train-0", "train-1"]
    for m in members:
        create_member(cluster, namespace, m, "train", gpus=8, pool=pool,
                      priority_class=HIGH_NEVER, scheduling_gates=[ADMISSION_GATE])
    with running_controller(cluster, config_for(namespace)):
        pods = [kube.wait_pod_running(cluster, namespace, m, timeout=90) for m in members]
        for m in members:  # GangAdmitted is sent once the plan is Done, after the binding
            kube.wait_for(f"GangAdmitted on {m}",
                          lambda m=m: "GangAdmitted" in reasons(cluster, namespace, m))
    assert sorted(p.spec.node_name for p in pods) == sorted(nodes)
    plan = plan_of(cluster, namespace, "train-0")
    assert plan is not None and sorted(p.name for p in plan.placements) == members
    assert not exists(cluster, namespace, "low-0") and not exists(cluster, namespace, "low-1")
    for m in members:
        assert reasons(cluster, namespace, m)[:2] == ["PreemptionPlanned", "GangAdmitted"]


def test_native_preemptor_gang_not_gated_is_planned_whole(cluster, namespace, pool, gpu_nodes):
    """Coexistence without our gate: the GangScheduling plugin holds the members until minCount
    exist, finds no room, and (preemptionPolicy Never) preempts nothing; we plan the group as one
    preemptor and the scheduler then binds both."""
    nodes = _two_full_nodes(cluster, namespace, pool, gpu_nodes)
    create_podgroup(cluster, namespace, "job", min_count=2, mode="all",
                    priority_class=HIGH_NEVER)
    members = ["job-0", "job-1"]
    for m in members:
        create_member(cluster, namespace, m, "job", gpus=8, pool=pool,
                      priority_class=HIGH_NEVER)
    for m in members:
        kube.wait_pod_unschedulable(cluster, namespace, m)
    with running_controller(cluster, config_for(namespace)):
        pods = [kube.wait_pod_running(cluster, namespace, m, timeout=90) for m in members]
    assert sorted(p.spec.node_name for p in pods) == sorted(nodes)
    plan = plan_of(cluster, namespace, "job-0")
    assert plan is not None and sorted(p.name for p in plan.placements) == members


def _victim_group(c, ns, pool, nodes, mode: str) -> list[str]:
    """PodGroup `v` (minCount 4): 4 members of 4 GPUs, two on each of nodes[0], nodes[1], all
    checkpointed just now; `solo` (8 GPUs, started 2 h ago, never checkpointed) on nodes[2]."""
    create_podgroup(c, ns, "v", min_count=4, mode=mode, priority_class=LOW)
    for i in range(4):
        create_member(c, ns, f"v-{i}", "v", gpus=4, pool=pool, priority_class=LOW,
                      node_name=nodes[i // 2])
    kube.create_pod(c, ns, "solo", gpus=8, pool=pool, priority_class=LOW, node_name=nodes[2])
    names = [f"v-{i}" for i in range(4)]
    for name in (*names, "solo"):
        kube.wait_pod_running(c, ns, name)
    c.core.patch_namespaced_pod_status("solo", ns, {"status": {"startTime": rfc3339(7200)}})
    for name in names:
        c.core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {
            "ckpt-preempt.io/last-checkpoint": rfc3339()}}})
    return names


@pytest.mark.parametrize("mode", ["all", "single"])
def test_native_victim_group_follows_its_disruption_mode(
        cluster, namespace, pool, gpu_nodes, mode):
    """An 8-GPU preemptor needs one node. `all`: the group is one unit, evicted whole, on both
    nodes. `single`: each member is its own unit, so only the two on the chosen node go."""
    priority_classes(cluster)
    nodes = gpu_nodes(3)
    members = _victim_group(cluster, namespace, pool, nodes, mode)
    kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
    kube.wait_pod_unschedulable(cluster, namespace, "big")
    text = explain_live.render(explain_live.explain(cluster.api, namespace, "big", Config()))
    assert f"ckpt-preempt: evict {4 if mode == 'all' else 2} pod(s)" in text, text
    with running_controller(cluster, config_for(namespace)):
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
    assert pod.spec.node_name in nodes[:2]
    gone = sorted(m for m in members if not exists(cluster, namespace, m))
    if mode == "all":
        assert gone == members
    else:
        same = nodes.index(pod.spec.node_name)
        assert gone == [f"v-{2 * same}", f"v-{2 * same + 1}"]
    for m in gone:
        assert reasons(cluster, namespace, m) == ["Evicted"]
    assert exists(cluster, namespace, "solo")


def test_controller_rbac_lets_the_cache_watch_podgroups(cluster, namespace):
    """With exactly deploy/rbac/controller.yaml's rules, the PodGroup informer lists and
    watches: a group created afterwards reaches the cache with its minCount and mode."""
    from ckpt_preempt.controller.kube.watch import ClusterCache
    from ckpt_preempt.policies.model.native_gangs import Disruption
    from e2e.harness.trust import controller_rbac

    with controller_rbac(cluster, namespace) as api:
        cache = ClusterCache(api, plan_namespace=namespace)
        cache.start()
        try:
            assert cache.wait_synced(30) and cache.podgroups.served is True
            create_podgroup(cluster, namespace, "seen", min_count=3, mode="all",
                            priority_class="")
            group = kube.wait_for("the PodGroup in the cache",
                                  lambda: cache.podgroups.get(f"{namespace}/seen"), timeout=30)
        finally:
            cache.stop()
    assert (group.min_count, group.disruption) == (3, Disruption.ALL)
    assert cache.podgroups.relists == 1  # no retry loop: one list, then the watch


def test_served_but_forbidden_podgroups_are_one_warning_and_an_empty_sync(cluster, caplog):
    """RBAC without podgroups (a chart older than the controller): run as without the API
    instead of retrying a forbidden list forever and never becoming ready."""
    import logging
    import threading

    from ckpt_preempt.controller.kube import podgroups

    caplog.set_level(logging.INFO, logger="ckpt_preempt.podgroups")
    api = cluster.client_for("ckpt-preempt-tenant")  # no RBAC binding at all here
    informer = podgroups.PodGroupInformer(api, threading.Event(), discover_seconds=1)
    informer.start()
    try:
        assert informer.synced.wait(30)
    finally:
        informer.stop()
    assert informer.served is False and informer.items() == [] and informer.relists == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "ckpt_preempt.podgroups"]
    assert len(lines) == 1 and "403" in lines[0] and "deploy/rbac" in lines[0], lines


def test_a_grant_given_after_start_is_seen_without_a_restart(cluster, namespace, caplog):
    """Forbidden at start, discovery asks again (every second here, DISCOVER_SECONDS in
    production): once list/watch is granted the informer watches, with no restart and no
    line per retry."""
    import logging
    import threading

    from ckpt_preempt.controller.kube import podgroups

    caplog.set_level(logging.INFO, logger="ckpt_preempt.podgroups")
    create_podgroup(cluster, namespace, "later", min_count=2, mode="all", priority_class="")
    api = cluster.client_for("ckpt-preempt-tenant")  # no RBAC binding on podgroups yet
    informer = podgroups.PodGroupInformer(api, threading.Event(), discover_seconds=1)
    name = f"podgroups-reader-{namespace}"
    informer.start()
    try:
        assert informer.synced.wait(30) and informer.served is False
        cluster.rbac.create_cluster_role({"metadata": {"name": name}, "rules": [{
            "apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups"],
            "verbs": ["list", "watch"]}]})
        cluster.rbac.create_cluster_role_binding({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": name},
            "subjects": [{"kind": "User", "name": "ckpt-preempt-tenant",
                          "apiGroup": "rbac.authorization.k8s.io"}]})
        group = kube.wait_for("the PodGroup once list/watch is granted",
                              lambda: informer.get(f"{namespace}/later"), timeout=60)
    finally:
        informer.stop()
        for delete in (cluster.rbac.delete_cluster_role_binding, cluster.rbac.delete_cluster_role):
            with contextlib.suppress(client.ApiException):
                delete(name)
    assert informer.served is True and group.min_count == 2
    lines = [r.getMessage() for r in caplog.records if r.name == "ckpt_preempt.podgroups"]
    assert len(lines) == 2 and "403" in lines[0] and "watching" in lines[1], lines
