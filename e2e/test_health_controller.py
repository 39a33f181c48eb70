"""GPU health end to end: the controller on the local control plane reads a real Prometheus
(e2e/harness/promstack.py) that scrapes a fixture exporter speaking dcgm-exporter's format, whose
values these tests change while the controller runs.

- a node whose GPU reports XID 79 is never chosen for a preemptor, although its victim would
  lose the least work;
- a rising NVLink CRC error rate makes the node degraded: the checkpointing pod there gets a
  drain request that its agent answers, and nobody is evicted;
- Prometheus stopped mid-run: every node is unknown, the source-up gauge is 0 and /readyz says
  why, and the preemptor refused while the GPU was known to fail is now planned.
"""

from __future__ import annotations

import sys
import threading
import time
import urllib.request

import pytest

from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.controller.health.health import HEALTH_PLAN_PREFIX
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.health import Health
from e2e.harness import kube, promstack
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    LOWER,
    config_for,
    exists,
    free_port,
    grant_agent,
    priority_classes,
    reasons,
    rfc3339,
    running_controller,
    start_agent,
    user_kubeconfig,
)
from e2e.harness.promstack import DcgmFixtureExporter

pytestmark = pytest.mark.e2e
dcgm_exporter, prometheus = promstack.dcgm_exporter, promstack.prometheus

XID = "DCGM_FI_DEV_XID_ERRORS"
CRC = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
SCRAPE_SECONDS = 0.5


def health_config(namespace: str, url: str, **kw):
    return config_for(namespace, prometheus_url=url, health_refresh_seconds=0.5,
                      health_query_timeout_seconds=2, health_window_seconds=4, **kw)


def wait_state(ctl, node: str, state: Health, timeout: float = 30) -> None:
    def probe():
        got = ctl.health.report().node(node)
        return got.state is state or kube.NotYet(f"{got.state}: {got.reasons}")
    kube.wait_for(f"{node} {state}", probe, timeout=timeout)


def test_a_node_whose_gpu_reports_xid_79_is_never_chosen(cluster, namespace, pool, gpu_nodes,
                                                          dcgm_exporter, prometheus):
    """As in scenario 1, `fresh` (checkpointed just now) is the cheapest victim, and without
    health the plan takes its node; its GPU 3 has fallen off the bus, so `stale` goes."""
    priority_classes(cluster)
    sick, well = gpu_nodes(2)
    for name in (sick, well):
        dcgm_exporter.add_node(name, gpus=8)
    dcgm_exporter.set(XID, 79, gpu=3, hostname=sick)
    prom = prometheus([dcgm_exporter.target], SCRAPE_SECONDS)
    kube.create_pod(cluster, namespace, "fresh", gpus=8, pool=pool, priority_class=LOW,
                    node_name=sick)
    kube.create_pod(cluster, namespace, "stale", gpus=8, pool=pool, priority_class=LOWER,
                    node_name=well)
    for name in ("fresh", "stale"):
        kube.wait_pod_running(cluster, namespace, name)
    time.sleep(3)
    cluster.core.patch_namespaced_pod("fresh", namespace, {"metadata": {"annotations": {
        "ckpt-preempt.io/last-checkpoint": rfc3339()}}})
    with running_controller(cluster, health_config(namespace, prom.url)) as ctl:
        wait_state(ctl, sick, Health.FAILING)
        wait_state(ctl, well, Health.HEALTHY)
        assert ctl.health.report().node(sick).reasons == (
            "gpu 3: XID 79 (GPU has fallen off the bus): failing",)
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
    assert pod.spec.node_name == well
    assert exists(cluster, namespace, "fresh") and not exists(cluster, namespace, "stale")
    assert reasons(cluster, namespace, "stale") == ["Evicted"]


