"""Helpers for the chart tests (no tests here): render deploy/helm/ckpt-preempt with the helm the
test bench builds, apply what it renders to the test cluster, and act as the chart's
ServiceAccounts with real tokens (TokenRequest).

    helm()                                  the cached helm binary (skips, or fails in CI)
    render(release, namespace, values)      -> [object dicts], `helm template` output
    find(docs, kind, name=None)             -> the one rendered object of that kind (and name)
    with installed(c, docs): ...            created in order, deleted in reverse afterwards
    with restricted_namespace(c) as ns: ... labelled pod-security enforce=restricted
    sa_token(c, ns, sa, pod=None)           -> a token; bound to `pod` (a V1Pod) when given
    token_client(c, token) / token_kubeconfig(c, token, path)
    controller_command(deployment, kubeconfig, config_file, port)
                                            -> argv: the Deployment's controller, run here
    run_helm(c, home, *args)                -> `helm ARGS` against the test cluster
    http_status(url)                        -> the HTTP status of a GET (0: no answer)
    start_replica(c, ns, deployment, tmp, tag) -> Replica: a controller pod of the live
                                               Deployment, as a process here, once ready
    roll(c, ns, deployment, tmp, tag, old)  -> the new Replica, as a rolling update makes it
    writes(replicas, verb, target)          -> how many such writes their logs show
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from e2e.harness import kube
from e2e.harness.localcluster import free_port
from e2e.harness.paths import REPO

CHART = REPO / "deploy/helm/ckpt-preempt"
HELM_SRC = REPO / "e2e/testbin/helm"
HELM_RECIPE = "1"  # must match RECIPE in testbin/helm/build.sh
# Quicker leader election and retries than the defaults; still the chart's keys and rules.
FAST = {"retrySeconds": 1, "leaseDurationSeconds": 6, "renewDeadlineSeconds": 4,
        "requestTimeoutSeconds": 2}
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/enforce-version": "latest"}


def helm_key() -> str:
    """Same hash testbin/helm/build.sh computes over go.mod, go.sum and its recipe version."""
    data = (HELM_SRC / "go.mod").read_bytes() + (HELM_SRC / "go.sum").read_bytes()
    return hashlib.sha256(data + f"recipe={HELM_RECIPE}\n".encode()).hexdigest()[:16]


def helm() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    root = Path(os.environ.get("CKPT_HELM_ROOT", cache / "ckpt-preempt" / "helm"))
    path = root / helm_key() / "helm"
    if not path.is_file():
        why = f"helm not built ({path}): run `make testbin`"
        if os.environ.get("CKPT_REQUIRE_TESTBIN") == "1":
            pytest.fail(f"{why} [CKPT_REQUIRE_TESTBIN=1, so this is a failure]", pytrace=False)
        pytest.skip(why)
    return path


def template(release: str, namespace: str, values: dict | None = None,
             *args: str) -> subprocess.CompletedProcess:
    """`helm template` with `values` (a values file on stdin) and extra arguments."""
    return subprocess.run([str(helm()), "template", release, str(CHART), "-n", namespace,
                           "-f", "-", *args], input=yaml.safe_dump(values or {}),
                          capture_output=True, text=True, timeout=120)


def render(release: str, namespace: str, values: dict | None = None) -> list[dict]:
    done = template(release, namespace, values)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def find(docs: list[dict], kind: str, name: str | None = None) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind
              and (name is None or d["metadata"]["name"] == name)]
    return doc


@contextmanager
def installed(c: kube.Cluster, docs: list[dict]) -> Iterator[None]:
    """Create every object (the admin's rights), delete them in reverse order afterwards.
    Admission policies are created last and removed first, so nothing else is refused by them
    while it is being set up or torn down."""
    dyn = dynamic.DynamicClient(c.api)
    order = sorted(docs, key=lambda d: d["kind"].startswith("ValidatingAdmissionPolicy"))
    made: list[tuple[object, dict]] = []
    try:
        for d in order:
            res = dyn.resources.get(api_version=d["apiVersion"], kind=d["kind"])
            res.create(body=d, namespace=d["metadata"].get("namespace"))
            made.append((res, d))
        yield
    finally:
        for res, d in reversed(made):
            try:
                res.delete(name=d["metadata"]["name"], namespace=d["metadata"].get("namespace"))
            except ApiException as e:
                if e.status != 404:
                    raise
        if any(d["kind"] == "ValidatingAdmissionPolicyBinding" for _, d in made):
            wait_policies_unloaded(c)


def wait_policies_unloaded(c: kube.Cluster) -> None:
    """A deleted admission policy is still enforced for a moment; the chart's bind every
    namespace but kube-system, so wait until a pod they refuse (one bound with spec.nodeName)
    is admitted again, lest the next test's pods be refused."""
    probe = {"metadata": {"name": "policy-probe"}, "spec": {
        "nodeName": "no-such-node", "containers": [{"name": "c", "image": "busybox"}]}}

    def admitted() -> bool | kube.NotYet:
        try:
            c.core.create_namespaced_pod("default", probe, dry_run="All")
        except ApiException as e:
            return kube.NotYet(f"{e.status} {e.reason}")
        return True
    kube.wait_for("the chart's admission policies to be unloaded", admitted, timeout=30)


def restricted_namespace(c: kube.Cluster):
    """A temporary namespace labelled to enforce Pod Security "restricted"."""
    return kube.temporary_namespace(c, "e2e-r", RESTRICTED)


def sa_token(c: kube.Cluster, namespace: str, sa: str, pod: client.V1Pod | None = None) -> str:
    """A TokenRequest for the ServiceAccount, as the kubelet makes for a pod's projected token
    when `pod` is given (then the API server adds the pod's node to the user's extra)."""
    spec: dict = {"expirationSeconds": 3600}
    if pod is not None:
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod",
                                  "name": pod.metadata.name, "uid": pod.metadata.uid}
    resp = c.core.create_namespaced_service_account_token(sa, namespace, {"spec": spec})
    return resp.status.token


