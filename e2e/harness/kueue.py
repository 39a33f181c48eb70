"""A real Kueue (v0.17.0's manager, built by e2e/testbin/kueue/build.sh) on a local control plane of
its own, and helpers for tests that watch Kueue preempt batch Jobs on kwok GPU nodes.

    cluster = next(kueue_cluster(workdir))        # module fixture: yield from kueue_cluster(...)
    with running_kueue(cluster, workdir) as kq:   # CRDs, manager, webhooks; stops it afterwards
        kq.tenant_namespace(name)                 # a namespace Kueue manages (TENANT_LABEL)
        q = kq.make_queue(ns, gpus=8, pool=pool)  # ResourceFlavor (nodeLabels: the pool),
                                # ClusterQueue (withinClusterQueue: LowerPriority), LocalQueue
                                # in ns -> Queue(flavor, cluster_queue, local_queue, namespace)
        kq.make_priority_class("low", 100)        # a WorkloadPriorityClass
        kq.make_job(ns, "a", queue=q, gpus=4, priority_class="low", grace_seconds=8)
        kq.workload_for(ns, "a")                  # its Workload (dict) or None
        kq.wait_admitted(ns, "a"); kq.wait_evicted(ns, "a")   # -> the Workload
        kq.set_boost(ns, "a", 100)                # kueue.x-k8s.io/priority-boost (None removes)
        kq.job_pods(ns, "a"); kq.job(ns, "a")
    # and in e2e.harness.kueue_pods:
    watch_termination(c, ns, pod)                 # -> Termination: how long it stayed Terminating
    ContainerProcess(c, ns, pod, argv, log)       # a local process as the pod's container

Why a control plane of its own (`kueue_cluster`): Kueue's CRDs and cluster-wide webhooks stay out
of the session's cluster, and its kwok runs different pod stages: kwok's stage/pod/fast
pod-complete.yaml (a Running pod owned by a Job goes Succeeded at once) is left out, so Job pods
run until deleted, and kwok's fast pod-delete.yaml (delete at once) is replaced by
e2e/manifests/kueue/pod-delete-after-grace.yaml: a terminating pod is deleted at its
deletionTimestamp, i.e. after the grace period the deleter gave it (the Job controller gives each
pod its own terminationGracePeriodSeconds). A pod's "container" can also be a local process
(`ContainerProcess`): SIGTERM when the pod starts terminating, and the pod is deleted (grace 0, as
a kubelet does when the containers have stopped) as soon as the process exits.

How the manager runs: as a process with the admin kubeconfig, a Configuration
(config.kueue.x-k8s.io/v1beta2, written per run) with internal cert management off, leader
election off, the batch/job integration only, manageJobsWithoutQueueName false, Jobs managed only
in namespaces labelled TENANT_LABEL, the webhook server, metrics and health probes on free
127.0.0.1 ports, and FEATURE_GATES. Its webhook server uses a certificate for 127.0.0.1 from
openssl; the webhook configurations are Kueue's own (config/components/webhook/manifests.yaml,
read from the build cache), keeping the kueue.x-k8s.io and batch ones, each pointed at
https://127.0.0.1:<port><its path> with our CA; the batch ones are scoped to TENANT_LABEL
namespaces. The five CRDs upstream converts by webhook (config/components/crd/kustomization.yaml,
patches/webhook_in_*.yaml) get the same URL's /convert.

With internal cert management off, v0.17.0 reads the metrics server's certificate from the fixed
path /etc/kueue/metrics/certs/tls.{crt,key} and exits if it is missing (cmd/kueue/main.go,
metricsCertPath). The host's /etc is not touched: the manager runs in a private mount namespace
(`unshare --mount`, plus `--user --map-root-user` when not root) where a read-only overlay over
/etc adds that folder. Without that ability (no root, no unprivileged user namespaces) the
fixture skips, or fails under CKPT_REQUIRE_TESTBIN=1.

The manager's log is `kq.log` (in the fixture's tmp folder, also listed in `cluster.logs` as
"kueue"); every wait here that times out puts its last lines into the message.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from ckpt_preempt.policies.kueue import boost
from e2e.harness import kube
from e2e.harness.eviction_gate_run import make_certs
from e2e.harness.localcluster import (
    USER_TOKENS,
    ComponentFailed,
    LocalCluster,
    TestbinMissing,
    _die_with_parent,
    find_testbin,
    free_port,
)
from e2e.harness.paths import REPO, TESTBIN

KUEUE_SRC = TESTBIN / "kueue"
RECIPE = "1"  # must match RECIPE in testbin/kueue/build.sh
GRACE_STAGE = REPO / "e2e" / "manifests" / "kueue" / "pod-delete-after-grace.yaml"
# kwok's stages (copied by testbin/build.sh) that the Kueue bench leaves out; see the docstring.
DROPPED_STAGES = ("pod-complete.yaml", "pod-delete.yaml", "node-heartbeat.yaml")

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"  # the storage version in v0.17.0's CRDs
# Label and annotation keys: sigs.k8s.io/kueue@v0.17.0 pkg/controller/constants/constants.go
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
# The Workload annotation Kueue reads with its PriorityBoost gate on (policies/kueue/boost.py says
# what it means and where Kueue reads it).
BOOST_ANNOTATION = boost.ANNOTATION
# pkg/features/kube_features.go: PriorityBoost is alpha (off by default) since 0.17.
# VisibilityOnDemand (beta, on) would start a second API server on a fixed port (8082): off.
FEATURE_GATES = {"PriorityBoost": True, "VisibilityOnDemand": False}
TENANT_LABEL = "e2e.ckpt-preempt.io/kueue"  # namespaces whose Jobs this Kueue manages
METRICS_CERT_DIR = "kueue/metrics/certs"  # under /etc: cmd/kueue/main.go metricsCertPath
# CRDs whose versions upstream converts with the manager's /convert webhook
# (config/components/crd/kustomization.yaml: patches/webhook_in_*.yaml)
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
HOW_TO_GET = "build it with `make testbin` (or e2e/testbin/kueue/build.sh; needs Go >= 1.26)"


class KueueMissing(RuntimeError):
    """Kueue's binary (or a way to run it here) is missing; the message says how to get it."""


