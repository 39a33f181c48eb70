"""The eviction gate against a tenant who owns its pods (create, get, list and patch pods in its
own namespace, nothing else): no annotation it writes holds an eviction past the admin's cap,
it cannot make another namespace's pod wait, and a forged ack for another disruption releases
nothing. Evictions come from the admin, as `kubectl drain` would send them."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client

from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.eviction_gate_run import (
    ack,
    drain_request,
    gate_config,
    running_gate,
    scope,
)
from e2e.harness.trust import RBAC_GROUP, TENANT_USER, extra_namespace, status_of

pytestmark = pytest.mark.e2e
CAP = 6.0  # the admin's maxCheckpointSeconds in these tests
TEN_YEARS = 10 * 365 * 86400.0
ALLOWED = 200  # status_of: the call went through


def _tenant(c: kube.Cluster, namespace: str) -> client.CoreV1Api:
    c.rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "tenant"},
        "rules": [{"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["create", "get", "list", "patch"]}]})
    c.rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "tenant"},
        "subjects": [{"kind": "User", "name": TENANT_USER, "apiGroup": RBAC_GROUP}],
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "tenant"}})
    return client.CoreV1Api(c.client_for(TENANT_USER))


def _evict(c: kube.Cluster, namespace: str, name: str) -> int:
    return status_of(lambda: kube.evict(c, namespace, name))


def _held_for(c: kube.Cluster, namespace: str, name: str, *, limit: float) -> float:
    """Evict every half second, as an eviction client would, until one is allowed; how long
    the evictions were refused (from the first refusal)."""
    start = time.monotonic()
    assert _evict(c, namespace, name) == 429
    while time.monotonic() - start < limit:
        time.sleep(0.5)
        status = _evict(c, namespace, name)
        if status != 429:
            assert status == ALLOWED, status
            return time.monotonic() - start
    raise AssertionError(f"{namespace}/{name} still refused after {limit} s")


def _forged(plan: str, deadline: float) -> str:
    now = time.time()
    return plan_record.drain_to_annotation(plan_record.DrainRequest(plan=plan, requested=now,
                                                                 deadline=now + deadline))


def test_no_annotation_a_tenant_writes_holds_an_eviction_past_the_cap(cluster, namespace,
                                                                      tmp_path):
    tenant = _tenant(cluster, namespace)
    tenant.create_namespaced_pod(namespace, kube.pod_body(
        "rewriter", checkpoint="on-request", checkpoint_seconds=10**9))
    with running_gate(cluster, namespace, tmp_path / "gate", gate_config(CAP)):
        # a huge checkpoint-seconds and a standing request of its own with a far deadline
        tenant.create_namespaced_pod(namespace, kube.pod_body(
            "forged", checkpoint="on-request", checkpoint_seconds=10**9,
            annotations={plan_record.DRAIN_ANNOTATION: _forged("disruption/mine", TEN_YEARS)}))
        held = _held_for(cluster, namespace, "forged", limit=CAP + 10)
        assert CAP - 1 <= held <= CAP + 2
        # a tenant re-writing a fresh far request every 200 ms, whatever the gate wrote
        stop = threading.Event()

        def rewrite():
            n = 0
            while not stop.is_set():
                n += 1
                tenant.patch_namespaced_pod("rewriter", namespace, {"metadata": {"annotations": {
                    plan_record.DRAIN_ANNOTATION: _forged(f"disruption/again-{n}", TEN_YEARS)}}})
                time.sleep(0.2)
        t = threading.Thread(target=rewrite, daemon=True)
        t.start()
        try:
            held = _held_for(cluster, namespace, "rewriter", limit=CAP + 10)
        finally:
            stop.set()
            t.join()
        assert CAP - 1 <= held <= CAP + 2


def test_a_forged_ack_for_another_disruption_does_not_release(cluster, namespace, tmp_path):
    tenant = _tenant(cluster, namespace)
    tenant.create_namespaced_pod(namespace, kube.pod_body(
        "train", checkpoint="on-request", checkpoint_seconds=60))
    with running_gate(cluster, namespace, tmp_path / "gate", gate_config(60)):
        assert _evict(cluster, namespace, "train") == 429
        request = kube.wait_for("the gate's drain request",  # written after the answer
                                lambda: drain_request(cluster, namespace, "train"), timeout=10)
        assert request.plan.startswith("disruption/")
        for other in ("disruption/0123456789abcdef0123", request.plan.removeprefix(
                "disruption/"), request.plan + "0"):
            ack(cluster, namespace, "train", other, api=tenant.api_client)
            time.sleep(1)  # the gate's watch cache has it by now
            assert _evict(cluster, namespace, "train") == 429, other
        assert drain_request(cluster, namespace, "train") == request  # no second request
        ack(cluster, namespace, "train", request.plan, api=tenant.api_client)
        # the gate reads its watch cache: allowed once it has seen the ack (as a client retries)
        kube.wait_for("the acked pod's eviction", lambda: _evict(
            cluster, namespace, "train") == ALLOWED or kube.NotYet("refused"), timeout=10)


def test_a_tenant_cannot_make_another_namespaces_pod_wait(cluster, namespace, tmp_path):
    """The gate reads only the evicted pod, which the tenant cannot write in another namespace;
    a pod there that cannot checkpoint goes at once, and so does any pod of a namespace the
    admin excludes, and any eviction our controller makes."""
    tenant = _tenant(cluster, namespace)
    with extra_namespace(cluster) as other, extra_namespace(cluster) as excluded:
        for ns in (other, excluded):
            scope(cluster, ns)
        kube.create_pod(cluster, other, "plain")
        kube.create_pod(cluster, other, "trainer", checkpoint="on-request")
        kube.create_pod(cluster, excluded, "trainer", checkpoint="on-request")
        forged = {"metadata": {"annotations": {
            plan_record.DRAIN_ANNOTATION: _forged("disruption/x", TEN_YEARS)}}}
        assert status_of(lambda: tenant.patch_namespaced_pod("plain", other, forged)) == 403
        assert status_of(lambda: tenant.create_namespaced_pod(other, kube.pod_body(
            "planted", checkpoint="on-request"))) == 403
        controller = "ckpt-preempt-agent"  # any identity the gate is told is the controller's
        cluster.rbac.create_namespaced_role(other, {
            "metadata": {"name": "evict"},
            "rules": [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]})
        cluster.rbac.create_namespaced_role_binding(other, {
            "metadata": {"name": "evict"},
            "subjects": [{"kind": "User", "name": controller, "apiGroup": RBAC_GROUP}],
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "evict"}})
        with running_gate(cluster, namespace, tmp_path / "gate", gate_config(60),
                          f"--exempt-user={controller}", f"--exclude-namespace={excluded}"):
            assert _evict(cluster, other, "plain") == ALLOWED
            assert _evict(cluster, excluded, "trainer") == ALLOWED
            as_controller = client.CoreV1Api(cluster.client_for(controller))
            body = client.V1Eviction(metadata=client.V1ObjectMeta(name="trainer",
                                                                  namespace=other))
            assert status_of(lambda: as_controller.create_namespaced_pod_eviction(
                "trainer", other, body)) == ALLOWED
            assert drain_request(cluster, other, "trainer") is None
