"""Helpers for e2e tests against a real Kubernetes API: fake GPU nodes, pods, and waits.

Fixtures (e2e/conftest.py):
    cluster    session  Cluster: .backend ("local" | "kind" | "existing"), .kubeconfig (Path),
                        .api (kubernetes.client.ApiClient), .core/.policy/.coordination/
                        .scheduling/.apps/.batch/.rbac/.events (typed APIs), .version (str),
                        .client_for(user) -> ApiClient for an identity with no groups, so only
                        RBAC bindings grant it anything (local: "ckpt-preempt-controller",
                        "ckpt-preempt-agent"; skips elsewhere),
                        .restart_scheduler(config: dict | None) (local backend only; else skips),
                        .logs -> {component: log path} (local backend)
    namespace  function a fresh namespace name, deleted afterwards
    pool       function a label value unique to the test; nodes and pods made with it pair up
    gpu_nodes  function gpu_nodes(n, **node_kwargs) -> [names]: fake kwok nodes in `pool`,
                        Ready before it returns, deleted afterwards
    scheduler_config function scheduler_config(cfg: dict): restart kube-scheduler with this
                        KubeSchedulerConfiguration (profiles, extenders, pluginConfig...); the
                        default configuration is restored afterwards. Skips on kind/existing.

Builders and actions (plain functions; `c` is a Cluster):
    node_body(name, *, gpus=8, cpu="64", memory="512Gi", pods=110, pool=None, labels=None,
              annotations=None, taints=None) -> dict
    create_gpu_nodes(c, n, *, prefix="gpu", **node_body_kwargs) -> [names]   waits for Ready
                                                                    and no not-ready taint
    delete_nodes(c, names)
    ensure_priority_class(c, name, value, *, preemption_policy="PreemptLowerPriority")
    pod_body(name, *, gpus=0, cpu="100m", memory="64Mi", priority_class=None, pool=None,
             gang=None, gang_total=None, checkpoint=None, last_checkpoint=None,
             checkpoint_seconds=None, labels=None, annotations=None, node_name=None,
             scheduling_gates=(), tolerations=None, grace_seconds=None,
             scheduler_name=None) -> dict
    create_pod(c, namespace, name, **pod_body_kwargs) -> V1Pod
    create_gang(c, namespace, gang, size, **pod_body_kwargs) -> [V1Pod]   pods <gang>-0..size-1
        labelled scheduling.ai/gang-name=<gang>, scheduling.ai/gang-total=<size>
    evict(c, namespace, name) -> None   Eviction API (policy/v1); raises ApiException (429 when a
        PDB forbids it)
    wait_event(c, namespace, reason, name=None, timeout=60) -> EventsV1Event  an Event with this
        reason (regarding object `name`, if given)
    client_copy(api) -> ApiClient: same credentials, own connections (e.g. a second controller)
    wait_for(what, probe, *, timeout=60, interval=0.2) -> probe()'s first truthy value;
        a probe returns NotYet(state) (falsy) to put `state` in the timeout message
    wait_pod_running(c, ns, name, timeout=60) -> V1Pod        (phase Running, bound to a node)
    wait_pod_unschedulable(c, ns, name, timeout=60) -> V1Pod  (PodScheduled=False/Unschedulable)
    wait_pod_gone(c, ns, name, timeout=60)                    (404; finalizers done)
    condition(pod, type) -> V1PodCondition | None

Every wait raises WaitTimeout naming what it waited for and the last state it saw.
Nodes carry `e2e.ckpt-preempt.io/pool=<pool>` and pods made with the same `pool` select it, so tests
never land on each other's (or a real cluster's) nodes.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

GPU = "nvidia.com/gpu"
POOL_LABEL = "e2e.ckpt-preempt.io/pool"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GANG_NAME, GANG_TOTAL = "scheduling.ai/gang-name", "scheduling.ai/gang-total"
T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A wait ran out of time; the message says what was awaited and what was last seen."""


