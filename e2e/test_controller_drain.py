"""Controller scenarios: the agent's acknowledgement, a restart mid-drain, two replicas."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt_sdk import EXIT_CHECKPOINTED
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    REPO,
    config_for,
    exists,
    free_port,
    grant_agent,
    plan_of,
    pod_events,
    priority_classes,
    running_controller,
    start_agent,
    start_controller_process,
    user_kubeconfig,
)

pytestmark = pytest.mark.e2e




def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_plan_done(cluster, namespace, name, timeout=60):
    """The stored plan for the preemptor, once it reads Done."""
    def done():
        rec = plan_of(cluster, namespace, name)
        return rec if rec and rec.state is plan_record.State.DONE else kube.NotYet(
            f"plan={rec and rec.state}")
    return kube.wait_for("the plan to reach Done", done, timeout=timeout)


def test_scenario3_on_request_victim_is_evicted_only_after_its_agent_acks(
        cluster, namespace, pool, gpu_nodes, tmp_path):
    """The victim runs the example training loop with the agent (RBAC: its own pod only) as a
    process. Order, by Event resourceVersion: CheckpointRequested → CheckpointCompleted →
    Evicted, and the ack came from the workload's own save. The loop keeps training after it
    acks; the eviction's SIGTERM (sent here, as a kubelet would) makes it save and exit 75
    (``EXIT_CHECKPOINTED``)."""
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "trainer", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node, checkpoint="on-request", checkpoint_seconds=20)
    started = time.time()
    kube.wait_pod_running(cluster, namespace, "trainer")
    grant_agent(cluster, namespace, "trainer")
    kubeconfig = user_kubeconfig(cluster, "ckpt-preempt-agent", tmp_path / "agent.kubeconfig")
    port = free_port()
    run = tmp_path / "run"
    train = subprocess.Popen(
        [sys.executable, str(REPO / "examples/tiny_training/train.py"), "--dir", str(run),
         "--steps", "1000000", "--every", "1000000", "--pidfile", str(tmp_path / "train.pid"),
         "--agent-url", f"http://127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    agent = start_agent(cluster, kubeconfig, namespace, "trainer", tmp_path,
                        "--signal-pidfile", str(tmp_path / "train.pid"), port=port)
    try:
        kube.wait_for("the agent's local endpoint", lambda: _listening(port), timeout=30)
        time.sleep(max(0.0, 22 - (time.time() - started)))  # draining (20 s) beats 22 s of work
        with running_controller(cluster, config_for(namespace)):
            t0 = time.monotonic()
            kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool,
                            priority_class=HIGH_NEVER)
            kube.wait_pod_running(cluster, namespace, "big", timeout=90)
            took = time.monotonic() - t0
        still_training = train.poll() is None  # acked, then trained on until evicted
        train.send_signal(signal.SIGTERM)  # what the kubelet sends an evicted pod
        out, _ = train.communicate(timeout=10)
    finally:
        kube.stop_process(agent)
        if train.poll() is None:
            train.kill()
    assert still_training, out
    assert train.returncode == EXIT_CHECKPOINTED, out
    assert "checkpoint on request" in out and "evicted: saved at step" in out, out
    state = json.loads((run / "checkpoint.json").read_text())
    assert state["step"] > 0
    order = [e.reason for e in pod_events(cluster, namespace)
             if e.involved_object.name == "trainer"]
    assert order == ["CheckpointRequested", "CheckpointCompleted", "Evicted"], order
    assert took < 15, f"took {took:.1f}s: the ack did not cut the 20 s deadline short"

    # resume: the loop picks up from the checkpoint it saved on request
    again = subprocess.run(
        [sys.executable, str(REPO / "examples/tiny_training/train.py"), "--dir", str(run),
         "--steps", str(state["step"] + 5), "--agent-url", "http://127.0.0.1:1"],
        capture_output=True, text=True, timeout=30)
    assert f"resumed from step {state['step']}" in again.stdout, again.stdout


def test_scenario6_controller_killed_mid_drain_resumes_without_double_or_unplanned_eviction(
        cluster, namespace, pool, gpu_nodes, tmp_path):
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    kube.create_pod(cluster, namespace, "victim", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[0], checkpoint="on-request", checkpoint_seconds=8)
    kube.create_pod(cluster, namespace, "other", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[1])
    kube.wait_pod_running(cluster, namespace, "victim")
    kube.wait_pod_running(cluster, namespace, "other")
    time.sleep(10)  # both have run 10 s: draining `victim` (8 s) is the cheapest choice
    cfg = config_for(namespace)
    first = start_controller_process(cluster, cfg, tmp_path, identity="first", log_name="c1.log")
    try:
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)

        def draining():
            rec = plan_of(cluster, namespace, "big")
            asked = plan_record.DRAIN_ANNOTATION in (cluster.core.read_namespaced_pod(
                "victim", namespace).metadata.annotations or {})
            return rec if rec and rec.state is plan_record.State.DRAINING and asked else \
                kube.NotYet(f"plan={rec and rec.state} asked={asked}")
        before = kube.wait_for("the plan to be Draining", draining, timeout=60)
    finally:
        first.kill()  # SIGKILL: no cleanup, no lease release
        first.wait()
    assert exists(cluster, namespace, "victim") and exists(cluster, namespace, "other")
    second = start_controller_process(cluster, cfg, tmp_path, identity="second",
                                      log_name="c2.log")
    try:
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
        # Binding and the controller's write of Done race; stop only once Done is persisted.
        after = wait_plan_done(cluster, namespace, "big")
    finally:
        kube.stop_process(second)
    assert after.id == before.id and after.state is plan_record.State.DONE
    assert [v.name for v in after.victims] == ["victim"]
    assert pod.spec.node_name == nodes[0]
    assert exists(cluster, namespace, "other")
    evicted = [e.involved_object.name for e in pod_events(cluster, namespace)
               if e.reason == "Evicted"]
    assert evicted == ["victim"]
    plans = [e for e in pod_events(cluster, namespace) if e.reason == "PreemptionPlanned"]
    assert len(plans) == 1


def test_two_replicas_only_the_lease_holder_acts(cluster, namespace, pool, gpu_nodes):
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "low", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node)
    kube.wait_pod_running(cluster, namespace, "low")
    cfg = config_for(namespace)
    ports = {"a": free_port(), "b": free_port()}
    with running_controller(cluster, cfg, identity="a", listen=("127.0.0.1", ports["a"])) as a, \
            running_controller(cluster, cfg, identity="b", listen=("127.0.0.1", ports["b"])) as b:
        kube.wait_for("a leader", lambda: a.is_leader or b.is_leader, timeout=30)
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        kube.wait_pod_running(cluster, namespace, "big", timeout=90)
        assert a.is_leader != b.is_leader
        leader, follower = (a, b) if a.is_leader else (b, a)
        lease = cluster.coordination.read_namespaced_lease(cfg.lease_name, namespace)
        assert lease.spec.holder_identity == leader.identity

        def scrape(c, path):
            url = f"http://127.0.0.1:{ports[c.identity]}{path}"
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode()
        for c in (leader, follower):
            assert scrape(c, "/healthz")[0] == 200 and scrape(c, "/readyz")[0] == 200
        lead_metrics, follow_metrics = scrape(leader, "/metrics")[1], scrape(follower,
                                                                              "/metrics")[1]
        assert 'ckpt_preempt_plans_total{outcome="planned"} 1.0' in lead_metrics
        assert "ckpt_preempt_is_leader 1.0" in lead_metrics
        assert "ckpt_preempt_victims_total 1.0" in lead_metrics
        assert 'outcome="planned"' not in follow_metrics
        assert "ckpt_preempt_is_leader 0.0" in follow_metrics
    assert [e.reason for e in pod_events(cluster, namespace)
            if e.involved_object.name == "low"] == ["Evicted"]


def test_scenario6_killed_while_evicting_resumes_and_evicts_once(cluster, namespace, pool,
                                                                 gpu_nodes, tmp_path):
    """A PDB holds the plan in Evicting (429s); the controller is killed there, the PDB is
    lifted, a new process finishes the same plan with one eviction."""
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "held", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node, labels={"app": "held"})
    cluster.policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "held"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "held"}}}})
    kube.wait_pod_running(cluster, namespace, "held")
    kube.wait_for("the PDB to be observed", lambda: cluster.policy.
                  read_namespaced_pod_disruption_budget("held", namespace).status.
                  observed_generation, timeout=30)
    cfg = config_for(namespace, eviction_timeout_seconds=120.0)
    first = start_controller_process(cluster, cfg, tmp_path, identity="first", log_name="c1.log")
    try:
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        kube.wait_event(cluster, namespace, "EvictionBlocked", name="big", timeout=60)
        rec = plan_of(cluster, namespace, "big")
        assert rec.state is plan_record.State.EVICTING
    finally:
        first.kill()
        first.wait()
    cluster.policy.delete_namespaced_pod_disruption_budget("held", namespace)
    second = start_controller_process(cluster, cfg, tmp_path, identity="second",
                                      log_name="c2.log")
    try:
        kube.wait_pod_running(cluster, namespace, "big", timeout=90)
        after = wait_plan_done(cluster, namespace, "big")
    finally:
        kube.stop_process(second)
    assert after.id == rec.id and after.state is plan_record.State.DONE
    evicted = [e.involved_object.name for e in pod_events(cluster, namespace)
               if e.reason == "Evicted"]
    assert evicted == ["held"]