def test_rising_nvlink_crc_errors_ask_the_agent_to_checkpoint_and_evict_nobody(
        cluster, namespace, pool, gpu_nodes, prometheus, tmp_path):
    (node,) = gpu_nodes(1)
    # dcgm-exporter after 4.5.3-4.8.2 writes `hostname`; the controller reads either
    with DcgmFixtureExporter(hostname_label="hostname") as exporter:
        exporter.add_node(node, gpus=8)
        prom = prometheus([exporter.target], SCRAPE_SECONDS)
        kube.create_pod(cluster, namespace, "w", gpus=8, pool=pool, node_name=node,
                        checkpoint="on-request", checkpoint_seconds=30)
        kube.wait_pod_running(cluster, namespace, "w")
        grant_agent(cluster, namespace, "w")
        kubeconfig = user_kubeconfig(cluster, "ckpt-preempt-agent", tmp_path / "kc")
        marker = tmp_path / "saved"
        agent = start_agent(
            cluster, kubeconfig, namespace, "w", tmp_path, "--exec",
            f"{sys.executable} -c \"import os,pathlib; pathlib.Path('{marker}')"
            ".write_text(os.environ['CKPT_PREEMPT_PLAN'])\"", port=free_port())
        stop = threading.Event()
        try:
            with running_controller(cluster, health_config(namespace, prom.url)) as ctl:
                wait_state(ctl, node, Health.HEALTHY)
                time.sleep(1)  # the agent's watch is up; the controller saw the node healthy

                def rise() -> None:  # 20 flow-control CRC errors a second on GPU 0
                    while not stop.wait(0.25):
                        exporter.add(CRC, 5, gpu=0, hostname=node)
                threading.Thread(target=rise, daemon=True).start()
                wait_state(ctl, node, Health.DEGRADED)
                plan = kube.wait_for("the agent's hook", lambda: marker.exists() and
                                     marker.read_text(), timeout=60)
                assert plan.startswith(HEALTH_PLAN_PREFIX)
                kube.wait_for("the agent's ack", lambda: (cluster.core.read_namespaced_pod(
                    "w", namespace).metadata.annotations or {}).get(
                        plan_record.DONE_ANNOTATION) == plan, timeout=30)
                time.sleep(3)  # still degraded: nothing more happens
            live = cluster.core.read_namespaced_pod("w", namespace)
            assert live.metadata.deletion_timestamp is None
            assert reasons(cluster, namespace, "w") == [Reason.HEALTH_CHECKPOINT_REQUESTED]
            assert "Evicted" not in reasons(cluster, namespace)
            assert ctl.metrics.registry.get_sample_value(
                "ckpt_preempt_health_checkpoint_requests_total") == 1
        finally:
            stop.set()
            agent.terminate()
            agent.wait(10)


def test_prometheus_stopped_mid_run_is_unknown_and_refuses_nothing(
        cluster, namespace, pool, gpu_nodes, dcgm_exporter, prometheus):
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    dcgm_exporter.add_node(node, gpus=8)
    dcgm_exporter.set(XID, 79, gpu=0, hostname=node)
    prom = prometheus([dcgm_exporter.target], SCRAPE_SECONDS)
    kube.create_pod(cluster, namespace, "victim", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node)
    kube.wait_pod_running(cluster, namespace, "victim")
    port = free_port()
    with running_controller(cluster, health_config(namespace, prom.url),
                            listen=("127.0.0.1", port)) as ctl:
        wait_state(ctl, node, Health.FAILING)
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        kube.wait_for("the refusal", lambda: "PreemptionNotPossible" in reasons(
            cluster, namespace, "big"), timeout=30)
        assert exists(cluster, namespace, "victim")

        prom.stop()
        kube.wait_for("health unknown", lambda: not ctl.health.report().source_up, timeout=30)
        assert ctl.metrics.registry.get_sample_value("ckpt_preempt_health_source_up") == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            body = r.read().decode()
        assert r.status == 200 and f"health: unknown (prometheus {prom.url} unreadable" in body
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
    assert pod.spec.node_name == node
    assert reasons(cluster, namespace, "victim") == ["Evicted"]  # by the plan, nothing else
    assert Reason.HEALTH_CHECKPOINT_REQUESTED not in reasons(cluster, namespace)
