"""Controller scenario: a plan that waits for its victim's declared end (policies.planner.timing)
instead of evicting it, on a real control plane."""

from __future__ import annotations

import time

import pytest

from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model import annotations as ann
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    exists,
    plan_of,
    pod_events,
    priority_classes,
    rfc3339,
    running_controller,
)

pytestmark = pytest.mark.e2e


def test_a_victim_that_ends_as_declared_is_waited_for_and_never_evicted(
        cluster, namespace, pool, gpu_nodes):
    """The 8-GPU victim declares it ends 35 s after it starts; after 25 s of work, evicting it
    loses 8 × 25 GPU-s, waiting costs the 1-GPU preemptor about a minute: the plan waits
    (victim wait: end). The victim then goes by itself (deleted here, as a finished Job's pod
    would stop running): the preemptor runs, and the victim was never evicted nor asked to
    checkpoint."""
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "finisher", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node, annotations={ann.EXPECTED_END: rfc3339(-35)})
    started = time.time()
    kube.wait_pod_running(cluster, namespace, "finisher")
    time.sleep(max(0.0, 25 - (time.time() - started)))
    with running_controller(cluster, config_for(namespace)):
        kube.create_pod(cluster, namespace, "urgent", gpus=1, pool=pool,
                        priority_class=HIGH_NEVER)

        def waiting():
            rec = plan_of(cluster, namespace, "urgent")
            return rec if rec and rec.state is plan_record.State.DRAINING else kube.NotYet(
                f"plan={rec and rec.state}")
        rec = kube.wait_for("the plan to wait", waiting, timeout=30)
        assert [(v.name, v.drain, v.wait) for v in rec.victims] == [("finisher", False, "end")]
        time.sleep(3)
        assert exists(cluster, namespace, "finisher")  # not evicted while it waits
        cluster.core.delete_namespaced_pod("finisher", namespace, grace_period_seconds=0)
        pod = kube.wait_pod_running(cluster, namespace, "urgent", timeout=90)
    assert pod.spec.node_name == node
    victim_events = [e.reason for e in pod_events(cluster, namespace)
                     if e.involved_object.name == "finisher"]
    assert "Evicted" not in victim_events and "CheckpointRequested" not in victim_events
