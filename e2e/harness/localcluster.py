"""Run a real Kubernetes control plane as local processes: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager and kwok, from the binaries `e2e/testbin/build.sh` caches.

    bins = find_testbin()               # TestbinMissing says how to get it
    with LocalCluster(bins, workdir) as lc:
        lc.kubeconfig                   # admin kubeconfig (token auth, RBAC on)
        lc.restart_scheduler(cfg)       # swap the KubeSchedulerConfiguration (a dict)
        lc.logs                         # {component: log path}

    LocalCluster(bins, workdir, audit=True)         # + an audit log of every write (below)
    LocalCluster(bins, workdir, watch_cache=False)  # kube-apiserver serves watches from etcd
    LocalCluster(bins, workdir, native_workload=True)  # + native PodGroups (NATIVE_WORKLOAD_*)
    LocalCluster(bins, workdir, eviction_request=True)  # + KEP-4563 (EVICTION_REQUEST_*)
        read_audit(lc.audit_log)        # -> [AuditEvent], oldest first
        lc.compact_etcd()               # compact etcd's history up to its current revision

The audit log (JSON lines, policy `AUDIT_POLICY`) is the ground truth of what was written, by
anyone: every eviction with its request body, every ConfigMap write with the stored object,
every write to pods and nodes with its metadata. With the watch cache off, a watch from a
resourceVersion older than an etcd compaction gets a real 410 Gone.

Everything listens on 127.0.0.1 on free ports, so parallel runs do not collide. kwok manages only
nodes annotated `kwok.x-k8s.io/node: fake` and drives their pods through the stages copied from
kwok's module. Nothing here imports `kubernetes`: readiness is probed over plain HTTP(S).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import hashlib
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from e2e.harness.paths import TESTBIN

TESTBIN_SRC = TESTBIN
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")
RECIPE = "1"  # must match RECIPE in testbin/build.sh

ADMIN_TOKEN = "ckpt-preempt-e2e-admin"
# Extra identities for RBAC tests: token -> user (no groups, so only what RBAC grants them).
USER_TOKENS = {"ckpt-preempt-e2e-controller": "ckpt-preempt-controller",
               "ckpt-preempt-e2e-agent": "ckpt-preempt-agent"}
USER_TOKENS["ckpt-preempt-e2e-tenant"] = "ckpt-preempt-tenant"  # trust tests: a pods-only tenant

CONTROLLERS = ",".join([
    "disruption-controller", "garbage-collector-controller", "namespace-controller",
    "job-controller", "replicaset-controller", "deployment-controller",
    "serviceaccount-controller", "serviceaccount-token-controller",
    "pod-garbage-collector-controller",
    # The TaintNodesByCondition admission plugin taints every new node not-ready; this controller
    # lifts the taint once kwok reports Ready (and taints/evicts as in a real cluster otherwise).
    "node-lifecycle-controller", "taint-eviction-controller",
    # DRA: makes a pod's ResourceClaims from its templates, and deletes them after the pod
    "resourceclaim-controller",
])
# First matching rule wins. Reads are never recorded; stage RequestReceived is omitted, so each
# request is one line (ResponseComplete: both timestamps and the response code).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "verbs": ["get", "list", "watch"]},
        {"level": "Request", "verbs": ["create"],
         "resources": [{"group": "", "resources": ["pods/eviction"]}]},
        {"level": "RequestResponse", "resources": [{"group": "", "resources": ["configmaps"]}]},
        {"level": "Metadata", "resources": [{"group": "", "resources": [
            "pods", "pods/status", "pods/binding", "nodes", "nodes/status"]}]},
        {"level": "None"},
    ],
}
# Native gang scheduling (issue 13): the GenericWorkload gate (beta in 1.37, off by default;
# kubernetes@v1.37.2 pkg/features/kube_features.go) enables the Workload/PodGroup storage
# (pkg/registry/scheduling/rest/storage_scheduling.go), kube-scheduler's GangScheduling plugin and
# its PodGroup preemption (pkg/scheduler/framework/preemption/podgrouppreemption.go). Beta APIs
# are not served by default, so the group version is switched on with --runtime-config.
NATIVE_WORKLOAD_GATES = "GenericWorkload=true"
NATIVE_WORKLOAD_API = "scheduling.k8s.io/v1beta1=true"
# KEP-4563 EvictionRequest (alpha in 1.37, off by default): the EvictionRequestAPI gate (listed by
# the v1.37.2 kube-apiserver's and kube-controller-manager's --help) and the alpha group version,
# lifecycle.k8s.io/v1alpha1 (evictionrequests, evictions). docs/eviction-request.md
EVICTION_REQUEST_GATES = "EvictionRequestAPI=true"
EVICTION_REQUEST_API = "lifecycle.k8s.io/v1alpha1=true"
HOW_TO_GET = ("build it with `make testbin` (needs Go >= 1.26), or run against kind with Docker "
              "and E2E_CLUSTER=kind, or against your own cluster with E2E_CLUSTER=existing")


class TestbinMissing(RuntimeError):
    """The control-plane binaries are not built; the message says how to get them."""

    __test__ = False  # not a pytest test class, despite the name


class ComponentFailed(RuntimeError):
    """A component exited or never became ready; the message ends with its log tail."""


def testbin_key() -> str:
    """Same hash build.sh computes over go.mod, go.sum and its recipe version."""
    data = (TESTBIN_SRC / "go.mod").read_bytes() + (TESTBIN_SRC / "go.sum").read_bytes()
    return hashlib.sha256(data + f"recipe={RECIPE}\n".encode()).hexdigest()[:16]


def find_testbin() -> Path:
    """The folder holding the binaries: $CKPT_TESTBIN if set, else the cache entry for go.mod."""
    if os.environ.get("CKPT_TESTBIN"):
        path = Path(os.environ["CKPT_TESTBIN"])
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        root = Path(os.environ.get("CKPT_TESTBIN_ROOT", cache / "ckpt-preempt" / "testbin"))
        path = root / testbin_key()
    missing = [b for b in BINARIES if not (path / b).is_file()]
    if missing or not (path / "stages").is_dir():
        raise TestbinMissing(f"control-plane testbin not found in {path} "
                             f"(missing {', '.join(missing) or 'stages/'}): {HOW_TO_GET}")
    return path


def versions(bins: Path) -> dict[str, str]:
    """KUBERNETES_VERSION, ETCD_VERSION, KWOK_VERSION, GO_VERSION as recorded by build.sh."""
    f = bins / "versions.env"
    lines = f.read_text().splitlines() if f.exists() else []
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _die_with_parent() -> None:
    """In the child before exec: kill it when pytest dies, even by SIGKILL (Linux prctl)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: stop() still cleans up
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # self-signed serving certs
    try:
        with urllib.request.urlopen(req, timeout=3, context=ctx) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, ssl.SSLError) as e:
        return 0, str(e)