@dataclass(frozen=True)
class KueueBuild:
    dir: Path

    @property
    def binary(self) -> Path:
        return self.dir / "kueue"

    @property
    def crds(self) -> list[Path]:
        return sorted((self.dir / "crd").glob("*.yaml"))

    @property
    def webhook_manifests(self) -> Path:
        return self.dir / "webhook-manifests.yaml"

    @property
    def version(self) -> str:
        return (self.dir / "version").read_text().strip()


def kueue_key() -> str:
    """The hash testbin/kueue/build.sh (cached_go_build.sh) computes over go.mod, go.sum, recipe."""
    data = (KUEUE_SRC / "go.mod").read_bytes() + (KUEUE_SRC / "go.sum").read_bytes()
    return hashlib.sha256(data + f"recipe={RECIPE}\n".encode()).hexdigest()[:16]


def find_kueue() -> KueueBuild:
    """$CKPT_KUEUE (a folder like the cache entry) if set, else the cache entry for go.mod."""
    if os.environ.get("CKPT_KUEUE"):
        path = Path(os.environ["CKPT_KUEUE"])
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        root = Path(os.environ.get("CKPT_KUEUE_ROOT", cache / "ckpt-preempt" / "kueue"))
        path = root / kueue_key()
    build = KueueBuild(path)
    if not (build.binary.is_file() and build.crds and build.webhook_manifests.is_file()):
        raise KueueMissing(f"Kueue not found in {path}: {HOW_TO_GET}")
    return build


def _unavailable(why: str) -> None:
    if os.environ.get("CKPT_REQUIRE_TESTBIN") == "1":
        pytest.fail(f"{why} [CKPT_REQUIRE_TESTBIN=1, so this is a failure]", pytrace=False)
    pytest.skip(why)


# -- the control plane ----------------------------------------------------------------------------
class KueueBench(LocalCluster):
    """A LocalCluster whose kwok keeps Job pods Running and honours grace periods (docstring)."""

    def _write_files(self) -> None:
        # LocalCluster._write_files lists kwok's --config files in `kwok-stages`; rewrite it.
        super()._write_files()
        if self.kwok_only:
            return
        stages = sorted(str(p) for p in (self.bins / "stages").glob("*.yaml")
                        if p.name not in DROPPED_STAGES)
        (self.dir / "kwok-stages").write_text(",".join([*stages, str(GRACE_STAGE)]))


