"""Other projects' conventions on a real control plane: a pod of another scheduler is left
alone (never a victim, never planned for), and Volcano's volcano.sh/last-checkpoint-time orders
victims like our own last-checkpoint."""

from __future__ import annotations

import time

import pytest

from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    exists,
    priority_classes,
    reasons,
    rfc3339,
    running_controller,
)

pytestmark = pytest.mark.e2e

OTHER_SCHEDULER = "volcano"  # no such scheduler runs here: its pods stay as we make them
VOLCANO_CHECKPOINT = "volcano.sh/last-checkpoint-time"


def test_a_pod_of_another_scheduler_is_left_alone(cluster, namespace, pool, gpu_nodes):
    """`theirs` (another scheduler's, bound by nodeName) just checkpointed, so by lost work it
    is the cheaper victim; `ours` never did. The controller must take `ours`. `stray`, a
    high-priority pod of the other scheduler marked Unschedulable as that scheduler would, is
    never planned for."""
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    kube.create_pod(cluster, namespace, "theirs", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[0], scheduler_name=OTHER_SCHEDULER)
    kube.create_pod(cluster, namespace, "ours", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[1])
    kube.wait_pod_running(cluster, namespace, "theirs")
    kube.wait_pod_running(cluster, namespace, "ours")
    time.sleep(3)  # `ours` has lost 3 s of work; `theirs` checkpoints now
    cluster.core.patch_namespaced_pod("theirs", namespace, {"metadata": {"annotations": {
        "ckpt-preempt.io/last-checkpoint": rfc3339()}}})
    kube.create_pod(cluster, namespace, "stray", gpus=8, pool=pool, priority_class=HIGH_NEVER,
                    scheduler_name=OTHER_SCHEDULER)
    cluster.core.patch_namespaced_pod_status("stray", namespace, {"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "set by the test, as the other scheduler would"}]}})
    with running_controller(cluster, config_for(namespace)):
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
        time.sleep(2)  # passes after the plan: `stray` is still not planned for
    assert pod.spec.node_name == nodes[1]
    assert reasons(cluster, namespace, "ours") == ["Evicted"]
    assert exists(cluster, namespace, "theirs") and reasons(cluster, namespace, "theirs") == []
    assert reasons(cluster, namespace, "stray") == []


def test_volcano_checkpoint_time_picks_the_victim(cluster, namespace, pool, gpu_nodes):
    """`early` started first, so without the alias (both charged from their start) it would be
    the costlier victim. Its volcano.sh/last-checkpoint-time is the fresher, so reading the
    alias makes it the cheaper one: it is evicted and `late`, whose checkpoint is older, stays."""
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    kube.create_pod(cluster, namespace, "early", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[0])
    kube.wait_pod_running(cluster, namespace, "early")
    time.sleep(2)
    kube.create_pod(cluster, namespace, "late", gpus=8, pool=pool, priority_class=LOW,
                    node_name=nodes[1])
    kube.wait_pod_running(cluster, namespace, "late")
    cluster.core.patch_namespaced_pod("late", namespace, {"metadata": {"annotations": {
        VOLCANO_CHECKPOINT: rfc3339()}}})
    time.sleep(3)
    cluster.core.patch_namespaced_pod("early", namespace, {"metadata": {"annotations": {
        VOLCANO_CHECKPOINT: rfc3339()}}})
    with running_controller(cluster, config_for(namespace)):
        kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        pod = kube.wait_pod_running(cluster, namespace, "big", timeout=90)
    assert pod.spec.node_name == nodes[0]
    assert reasons(cluster, namespace, "early") == ["Evicted"]
    assert exists(cluster, namespace, "late")
