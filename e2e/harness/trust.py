"""Shared helpers for the trust e2e tests (no tests here): deploy/'s RBAC and admission policies
installed on the test cluster, scoped to one test, and the RBAC-limited identities.

    with controller_rbac(c, ns) as api: ...        # deploy/rbac/controller.yaml, as a token user
    with admission_policies(c, namespaces=[ns], plan_namespace=ns, pool=pool): ...
    with tenant(c, ns) as api: ...                 # may only create, get and list pods in ns
    with extra_namespace(c) as ns: ...             # a second namespace, deleted afterwards
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.paths import REPO

DEPLOY = REPO / "deploy"
CONTROLLER_RBAC = DEPLOY / "rbac/controller.yaml"
ADMISSION = DEPLOY / "admission"
DEPLOYED_CONTROLLER = "system:serviceaccount:ckpt-preempt:ckpt-preempt-controller"
CONTROLLER_USER = "ckpt-preempt-controller"  # the e2e token user standing in for its SA
TENANT_USER = "ckpt-preempt-tenant"
RESERVED_TAINT = "ckpt-preempt.io/reserved"
MANAGED_BY = {"app.kubernetes.io/managed-by": "ckpt-preempt"}
RBAC_GROUP = "rbac.authorization.k8s.io"


def status_of(call: Callable[[], object]) -> int:
    """The HTTP status a call got: 200 when it went through, else the ApiException's."""
    try:
        call()
    except ApiException as e:
        return e.status
    return 200


def _user(name: str) -> list[dict]:
    return [{"kind": "User", "name": name, "apiGroup": RBAC_GROUP}]


@contextmanager
def controller_rbac(c: kube.Cluster, namespace: str,
                    user: str = CONTROLLER_USER) -> Iterator[client.ApiClient]:
    """deploy/rbac/controller.yaml bound to the token user `user` instead of the ServiceAccount,
    its namespaced Roles in `namespace` (the tests' lease and plan namespace). Yields that
    user's client."""
    docs = list(yaml.safe_load_all(CONTROLLER_RBAC.read_text()))
    cluster_name = f"e2e-{namespace}"
    for d in docs:
        kind, meta = d["kind"], d["metadata"]
        if kind == "ClusterRole":
            c.rbac.create_cluster_role({**d, "metadata": {"name": cluster_name}})
        elif kind == "ClusterRoleBinding":
            c.rbac.create_cluster_role_binding({
                **d, "metadata": {"name": cluster_name}, "subjects": _user(user),
                "roleRef": {**d["roleRef"], "name": cluster_name}})
        elif kind == "Role":
            c.rbac.create_namespaced_role(namespace, {
                **d, "metadata": {"name": meta["name"], "namespace": namespace}})
        elif kind == "RoleBinding":
            c.rbac.create_namespaced_role_binding(namespace, {
                **d, "metadata": {"name": meta["name"], "namespace": namespace},
                "subjects": _user(user)})
    try:
        yield c.client_for(user)
    finally:
        c.rbac.delete_cluster_role_binding(cluster_name)
        c.rbac.delete_cluster_role(cluster_name)


def _policies(controller: str) -> list[dict]:
    docs = []
    for path in sorted(ADMISSION.glob("*.yaml")):
        text = path.read_text()
        assert DEPLOYED_CONTROLLER in text, f"{path} does not name the controller's identity"
        docs += yaml.safe_load_all(text.replace(DEPLOYED_CONTROLLER, controller))
    return docs


