"""The chart on the local control plane: what `helm template` renders is applied (a release in a
namespace enforcing Pod Security "restricted"), the controller runs with the rendered command,
args and config under a token of the chart's ServiceAccount, and hwprobe publishes under its
own. Together: the chart's RBAC and policies are sufficient, and no broader than they must be.

The local control plane runs no DaemonSet controller and no kubelet (kwok plays the nodes), so
hwprobe's pod is made from the DaemonSet's template as that controller would make it, and the
processes run here, with the tokens the kubelet would project into their pods (TokenRequest).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
import yaml
from kubernetes import client

from ckpt_preempt.hwprobe.report import LABEL_PREFIX
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.gpu_use import ANNOTATION as GPU_USE_ANNOTATION
from ckpt_preempt.policies.model.topology import ANNOTATION
from e2e.harness import chart, kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    REPO,
    free_port,
    plans,
    priority_classes,
    reasons,
    wait_run_past,
)
from e2e.harness.trust import extra_namespace, status_of

pytestmark = pytest.mark.e2e

GPU_PRESENT = {"nvidia.com/gpu.present": "true"}  # what the DaemonSet selects by default
FAST = chart.FAST


def _release() -> str:
    return f"e2e-{uuid.uuid4().hex[:6]}"


def _pods(c: kube.Cluster, ns: str, component: str) -> list[client.V1Pod]:
    return c.core.list_namespaced_pod(
        ns, label_selector=f"app.kubernetes.io/component={component}").items


def test_chart_installs_under_pod_security_restricted(cluster, gpu_nodes, tmp_path):
    (node,) = gpu_nodes(1, labels=GPU_PRESENT)
    sidecar = yaml.safe_load((REPO / "deploy/sidecar-example.yaml").read_text())
    kube.ensure_priority_class(cluster, sidecar["spec"]["priorityClassName"], 100)
    with chart.restricted_namespace(cluster) as ns:
        # (no admission policies: the DaemonSet pod below is bound by hand, with spec.nodeName)
        docs = chart.render(_release(), ns, {"agent": {"namespaces": [ns]},
                                             "admission": {"enabled": False}})
        with chart.installed(cluster, docs):
            deployment = chart.find(docs, "Deployment")
            kube.wait_for("the controller Deployment's pods to be admitted", lambda: len(
                _pods(cluster, ns, "controller")) == deployment["spec"]["replicas"] or kube.NotYet(
                [p.metadata.name for p in _pods(cluster, ns, "controller")]), timeout=60)
            hwprobe = chart.pod_from_template(chart.find(docs, "DaemonSet"), "hwprobe-0", node)
            cluster.core.create_namespaced_pod(ns, hwprobe)
            sidecar["metadata"]["namespace"] = ns
            kube.wait_for("the sidecar example to be admitted", lambda: status_of(
                lambda: cluster.core.create_namespaced_pod(ns, sidecar, dry_run="All")) == 200,
                timeout=20)  # (the new PriorityClass takes a moment to be seen)
            # The namespace does enforce: a pod that only leaves out capabilities.drop is refused.
            loose = chart.pod_from_template(deployment, "loose", node)
            del loose["spec"]["containers"][0]["securityContext"]["capabilities"]
            assert status_of(lambda: cluster.core.create_namespaced_pod(
                ns, loose, dry_run="All")) == 403


def test_chart_controller_preempts_in_its_namespaces_and_nowhere_else(
        cluster, namespace, pool, gpu_nodes, tmp_path):
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "victim", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node, checkpoint="on-request", checkpoint_seconds=2)
    victim = kube.wait_pod_running(cluster, namespace, "victim")
    release = _release()
    with chart.restricted_namespace(cluster) as ns, extra_namespace(cluster) as elsewhere:
        docs = chart.render(release, ns, {"config": {"namespaces": [namespace], **FAST},
                                          "hwprobe": {"enabled": False}})
        with chart.installed(cluster, docs):
            # the chart's admission policies are loaded: a drain request by the admin is refused
            kube.wait_for("the chart's policies to be enforced", lambda: status_of(
                lambda: cluster.core.create_namespaced_pod(namespace, kube.pod_body(
                    "probe", annotations={plan_record.DRAIN_ANNOTATION: "{}"}),
                    dry_run="All")) == 403, timeout=30)
            sa = chart.find(docs, "ServiceAccount")["metadata"]["name"]
            token = chart.sa_token(cluster, ns, sa)
            config_file = tmp_path / "config.yaml"
            config_file.write_text(chart.find(docs, "ConfigMap")["data"]["config.yaml"])
            cmd = chart.controller_command(chart.find(docs, "Deployment"), chart.token_kubeconfig(
                cluster, token, tmp_path / "sa.kubeconfig"), config_file, free_port())
            with open(tmp_path / "controller.log", "wb") as log:
                proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "POD_NAME": f"{release}-0",
                                             "PYTHONPATH": str(REPO)})
            try:
                wait_run_past(victim, 5.0)  # past its 2 s checkpoint: the plan drains it
                kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool,
                                priority_class=HIGH_NEVER)
                pod = kube.wait_pod_running(cluster, namespace, "big", timeout=120)
                kube.wait_for("the plan to be stored as Done", lambda: [
                    r.state for r in plans(cluster, ns)] == [plan_record.State.DONE], timeout=30)
                assert proc.poll() is None, (tmp_path / "controller.log").read_text()[-3000:]
            finally:
                proc.terminate()
                proc.wait(timeout=20)
            log_text = (tmp_path / "controller.log").read_text()
            assert pod.spec.node_name == node
            assert reasons(cluster, namespace, "victim") == [
                "CheckpointRequested", "CheckpointDeadlineExceeded", "Evicted"]
            assert " 403" not in log_text and "Forbidden" not in log_text, log_text[-3000:]

            # Outside config.namespaces the same token may read pods but change nothing.
            sa_core = client.CoreV1Api(chart.token_client(cluster, token))
            kube.create_pod(cluster, elsewhere, "other", pool=pool)
            assert status_of(lambda: sa_core.read_namespaced_pod("other", elsewhere)) == 200
            eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="other"))
            assert status_of(lambda: sa_core.create_namespaced_pod_eviction(
                "other", elsewhere, eviction)) == 403
            assert status_of(lambda: sa_core.patch_namespaced_pod(
                "other", elsewhere, {"metadata": {"labels": {"x": "y"}}})) == 403
            assert status_of(lambda: sa_core.patch_namespaced_pod_status(
                "other", elsewhere, {"status": {"nominatedNodeName": node}})) == 403
            events = client.EventsV1Api(chart.token_client(cluster, token))
            assert status_of(lambda: events.create_namespaced_event(elsewhere, {
                "metadata": {"name": "x"}, "eventTime": "2026-01-01T00:00:00.000000Z",
                "reportingController": "x", "reportingInstance": "x", "action": "x",
                "reason": "x", "type": "Normal"})) == 403
            assert status_of(lambda: sa_core.list_namespaced_secret(ns)) == 403


@pytest.mark.mocknvml
def test_chart_hwprobe_publishes_on_its_own_node_only(cluster, gpu_nodes, nvml, tmp_path):
    own, other = gpu_nodes(2, labels=GPU_PRESENT)
    with chart.restricted_namespace(cluster) as ns:
        docs = [d for d in chart.render(_release(), ns)
                if d["metadata"]["name"].endswith(("-hwprobe", "-hwprobe-own-node"))]
        with chart.installed(cluster, docs):
            daemonset = chart.find(docs, "DaemonSet")
            pod = cluster.core.create_namespaced_pod(
                ns, chart.pod_from_template(daemonset, "hwprobe-own", own))
            sa = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
            token = chart.sa_token(cluster, ns, sa, pod=pod)
            as_hwprobe = client.CoreV1Api(chart.token_client(cluster, token))
            kube.wait_for("the own-node policy to be enforced", lambda: status_of(
                lambda: as_hwprobe.patch_node(other, {"metadata": {"annotations": {
                    ANNOTATION: "{}"}}}, dry_run="All")) == 403, timeout=30)

            kubeconfig = str(chart.token_kubeconfig(cluster, token, tmp_path / "kc"))
            done = nvml.run("h100", "publish", "--node", own, "--kubeconfig", kubeconfig)
            assert done.returncode == 0, done.stderr
            assert ANNOTATION in cluster.core.read_node(own).metadata.annotations
            done = nvml.run("h100", "publish", "--node", other, "--kubeconfig", kubeconfig)
            assert done.returncode == 2 and "Traceback" not in done.stderr
            assert done.stderr.strip().splitlines()[-1] == \
                f"hwprobe: node {other}: API answered 403 Forbidden"
            assert ANNOTATION not in (cluster.core.read_node(other).metadata.annotations or {})

            def patch(node, meta=None, spec=None, api=as_hwprobe):
                body = {"metadata": meta or {}, **({"spec": spec} if spec else {})}
                return status_of(lambda: api.patch_node(node, body))
            assert patch(own, {"labels": {f"{LABEL_PREFIX}extra": "1"}}) == 200
            assert patch(own, {"labels": {f"{LABEL_PREFIX}extra": None}}) == 200
            assert patch(own, {"labels": {"team": "a"}}) == 403
            assert patch(own, {"labels": {kube.POOL_LABEL: None}}) == 403
            assert patch(own, {"annotations": {"other.example.com/x": "1"}}) == 403
            assert patch(own, {"annotations": {GPU_USE_ANNOTATION: "{}"}}) == 200
            assert patch(own, {"annotations": {GPU_USE_ANNOTATION: None}}) == 200
            assert patch(other, {"annotations": {GPU_USE_ANNOTATION: "{}"}}) == 403
            assert patch(own, spec={"unschedulable": True}) == 403
            # a token of the same ServiceAccount bound to no pod names no node: refused
            unbound = client.CoreV1Api(chart.token_client(
                cluster, chart.sa_token(cluster, ns, sa)))
            assert patch(own, {"annotations": {ANNOTATION: "{}"}}, api=unbound) == 403
            # RBAC: get and patch nodes, nothing else
            assert status_of(lambda: as_hwprobe.list_node()) == 403
            assert status_of(lambda: as_hwprobe.read_namespaced_pod("hwprobe-own", ns)) == 403
            assert status_of(lambda: as_hwprobe.delete_node(other, dry_run="All")) == 403


def _hwprobe_command(daemonset: dict, node: str, port: int) -> list[str]:
    """The DaemonSet's command and args as the kubelet would run them on `node`: $(NODE_NAME)
    expanded from the downward API, `hwprobe` as this checkout's module, a free metrics port."""
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["hwprobe"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    args = [node if a == "$(NODE_NAME)" else a for a in container["args"]]
    i = args.index("--metrics-port") + 1
    assert args[i] == str(container["ports"][0]["containerPort"])
    args[i] = str(port)
    return [sys.executable, "-m", "ckpt_preempt.hwprobe.cli", *args]


@pytest.mark.mocknvml
def test_chart_hwprobe_daemonset_command_serves_and_publishes(cluster, gpu_nodes, nvml,
                                                                tmp_path):
    (node,) = gpu_nodes(1, labels=GPU_PRESENT)
    with chart.restricted_namespace(cluster) as ns:
        docs = [d for d in chart.render(_release(), ns, {"hwprobe": {"interval": 1}})
                if d["metadata"]["name"].endswith(("-hwprobe", "-hwprobe-own-node"))]
        with chart.installed(cluster, docs):
            daemonset = chart.find(docs, "DaemonSet")
            pod = cluster.core.create_namespaced_pod(
                ns, chart.pod_from_template(daemonset, "hwprobe-0", node))
            sa = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
            kubeconfig = chart.token_kubeconfig(
                cluster, chart.sa_token(cluster, ns, sa, pod=pod), tmp_path / "kc")
            port = free_port()
            env = {**nvml.env("h100"), "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(REPO)}
            with open(tmp_path / "hwprobe.log", "wb") as log:
                proc = subprocess.Popen(_hwprobe_command(daemonset, node, port), cwd=REPO,
                                        env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                kube.wait_for("hwprobe serve to be ready", lambda: chart.http_status(
                    f"http://127.0.0.1:{port}/readyz") == 200, timeout=60)
                assert chart.http_status(f"http://127.0.0.1:{port}/healthz") == 200
                value = cluster.core.read_node(node).metadata.annotations[ANNOTATION]
                assert '"gpu_count":8' in value.replace(" ", "")
            finally:
                proc.terminate()
                proc.wait(timeout=20)
