"""Helpers for the image tests (no tests here): run a container of the project's image with podman
exactly as a kubelet would run one of the chart's pods, from the rendered pod template.

    image()                                 the built image (skips, or fails in CI, when missing)
    with chart_pod(c, "controller", values) as (template, pod, ns): ...   # installed, as below
    with running(image, template, pod, workdir, extra=[...]) as ctr: ...   # ctr.pid, ctr.logs()
    seconds = wait_ready(ctr, port, started)  # from `podman run` to /readyz 200
    status(pid)                             -> /proc/<pid>/status as a dict (Uid, CapEff, ...)
    mock_nvml_flags(library)                -> podman flags mounting the mock NVML and its profile

`chart_pod` renders a release into a namespace enforcing Pod Security "restricted", installs
what the component's pod needs (the whole chart for the controller; the ServiceAccount, RBAC
and ConfigMap for the extender; hwprobe's objects and a pod bound to `node` for hwprobe, whose
token is then bound to that pod), and yields the pod template and a `KubeletView`: the
ServiceAccount's token, the rendered ConfigMaps, the downward API fields, and the API server
as a pod sees it, with kube-apiserver's self-signed serving certificate as ca.crt.

`podman_args` maps the template's container onto podman flags: command and args (with
`$(VAR)` expanded from the container's env, as the kubelet does), env (values and the downward
API fields given), the merged pod and container securityContext, the memory and CPU limits, and
the volumes: a ConfigMap as a read-only folder of its files, an emptyDir as a tmpfs of its
sizeLimit, and the ServiceAccount token projected where the kubelet projects it, with
KUBERNETES_SERVICE_HOST/PORT set. A pod or container field, securityContext field or volume
kind it does not know fails the test, so the chart cannot gain a setting these tests silently
ignore. Left to the cluster on purpose: placement (node selectors, affinity, tolerations,
priority), image pulling, ports and probes. The network is the host's: the chart's ports are
rendered as free ports of this machine.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from e2e.harness import chart, kube
from e2e.harness.paths import REPO

BUILD = REPO / "e2e" / "testbin" / "images" / "build.sh"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where the kubelet projects the token
# Where the NVIDIA container runtime mounts the driver's libnvidia-ml.so.1 in a Debian-based image:
# the multiarch library folder (NVIDIA/libnvidia-container@63eb489ca6cec79d8da288d6858b2a6d3e0d4edf
# src/nvc_container.c copy_config: /etc/debian_version present -> USR_LIB_MULTIARCH_DIR).
NVML_PATH = f"/usr/lib/{platform.machine()}-linux-gnu/libnvidia-ml.so.1"
# Pod and container fields podman_args applies, or leaves to the cluster on purpose (placement,
# pulling, ports, probes); any other fails the test.
KNOWN_POD = {"serviceAccountName", "priorityClassName", "imagePullSecrets", "securityContext",
             "nodeSelector", "tolerations", "affinity", "topologySpreadConstraints",
             "runtimeClassName", "containers", "volumes", "automountServiceAccountToken",
             "nodeName"}
KNOWN_CONTAINER = {"name", "image", "imagePullPolicy", "command", "args", "env", "ports",
                   "livenessProbe", "readinessProbe", "resources", "securityContext",
                   "volumeMounts"}
# securityContext fields podman_args knows how to apply (pod and container level, merged)
KNOWN_SECURITY = {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "supplementalGroups",
                  "seccompProfile", "allowPrivilegeEscalation", "readOnlyRootFilesystem",
                  "capabilities"}


def _podman_prefix() -> tuple[list[str], list[str]]:
    """(the podman command, its run flags) as build.sh prints them: runc, cgroupfs, ulimits."""
    lines = subprocess.run([str(BUILD), "--podman"], capture_output=True, text=True,
                           check=True).stdout.split()
    i = lines.index("--ulimit")
    return lines[:i], lines[i:]


PODMAN, RUN_FLAGS = _podman_prefix()


def _unavailable(why: str) -> None:
    if os.environ.get("CKPT_REQUIRE_TESTBIN") == "1":
        pytest.fail(f"{why} [CKPT_REQUIRE_TESTBIN=1, so this is a failure]", pytrace=False)
    pytest.skip(why)


def image() -> str:
    """The image `make image` builds; skips (fails in CI) without podman or the image."""
    if shutil.which("podman") is None:
        _unavailable("podman not installed: run `make image`")
    found = subprocess.run([str(BUILD), "--find"], capture_output=True, text=True)
    if found.returncode != 0:
        _unavailable("the image is not built, or not from these sources: run `make image`")
    return found.stdout.strip()


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True, check=check,
                          timeout=timeout)


@dataclass(frozen=True, kw_only=True)
class KubeletView:
    """What the kubelet gives the pod: its ServiceAccount token and the API server's CA, the
    API server's address, the downward API fields, and the ConfigMaps' data by name."""
    token: str
    ca: Path
    api: tuple[str, int]
    fields: dict[str, str] = field(default_factory=dict)
    configmaps: dict[str, dict[str, str]] = field(default_factory=dict)


def _security(spec: dict, container: dict) -> dict:
    merged = {**spec.get("securityContext", {}), **container.get("securityContext", {})}
    unknown = set(merged) - KNOWN_SECURITY
    assert not unknown, f"securityContext fields the image tests do not apply: {unknown}"
    return merged


def _security_flags(sec: dict, image_user: str) -> list[str]:
    flags = []
    user = sec.get("runAsUser")
    if user is not None:
        flags += ["--user", f"{user}:{sec.get('runAsGroup', user)}"]
    if sec.get("runAsNonRoot"):  # the kubelet refuses to start a container that would be root
        uid = user if user is not None else image_user.split(":")[0]
        assert str(uid).isdigit() and int(uid) != 0, f"runAsNonRoot, but the user is {uid!r}"
    groups = [sec["fsGroup"]] if "fsGroup" in sec else []
    for gid in groups + list(sec.get("supplementalGroups", [])):
        flags += ["--group-add", str(gid)]
    seccomp = sec.get("seccompProfile", {}).get("type", "RuntimeDefault")
    assert seccomp == "RuntimeDefault", seccomp  # podman's default profile
    if sec.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    if sec.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]  # only the pod's own volumes
    caps = sec.get("capabilities", {})
    flags += [f"--cap-drop={c.lower()}" for c in caps.get("drop", [])]
    flags += [f"--cap-add={c.lower()}" for c in caps.get("add", [])]
    return flags


def _volume_flags(spec: dict, container: dict, pod: KubeletView, workdir: Path) -> list[str]:
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    flags = []
    for m in container.get("volumeMounts", []):
        v = volumes[m["name"]]
        if "configMap" in v:
            folder = workdir / f"cm-{m['name']}"
            folder.mkdir(mode=0o755)
            for key, text in pod.configmaps[v["configMap"]["name"]].items():
                (folder / key).write_text(text)
                (folder / key).chmod(0o644)
            flags += ["--volume", f"{folder}:{m['mountPath']}:ro"]
        elif "emptyDir" in v:
            size = v["emptyDir"].get("sizeLimit", "64Mi").replace("Mi", "m")
            flags += ["--tmpfs", f"{m['mountPath']}:rw,size={size},mode=1777"]
        else:
            raise AssertionError(f"volume kind the image tests do not provide: {v}")
    if spec.get("automountServiceAccountToken", True):
        sa = workdir / "serviceaccount"
        sa.mkdir(mode=0o755)
        (sa / "token").write_text(pod.token)
        (sa / "namespace").write_text(pod.fields.get("metadata.namespace", "default"))
        shutil.copyfile(pod.ca, sa / "ca.crt")
        for f in sa.iterdir():
            f.chmod(0o644)
        flags += ["--volume", f"{sa}:{SA_DIR}:ro",
                  "--env", f"KUBERNETES_SERVICE_HOST={pod.api[0]}",
                  "--env", f"KUBERNETES_SERVICE_PORT={pod.api[1]}"]
    return flags


def _bytes(quantity: str) -> str:
    """A Kubernetes memory quantity (binary suffixes) in bytes, for podman."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return str(int(quantity.removesuffix(suffix)) * factor)
    assert quantity.isdigit(), f"memory limit the image tests do not parse: {quantity}"
    return quantity


