"""The project's image (deploy/Dockerfile, built by `make image`) run for real with podman: the
controller, the extender and hwprobe each start from the image with exactly the command, args,
config file, volumes and securityContext that `helm template` renders (e2e/harness/images.py maps
the rendered pod template onto podman flags), under a token of the chart's ServiceAccount projected
where the kubelet projects it, on the host network against the local control plane.

Each test also checks, from outside, that the running process is what the chart promises: not
root, no capability, no_new_privs, a root filesystem it cannot write. The image holds no shell.
Skipped without podman or the image, unless CKPT_REQUIRE_TESTBIN=1 (CI), where that fails.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.topology import ANNOTATION
from e2e.harness import images, kube
from e2e.harness.controller_run import (
    HIGH_KUBE,
    HIGH_NEVER,
    LOW,
    free_port,
    plans,
    priority_classes,
    reasons,
    wait_run_past,
)
from e2e.harness.extender_run import metric
from e2e.harness.extender_run import scheduler_config as extender_config
from e2e.test_chart_deploy import FAST, GPU_PRESENT
from e2e.test_extender_scheduler import NVLINK_REQUIRED, _topology

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def image() -> str:
    return images.image()


@pytest.fixture
def local(cluster):
    if cluster.local is None or cluster.backend != "local":
        pytest.skip("the image tests mount the local control plane's serving certificate")
    return cluster


def _assert_confined(ctr: images.Container) -> None:
    """What the chart's securityContext promises, seen from outside the container, and that
    its root filesystem refuses a write."""
    st = images.status(ctr.pid)
    assert all(int(u) != 0 for u in st["Uid"].split()), st["Uid"]
    assert all(int(g) != 0 for g in st["Gid"].split()), st["Gid"]
    # capabilities.drop [ALL]: none held, and none to regain (the bounding set is empty too)
    assert all(int(st[k], 16) == 0 for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")), st
    assert st["NoNewPrivs"] == "1", st
    denied = images.podman("exec", ctr.name, "python3", "-c", "open('/opt/x', 'w')", check=False)
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr, denied


@contextmanager
def _started(image: str, template: dict, view: images.KubeletView, port: int, tmp_path,
             **kw) -> Iterator[images.Container]:
    """The container, running, ready and confined."""
    started = time.monotonic()
    with images.running(image, template, view, tmp_path, **kw) as ctr:
        images.wait_ready(ctr, port, started)
        _assert_confined(ctr)
        yield ctr


def test_image_has_no_shell_and_a_numeric_non_root_user(image):
    user = images.podman("image", "inspect", "--format", "{{.Config.User}}", image).stdout
    assert user.strip() == "65532:65532"
    once = ("run", "--rm", "--pull=never", "--network=none", *images.RUN_FLAGS)
    for shell in ("/bin/sh", "/bin/bash", "/bin/dash"):
        done = images.podman(*once, "--entrypoint", shell, image, "-c", "true", check=False)
        assert done.returncode != 0, (shell, done)
    done = images.podman(*once, image, "--version", check=False)
    assert done.returncode == 0 and done.stdout.strip(), done


def test_the_build_leaves_no_dangling_image(image):
    """`make image` names the Dockerfile's build stage (its layers are the next build's cache)
    and prunes what earlier builds left untagged, so no image of this project dangles (each
    build used to leave its 330 MB build stage)."""
    dangling = images.podman("images", "--quiet", "--filter", "dangling=true", "--filter",
                             "label=ckpt-preempt.sources").stdout.split()
    assert dangling == []


def test_controller_container_preempts_with_the_charts_pod_spec(
        local, image, namespace, pool, gpu_nodes, tmp_path):
    priority_classes(local)
    (node,) = gpu_nodes(1)
    kube.create_pod(local, namespace, "victim", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node, checkpoint="on-request", checkpoint_seconds=2)
    victim = kube.wait_pod_running(local, namespace, "victim")
    port = free_port()
    values = {"config": {"namespaces": [namespace], **FAST},
              "controller": {"metricsPort": port}, "hwprobe": {"enabled": False}}
    with images.chart_pod(local, "controller", values) as (template, view, ns), \
            _started(image, template, view, port, tmp_path) as ctr:
        wait_run_past(victim, 5.0)  # past its 2 s checkpoint: the plan drains it
        kube.create_pod(local, namespace, "big", gpus=8, pool=pool,
                        priority_class=HIGH_NEVER)
        pod = kube.wait_pod_running(local, namespace, "big", timeout=120)
        kube.wait_for("the plan to be stored as Done", lambda: [
            r.state for r in plans(local, ns)] == [plan_record.State.DONE], timeout=30)
        log = ctr.logs()
    assert pod.spec.node_name == node
    assert reasons(local, namespace, "victim") == [
        "CheckpointRequested", "CheckpointDeadlineExceeded", "Evicted"]
    assert " 403" not in log and "Forbidden" not in log and "Traceback" not in log, log[-3000:]


def test_extender_container_answers_kube_scheduler(
        local, image, namespace, pool, gpu_nodes, scheduler_config, tmp_path):
    """Filter (an NVLink pod goes where a free domain is sure), prioritize (a pod that fits on
    two nodes) and preempt (a pod that keeps PreemptLowerPriority, on a pool with no 8 free)."""
    priority_classes(local)
    (split,) = gpu_nodes(1, prefix=f"{pool}-split", annotations=_topology([[0, 1, 2, 3],
                                                                          [4, 5, 6, 7]]))
    (whole,) = gpu_nodes(1, prefix=f"{pool}-whole", annotations=_topology([list(range(8))]))
    (spare,) = gpu_nodes(1, prefix=f"{pool}-spare")
    for node, gpus in ((split, 2), (whole, 4), (spare, 2)):
        kube.create_pod(local, namespace, f"busy-{node}", gpus=gpus, pool=pool, node_name=node,
                        priority_class=LOW)
    port = free_port()
    values = {"extender": {"enabled": True, "port": port}}
    with images.chart_pod(local, "extender", values) as (template, view, _), \
            _started(image, template, view, port, tmp_path) as ctr:
        url = f"http://127.0.0.1:{port}/ckpt"
        scheduler_config(extender_config(url))
        kube.create_pod(local, namespace, "nv", gpus=4, pool=pool,
                        annotations=NVLINK_REQUIRED, priority_class=LOW)
        assert kube.wait_pod_running(local, namespace, "nv").spec.node_name == whole
        kube.create_pod(local, namespace, "plain", gpus=1, pool=pool,
                        priority_class=LOW)  # fits on split and on spare
        kube.wait_pod_running(local, namespace, "plain")
        kube.create_pod(local, namespace, "big", gpus=8, pool=pool,
                        priority_class=HIGH_KUBE)
        kube.wait_pod_running(local, namespace, "big", timeout=90)
        served = {verb: metric(url, 'ckpt_preempt_extender_requests_total'
                                    f'{{code="200",verb="{verb}"}}')
                  for verb in ("filter", "prioritize", "preempt")}
        log = ctr.logs()
    assert all(n >= 1 for n in served.values()), (served, log[-3000:])
    assert "Traceback" not in log and " 403" not in log, log[-3000:]


@pytest.mark.mocknvml
def test_hwprobe_container_publishes_with_the_mock_nvml_mounted(
        local, image, gpu_nodes, nvml, tmp_path):
    (node,) = gpu_nodes(1, labels=GPU_PRESENT)
    port = free_port()
    values = {"hwprobe": {"interval": 1, "metricsPort": port}}
    with images.chart_pod(local, "hwprobe", values, node=node) as (template, view, _), \
            _started(image, template, view, port, tmp_path,
                     extra=images.mock_nvml_flags(nvml.library)) as ctr:
            value = local.core.read_node(node).metadata.annotations[ANNOTATION]
            code, body = images.http_get(f"http://127.0.0.1:{port}/metrics")
            log = ctr.logs()
    assert '"gpu_count":8' in value.replace(" ", ""), value
    assert code == 200 and "hwprobe_" in body, body[:500]
    assert "Traceback" not in log, log[-3000:]


def test_pod_spec_mapping_refuses_what_it_cannot_apply(tmp_path):
    """A setting the chart might gain that podman_args does not apply must fail the tests, not
    be dropped: a container would then run looser than the chart says."""
    view = images.KubeletView(token="t", ca=images.REPO / "README.md", api=("127.0.0.1", 1))
    container = {"name": "c", "command": ["ckpt-preempt"], "args": ["run"],
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 65532}}

    def args(spec_extra: dict, ctr_extra: dict) -> list[str]:
        work = tmp_path / str(len(list(tmp_path.iterdir())))
        work.mkdir()
        template = {"spec": {"containers": [{**container, **ctr_extra}], **spec_extra,
                             "automountServiceAccountToken": False}}
        return images.podman_args(template, view, work, "65532:65532")

    flags = args({}, {})
    assert flags[flags.index("--user") + 1] == "65532:65532"
    with pytest.raises(AssertionError, match="hostPID"):
        args({"hostPID": True}, {})
    with pytest.raises(AssertionError, match="lifecycle"):
        args({}, {"lifecycle": {"preStop": {"exec": {"command": ["x"]}}}})
    with pytest.raises(AssertionError, match="privileged"):
        args({}, {"securityContext": {"privileged": True}})
    with pytest.raises(AssertionError, match="runAsNonRoot"):
        args({}, {"securityContext": {"runAsNonRoot": True, "runAsUser": 0}})
    with pytest.raises(AssertionError, match="volume kind"):
        args({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]},
             {"volumeMounts": [{"name": "h", "mountPath": "/host"}]})
    limited = args({}, {"resources": {"limits": {"memory": "256Mi", "cpu": "500m"}}})
    assert limited[limited.index("--memory") + 1] == str(256 * 2**20)
    assert limited[limited.index("--cpus") + 1] == "0.5"
