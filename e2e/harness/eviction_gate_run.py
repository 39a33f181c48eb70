"""Helpers for the eviction gate's e2e tests (no tests here): a CA and serving certificate from
openssl, the gate as its own process (``ckpt-preempt gate``) with the chart's RBAC only, and
a ValidatingWebhookConfiguration pointing the local API server at it, scoped to one namespace.

    with running_gate(c, namespace, tmp_path, config) as g:   # g.proc, g.stop(), g.port
        ...
    drain(c, node, *extra, timeout=...) -> (CompletedProcess, seconds)
    drain_request(c, ns, name) -> DrainRequest | None
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.kubectl import kubectl
from e2e.harness.localcluster import free_port, kubeconfig_text

GATE_USER = "ckpt-preempt-controller"  # a token user of the local cluster (no groups)
SCOPE_LABEL = "e2e.ckpt-preempt.io/gate"
RBAC = "rbac.authorization.k8s.io"
# What the chart grants the gate (deploy/helm/ckpt-preempt/templates/eviction-gate.yaml)
GATE_RULES = [{"apiGroups": [""], "resources": ["pods"],
               "verbs": ["get", "list", "watch", "patch"]},
              {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]}]


def make_certs(workdir: Path) -> tuple[Path, Path, bytes]:
    """A CA and a certificate for 127.0.0.1 signed by it: (cert, key, CA PEM)."""
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=workdir, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
        "-subj", "/CN=e2e-gate-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign")
    ssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=127.0.0.1")
    (workdir / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n"
                                     "extendedKeyUsage=serverAuth\n")
    ssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "tls.crt", "-days", "1", "-extfile", "san.ext")
    return workdir / "tls.crt", workdir / "tls.key", (workdir / "ca.crt").read_bytes()


def webhook_configuration(name: str, port: int, ca: bytes, scope: str) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": name},
        "webhooks": [{
            "name": "eviction-gate.ckpt-preempt.io",
            "clientConfig": {"url": f"https://127.0.0.1:{port}/validate",
                             "caBundle": base64.b64encode(ca).decode()},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods/eviction"], "scope": "Namespaced"}],
            "failurePolicy": "Ignore", "sideEffects": "NoneOnDryRun", "timeoutSeconds": 5,
            "admissionReviewVersions": ["v1"], "matchPolicy": "Equivalent",
            "namespaceSelector": {"matchLabels": {SCOPE_LABEL: scope}},
        }]}


@dataclass
class Gate:
    proc: subprocess.Popen
    port: int
    log: Path

    def stop(self) -> None:
        kube.stop_process(self.proc)


def _grant_gate(c: kube.Cluster, name: str) -> None:
    c.rbac.create_cluster_role({"metadata": {"name": name}, "rules": GATE_RULES})
    c.rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "subjects": [{"kind": "User", "name": GATE_USER, "apiGroup": RBAC}],
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name}})


def _revoke_gate(c: kube.Cluster, name: str) -> None:
    for call in (c.rbac.delete_cluster_role_binding, c.rbac.delete_cluster_role):
        try:
            call(name)
        except ApiException as e:
            if e.status != 404:
                raise


def scope(c: kube.Cluster, namespace: str) -> None:
    """Put `namespace` under the gate's webhook (its namespaceSelector)."""
    c.core.patch_namespace(namespace, {"metadata": {"labels": {SCOPE_LABEL: namespace}}})


@contextmanager
def running_gate(c: kube.Cluster, namespace: str, workdir: Path, config: dict,
                 *flags: str) -> Iterator[Gate]:
    """The gate as its own process, as GATE_USER with the chart's rules only, and a webhook
    configuration sending it the Evictions of `namespace` (others: `scope(c, ns)`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cert, key, ca = make_certs(workdir)
    (workdir / "config.json").write_text(json.dumps(config))
    token = next(t for u, t in c.user_tokens.items() if u == GATE_USER)
    (workdir / "kubeconfig").write_text(kubeconfig_text(c.api.configuration.host, token,
                                                         GATE_USER))
    name = f"e2e-gate-{uuid.uuid4().hex[:8]}"
    _grant_gate(c, name)
    port = free_port()
    log = workdir / "gate.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckpt_preempt.controller.app.cmd_gate",
         "--kubeconfig", str(workdir / "kubeconfig"), "--config", str(workdir / "config.json"),
         "--tls-cert", str(cert), "--tls-key", str(key), "--listen", f"127.0.0.1:{port}",
         *flags],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    gate = Gate(proc=proc, port=port, log=log)
    admission = client.AdmissionregistrationV1Api(c.api)
    try:
        kube.wait_for("the gate to listen", lambda: b"listening" in log.read_bytes()
                      or kube.NotYet(log.read_text()[-300:]), timeout=30)
        scope(c, namespace)
        admission.create_validating_webhook_configuration(
            webhook_configuration(name, port, ca, namespace))
        wait_webhook_active(c, namespace)
        yield gate
    finally:
        try:
            admission.delete_validating_webhook_configuration(name)
        except ApiException as e:
            if e.status != 404:
                raise
        gate.stop()
        _revoke_gate(c, name)


def wait_webhook_active(c: kube.Cluster, namespace: str) -> None:
    """The API server reads webhook configurations from its own informer: wait until a dry-run
    Eviction of an on-request probe pod comes back with the gate's warning (a dry run is allowed
    and writes nothing)."""
    kube.create_pod(c, namespace, "gate-probe", checkpoint="on-request")

    def warned():
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name="gate-probe",
                                                              namespace=namespace))
        answer = c.core.create_namespaced_pod_eviction(
            "gate-probe", namespace, body, dry_run="All", _preload_content=False)
        warning = answer.headers.get("Warning", "")
        return "ckpt-preempt eviction gate" in warning or kube.NotYet(warning)
    kube.wait_for("the webhook to be called", warned, timeout=30, interval=0.5)
    c.core.delete_namespaced_pod("gate-probe", namespace, grace_period_seconds=0)


def start_drain(c: kube.Cluster, node: str, *extra: str, timeout: float = 60) -> subprocess.Popen:
    """`kubectl drain` of `node` (unmanaged pods too), in the background."""
    return subprocess.Popen(
        [str(kubectl()), "--kubeconfig", str(c.kubeconfig), "drain", node, "--force",
         "--ignore-daemonsets", "--delete-emptydir-data", f"--timeout={int(timeout)}s", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def drain(c: kube.Cluster, node: str, *extra: str,
          timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    """`kubectl drain` of `node` to its end, and how long it took."""
    start = time.monotonic()
    proc = start_drain(c, node, *extra, timeout=timeout)
    out, err = proc.communicate(timeout=timeout + 30)
    return (subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
            time.monotonic() - start)


def drain_request(c: kube.Cluster, namespace: str, name: str) -> plan_record.DrainRequest | None:
    try:
        pod = c.core.read_namespaced_pod(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    raw = (pod.metadata.annotations or {}).get(plan_record.DRAIN_ANNOTATION)
    return None if raw is None else plan_record.drain_from_annotation(raw)


def ack(c: kube.Cluster, namespace: str, name: str, plan: str,
        api: client.ApiClient | None = None) -> None:
    """What the agent writes once the checkpoint is saved."""
    core = client.CoreV1Api(api) if api is not None else c.core
    core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {
        plan_record.DONE_ANNOTATION: plan}}})


def gate_config(cap: float = 30) -> dict:
    return {"maxCheckpointSeconds": cap}
