"""`helm template` of the chart's eviction gate (templates/eviction-gate.yaml; no cluster): off by
default; when on, a webhook on pods/eviction that fails open, with a Service, a certificate its
caBundle verifies, and a Deployment running `ckpt-preempt gate` as the controller's
ServiceAccount."""

from __future__ import annotations

import base64
import subprocess

import pytest

from e2e.harness import chart
from e2e.harness.eviction_gate_run import GATE_RULES

NAMESPACE = "ckpt-preempt"
ON = {"evictionGate": {"enabled": True}}


def test_off_by_default():
    docs = chart.render("ckpt-preempt", NAMESPACE)
    assert not [d for d in docs if "eviction-gate" in d["metadata"]["name"]]


def test_on_it_is_a_webhook_on_evictions_that_fails_open():
    docs = chart.render("ckpt-preempt", NAMESPACE, ON)
    (hook,) = chart.find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods/eviction"], "scope": "Namespaced"}]
    assert (hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (
        "Ignore", "NoneOnDryRun", 5)
    service = chart.find(docs, "Service", "ckpt-preempt-eviction-gate")
    assert hook["clientConfig"]["service"] == {
        "name": service["metadata"]["name"], "namespace": NAMESPACE, "path": "/validate",
        "port": service["spec"]["ports"][0]["port"]}
    # its own namespace and kube-system are never delayed
    (never,) = hook["namespaceSelector"]["matchExpressions"]
    assert never["operator"] == "NotIn" and set(never["values"]) == {"kube-system", NAMESPACE}


def test_the_generated_certificate_is_for_the_service_and_signed_by_the_ca_bundle(tmp_path):
    docs = chart.render("ckpt-preempt", NAMESPACE, ON)
    (hook,) = chart.find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    secret = chart.find(docs, "Secret", "ckpt-preempt-eviction-gate-tls")
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(hook["clientConfig"]["caBundle"]))
    (tmp_path / "tls.crt").write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), "-verify_hostname",
         f"ckpt-preempt-eviction-gate.{NAMESPACE}.svc", str(tmp_path / "tls.crt")],
        capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr + verified.stdout


def test_the_gate_runs_as_the_controller_and_lets_its_evictions_through():
    values = {"evictionGate": {"enabled": True, "excludedNamespaces": ["infra", "*"],
                               "excludedPriorityClasses": ["critical"]}}
    docs = chart.render("r", "ops", values)
    deploy = chart.find(docs, "Deployment", "r-ckpt-preempt-eviction-gate")
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "r-ckpt-preempt-controller"
    args = pod["containers"][0]["args"]
    assert args[0] == "gate"
    assert "--exempt-user=system:serviceaccount:ops:r-ckpt-preempt-controller" in args
    assert {"--exclude-namespace=infra", "--exclude-namespace=*",
            "--exclude-priority-class=critical"} <= set(args)
    rules = chart.find(docs, "ClusterRole", "r-ckpt-preempt-eviction-gate")["rules"]
    assert rules == GATE_RULES  # what the e2e tests run the gate with
    binding = chart.find(docs, "ClusterRoleBinding", "r-ckpt-preempt-eviction-gate")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "r-ckpt-preempt-controller",
                                    "namespace": "ops"}]


def test_config_namespaces_scope_the_webhook():
    docs = chart.render("ckpt-preempt", NAMESPACE, {**ON, "config": {"namespaces": ["team-a"]}})
    (hook,) = chart.find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    scoped = hook["namespaceSelector"]["matchExpressions"][0]
    assert scoped == {"key": "kubernetes.io/metadata.name", "operator": "In",
                      "values": ["team-a"]}


def test_an_own_secret_needs_its_ca_bundle():
    values = {"evictionGate": {"enabled": True, "tls": {"secretName": "mine"}}}
    done = chart.template("ckpt-preempt", NAMESPACE, values)
    assert done.returncode != 0 and "evictionGate.tls.caBundle is required" in done.stderr
    values["evictionGate"]["tls"]["caBundle"] = base64.b64encode(b"PEM").decode()
    docs = chart.render("ckpt-preempt", NAMESPACE, values)
    assert not [d for d in docs if d["kind"] == "Secret"]
    deploy = chart.find(docs, "Deployment", "ckpt-preempt-eviction-gate")
    (tls,) = [v for v in deploy["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"]
    assert tls["secret"]["secretName"] == "mine"


@pytest.mark.parametrize("bad", [{"failurePolicy": "Maybe"}, {"timeoutSeconds": 60},
                                 {"excludedNamespaces": ["Not A Namespace"]}, {"extra": 1}])
def test_schema_refuses_bad_gate_values(bad):
    done = chart.template("ckpt-preempt", NAMESPACE, {"evictionGate": {"enabled": True, **bad}})
    assert done.returncode != 0 and "evictionGate" in done.stderr, done.stderr
