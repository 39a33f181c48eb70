"""The grace webhook against the local control plane: pods created by a tenant who may only
create, get and list pods in its own namespace get a grace period sized to their declared
checkpoint (capped), keep a larger one of their own, are untouched where nobody opted in, and
are still created when the webhook's process is dead (failurePolicy Ignore). Then the chart's
side (`helm template`, no cluster): off by default; when on, the webhooks these tests register,
a certificate its caBundle verifies, and a pod with no API credentials that passes Pod Security
"restricted"."""

from __future__ import annotations

import base64
import subprocess
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.policies.disruption.grace_period import DEFAULT_MARGIN_SECONDS
from e2e.harness import chart
from e2e.harness.grace_run import OPT_IN, hooks, opt_in, pod_body, running_grace_webhook
from e2e.harness.trust import tenant

pytestmark = pytest.mark.e2e
CAP, MARGIN = 120, 30  # maxCheckpointSeconds and the margin the webhook runs with
DEFAULT_GRACE = 30  # what the API server sets when a pod sets none


@pytest.fixture(scope="module")
def grace(cluster, tmp_path_factory):
    """An opted-in namespace and one that is not, each with the tenant's least RBAC (create,
    get and list pods there), and the webhook running for both: (opted-in ns, other ns, the
    tenant's CoreV1Api)."""
    made = []
    for _ in range(2):
        ns = f"e2e-grace-{uuid.uuid4().hex[:8]}"
        cluster.core.create_namespace({"metadata": {"name": ns}})
        made.append(ns)
    on, off = made
    opt_in(cluster, on)
    try:
        with tenant(cluster, on) as api, tenant(cluster, off), running_grace_webhook(
                cluster, tmp_path_factory.mktemp("grace"), scope=made, probe=on, cap=CAP,
                margin=MARGIN):
            yield on, off, client.CoreV1Api(api)
    finally:
        for ns in made:
            cluster.core.delete_namespace(ns, grace_period_seconds=0)


def _create(core: client.CoreV1Api, namespace: str, name: str, declared: str | None = None,
            **kwargs) -> tuple[int, str]:
    """Create a pod as the tenant: (its grace as stored, the API's Warning header)."""
    answer = core.create_namespaced_pod(namespace, pod_body(name, declared, **kwargs),
                                        _preload_content=False)
    assert answer.status == 201
    answer.read()  # and give the connection back
    stored = core.read_namespaced_pod(name, namespace)
    return stored.spec.termination_grace_period_seconds, answer.headers.get("Warning", "")


def test_an_opted_in_pod_gets_its_checkpoint_time_plus_the_margin(grace):
    on, _, tenant_core = grace
    assert _create(tenant_core, on, "declares-45", "45") == (45 + MARGIN, "")
    assert _create(tenant_core, on, "declares-2m", "2m")[0] == 120 + MARGIN
    # no declaration: left as the API server made it
    assert _create(tenant_core, on, "declares-nothing") == (DEFAULT_GRACE, "")


def test_an_enormous_or_malformed_declaration_gets_no_more_than_the_cap(grace):
    on, _, tenant_core = grace
    grace_s, warning = _create(tenant_core, on, "declares-forever", "99999999h")
    assert grace_s == CAP + MARGIN
    assert "capped at maxCheckpointSeconds" in warning
    for i, bad in enumerate(["NaN", "-5", "1e9", "9" * 400]):
        grace_s, warning = _create(tenant_core, on, f"declares-bad-{i}", bad)
        assert grace_s == DEFAULT_GRACE, bad
        assert "ckpt-preempt grace webhook" in warning and "left unchanged" in warning, warning


def test_the_users_larger_grace_is_kept_and_a_smaller_one_raised(grace):
    on, _, tenant_core = grace
    assert _create(tenant_core, on, "own-900", "45", grace_seconds=900)[0] == 900
    assert _create(tenant_core, on, "own-5", "45", grace_seconds=5)[0] == 45 + MARGIN


def test_a_namespace_not_opted_in_is_untouched_unless_the_pod_opts_in(grace):
    _, off, tenant_core = grace  # the same tenant, with the same Role in both namespaces
    assert _create(tenant_core, off, "not-opted-in", "45")[0] == DEFAULT_GRACE
    assert _create(tenant_core, off, "pod-opts-in", "45", labels=OPT_IN)[0] == 45 + MARGIN
    # the tenant may not write elsewhere: its RBAC is pods in these two namespaces only
    with pytest.raises(ApiException) as e:
        tenant_core.create_namespaced_pod("default", pod_body("elsewhere", "45"))
    assert e.value.status == 403