@dataclass
class Cluster:
    backend: str
    kubeconfig: Path
    api: client.ApiClient
    version: str = ""
    local: Any = None  # localcluster.LocalCluster when the control plane is ours
    has_kwok: bool = True
    user_tokens: dict[str, str] = field(default_factory=dict)  # user -> bearer token

    @cached_property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @cached_property
    def policy(self) -> client.PolicyV1Api:
        return client.PolicyV1Api(self.api)

    @cached_property
    def coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api)

    @cached_property
    def scheduling(self) -> client.SchedulingV1Api:
        return client.SchedulingV1Api(self.api)

    @cached_property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @cached_property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @cached_property
    def rbac(self) -> client.RbacAuthorizationV1Api:
        return client.RbacAuthorizationV1Api(self.api)

    @cached_property
    def events(self) -> client.EventsV1Api:
        return client.EventsV1Api(self.api)

    @property
    def logs(self) -> dict[str, Path]:
        return dict(self.local.logs) if self.local else {}

    def client_for(self, user: str) -> client.ApiClient:
        """An ApiClient authenticated as `user` (no groups): RBAC grants it nothing by default."""
        if user not in self.user_tokens:
            pytest.skip(f"backend {self.backend!r} has no token for user {user!r}")
        cfg = client.Configuration()
        cfg.host, cfg.verify_ssl = self.api.configuration.host, False
        cfg.api_key = {"authorization": f"Bearer {self.user_tokens[user]}"}
        return client.ApiClient(cfg)

    def restart_scheduler(self, config: dict | None = None) -> None:
        """Run kube-scheduler with this KubeSchedulerConfiguration (dict); None = defaults."""
        if self.local is None or self.local.kwok_only:
            pytest.skip(f"backend {self.backend!r} does not let tests configure kube-scheduler")
        self.local.restart_scheduler(config)


def client_copy(api: client.ApiClient) -> client.ApiClient:
    """Another client with the same credentials and its own connection pool (a second actor)."""
    return client.ApiClient(api.configuration)


def wait_for(what: str, probe: Callable[[], T], *, timeout: float = 60,
             interval: float = 0.2) -> T:
    """Poll `probe` until it returns something truthy, and return that. A probe that returns
    NotYet("what I saw") gets that text into the timeout message."""
    deadline, seen = time.monotonic() + timeout, None
    while True:
        seen = probe()
        if seen and not isinstance(seen, NotYet):
            return seen
        if time.monotonic() >= deadline:
            detail = seen.state if isinstance(seen, NotYet) else seen
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}; last seen: "
                              f"{detail}")
        time.sleep(interval)


@dataclass
class NotYet:
    """Falsy probe result that still carries what was observed, for the timeout message."""
    state: str

    def __bool__(self) -> bool:
        return False


def condition(pod: client.V1Pod, type_: str) -> client.V1PodCondition | None:
    return next((c for c in (pod.status.conditions or []) if c.type == type_), None)


def _pod_state(pod: client.V1Pod) -> str:
    conds = ", ".join(f"{c.type}={c.status}" + (f"/{c.reason}" if c.reason else "")
                      for c in pod.status.conditions or [])
    return (f"phase={pod.status.phase} node={pod.spec.node_name} deleting="
            f"{pod.metadata.deletion_timestamp is not None} conditions=[{conds}]")


