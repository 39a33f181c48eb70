"""Self-tests of the e2e bench: each asserts on state the real API server, kube-scheduler,
kube-controller-manager and kwok produced, never on our own code's opinion of it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.harness import kube
from e2e.harness.localcluster import versions

pytestmark = pytest.mark.e2e


def test_control_plane_reports_the_version_it_was_built_from(cluster):
    if cluster.backend != "local":
        pytest.skip("only the local control plane is built from our pinned modules")
    built = versions(cluster.local.bins)["KUBERNETES_VERSION"]
    assert cluster.version == built, f"/version says {cluster.version}, testbin built {built}"


def test_rbac_is_enforced_for_token_users(cluster, namespace):
    pods = client.CoreV1Api(cluster.client_for("ckpt-preempt-controller"))
    with pytest.raises(ApiException) as denied:
        pods.list_namespaced_pod(namespace)
    assert denied.value.status == 403, denied.value

    cluster.rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})
    cluster.rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "pod-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "User", "name": "ckpt-preempt-controller"}]})

    def allowed():
        try:
            return pods.list_namespaced_pod(namespace).items == []
        except ApiException as e:  # the authorizer's informer has not seen the binding yet
            return kube.NotYet(f"HTTP {e.status}")
    kube.wait_for("the RoleBinding to take effect", allowed)


def test_gpu_pod_is_scheduled_onto_fake_gpu_node_and_runs(cluster, namespace, pool, gpu_nodes):
    [node] = gpu_nodes(1, gpus=8)
    assert cluster.core.read_node(node).status.allocatable[kube.GPU] == "8"

    kube.create_pod(cluster, namespace, "train", gpus=4, pool=pool)
    pod = kube.wait_pod_running(cluster, namespace, "train")

    assert pod.spec.node_name == node  # bound by kube-scheduler
    assert kube.condition(pod, "PodScheduled").status == "True"
    assert kube.condition(pod, "Ready").status == "True"  # kwok's pod-ready stage
    assert pod.status.pod_ip, "kwok assigns a pod IP from its CIDR"


def test_pod_that_does_not_fit_is_unschedulable(cluster, namespace, pool, gpu_nodes):
    gpu_nodes(1, gpus=8)
    kube.create_pod(cluster, namespace, "too-big", gpus=16, pool=pool)
    pod = kube.wait_pod_unschedulable(cluster, namespace, "too-big")

    assert pod.spec.node_name is None
    message = kube.condition(pod, "PodScheduled").message
    assert f"Insufficient {kube.GPU}" in message, message


def test_default_preemption_evicts_lower_priority_pod(cluster, namespace, pool, gpu_nodes):
    kube.ensure_priority_class(cluster, "e2e-low", 100)
    kube.ensure_priority_class(cluster, "e2e-high", 1000)
    [node] = gpu_nodes(1, gpus=8)
    kube.create_pod(cluster, namespace, "victim", gpus=8, pool=pool, priority_class="e2e-low")
    kube.wait_pod_running(cluster, namespace, "victim")

    kube.create_pod(cluster, namespace, "preemptor", gpus=8, pool=pool,
                    priority_class="e2e-high")

    kube.wait_pod_gone(cluster, namespace, "victim")
    pod = kube.wait_pod_running(cluster, namespace, "preemptor")
    assert pod.spec.node_name == node
    assert pod.spec.priority == 1000  # resolved by the Priority admission plugin
    kube.wait_event(cluster, namespace, "Preempted", "victim")  # kube-scheduler's own record


def test_scheduler_runs_the_configuration_the_test_chose(cluster, namespace, pool, gpu_nodes,
                                                        scheduler_config):
    gpu_nodes(1, gpus=8)
    scheduler_config({"profiles": [{"schedulerName": "gpu-binpack", "pluginConfig": [{
        "name": "NodeResourcesFit",
        "args": {"scoringStrategy": {"type": "MostAllocated",
                                     "resources": [{"name": kube.GPU, "weight": 1}]}}}]}]})

    kube.create_pod(cluster, namespace, "default", gpus=1, pool=pool)
    kube.create_pod(cluster, namespace, "mine", gpus=1, pool=pool, scheduler_name="gpu-binpack")
    assert kube.wait_pod_running(cluster, namespace, "mine").spec.node_name
    # The only profile is gpu-binpack, so no one serves schedulerName default-scheduler: the pod
    # created first is still untouched.
    pod = cluster.core.read_namespaced_pod("default", namespace)
    assert pod.spec.node_name is None and kube.condition(pod, "PodScheduled") is None

    scheduler_config(None)  # back to the default profile
    assert kube.wait_pod_running(cluster, namespace, "default").spec.node_name


def _pdb_status(cluster, ns, name, **want):
    def probe():
        pdb = cluster.policy.read_namespaced_pod_disruption_budget(name, ns)
        s = pdb.status
        seen = {"observed_generation": s.observed_generation,
                "current_healthy": s.current_healthy,
                "disruptions_allowed": s.disruptions_allowed}
        ok = s.observed_generation == pdb.metadata.generation and all(
            seen[k] == v for k, v in want.items())
        return pdb if ok else kube.NotYet(str(seen))
    return kube.wait_for(f"PDB {ns}/{name} status {want}", probe)


def test_eviction_violating_pdb_gets_429_until_pdb_allows(cluster, namespace, pool, gpu_nodes):
    gpu_nodes(1, gpus=8)
    kube.create_gang(cluster, namespace, "worker", 2, gpus=2, pool=pool,
                     labels={"app": "trainer"})
    for i in range(2):
        kube.wait_pod_running(cluster, namespace, f"worker-{i}")
    cluster.policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "trainer"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "trainer"}}}})
    _pdb_status(cluster, namespace, "trainer", current_healthy=2, disruptions_allowed=0)

    with pytest.raises(ApiException) as refused:
        kube.evict(cluster, namespace, "worker-0")
    assert refused.value.status == 429, refused.value
    assert "disruption budget" in refused.value.body
    assert cluster.core.read_namespaced_pod("worker-0", namespace).metadata.deletion_timestamp \
        is None

    cluster.policy.patch_namespaced_pod_disruption_budget(
        "trainer", namespace, {"spec": {"minAvailable": 1}})
    _pdb_status(cluster, namespace, "trainer", disruptions_allowed=1)
    kube.evict(cluster, namespace, "worker-0")
    kube.wait_pod_gone(cluster, namespace, "worker-0")
    assert kube.wait_pod_running(cluster, namespace, "worker-1")


def _lease(holder: str, now: datetime, seconds: int = 15) -> dict:
    micro = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # metav1.MicroTime's wire format
    return {"holderIdentity": holder, "leaseDurationSeconds": seconds,
            "acquireTime": micro, "renewTime": micro}


def _race(*attempts):
    """Run the callables at the same moment; return what each returned or raised."""
    start, results = threading.Barrier(len(attempts)), [None] * len(attempts)

    def run(i, fn):
        start.wait()
        try:
            results[i] = fn()
        except ApiException as e:
            results[i] = e
    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(attempts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_two_clients_contending_for_a_lease_see_one_leader(cluster, namespace):
    """Leader election rests on the API server's create-once and resourceVersion checks."""
    apis = {who: client.CoordinationV1Api(kube.client_copy(cluster.api)) for who in "ab"}
    now = datetime.now(UTC)

    def create(who):
        return lambda: apis[who].create_namespaced_lease(namespace, {
            "metadata": {"name": "ckpt-preempt-leader"}, "spec": _lease(who, now)})
    results = dict(zip("ab", _race(create("a"), create("b")), strict=True))
    losers = [w for w, r in results.items() if isinstance(r, ApiException)]
    assert len(losers) == 1 and results[losers[0]].status == 409, results
    [leader] = set("ab") - set(losers)
    for api in apis.values():  # both clients see the same single holder
        assert api.read_namespaced_lease("ckpt-preempt-leader", namespace) \
            .spec.holder_identity == leader

    # The lease expires; both followers try to take it over from the same observed version.
    seen = apis[leader].read_namespaced_lease("ckpt-preempt-leader", namespace)
    later = now + timedelta(seconds=60)

    def take(who):
        body = {"metadata": {"name": "ckpt-preempt-leader",
                             "resourceVersion": seen.metadata.resource_version},
                "spec": _lease(who, later)}
        return lambda: apis[who].replace_namespaced_lease("ckpt-preempt-leader", namespace, body)
    results = dict(zip("ab", _race(take("a"), take("b")), strict=True))
    conflicts = [w for w, r in results.items() if isinstance(r, ApiException)]
    assert len(conflicts) == 1 and results[conflicts[0]].status == 409, results
    [winner] = set("ab") - set(conflicts)
    final = apis[conflicts[0]].read_namespaced_lease("ckpt-preempt-leader", namespace)
    assert final.spec.holder_identity == winner
