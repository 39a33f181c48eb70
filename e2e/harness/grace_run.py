"""Helpers for the grace webhook's e2e tests (no tests here): the webhook as its own process
(``ckpt-preempt grace-webhook``, no API credentials: it needs none), and a
MutatingWebhookConfiguration that points the local API server at it, shaped as the chart's
(``hooks`` builds both; the chart test compares them) and narrowed to the test's namespaces.

    with running_grace_webhook(c, tmp, scope=[ns, other], probe=ns) as w:   # w.stop(), w.port
        ...
    hooks(client_config, never=..., namespaces=..., namespace_label=..., pod_label=...)
    opt_in(c, ns)                                  # label a namespace in
"""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.grace.grace import OPT_IN_LABEL, OPT_IN_VALUE, PATH
from e2e.harness import kube
from e2e.harness.eviction_gate_run import make_certs
from e2e.harness.localcluster import free_port

OPT_IN = {OPT_IN_LABEL: OPT_IN_VALUE}
SECONDS = "ckpt-preempt.io/checkpoint-seconds"
NAME = "kubernetes.io/metadata.name"
UNSCHEDULABLE_POOL = "e2e-grace-no-such-pool"


def _hook(name: str, client_config: dict, timeout: int) -> dict:
    return {"name": name, "admissionReviewVersions": ["v1"], "clientConfig": client_config,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "failurePolicy": "Ignore", "sideEffects": "None", "reinvocationPolicy": "Never",
            "timeoutSeconds": timeout, "matchPolicy": "Equivalent"}


def hooks(client_config: dict, *, never: list[str], namespaces: list[str] = (),
          namespace_label: bool = True, pod_label: bool = True, timeout: int = 3) -> list[dict]:
    """The webhooks of the chart's MutatingWebhookConfiguration (templates/grace-webhook.yaml):
    one per opt-in route, each never in `never`."""
    not_in = {"key": NAME, "operator": "NotIn", "values": list(never)}
    out = []
    if namespace_label:
        out.append({**_hook("namespace-label.grace.ckpt-preempt.io", client_config, timeout),
                    "namespaceSelector": {"matchLabels": dict(OPT_IN),
                                          "matchExpressions": [not_in]}})
    if namespaces:
        out.append({**_hook("namespace-list.grace.ckpt-preempt.io", client_config, timeout),
                    "namespaceSelector": {"matchExpressions": [
                        {"key": NAME, "operator": "In", "values": list(namespaces)}, not_in]}})
    if pod_label:
        out.append({**_hook("pod-label.grace.ckpt-preempt.io", client_config, timeout),
                    "namespaceSelector": {"matchExpressions": [not_in]},
                    "objectSelector": {"matchLabels": dict(OPT_IN)}})
    return out


def opt_in(c: kube.Cluster, namespace: str) -> None:
    c.core.patch_namespace(namespace, {"metadata": {"labels": OPT_IN}})


@dataclass
class GraceWebhook:
    proc: subprocess.Popen
    port: int
    log: Path

    def stop(self) -> None:
        kube.stop_process(self.proc)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


@contextmanager
def running_grace_webhook(c: kube.Cluster, workdir: Path, *, scope: list[str], probe: str,
                          cap: float = 120, margin: int = 30,
                          namespaces: list[str] = ()) -> Iterator[GraceWebhook]:
    """The webhook as its own process with `cap` as maxCheckpointSeconds, and the chart's
    webhooks pointed at it, each also narrowed to the namespaces in `scope` (other tests' pods
    are never sent to it). Returns once a dry-run pod in `probe` (opted in) comes back with
    its grace raised (the API server loads webhook configurations from its own informer)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cert, key, ca = make_certs(workdir)
    (workdir / "config.json").write_text(json.dumps({"maxCheckpointSeconds": cap}))
    port = free_port()
    log = workdir / "grace-webhook.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckpt_preempt.controller.app.cli", "grace-webhook",
         "--config", str(workdir / "config.json"), "--margin-seconds", str(margin),
         "--tls-cert", str(cert), "--tls-key", str(key), "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    webhook = GraceWebhook(proc=proc, port=port, log=log)
    admission = client.AdmissionregistrationV1Api(c.api)
    name = f"e2e-grace-{uuid.uuid4().hex[:8]}"
    url = {"url": f"https://127.0.0.1:{port}{PATH}", "caBundle": base64.b64encode(ca).decode()}
    made = hooks(url, never=["kube-system", "ckpt-preempt"], namespaces=namespaces)
    for h in made:
        h["namespaceSelector"].setdefault("matchExpressions", []).append(
            {"key": NAME, "operator": "In", "values": list(scope)})
    try:
        kube.wait_for("the grace webhook to listen", lambda: b"listening" in log.read_bytes()
                      or kube.NotYet(log.read_text()[-300:]), timeout=30)
        admission.create_mutating_webhook_configuration(
            {"apiVersion": "admissionregistration.k8s.io/v1",
             "kind": "MutatingWebhookConfiguration", "metadata": {"name": name},
             "webhooks": made})
        expect = math.ceil(min(60, cap)) + margin  # above the default 30 s, whatever the margin
        kube.wait_for("the webhook to be called", lambda: (
            g if (g := dry_run_grace(c, probe, "60")) == expect else kube.NotYet(f"grace {g}")),
            timeout=30, interval=0.5)
        yield webhook
    finally:
        try:
            admission.delete_mutating_webhook_configuration(name)
        except ApiException as e:
            if e.status != 404:
                raise
        webhook.stop()


def pod_body(name: str, declared: str | None = None, **kwargs) -> dict:
    """A pod declaring `declared` checkpoint seconds, held Pending (it selects a pool no node
    is in), so it never lands on another test's nodes."""
    annotations = {SECONDS: declared} if declared is not None else {}
    return kube.pod_body(name, annotations=annotations, pool=UNSCHEDULABLE_POOL, **kwargs)


def dry_run_grace(c: kube.Cluster, namespace: str, declared: str) -> int | None:
    """The grace a pod declaring `declared` would be created with (a dry run: nothing made)."""
    body = pod_body(f"probe-{uuid.uuid4().hex[:6]}", declared)
    pod = c.core.create_namespaced_pod(namespace, body, dry_run="All")
    return pod.spec.termination_grace_period_seconds