def kueue_cluster(workdir: Path) -> Iterator[kube.Cluster]:
    """Generator for a module-scoped `cluster` fixture: a KueueBench of its own.

        @pytest.fixture(scope="module")
        def cluster(tmp_path_factory):
            yield from kueue.kueue_cluster(tmp_path_factory.mktemp("kueue-bench"))

    Skips on E2E_CLUSTER=kind/existing (webhooks by 127.0.0.1 URL need our own API server) and
    without the testbin or Kueue (failures under CKPT_REQUIRE_TESTBIN=1)."""
    backend = os.environ.get("E2E_CLUSTER", "local")
    if backend != "local":
        pytest.skip(f"the Kueue bench needs the local control plane; E2E_CLUSTER={backend}")
    try:
        bins = find_testbin()
        find_kueue()
    except (TestbinMissing, KueueMissing) as e:
        _unavailable(str(e))
    lc = KueueBench(bins, workdir)
    try:
        lc.start()
        api = config.new_client_from_config(config_file=str(lc.kubeconfig))
        yield kube.Cluster("local", lc.kubeconfig, api,
                           client.VersionApi(api).get_code().git_version, local=lc,
                           user_tokens={u: t for t, u in USER_TOKENS.items()})
    finally:
        lc.stop()


# -- the manager ----------------------------------------------------------------------------------
def manager_configuration(*, webhook_port: int, metrics_port: int, health_port: int,
                          cert_dir: Path, feature_gates: dict[str, bool]) -> dict:
    """Kueue's Configuration (sigs.k8s.io/kueue@v0.17.0 apis/config/v1beta2/
    configuration_types.go; decoded strictly, pkg/config/config.go fromFile)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": "kueue-system",
        "manageJobsWithoutQueueName": False,
        # Must not match kube-system or `namespace` (pkg/config/validation.go).
        "managedJobsNamespaceSelector": {"matchLabels": {TENANT_LABEL: "true"}},
        "internalCertManagement": {"enable": False},
        "leaderElection": {"leaderElect": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": dict(feature_gates),
    }


def webhook_configurations(manifests: str, url: str, ca: bytes, name: str) -> list[dict]:
    """Kueue's webhook configurations, service references turned into `url` + path."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc or doc.get("kind") not in ("MutatingWebhookConfiguration",
                                              "ValidatingWebhookConfiguration"):
            continue
        kept = []
        for hook in doc.get("webhooks", []):
            groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
            if not groups & {GROUP, "batch"}:
                continue  # other integrations (pods, JobSet, Ray...) are off here
            hook = copy.deepcopy(hook)
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}",
                                    "caBundle": base64.b64encode(ca).decode()}
            if "batch" in groups:
                hook["namespaceSelector"] = {"matchLabels": {TENANT_LABEL: "true"}}
            kept.append(hook)
        kind = "mutating" if doc["kind"].startswith("Mutating") else "validating"
        out.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": doc["kind"],
                    "metadata": {"name": f"{name}-{kind}"}, "webhooks": kept})
    return out