def podman_args(template: dict, pod: KubeletView, workdir: Path, image_user: str) -> list[str]:
    """`podman run` flags and the command line for the template's one container."""
    spec = template["spec"]
    (container,) = spec["containers"]
    unknown = (set(spec) - KNOWN_POD) | (set(container) - KNOWN_CONTAINER)
    assert not unknown, f"pod or container fields the image tests do not apply: {unknown}"
    env = {}
    for e in container.get("env", []):
        env[e["name"]] = (e["value"] if "value" in e
                          else pod.fields[e["valueFrom"]["fieldRef"]["fieldPath"]])
    flags = _security_flags(_security(spec, container), image_user)
    limits = container.get("resources", {}).get("limits", {})
    if "memory" in limits:  # the kubelet's cgroup limit (requests only place the pod)
        flags += ["--memory", _bytes(limits["memory"])]
    if "cpu" in limits:
        cpu = limits["cpu"]
        flags += ["--cpus", str(int(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu))]
    flags += _volume_flags(spec, container, pod, workdir)
    for name, value in env.items():
        flags += ["--env", f"{name}={value}"]
    command = container["command"]
    args = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), a)
            for a in container.get("args", [])]
    return [*flags, "--entrypoint", json.dumps(command), "@IMAGE@", *args]


@dataclass(frozen=True, kw_only=True)
class Container:
    name: str
    pid: int  # the container's first process, as this machine sees it

    def logs(self) -> str:
        done = podman("logs", self.name, check=False)
        return done.stdout + done.stderr