def test_with_the_webhook_killed_pods_are_still_created(cluster, namespace, tmp_path):
    opt_in(cluster, namespace)
    with tenant(cluster, namespace) as api, running_grace_webhook(
            cluster, tmp_path / "grace", scope=[namespace], probe=namespace, cap=CAP,
            margin=MARGIN) as webhook:
        core = client.CoreV1Api(api)
        assert _create(core, namespace, "while-up", "45")[0] == 45 + MARGIN
        webhook.kill()
        # the API server cannot reach it: failurePolicy Ignore creates the pod as sent
        assert _create(core, namespace, "while-down", "45")[0] == DEFAULT_GRACE


# ---------------------------------------------------------------------------- the chart

NAMESPACE = "ckpt-preempt"
ON = {"graceWebhook": {"enabled": True}}


def test_chart_off_by_default():
    docs = chart.render("ckpt-preempt", NAMESPACE)
    assert not [d for d in docs if "grace-webhook" in d["metadata"]["name"]]


def test_chart_webhooks_are_the_ones_the_tests_register():
    values = {"graceWebhook": {"enabled": True, "namespaces": ["team-a"],
                               "excludedNamespaces": ["infra"], "marginSeconds": 45}}
    docs = chart.render("ckpt-preempt", NAMESPACE, values)
    config = chart.find(docs, "MutatingWebhookConfiguration")
    service = chart.find(docs, "Service", "ckpt-preempt-grace-webhook")
    client_config = config["webhooks"][0]["clientConfig"]
    assert client_config["service"] == {
        "name": service["metadata"]["name"], "namespace": NAMESPACE, "path": "/mutate",
        "port": service["spec"]["ports"][0]["port"]}
    assert config["webhooks"] == hooks(client_config, never=["kube-system", NAMESPACE, "infra"],
                                       namespaces=["team-a"])
    deploy = chart.find(docs, "Deployment", "ckpt-preempt-grace-webhook")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "grace-webhook" and "--margin-seconds=45" in args
    assert {f"--exclude-namespace={ns}" for ns in ("kube-system", NAMESPACE, "infra")} <= set(args)


def test_chart_routes_follow_the_values_and_one_must_be_on():
    docs = chart.render("ckpt-preempt", NAMESPACE, {"graceWebhook": {
        "enabled": True, "podLabel": False}})
    (hook,) = chart.find(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["name"] == "namespace-label.grace.ckpt-preempt.io"
    done = chart.template("ckpt-preempt", NAMESPACE, {"graceWebhook": {
        "enabled": True, "podLabel": False, "namespaceLabel": False}})
    assert done.returncode != 0 and "graceWebhook: nothing opts in" in done.stderr


def test_chart_margin_default_is_the_webhooks():
    docs = chart.render("ckpt-preempt", NAMESPACE, ON)
    deploy = chart.find(docs, "Deployment", "ckpt-preempt-grace-webhook")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--margin-seconds={DEFAULT_MARGIN_SECONDS}" in args


def test_chart_pod_has_no_api_credentials_and_is_restricted():
    docs = chart.render("r", "ops", ON)
    deploy = chart.find(docs, "Deployment", "r-ckpt-preempt-grace-webhook")
    pod = deploy["spec"]["template"]["spec"]
    sa = chart.find(docs, "ServiceAccount", "r-ckpt-preempt-grace-webhook")
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is False
    assert sa["automountServiceAccountToken"] is False
    assert not [d for d in docs if d["kind"] in {"ClusterRoleBinding", "RoleBinding"}
                and "grace" in d["metadata"]["name"]]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert (sc["allowPrivilegeEscalation"], sc["readOnlyRootFilesystem"]) == (False, True)
    assert sc["capabilities"] == {"drop": ["ALL"]}


def test_chart_certificate_is_for_the_service_and_signed_by_the_ca_bundle(tmp_path):
    docs = chart.render("ckpt-preempt", NAMESPACE, ON)
    hook = chart.find(docs, "MutatingWebhookConfiguration")["webhooks"][0]
    secret = chart.find(docs, "Secret", "ckpt-preempt-grace-webhook-tls")
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(hook["clientConfig"]["caBundle"]))
    (tmp_path / "tls.crt").write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), "-verify_hostname",
         f"ckpt-preempt-grace-webhook.{NAMESPACE}.svc", str(tmp_path / "tls.crt")],
        capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr + verified.stdout


@pytest.mark.parametrize("bad", [{"marginSeconds": -1}, {"marginSeconds": 1.5},
                                 {"timeoutSeconds": 30}, {"namespaces": ["Not A Namespace"]},
                                 {"failurePolicy": "Fail"}, {"extra": 1}])
def test_chart_schema_refuses_bad_values(bad):
    done = chart.template("ckpt-preempt", NAMESPACE, {"graceWebhook": {"enabled": True, **bad}})
    assert done.returncode != 0 and "graceWebhook" in done.stderr, done.stderr