def _unshare_prefix() -> list[str]:
    """How to get a private mount namespace here (module docstring), or KueueMissing."""
    if shutil.which("unshare") is None:
        raise KueueMissing("`unshare` (util-linux) is needed to give Kueue its metrics "
                           "certificate path")
    prefix = ["unshare", "--mount"] if os.geteuid() == 0 else [
        "unshare", "--user", "--map-root-user", "--mount"]
    probe = subprocess.run([*prefix, "--", "sh", "-c", "mount -t tmpfs none /mnt"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        raise KueueMissing(
            "Kueue v0.17.0 without internal cert management reads /etc/kueue/metrics/certs; the "
            f"bench mounts it in a private mount namespace, which failed here ({' '.join(prefix)}:"
            f" {probe.stderr.strip()[:200]}): run as root or allow unprivileged user namespaces")
    return prefix


# `sh -c` body: overlay our folder on /etc (read-only, two lower layers), then become Kueue.
_OVERLAY = 'mount -t overlay overlay -o "lowerdir=$1:/etc" /etc || exit 97; shift; exec "$@"'


@dataclass(frozen=True)
class Queue:
    flavor: str
    cluster_queue: str
    local_queue: str
    namespace: str


@dataclass
class RunningKueue:
    """The manager as a process, and the helpers tests use (module docstring)."""

    c: kube.Cluster
    build: KueueBuild
    workdir: Path
    webhook_port: int = 0
    metrics_port: int = 0
    health_port: int = 0
    proc: subprocess.Popen | None = None
    ca: bytes = b""
    name: str = field(default_factory=lambda: f"e2e-kueue-{uuid.uuid4().hex[:6]}")
    feature_gates: dict[str, bool] = field(default_factory=lambda: dict(FEATURE_GATES))

    @property
    def log(self) -> Path:
        return self.workdir / "kueue.log"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.c.api)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- last {lines} lines of {self.log} ---\n" + "\n".join(
            text.splitlines()[-lines:])

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, timeout: float = 120) -> None:
        prefix = _unshare_prefix()
        certs = self.workdir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        cert, key, self.ca = make_certs(certs)
        etc = self.workdir / "etc-overlay"
        (etc / METRICS_CERT_DIR).mkdir(parents=True, exist_ok=True)
        for f in (cert, key):
            shutil.copy(f, etc / METRICS_CERT_DIR / f.name)
        if not _exists(self.c.core.read_namespace, "kueue-system"):  # cfg.namespace
            self.c.core.create_namespace({"metadata": {"name": "kueue-system"}})
        if self.c.local is not None:
            self.c.local.logs["kueue"] = self.log  # listed with the components' logs
        for attempt in range(3):
            # A port free when chosen may be taken before Kueue binds it (see LocalCluster's
            # kwok): then again on fresh ports.
            self.webhook_port, self.metrics_port, self.health_port = (
                free_port() for _ in range(3))
            self._install_crds()  # their conversion webhook URL names the port
            self._spawn(prefix, etc, certs)
            try:
                self._wait_ready(timeout)
                break
            except ComponentFailed as e:
                if "address already in use" not in str(e) or attempt == 2:
                    raise
                self.stop()
        self._register_webhooks()
        self._wait_webhooks(timeout)

    def _spawn(self, prefix: list[str], etc: Path, certs: Path) -> None:
        cfg = manager_configuration(webhook_port=self.webhook_port,
                                    metrics_port=self.metrics_port,
                                    health_port=self.health_port, cert_dir=certs,
                                    feature_gates=self.feature_gates)
        (self.workdir / "config.yaml").write_text(json.dumps(cfg, indent=1))  # JSON is YAML
        argv = [*prefix, "--", "sh", "-c", _OVERLAY, "sh", str(etc), str(self.build.binary),
                f"--config={self.workdir / 'config.yaml'}", "--zap-log-level=2"]
        with open(self.log, "ab") as out:
            out.write(f"\n=== {time.strftime('%H:%M:%S')} start {' '.join(argv)}\n".encode())
            out.flush()
            # One process (unshare and sh exec) in its own group; it dies with pytest.
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir,
                start_new_session=True, preexec_fn=_die_with_parent,
                env={**os.environ, "KUBECONFIG": str(self.c.kubeconfig)})

    def stop(self) -> None:
        admission = client.AdmissionregistrationV1Api(self.c.api)
        for delete, kind in ((admission.delete_mutating_webhook_configuration, "mutating"),
                             (admission.delete_validating_webhook_configuration, "validating")):
            with contextlib.suppress(ApiException):
                delete(f"{self.name}-{kind}")
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def _install_crds(self) -> None:
        ext = client.ApiextensionsV1Api(self.c.api)
        names = []
        for path in self.build.crds:
            crd = yaml.safe_load(path.read_text())
            if crd["spec"]["names"]["plural"] in CONVERTED:
                crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "clientConfig": {"url": f"{self.url}/convert",
                                     "caBundle": base64.b64encode(self.ca).decode()},
                    "conversionReviewVersions": ["v1"]}}
            try:
                ext.create_custom_resource_definition(crd)
            except ApiException as e:
                if e.status != 409:
                    raise
                crd["metadata"]["resourceVersion"] = ext.read_custom_resource_definition(
                    crd["metadata"]["name"]).metadata.resource_version
                ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)
            names.append(crd["metadata"]["name"])

        def established(name: str):
            conds = ext.read_custom_resource_definition(name).status.conditions or []
            ok = any(x.type == "Established" and x.status == "True" for x in conds)
            return True if ok else kube.NotYet(str([(x.type, x.status) for x in conds]))
        for name in names:
            kube.wait_for(f"CRD {name} to be Established", lambda n=name: established(n),
                          timeout=60)

    def _wait_ready(self, timeout: float) -> None:
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        deadline, last = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ComponentFailed(f"kueue exited with {self.proc.returncode}\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=3) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError) as e:
                last = str(e)
            time.sleep(0.3)
        raise ComponentFailed(f"kueue not ready after {timeout:.0f}s at {url}: {last}\n"
                              f"{self.tail()}")

    def _register_webhooks(self) -> None:
        admission = client.AdmissionregistrationV1Api(self.c.api)
        for body in webhook_configurations(self.build.webhook_manifests.read_text(), self.url,
                                           self.ca, self.name):
            if body["kind"].startswith("Mutating"):
                admission.create_mutating_webhook_configuration(body)
            else:
                admission.create_validating_webhook_configuration(body)

    def _wait_webhooks(self, timeout: float) -> None:
        """The API server reads webhook configurations from an informer: wait until a dry-run
        Job is suspended by Kueue's mutating Job webhook and a dry-run Workload with a bad
        priority-boost is refused by the validating Workload webhook (which also shows that the
        PriorityBoost gate is on)."""
        ns = "kueue-e2e-probe"
        if not _exists(self.c.core.read_namespace, ns):
            self.c.core.create_namespace({"metadata": {"name": ns,
                                                       "labels": {TENANT_LABEL: "true"}}})
        job = job_body("probe", queue="probe", gpus=0)
        job["spec"]["suspend"] = False

        def suspended():
            made = self.c.batch.create_namespaced_job(ns, job, dry_run="All")
            return bool(made.spec.suspend) or kube.NotYet(f"suspend={made.spec.suspend}")
        self.wait("Kueue's Job webhook to be called", suspended, timeout=timeout)
        workload = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
                    "metadata": {"name": "probe", "annotations": {BOOST_ANNOTATION: "x"}},
                    "spec": {"queueName": "probe", "podSets": [{
                        "name": "main", "count": 1, "template": job["spec"]["template"]}]}}

        def refused():
            try:
                self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "workloads",
                                                            workload, dry_run="All")
            except ApiException as e:
                if 400 <= e.status < 500 and BOOST_ANNOTATION in (e.body or ""):
                    return True
                return kube.NotYet(f"{e.status}: {(e.body or '')[:300]}")
            return kube.NotYet("a Workload with priority-boost 'x' was accepted")
        self.wait("Kueue's Workload webhook to refuse a bad priority-boost", refused,
                  timeout=timeout)

    # -- waits that show Kueue's log --------------------------------------------------------------
    def wait(self, what: str, probe, *, timeout: float = 90, interval: float = 0.25):
        if self.proc is not None and self.proc.poll() is not None:
            raise ComponentFailed(f"kueue exited with {self.proc.returncode}\n{self.tail()}")
        try:
            return kube.wait_for(what, probe, timeout=timeout, interval=interval)
        except kube.WaitTimeout as e:
            raise kube.WaitTimeout(f"{e}\n{self.tail()}") from None

    # -- objects ----------------------------------------------------------------------------------
    def tenant_namespace(self, name: str) -> str:
        self.c.core.create_namespace({"metadata": {"name": name,
                                                   "labels": {TENANT_LABEL: "true"}}})
        return name

    def _create(self, plural: str, body: dict, namespace: str | None = None) -> dict:
        body = {"apiVersion": f"{GROUP}/{VERSION}", **body}
        if namespace is None:
            return self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural,
                                                           body)

    def make_priority_class(self, name: str, value: int) -> None:
        """A WorkloadPriorityClass (apis/kueue/v1beta2/workloadpriorityclass_types.go); one that
        already exists with this name is kept."""
        try:
            self._create("workloadpriorityclasses", {"kind": "WorkloadPriorityClass",
                                                     "metadata": {"name": name}, "value": value})
        except ApiException as e:
            if e.status != 409:
                raise

    def make_queue(self, namespace: str, *, gpus: int, pool: str | None = None,
                   within_cluster_queue: str = "LowerPriority", name: str | None = None) -> Queue:
        """A ResourceFlavor whose nodeLabels select `pool` (Kueue adds them to admitted pods'
        nodeSelector), a ClusterQueue with `gpus` of nvidia.com/gpu (cpu and memory plentiful:
        Kueue admits only workloads whose every requested resource is covered) and the given
        withinClusterQueue preemption, and a LocalQueue in `namespace`."""
        name = name or f"q{uuid.uuid4().hex[:6]}"
        labels = {kube.POOL_LABEL: pool} if pool else {}
        self._create("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": name},
                                         "spec": {"nodeLabels": labels}})
        self._create("clusterqueues", {
            "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {},
                     "preemption": {"withinClusterQueue": within_cluster_queue},
                     "resourceGroups": [{
                         "coveredResources": ["cpu", "memory", kube.GPU],
                         "flavors": [{"name": name, "resources": [
                             {"name": "cpu", "nominalQuota": "1000"},
                             {"name": "memory", "nominalQuota": "10Ti"},
                             {"name": kube.GPU, "nominalQuota": str(gpus)}]}]}]}})
        self._create("localqueues", {"kind": "LocalQueue",
                                     "metadata": {"name": name, "namespace": namespace},
                                     "spec": {"clusterQueue": name}}, namespace)
        queue = Queue(flavor=name, cluster_queue=name, local_queue=name, namespace=namespace)

        def active():
            cq = self.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
            lq = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace,
                                                          "localqueues", name)
            ok = _condition(cq, "Active") and _condition(lq, "Active")
            return True if ok else kube.NotYet(
                f"cq={_conds(cq)} lq={_conds(lq)}")
        self.wait(f"ClusterQueue and LocalQueue {name} to be Active", active, timeout=60)
        return queue

    def make_job(self, namespace: str, name: str, *, queue: Queue | str, gpus: int,
                 priority_class: str | None = None, grace_seconds: int = 30,
                 parallelism: int = 1, **kwargs: Any) -> client.V1Job:
        """A batch/v1 Job for Kueue (job_body); returns the created Job."""
        q = queue.local_queue if isinstance(queue, Queue) else queue
        body = job_body(name, queue=q, gpus=gpus, priority_class=priority_class,
                        grace_seconds=grace_seconds, parallelism=parallelism, **kwargs)
        return self.c.batch.create_namespaced_job(namespace, body)

    def job(self, namespace: str, name: str) -> client.V1Job:
        return self.c.batch.read_namespaced_job(name, namespace)

    def job_pods(self, namespace: str, name: str) -> list[client.V1Pod]:
        return self.c.core.list_namespaced_pod(
            namespace, label_selector=f"batch.kubernetes.io/job-name={name}").items

    def workload_for(self, namespace: str, job: str) -> dict | None:
        """The Workload Kueue made for Job `job` (found by its owner reference), or None."""
        uid = self.job(namespace, job).metadata.uid
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                          "workloads")["items"]
        return next((w for w in items if any(
            o.get("uid") == uid for o in w["metadata"].get("ownerReferences", []))), None)

    def wait_workload(self, namespace: str, job: str, type_: str, *, reason: str | None = None,
                      timeout: float = 90) -> dict:
        """Wait until Job `job`'s Workload has condition `type_`=True (with `reason`)."""
        def probe():
            wl = self.workload_for(namespace, job)
            if wl is None:
                return kube.NotYet("no Workload yet")
            cond = _condition(wl, type_)
            ok = cond and (reason is None or cond.get("reason") == reason)
            return wl if ok else kube.NotYet(_conds(wl))
        want = f"{type_}=True" + (f"/{reason}" if reason else "")
        return self.wait(f"the Workload of Job {namespace}/{job} to be {want}", probe,
                         timeout=timeout)

    def wait_admitted(self, namespace: str, job: str, timeout: float = 90) -> dict:
        return self.wait_workload(namespace, job, "Admitted", timeout=timeout)

    def wait_evicted(self, namespace: str, job: str, reason: str = "Preempted",
                     timeout: float = 90) -> dict:
        """Evicted=True with `reason` (apis/kueue/v1beta2/workload_types.go: "Preempted" for a
        preemption; the Preempted condition then says InClusterQueue, InCohort...)."""
        return self.wait_workload(namespace, job, "Evicted", reason=reason, timeout=timeout)

    def set_boost(self, namespace: str, job: str, value: int | None) -> dict:
        """Set (or with None remove) the priority-boost annotation on Job `job`'s Workload."""
        wl = self.workload_for(namespace, job)
        assert wl is not None, f"Job {namespace}/{job} has no Workload"
        patch = {"metadata": {"annotations": {
            BOOST_ANNOTATION: None if value is None else str(value)}}}
        return self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "workloads", wl["metadata"]["name"], patch,
            _content_type="application/merge-patch+json")