@contextmanager
def running(image_name: str, template: dict, pod: KubeletView, workdir: Path, *,
            extra: tuple[str, ...] = ()) -> Iterator[Container]:
    """The template's container, started detached on the host network; removed afterwards
    (its log is written to `workdir`/container.log first)."""
    user = podman("image", "inspect", "--format", "{{.Config.User}}", image_name).stdout.strip()
    args = podman_args(template, pod, workdir, user)
    args[args.index("@IMAGE@")] = image_name
    name = f"ckpt-e2e-{workdir.name[-20:].strip('-_')}-{os.getpid()}"
    podman("run", "--detach", "--name", name, "--network=host", "--pull=never", *RUN_FLAGS,
           *extra, *args)
    pid = int(podman("inspect", "--format", "{{.State.Pid}}", name).stdout)
    ctr = Container(name=name, pid=pid)
    try:
        yield ctr
    finally:
        (workdir / "container.log").write_text(ctr.logs())
        podman("rm", "--force", "--time", "5", name, check=False)


def mock_nvml_flags(library, profile: str = "h100") -> tuple[str, ...]:
    """The mock libnvidia-ml.so.1 mounted where the NVIDIA container runtime mounts the
    driver's (found by the dynamic loader, no environment variable), its profile beside."""
    path = REPO / "hwprobe" / "profiles" / f"{profile}.yaml"
    return ("--volume", f"{library}:{NVML_PATH}:ro",
            "--volume", f"{path}:/etc/mock-nvml/profile.yaml:ro",
            "--env", "MOCK_NVML_CONFIG=/etc/mock-nvml/profile.yaml")


def status(pid: int) -> dict[str, str]:
    """/proc/<pid>/status of a process, as {field: value}."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def http_get(url: str) -> tuple[int, str]:
    """(status, body); status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError:
        return 0, ""


def wait_ready(ctr: Container, port: int, started: float, timeout: float = 90) -> float:
    """Seconds from `started` (time.monotonic() before `podman run`) to /readyz answering 200."""
    def ready():
        running = podman("inspect", "--format", "{{.State.Running}}", ctr.name).stdout.strip()
        assert running == "true", ctr.logs()[-3000:]
        return http_get(f"http://127.0.0.1:{port}/readyz")[0] == 200 or kube.NotYet("not ready")
    kube.wait_for(f"{ctr.name} to be ready", ready, timeout=timeout, interval=0.05)
    return time.monotonic() - started


COMPONENTS = ("controller", "extender", "hwprobe")


@contextmanager
def chart_pod(c: kube.Cluster, component: str, values: dict, *,
              node: str | None = None) -> Iterator[tuple[dict, KubeletView, str]]:
    """(pod template, KubeletView, namespace) of `component` in a fresh release (above)."""
    assert component in COMPONENTS, component
    release = f"e2e-{uuid.uuid4().hex[:6]}"
    with chart.restricted_namespace(c) as ns:
        docs = chart.render(release, ns, values)
        names = {"extender": f"{release}-ckpt-preempt-extender",
                 "hwprobe": f"{release}-ckpt-preempt-hwprobe"}
        if component == "controller":
            workload, setup = chart.find(docs, "Deployment"), docs
        else:
            kind = "DaemonSet" if component == "hwprobe" else "Deployment"
            workload = chart.find(docs, kind, names[component])
            # its ServiceAccount, RBAC, policy and (extender) the ConfigMap it mounts; the
            # container runs here instead of the workload's own pods
            setup = [d for d in docs if d["kind"] not in ("Deployment", "DaemonSet", "Service")
                     and (d["metadata"]["name"].startswith(names[component])
                          or (component == "extender" and d["kind"] == "ConfigMap"))]
        template = workload["spec"]["template"]
        sa = template["spec"]["serviceAccountName"]
        with chart.installed(c, setup):
            fields = {"metadata.namespace": ns, "metadata.name": f"{release}-0"}
            bound = None
            if component == "hwprobe":
                assert node is not None, "hwprobe runs on a node"
                bound = c.core.create_namespaced_pod(
                    ns, chart.pod_from_template(workload, fields["metadata.name"], node))
                fields["spec.nodeName"] = node
            cert = Path(c.local.dir) / "apiserver-certs" / "apiserver.crt"
            addr, port = c.api.configuration.host.removeprefix("https://").rsplit(":", 1)
            view = KubeletView(
                token=chart.sa_token(c, ns, sa, pod=bound), ca=cert, api=(addr, int(port)),
                fields=fields,
                configmaps={d["metadata"]["name"]: d["data"] for d in docs
                            if d["kind"] == "ConfigMap"})
            yield template, view, ns