def _read_pod(c: Cluster, ns: str, name: str) -> client.V1Pod | None:
    try:
        return c.core.read_namespaced_pod(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def wait_pod_running(c: Cluster, ns: str, name: str, timeout: float = 60) -> client.V1Pod:
    def probe():
        pod = _read_pod(c, ns, name)
        if pod is None:
            return NotYet("pod does not exist")
        ok = pod.status.phase == "Running" and pod.spec.node_name
        return pod if ok else NotYet(_pod_state(pod))
    return wait_for(f"pod {ns}/{name} to be Running", probe, timeout=timeout)


def wait_pod_unschedulable(c: Cluster, ns: str, name: str, timeout: float = 60) -> client.V1Pod:
    def probe():
        pod = _read_pod(c, ns, name)
        if pod is None:
            return NotYet("pod does not exist")
        cond = condition(pod, "PodScheduled")
        ok = cond and cond.status == "False" and cond.reason == "Unschedulable"
        return pod if ok else NotYet(_pod_state(pod))
    return wait_for(f"pod {ns}/{name} to be PodScheduled=False/Unschedulable", probe,
                    timeout=timeout)


def wait_pod_gone(c: Cluster, ns: str, name: str, timeout: float = 60) -> None:
    def probe():
        pod = _read_pod(c, ns, name)
        return True if pod is None else NotYet(_pod_state(pod))
    wait_for(f"pod {ns}/{name} to be gone", probe, timeout=timeout)


def node_body(name: str, *, gpus: int = 8, cpu: str = "64", memory: str = "512Gi",
              pods: int = 110, pool: str | None = None, labels: dict | None = None,
              annotations: dict | None = None, taints: list[dict] | None = None) -> dict:
    """A Node kwok will manage (annotation kwok.x-k8s.io/node=fake) with GPU capacity."""
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods), GPU: str(gpus)}
    all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                  "type": "kwok", **({POOL_LABEL: pool} if pool else {}), **(labels or {})}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": all_labels,
                     "annotations": {KWOK_ANNOTATION: "fake", **(annotations or {})}},
        "spec": {"taints": taints or []},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def create_gpu_nodes(c: Cluster, n: int, *, prefix: str = "gpu", timeout: float = 60,
                     **kwargs: Any) -> list[str]:
    """Create n fake GPU nodes named <prefix>-0..n-1; wait until kwok marks them Ready and the
    node lifecycle controller has lifted the node.kubernetes.io/not-ready taint."""
    if not c.has_kwok:
        pytest.skip(f"backend {c.backend!r} has no kwok to run fake nodes (build the testbin)")
    names = [f"{prefix}-{i}" for i in range(n)]
    for name in names:
        c.core.create_node(node_body(name, **kwargs))

    def ready(name: str):
        node = c.core.read_node(name)
        conds = {x.type: x.status for x in node.status.conditions or []}
        taints = [t.key for t in node.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]
        ok = conds.get("Ready") == "True" and not taints
        return True if ok else NotYet(f"conditions={conds} taints={taints}")
    for name in names:
        wait_for(f"node {name} to be Ready (kwok)", lambda name=name: ready(name), timeout=timeout)
    return names


def delete_nodes(c: Cluster, names: list[str]) -> None:
    for name in names:
        try:
            c.core.delete_node(name)
        except ApiException as e:
            if e.status != 404:
                raise


def ensure_priority_class(c: Cluster, name: str, value: int, *,
                          preemption_policy: str = "PreemptLowerPriority") -> None:
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "preemptionPolicy": preemption_policy}
    try:
        c.scheduling.create_priority_class(body)
    except ApiException as e:
        if e.status != 409:
            raise


