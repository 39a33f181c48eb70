"""Early warning with the real checkpoint agent: the agent answers a disruption request exactly
as it answers a plan's (its hook runs with the disruption id, it writes checkpoint-done), and a
controller restarted while the node stays cordoned, with no memory of its rounds, asks nobody
again."""

from __future__ import annotations

import sys
import time

import pytest

from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.controller_run import (
    config_for,
    free_port,
    grant_agent,
    reasons,
    running_controller,
    start_agent,
    user_kubeconfig,
)
from e2e.test_early_warning import request_of, wait_request

pytestmark = pytest.mark.e2e


def test_the_agent_acks_a_disruption_request_and_a_restarted_controller_asks_no_more(
        cluster, namespace, pool, gpu_nodes, tmp_path):
    (node,) = gpu_nodes(1)
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
    try:
        time.sleep(2)  # the agent's watch is up
        with running_controller(cluster, config_for(namespace), identity="first"):
            cluster.core.patch_node(node, {"spec": {"unschedulable": True}})
            asked = wait_request(cluster, namespace, "w")
            plan = kube.wait_for("the agent's hook", lambda: marker.exists() and
                                 marker.read_text(), timeout=60)
            assert plan == asked.plan and plan.startswith("disruption/")
            kube.wait_for("the agent's ack", lambda: (cluster.core.read_namespaced_pod(
                "w", namespace).metadata.annotations or {}).get(
                    plan_record.DONE_ANNOTATION) == plan, timeout=30)
        # a new process: no memory of the round; the node is still cordoned
        with running_controller(cluster, config_for(namespace), identity="second") as ctl:
            kube.wait_for("the new leader", lambda: ctl.is_leader, timeout=30)
            time.sleep(4)
        assert request_of(cluster, namespace, "w") == asked
        assert reasons(cluster, namespace, "w") == [Reason.DISRUPTION_CHECKPOINT_REQUESTED]
        live = cluster.core.read_namespaced_pod("w", namespace)
        assert live.metadata.deletion_timestamp is None  # nobody evicted it
    finally:
        agent.terminate()
        agent.wait(10)
        cluster.core.patch_node(node, {"spec": {"unschedulable": False}})