class LocalCluster:
    """Starts the five components in `workdir`; use as a context manager (or start()/stop())."""

    def __init__(self, bins: Path, workdir: Path, *, scheduler_config: dict | None = None,
                 kwok_only_for: Path | None = None, audit: bool = False,
                 watch_cache: bool = True, native_workload: bool = False,
                 eviction_request: bool = False):
        """`kwok_only_for`: an existing cluster's kubeconfig; start only kwok against it.
        `audit`: kube-apiserver writes `audit_log` (AUDIT_POLICY). `watch_cache=False`: watches
        and lists are served from etcd, so a compacted resourceVersion answers 410 Gone.
        `native_workload`: GenericWorkload on in apiserver, scheduler and controller-manager,
        and scheduling.k8s.io/v1beta1 (PodGroup, Workload) served. `eviction_request`: the
        EvictionRequestAPI gate on everywhere, and lifecycle.k8s.io/v1alpha1 served."""
        self.bins, self.dir = bins, Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.port = {n: free_port() for n in ("etcd", "peer", "apiserver", "scheduler", "kcm",
                                              "kwok")}
        self.server = f"https://127.0.0.1:{self.port['apiserver']}"
        self.kubeconfig = kwok_only_for or self.dir / "kubeconfig"
        self.kwok_only = kwok_only_for is not None
        self.scheduler_config = scheduler_config
        self.audit_log = self.dir / "audit.jsonl" if audit else None
        self.watch_cache = watch_cache
        wanted = ((native_workload, NATIVE_WORKLOAD_GATES, NATIVE_WORKLOAD_API),
                  (eviction_request, EVICTION_REQUEST_GATES, EVICTION_REQUEST_API))
        gates = [g for on, g, _ in wanted if on]
        apis = [a for on, _, a in wanted if on]
        self.gates = [f"--feature-gates={','.join(gates)}"] if gates else []
        # PodGroups carry a deletion finalizer that this controller removes.
        self.controllers = CONTROLLERS + (",podgroup-protection-controller"
                                          if native_workload else "")
        self.runtime_config = [f"--runtime-config={','.join(apis)}"] if apis else []
        self.etcd_url = f"http://127.0.0.1:{self.port['etcd']}"

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, timeout: float = 120) -> None:
        self._write_files()
        if self.kwok_only:
            self._start_kwok_ready(timeout)
            return
        self._start_etcd()
        self._wait("etcd", f"http://127.0.0.1:{self.port['etcd']}/health", timeout)
        self._start_apiserver()
        self._wait("kube-apiserver", f"{self.server}/readyz", timeout, token=ADMIN_TOKEN)
        self._start_kcm()
        self.restart_scheduler(self.scheduler_config, timeout=timeout)
        self._wait("kube-controller-manager", f"https://127.0.0.1:{self.port['kcm']}/healthz",
                   timeout)
        self._start_kwok_ready(timeout)

    def _start_kwok_ready(self, timeout: float, tries: int = 3) -> None:
        """kwok, started and healthy. Its port was free when chosen, but by the time kwok binds
        it a component's outgoing connection may hold it as its local port (CI saw "bind:
        address already in use"): then it starts again on a fresh port."""
        for attempt in range(tries):
            self._start_kwok()
            try:
                self._wait("kwok", f"http://127.0.0.1:{self.port['kwok']}/healthz", timeout)
                return
            except ComponentFailed as e:
                if "address already in use" not in str(e) or attempt == tries - 1:
                    raise
                self.procs.pop("kwok", None)
                self.port["kwok"] = free_port()

    def stop(self) -> None:
        """SIGTERM every component (newest first), SIGKILL what is still there after 10 s."""
        for name, p in reversed(list(self.procs.items())):
            self._kill(name, p)
        self.procs.clear()

    def _kill(self, name: str, p: subprocess.Popen) -> None:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def restart_scheduler(self, config: dict | None = None, *, timeout: float = 60) -> None:
        """(Re)start kube-scheduler with `config`, a KubeSchedulerConfiguration as a dict (profiles,
        extenders...). Connection and leader-election fields are filled in; None = defaults."""
        if "kube-scheduler" in self.procs:
            self._kill("kube-scheduler", self.procs.pop("kube-scheduler"))
        cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
               **(config or {})}
        cfg["clientConnection"] = {"kubeconfig": str(self.kubeconfig)}
        cfg["leaderElection"] = {"leaderElect": False}
        path = self.dir / "scheduler-config.yaml"
        path.write_text(json.dumps(cfg, indent=1))  # JSON is YAML
        self.scheduler_config = config
        self._spawn("kube-scheduler", f"--config={path}", "--bind-address=127.0.0.1",
                    f"--secure-port={self.port['scheduler']}", f"--cert-dir={self.dir}/sched-certs",
                    "--authentication-tolerate-lookup-failure", "-v=2", *self.gates)
        self._wait("kube-scheduler", f"https://127.0.0.1:{self.port['scheduler']}/healthz", timeout)

    # -- components ------------------------------------------------------------------------------
    def _write_files(self) -> None:
        tokens = [f"{ADMIN_TOKEN},admin,admin,system:masters"]
        tokens += [f"{t},{u},{u}" for t, u in USER_TOKENS.items()]
        (self.dir / "tokens.csv").write_text("\n".join(tokens) + "\n")
        if not self.kwok_only:
            subprocess.run(["openssl", "genrsa", "-out", str(self.dir / "sa.key"), "2048"],
                           check=True, capture_output=True)
            self.kubeconfig.write_text(kubeconfig_text(self.server, ADMIN_TOKEN))
        if self.audit_log is not None:
            (self.dir / "audit-policy.yaml").write_text(json.dumps(AUDIT_POLICY, indent=1))
        stages = sorted(str(p) for p in (self.bins / "stages").glob("*.yaml")
                        if p.name != "node-heartbeat.yaml")  # the -with-lease variant replaces it
        (self.dir / "kwok-stages").write_text(",".join(stages))

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.port['etcd']}"
        peer = f"http://127.0.0.1:{self.port['peer']}"
        self._spawn("etcd", f"--data-dir={self.dir}/etcd", f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}", f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}", f"--initial-cluster=default={peer}",
                    "--unsafe-no-fsync", "--quota-backend-bytes=4294967296")

    def _start_apiserver(self) -> None:
        sa = self.dir / "sa.key"
        extra = [*self.gates, *self.runtime_config]
        extra += [] if self.watch_cache else ["--watch-cache=false"]
        if self.audit_log is not None:  # the log backend blocks: a line is on disk before the
            # response is sent; no rotation, so one file holds the whole run
            extra += [f"--audit-policy-file={self.dir / 'audit-policy.yaml'}",
                      f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
                      "--audit-log-mode=blocking", "--audit-log-maxsize=0"]
        self._spawn(
            "kube-apiserver", f"--etcd-servers=http://127.0.0.1:{self.port['etcd']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port['apiserver']}", f"--cert-dir={self.dir}/apiserver-certs",
            f"--token-auth-file={self.dir}/tokens.csv", "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
            # ServiceAccount admission would reject pods until the namespace's default SA exists.
            "--disable-admission-plugins=ServiceAccount",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa}", f"--service-account-signing-key-file={sa}",
            "--endpoint-reconciler-type=none", "-v=1", *extra)

    def _start_kcm(self) -> None:
        self._spawn("kube-controller-manager", f"--kubeconfig={self.kubeconfig}",
                    "--leader-elect=false", "--bind-address=127.0.0.1",
                    f"--secure-port={self.port['kcm']}", f"--cert-dir={self.dir}/kcm-certs",
                    f"--controllers={self.controllers}",
                    "--use-service-account-credentials=false",
                    f"--service-account-private-key-file={self.dir / 'sa.key'}",
                    "--authentication-tolerate-lookup-failure", "-v=2", *self.gates)

    def _start_kwok(self) -> None:
        self._spawn("kwok", f"--kubeconfig={self.kubeconfig}",
                    f"--config={(self.dir / 'kwok-stages').read_text()}",
                    "--manage-all-nodes=false",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    "--cidr=10.128.0.1/12", "--node-ip=127.0.0.1",
                    "--node-lease-duration-seconds=40",
                    f"--server-address=127.0.0.1:{self.port['kwok']}")

    def _spawn(self, name: str, *args: str) -> None:
        log = self.logs.setdefault(name, self.dir / f"{name}.log")
        with open(log, "ab") as out:
            out.write(f"\n=== {time.strftime('%H:%M:%S')} start {name} {' '.join(args)}\n".encode())
            out.flush()
            # Own process group: teardown signals the whole component and nothing else.
            self.procs[name] = subprocess.Popen([str(self.bins / name), *args], stdout=out,
                                                stderr=subprocess.STDOUT, cwd=self.dir,
                                                start_new_session=True,
                                                preexec_fn=_die_with_parent)

    def _wait(self, name: str, url: str, timeout: float, token: str | None = None) -> None:
        deadline, last = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            proc = self.procs[name]
            if proc.poll() is not None:
                raise ComponentFailed(f"{name} exited with {proc.returncode}\n{self.tail(name)}")
            code, last = _get(url, token)
            if code == 200:
                return
            time.sleep(0.3)
        raise ComponentFailed(f"{name} not ready after {timeout:.0f}s at {url}: {last[:500]}\n"
                              f"{self.tail(name)}")

    def compact_etcd(self) -> int:
        """Compact etcd's key-value history up to its current revision (etcd's JSON gateway:
        /v3/kv/range for the revision, then /v3/kv/compaction, physical so it has happened when
        this returns). Returns that revision; a watch from an older resourceVersion gets 410."""
        probe = {"key": base64.b64encode(b"/registry/ckpt-preempt-compaction-probe").decode()}
        header = _etcd_post(f"{self.etcd_url}/v3/kv/range", probe)["header"]
        revision = int(header["revision"])
        _etcd_post(f"{self.etcd_url}/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def tail(self, name: str, lines: int = 40) -> str:
        text = self.logs[name].read_text(errors="replace") if name in self.logs else ""
        return f"--- last {lines} lines of {self.logs.get(name)} ---\n" + "\n".join(
            text.splitlines()[-lines:])


def _etcd_post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    """One line of the audit log: a write request as the API server saw and answered it."""

    verb: str  # create, update, patch, delete, deletecollection
    resource: str  # pods, configmaps, nodes...
    subresource: str  # "" or eviction, status, binding
    namespace: str
    name: str
    code: int  # the HTTP status the API server answered
    user: str
    user_agent: str
    received: float  # epoch seconds, the API server's clock (microseconds)
    completed: float
    request: dict | None  # the body sent (level Request and up)
    response: dict | None  # the object returned (level RequestResponse)

    @property
    def ok(self) -> bool:
        return 200 <= self.code < 300


def _epoch(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def read_audit(path: Path) -> list[AuditEvent]:
    """Every complete line of the audit log, oldest first (a line still being written is
    skipped)."""
    out = []
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if d.get("stage") != "ResponseComplete":
            continue
        ref = d.get("objectRef") or {}
        out.append(AuditEvent(
            verb=d.get("verb", ""), resource=ref.get("resource", ""),
            subresource=ref.get("subresource", ""), namespace=ref.get("namespace", ""),
            name=ref.get("name", ""), code=int((d.get("responseStatus") or {}).get("code", 0)),
            user=(d.get("user") or {}).get("username", ""), user_agent=d.get("userAgent", ""),
            received=_epoch(d["requestReceivedTimestamp"]),
            completed=_epoch(d["stageTimestamp"]),
            request=d.get("requestObject"), response=d.get("responseObject")))
    return sorted(out, key=lambda e: e.completed)


def kubeconfig_text(server: str, token: str, user: str = "admin") -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
        "clusters": [{"name": "e2e", "cluster": {"server": server,
                                                 "insecure-skip-tls-verify": True}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
    }, indent=1)