def _exists(read, *args) -> bool:
    try:
        read(*args)
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


def _condition(obj: dict, type_: str) -> dict | None:
    cond = next((x for x in (obj.get("status") or {}).get("conditions") or []
                 if x["type"] == type_), None)
    return cond if cond and cond["status"] == "True" else None


def _conds(obj: dict) -> str:
    return ", ".join(f"{x['type']}={x['status']}/{x.get('reason', '')}"
                     for x in (obj.get("status") or {}).get("conditions") or [])


def condition(obj: dict, type_: str) -> dict | None:
    """The condition `type_` of a Kueue object (dict) if it is True, else None."""
    return _condition(obj, type_)


def job_body(name: str, *, queue: str, gpus: int, priority_class: str | None = None,
             grace_seconds: int = 30, parallelism: int = 1, cpu: str = "100m",
             memory: str = "64Mi", labels: dict | None = None,
             annotations: dict | None = None, pod_labels: dict | None = None,
             pod_annotations: dict | None = None) -> dict:
    """A suspended batch/v1 Job for LocalQueue `queue` (label kueue.x-k8s.io/queue-name), with
    `parallelism` pods of `gpus` GPUs each and terminationGracePeriodSeconds `grace_seconds`.
    The kwok toleration lets its pods onto tainted kwok nodes; Kueue sets their nodeSelector."""
    requests = {"cpu": cpu, "memory": memory, **({kube.GPU: str(gpus)} if gpus else {})}
    job_labels = {QUEUE_LABEL: queue, **(labels or {})}
    if priority_class:
        job_labels[PRIORITY_CLASS_LABEL] = priority_class
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": job_labels, "annotations": annotations or {}},
        "spec": {
            "suspend": True, "parallelism": parallelism, "completions": parallelism,
            "template": {
                "metadata": {"labels": pod_labels or {}, "annotations": pod_annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": grace_seconds,
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": requests,
                                                  "limits": {kube.GPU: str(gpus)} if gpus
                                                  else {}}}],
                    "tolerations": [{"key": kube.KWOK_ANNOTATION, "operator": "Exists",
                                     "effect": "NoSchedule"}],
                }}}}


@contextlib.contextmanager
def running_kueue(c: kube.Cluster, workdir: Path, *,
                  feature_gates: dict[str, bool] | None = None) -> Iterator[RunningKueue]:
    """Kueue's CRDs, the manager, its webhooks; all stopped/removed afterwards (the CRDs stay:
    the control plane is the module's own). `feature_gates` replace FEATURE_GATES."""
    if c.local is None or c.local.kwok_only:
        pytest.skip("the Kueue bench needs the local control plane (kueue_cluster)")
    try:
        build = find_kueue()
        _unshare_prefix()
    except KueueMissing as e:
        _unavailable(str(e))
    workdir.mkdir(parents=True, exist_ok=True)
    kq = RunningKueue(c, build, workdir)
    if feature_gates is not None:
        kq.feature_gates = dict(feature_gates)
    try:
        kq.start()
        yield kq
    finally:
        kq.stop()
