"""deploy/rbac/agent.yaml on a real API server: with a pod-bound ServiceAccount token, the
agent may write checkpoint-done, last-checkpoint and expected-end on its own pod and nothing
else: no finalizer (which would keep a victim from ever going away), ownerReference or label."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client

from e2e.harness import kube

pytestmark = pytest.mark.e2e
AGENT = Path(__file__).resolve().parents[1] / "deploy/rbac/agent.yaml"


def _status(fn) -> int:
    try:
        fn()
    except client.ApiException as e:
        return e.status
    return 200


def test_agent_policy_limits_a_pod_bound_token_to_its_own_pod(cluster, namespace):
    docs = list(yaml.safe_load_all(AGENT.read_text()))
    by_kind = {d["kind"]: d for d in docs}
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        d = by_kind[kind]
        d["metadata"]["namespace"] = namespace
        if kind == "RoleBinding":
            d["subjects"][0]["namespace"] = namespace
    core, rbac = cluster.core, cluster.rbac
    adm = client.AdmissionregistrationV1Api(cluster.api)
    core.create_namespaced_service_account(namespace, by_kind["ServiceAccount"])
    rbac.create_namespaced_role(namespace, by_kind["Role"])
    rbac.create_namespaced_role_binding(namespace, by_kind["RoleBinding"])
    policy = by_kind["ValidatingAdmissionPolicy"]
    binding = by_kind["ValidatingAdmissionPolicyBinding"]
    name = f"agent-own-pod-{namespace}"
    policy["metadata"]["name"] = binding["metadata"]["name"] = name
    binding["spec"]["policyName"] = name
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": namespace}}}
    adm.create_validating_admission_policy(policy)
    adm.create_validating_admission_policy_binding(binding)
    try:
        pods = {}
        for pod in ("mine", "theirs"):
            body = kube.pod_body(pod)
            body["spec"]["serviceAccountName"] = "ckpt-preempt-agent"
            pods[pod] = core.create_namespaced_pod(namespace, body)
        mine = pods["mine"]
        token = core.create_namespaced_service_account_token(
            "ckpt-preempt-agent", namespace, {"spec": {"boundObjectRef": {
                "kind": "Pod", "apiVersion": "v1", "name": "mine",
                "uid": mine.metadata.uid}}}).status.token
        cfg = client.Configuration()
        cfg.host, cfg.verify_ssl = cluster.api.configuration.host, False
        cfg.api_key = {"authorization": f"Bearer {token}"}
        agent = client.CoreV1Api(client.ApiClient(cfg))

        def patch(pod, key):
            return lambda: agent.patch_namespaced_pod(pod, namespace, {"metadata": {
                "annotations": {key: "plan-1"}}})
        # the policy takes a moment to be loaded; until then nothing is denied
        kube.wait_for("the admission policy to deny another pod", lambda: _status(
            patch("theirs", "ckpt-preempt.io/checkpoint-done")) != 200, timeout=30)
        assert _status(patch("mine", "ckpt-preempt.io/checkpoint-done")) == 200
        assert _status(patch("mine", "ckpt-preempt.io/last-checkpoint")) == 200
        assert _status(patch("mine", "ckpt-preempt.io/expected-end")) == 200
        assert _status(patch("mine", "ckpt-preempt.io/plan")) != 200
        assert _status(patch("theirs", "ckpt-preempt.io/last-checkpoint")) != 200
        assert _status(patch("theirs", "ckpt-preempt.io/expected-end")) != 200
        assert _status(lambda: agent.read_namespaced_pod("mine", namespace)) == 200

        before = core.read_namespaced_pod("mine", namespace).metadata
        owner = {"apiVersion": "v1", "kind": "Pod", "name": "theirs",
                 "uid": pods["theirs"].metadata.uid}
        for meta in ({"finalizers": ["example.com/keep"]}, {"ownerReferences": [owner]},
                     {"labels": {"app": "other"}}):
            assert _status(lambda meta=meta: agent.patch_namespaced_pod(
                "mine", namespace, {"metadata": meta})) in (403, 422), meta
        after = core.read_namespaced_pod("mine", namespace).metadata
        assert after.resource_version == before.resource_version
        assert after.finalizers is None and after.owner_references is None
        assert after.labels == before.labels
    finally:
        adm.delete_validating_admission_policy_binding(name)
        adm.delete_validating_admission_policy(name)
