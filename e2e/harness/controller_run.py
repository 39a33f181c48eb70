"""Shared helpers for the controller e2e tests (no tests here): start the controller in-process
or as a subprocess against the test cluster, and read back what it did from API state."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from kubernetes import client

from ckpt_preempt.controller.app.runner import Controller
from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.paths import REPO

HIGH_NEVER, HIGH_KUBE = "e2e-ckpt-high-never", "e2e-ckpt-high-kube"
LOW, LOWER = "e2e-ckpt-low", "e2e-ckpt-lower"


def priority_classes(c: kube.Cluster) -> None:
    kube.ensure_priority_class(c, HIGH_NEVER, 1000, preemption_policy="Never")
    kube.ensure_priority_class(c, HIGH_KUBE, 1000)
    kube.ensure_priority_class(c, LOW, 100)
    kube.ensure_priority_class(c, LOWER, 50)


def rfc3339(ago_seconds: float = 0.0) -> str:
    t = datetime.now(UTC) - timedelta(seconds=ago_seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def wait_run_past(pod: client.V1Pod, seconds: float) -> None:
    """Wait until ``pod`` (as read once Running) has run more than ``seconds``. Draining pays
    only once a victim has more unsaved work than its checkpoint takes (policies.planner.cost):
    a plan made within its checkpoint time of its start evicts it without asking."""
    started = pod.status.start_time.timestamp()
    kube.wait_for(f"{pod.metadata.name} to run past {seconds:.0f} s",
                  lambda: time.time() - started > seconds, timeout=seconds + 30)


def config_for(namespace: str, **kw) -> Config:
    base = {"namespaces": (namespace,), "lease_namespace": namespace, "retry_seconds": 1.0,
            "lease_duration_seconds": 6.0, "renew_deadline_seconds": 4.0,
            "request_timeout_seconds": 2.0,
            "plan_namespace": namespace,
            # the scenarios' victims are seconds old: a restart charge (restartCostSeconds,
            # default 150 s per GPU) would outweigh their lost work and change every choice
            "restart_cost_seconds": 0.0}
    return Config(**{**base, **kw})


@contextmanager
def running_controller(c: kube.Cluster, cfg: Config, *, identity: str = "c1",
                       api: client.ApiClient | None = None,
                       listen: tuple[str, int] | None = None) -> Iterator[Controller]:
    ctl = Controller(api or kube.client_copy(c.api), cfg, identity=identity, listen=listen)
    stop = threading.Event()
    t = threading.Thread(target=ctl.run, args=(stop,), name=f"controller-{identity}", daemon=True)
    t.start()
    try:
        yield ctl
    finally:
        stop.set()
        t.join(timeout=15)


def start_controller_process(c: kube.Cluster, cfg: Config, tmp: Path, *, identity: str,
                             log_name: str, listen: str = "127.0.0.1:0") -> subprocess.Popen:
    data = {"namespaces": list(cfg.namespaces), "leaseNamespace": cfg.lease_namespace,
            "retrySeconds": cfg.retry_seconds, "leaseDurationSeconds": cfg.lease_duration_seconds,
            "renewDeadlineSeconds": cfg.renew_deadline_seconds,
            "requestTimeoutSeconds": cfg.request_timeout_seconds,
            "planNamespace": cfg.plan_namespace, "dryRun": cfg.dry_run,
            "maxCheckpointSeconds": cfg.max_checkpoint_seconds,
            "evictionTimeoutSeconds": cfg.eviction_timeout_seconds}
    path = tmp / "controller.yaml"
    path.write_text(yaml.safe_dump(data))
    log = open(tmp / log_name, "wb")  # noqa: SIM115 (lives as long as the process)
    return subprocess.Popen(
        [sys.executable, "-m", "ckpt_preempt.controller.app.cmd_run",
         "--kubeconfig", str(c.kubeconfig),
         "--config", str(path), "--identity", identity, "--listen", listen],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)})


def pod_events(c: kube.Cluster, namespace: str) -> list[client.CoreV1Event]:
    """Events by our controller, oldest first (creation order by resourceVersion)."""
    items = c.core.list_namespaced_event(namespace).items
    ours = [e for e in items if e.reporting_component == "ckpt-preempt.io/controller"]
    return sorted(ours, key=lambda e: int(e.metadata.resource_version))


def reasons(c: kube.Cluster, namespace: str, name: str | None = None) -> list[str]:
    return [e.reason for e in pod_events(c, namespace)
            if name is None or e.involved_object.name == name]


def exists(c: kube.Cluster, namespace: str, name: str) -> bool:
    try:
        pod = c.core.read_namespaced_pod(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise
    return pod.metadata.deletion_timestamp is None


def user_kubeconfig(c: kube.Cluster, user: str, path: Path) -> Path:
    """A kubeconfig for an RBAC-limited test user (token auth; the local CA is not pinned)."""
    c.client_for(user)  # skips on backends without test users
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "u",
           "clusters": [{"name": "c", "cluster": {"server": c.api.configuration.host,
                                                  "insecure-skip-tls-verify": True}}],
           "users": [{"name": user, "user": {"token": c.user_tokens[user]}}],
           "contexts": [{"name": "u", "context": {"cluster": "c", "user": user}}]}
    path.write_text(yaml.safe_dump(cfg))
    return path


def grant_agent(c: kube.Cluster, namespace: str, pod: str, user: str = "ckpt-preempt-agent"):
    """The agent's RBAC: get/watch/patch on its own pod only (as deploy/rbac does per pod)."""
    c.rbac.create_namespaced_role(namespace, {
        "metadata": {"name": f"agent-{pod}"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "resourceNames": [pod],
                   "verbs": ["get", "list", "watch", "patch"]}]})
    c.rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": f"agent-{pod}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": f"agent-{pod}"},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]})


def start_agent(c: kube.Cluster, kubeconfig: Path, namespace: str, pod: str, tmp: Path,
                *hook: str, port: int) -> subprocess.Popen:
    log = open(tmp / f"agent-{pod}.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "ckpt_preempt.controller.app.cmd_agent",
         "--kubeconfig", str(kubeconfig),
         "--pod", pod, "--namespace", namespace, "--listen", f"127.0.0.1:{port}", *hook],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)})


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def event_time(e: client.CoreV1Event) -> float:
    return (e.last_timestamp or e.first_timestamp or e.event_time).timestamp()


PLAN_LABEL_SELECTOR = "app.kubernetes.io/managed-by=ckpt-preempt"


def plans(c: kube.Cluster, plan_namespace: str) -> list[plan_record.PlanRecord]:
    """Every plan the controller stored (ConfigMaps in its namespace), oldest first."""
    items = c.core.list_namespaced_config_map(plan_namespace,
                                              label_selector=PLAN_LABEL_SELECTOR).items
    out = [plan_record.plan_from_annotation(cm.data[plan_record.PLAN_DATA_KEY]) for cm in items
           if (cm.data or {}).get(plan_record.PLAN_DATA_KEY)]
    return sorted(out, key=lambda r: (r.created, r.id))


def plan_of(c: kube.Cluster, plan_namespace: str, pod: str,
            pod_namespace: str | None = None) -> plan_record.PlanRecord | None:
    """The newest stored plan that places `pod` (any member, for a gang), or None."""
    ns = pod_namespace or plan_namespace
    mine = [r for r in plans(c, plan_namespace)
            if any(p.name == pod and p.namespace == ns for p in r.placements)]
    return mine[-1] if mine else None