def token_client(c: kube.Cluster, token: str) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = c.api.configuration.host
    cfg.verify_ssl = False
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


def token_kubeconfig(c: kube.Cluster, token: str, path: Path) -> Path:
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
           "clusters": [{"name": "c", "cluster": {"server": c.api.configuration.host,
                                                  "insecure-skip-tls-verify": True}}],
           "users": [{"name": "sa", "user": {"token": token}}],
           "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}]}
    path.write_text(yaml.safe_dump(cfg))
    return path


def pod_from_template(workload: dict, name: str, node: str) -> dict:
    """A Pod as the workload's controller would make it, bound to `node` (the local control
    plane runs no DaemonSet controller)."""
    tpl = workload["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": tpl["metadata"]["labels"]},
            "spec": {**tpl["spec"], "nodeName": node}}


def controller_command(deployment: dict, kubeconfig, config_file, port: int) -> list[str]:
    """The Deployment's command and args, run here: `ckpt-preempt` is this checkout's module,
    --in-cluster (the pod's token file) becomes a kubeconfig holding the same token, the
    config is the ConfigMap's file, and the listen port a free one. `deployment` is a rendered
    manifest or a live object (as a dict in the API's field names)."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["ckpt-preempt"]
    args = list(container["args"])
    assert args[:4] == ["run", "--in-cluster", "--config", "/etc/ckpt-preempt/config.yaml"]
    mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["config"]
    assert args[3] == f"{mount}/config.yaml"
    args[1:2] = ["--kubeconfig", str(kubeconfig)]
    args[args.index("--config") + 1] = str(config_file)
    i = args.index("--listen") + 1
    assert args[i] == f"0.0.0.0:{container['ports'][0]['containerPort']}"
    args[i] = f"127.0.0.1:{port}"
    return [sys.executable, "-m", "ckpt_preempt.controller.app.cli", *args]


def run_helm(c: kube.Cluster, home: Path, *args: str,
             timeout: float = 120) -> subprocess.CompletedProcess:
    """`helm ARGS` with the admin's kubeconfig; helm's cache, config and data under `home`."""
    env = {**os.environ, "KUBECONFIG": str(c.kubeconfig), "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
    return subprocess.run([str(helm()), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


@dataclass
class Replica:
    """One controller pod of the chart's Deployment, as a process here."""

    proc: subprocess.Popen
    port: int
    log: Path

    def holds(self, c: kube.Cluster, ns: str, lease: str) -> bool | kube.NotYet:
        """Whether it holds the Lease (the default identity is host-pid-random)."""
        holder = c.coordination.read_namespaced_lease(lease, ns).spec.holder_identity or ""
        return f"-{self.proc.pid}-" in holder or kube.NotYet(f"holder {holder!r}")


def start_replica(c: kube.Cluster, ns: str, deployment: str, tmp: Path, tag: str) -> Replica:
    """Start what the live Deployment's pod template says, with the live ConfigMap it mounts
    and a token of its ServiceAccount, as the kubelet would; return once /readyz answers."""
    live = c.api.sanitize_for_serialization(c.apps.read_namespaced_deployment(deployment, ns))
    pod = live["spec"]["template"]["spec"]
    volume = {v["name"]: v for v in pod["volumes"]}["config"]["configMap"]["name"]
    config_file = tmp / f"config-{tag}.yaml"
    config_file.write_text(c.core.read_namespaced_config_map(volume, ns).data["config.yaml"])
    kubeconfig = token_kubeconfig(
        c, sa_token(c, ns, pod["serviceAccountName"]), tmp / f"sa-{tag}.kubeconfig")
    port = free_port()
    log = tmp / f"controller-{tag}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(controller_command(live, kubeconfig, config_file, port),
                                cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})

    def ready() -> bool | kube.NotYet:
        if proc.poll() is not None:
            raise AssertionError(f"controller {tag} exited: {log.read_text()[-2000:]}")
        return http_status(f"http://127.0.0.1:{port}/readyz") == 200 or kube.NotYet("no")
    kube.wait_for(f"controller {tag} to be ready (its watch cache synced)", ready, timeout=60)
    return Replica(proc=proc, port=port, log=log)


def roll(c: kube.Cluster, ns: str, deployment: str, tmp: Path, tag: str, old: Replica, *,
         lease: str) -> Replica:
    """A rolling update (maxSurge 1, maxUnavailable 0): the new pod up and ready first, then
    the old one stopped (SIGTERM), and the new one leading."""
    new = start_replica(c, ns, deployment, tmp, tag)
    kube.stop_process(old.proc)
    kube.wait_for(f"controller {tag} to take the Lease", lambda: new.holds(c, ns, lease),
                  timeout=30)
    return new


def writes(replicas: list[Replica], verb: str, target: str) -> int:
    """How many writes of `verb` on `target` the replicas sent: every write passes the one
    choke point (controller/writes/actions.py), which logs an audit line before sending it."""
    n = 0
    for r in replicas:
        for line in r.log.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            n += rec.get("audit") == verb and rec.get("target") == target
    return n