@contextmanager
def admission_policies(c: kube.Cluster, *, namespaces: list[str], plan_namespace: str,
                       pool: str, controller: str = CONTROLLER_USER) -> Iterator[None]:
    """deploy/admission/*.yaml with `controller` as the exempt identity, each binding narrowed
    to this test: pods in `namespaces`, ConfigMaps in `plan_namespace`, nodes in `pool`.
    Returns once every policy denies a dry-run probe (policies take a moment to load)."""
    adm = client.AdmissionregistrationV1Api(c.api)
    suffix = uuid.uuid4().hex[:6]
    by_namespace = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                          "operator": "In", "values": namespaces}]}
    scope_for = {  # what each policy is about -> the part of this cluster that is the test's
        "pods": {"namespaceSelector": by_namespace},
        "configmaps": {"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": plan_namespace}}},
        "nodes": {"objectSelector": {"matchLabels": {kube.POOL_LABEL: pool}}},
    }
    docs = _policies(controller)
    resource = {d["metadata"]["name"]: d["spec"]["matchConstraints"]["resourceRules"][0]
                ["resources"][0] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    made: list[tuple[str, str]] = []
    try:
        for d in docs:
            original = d["metadata"]["name"]
            d["metadata"] = {"name": f"{original}-{suffix}"}
            if d["kind"] == "ValidatingAdmissionPolicy":
                adm.create_validating_admission_policy(d)
                made.append(("policy", d["metadata"]["name"]))
                continue
            d["spec"]["matchResources"] = scope_for[resource[d["spec"]["policyName"]]]
            d["spec"]["policyName"] += f"-{suffix}"
            adm.create_validating_admission_policy_binding(d)
            made.append(("binding", d["metadata"]["name"]))
        _wait_enforced(c, namespaces[0], plan_namespace, pool)
        yield
    finally:
        for kind, name in reversed(made):
            delete = (adm.delete_validating_admission_policy_binding if kind == "binding"
                      else adm.delete_validating_admission_policy)
            delete(name)


def _wait_enforced(c: kube.Cluster, namespace: str, plan_namespace: str, pool: str) -> None:
    """Dry-run writes (as the admin, whom the policies do not exempt) until each is denied."""
    probes = {
        "drain annotation": lambda: c.core.create_namespaced_pod(namespace, kube.pod_body(
            "probe", annotations={plan_record.DRAIN_ANNOTATION: "{}"}), dry_run="All"),
        "tolerate-all pod": lambda: c.core.create_namespaced_pod(namespace, kube.pod_body(
            "probe", tolerations=[{"operator": "Exists"}]), dry_run="All"),
        "reservation taint": lambda: c.core.create_node(kube.node_body(
            f"{pool}-probe", pool=pool, taints=[{"key": RESERVED_TAINT, "value": "x",
                                                 "effect": "NoSchedule"}]), dry_run="All"),
        "plan ConfigMap": lambda: c.core.create_namespaced_config_map(plan_namespace, {
            "metadata": {"name": "ckpt-plan-probe", "labels": MANAGED_BY}}, dry_run="All"),
    }
    for what, call in probes.items():
        kube.wait_for(f"the admission policy to deny a {what}",
                      lambda call=call: status_of(call) == 403, timeout=30)


@contextmanager
def tenant(c: kube.Cluster, namespace: str) -> Iterator[client.ApiClient]:
    """The tenant token user, allowed only to create, get and list pods in `namespace`."""
    c.rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "tenant"},
        "rules": [{"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["create", "get", "list"]}]})
    c.rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "tenant"}, "subjects": _user(TENANT_USER),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "tenant"}})
    yield c.client_for(TENANT_USER)


def extra_namespace(c: kube.Cluster):
    """A second namespace for a test (a tenant's, or one outside the controller's scope)."""
    return kube.temporary_namespace(c)


def store_plan(c: kube.Cluster, plan_namespace: str, record: plan_record.PlanRecord) -> None:
    """Persist `record` the way the controller does (as a previous controller would have)."""
    c.core.create_namespaced_config_map(plan_namespace, {
        "metadata": {"name": f"ckpt-plan-{record.id}", "labels": MANAGED_BY},
        "data": {plan_record.PLAN_DATA_KEY: plan_record.plan_to_annotation(record)}})


def reserved(c: kube.Cluster, node: str) -> list[str]:
    """The reservation taints' values (plan ids) on `node`."""
    return [t.value for t in c.core.read_node(node).spec.taints or [] if t.key == RESERVED_TAINT]