def pod_body(name: str, *, gpus: int = 0, cpu: str = "100m", memory: str = "64Mi",
             priority_class: str | None = None, pool: str | None = None,
             gang: str | None = None, gang_total: int | None = None,
             checkpoint: str | None = None, last_checkpoint: str | None = None,
             checkpoint_seconds: int | None = None, labels: dict | None = None,
             annotations: dict | None = None, node_name: str | None = None,
             scheduling_gates: tuple[str, ...] | list[str] = (),
             tolerations: list[dict] | None = None, grace_seconds: int | None = None,
             scheduler_name: str | None = None) -> dict:
    """A pod that kwok can run. Checkpoint fields map to the ckpt-preempt.io/* annotations."""
    requests = {"cpu": cpu, "memory": memory, **({GPU: str(gpus)} if gpus else {})}
    limits = {GPU: str(gpus)} if gpus else {}  # extended resources need limits == requests
    ann = {k: str(v) for k, v in {
        "ckpt-preempt.io/checkpoint": checkpoint,
        "ckpt-preempt.io/last-checkpoint": last_checkpoint,
        "ckpt-preempt.io/checkpoint-seconds": checkpoint_seconds,
    }.items() if v is not None}
    lab = {**({GANG_NAME: gang} if gang else {}),
           **({GANG_TOTAL: str(gang_total)} if gang_total is not None else {}), **(labels or {})}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": requests, "limits": limits}}],
        # kwok nodes may carry its usual taint; tolerate it so tests choose nodes by `pool` only.
        "tolerations": [{"key": KWOK_ANNOTATION, "operator": "Exists", "effect": "NoSchedule"},
                        *(tolerations or [])],
    }
    if pool:
        spec["nodeSelector"] = {POOL_LABEL: pool}
    optional = {"priorityClassName": priority_class, "nodeName": node_name,
                "terminationGracePeriodSeconds": grace_seconds, "schedulerName": scheduler_name,
                "schedulingGates": [{"name": g} for g in scheduling_gates] or None}
    spec.update({k: v for k, v in optional.items() if v is not None})
    meta = {"name": name, "labels": lab, "annotations": {**ann, **(annotations or {})}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def create_pod(c: Cluster, namespace: str, name: str, **kwargs: Any) -> client.V1Pod:
    return c.core.create_namespaced_pod(namespace, pod_body(name, **kwargs))


def create_gang(c: Cluster, namespace: str, gang: str, size: int,
                **kwargs: Any) -> list[client.V1Pod]:
    return [create_pod(c, namespace, f"{gang}-{i}", gang=gang, gang_total=size, **kwargs)
            for i in range(size)]


def evict(c: Cluster, namespace: str, name: str) -> None:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    c.core.create_namespaced_pod_eviction(name, namespace, body)


def wait_event(c: Cluster, namespace: str, reason: str, name: str | None = None,
               timeout: float = 60) -> Any:
    def probe():
        events = c.events.list_namespaced_event(namespace).items
        hit = next((e for e in events if e.reason == reason
                    and (name is None or e.regarding.name == name)), None)
        return hit or NotYet(sorted({f"{e.reason}:{e.regarding.name}" for e in events}))
    return wait_for(f"event {reason} for {name or 'any object'} in {namespace}", probe,
                    timeout=timeout)


def own_local_cluster(workdir: Path, **options: Any):
    """Generator for a module-scoped `cluster` fixture that needs a control plane of its own
    (LocalCluster options such as audit=True or watch_cache=False), instead of the session's:

        @pytest.fixture(scope="module")
        def cluster(tmp_path_factory):
            yield from kube.own_local_cluster(tmp_path_factory.mktemp("c"), audit=True)

    Skips on E2E_CLUSTER=kind/existing and without a testbin (a failure under
    CKPT_REQUIRE_TESTBIN=1, as for the session cluster)."""
    import os

    from kubernetes import config

    from e2e.harness.localcluster import USER_TOKENS, LocalCluster, TestbinMissing, find_testbin

    backend = os.environ.get("E2E_CLUSTER", "local")
    if backend != "local":
        pytest.skip(f"needs the local control plane's own options ({sorted(options)}); "
                    f"E2E_CLUSTER={backend}")
    try:
        bins = find_testbin()
    except TestbinMissing as e:
        if os.environ.get("CKPT_REQUIRE_TESTBIN") == "1":
            pytest.fail(f"{e} [CKPT_REQUIRE_TESTBIN=1, so this is a failure]", pytrace=False)
        pytest.skip(str(e))
    lc = LocalCluster(bins, workdir, **options)
    try:
        lc.start()
        api = config.new_client_from_config(config_file=str(lc.kubeconfig))
        yield Cluster("local", lc.kubeconfig, api, client.VersionApi(api).get_code().git_version,
                      local=lc, user_tokens={u: t for t, u in USER_TOKENS.items()})
    finally:
        lc.stop()


@contextmanager
def temporary_namespace(c: Cluster, prefix: str = "e2e",
                        labels: dict[str, str] | None = None) -> Iterator[str]:
    """A namespace of its own for the block, deleted afterwards (already gone is fine)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    c.core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
    try:
        yield name
    finally:
        try:
            c.core.delete_namespace(name, grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s; a process already gone is fine."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
