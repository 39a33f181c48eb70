"""A rival pending pod that tolerates every taint (so the reservation taint does not stop it),
of the preemptor's own priority, created while the victim is being drained, i.e. right before
it goes: it never takes the freed node. No admission policy is installed; the preemptor's
nomination, made before its victim is evicted, is what kube-scheduler honours."""

from __future__ import annotations

import time

import pytest

from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    priority_classes,
    running_controller,
)
from e2e.harness.trust import extra_namespace

pytestmark = pytest.mark.e2e
RUNS = 5


def _delete_now(c: kube.Cluster, namespace: str, name: str) -> None:
    c.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    kube.wait_pod_gone(c, namespace, name, timeout=30)


def test_tolerate_all_rival_never_takes_the_freed_node(cluster, namespace, pool, gpu_nodes):
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    lost = []
    # the rival's namespace is outside the controller's scope: only kube-scheduler handles it
    with extra_namespace(cluster) as rivals, running_controller(cluster, config_for(namespace)):
        for run in range(RUNS):
            victim, big, rival = f"victim-{run}", f"big-{run}", f"rival-{run}"
            kube.create_pod(cluster, namespace, victim, gpus=8, pool=pool, priority_class=LOW,
                            node_name=node, checkpoint="on-request", checkpoint_seconds=1)
            kube.wait_pod_running(cluster, namespace, victim)
            time.sleep(2)  # draining (1 s) now costs less than evicting (2 s of work)
            kube.create_pod(cluster, namespace, big, gpus=8, pool=pool,
                            priority_class=HIGH_NEVER)
            kube.wait_for(f"{victim} to be asked to checkpoint", lambda victim=victim: (
                plan_record.DRAIN_ANNOTATION in (cluster.core.read_namespaced_pod(
                    victim, namespace).metadata.annotations or {})), timeout=60)
            kube.create_pod(cluster, rivals, rival, gpus=8, pool=pool,
                            priority_class=HIGH_NEVER, tolerations=[{"operator": "Exists"}])
            bound = kube.wait_pod_running(cluster, namespace, big, timeout=60)
            assert bound.spec.node_name == node
            if cluster.core.read_namespaced_pod(rival, rivals).spec.node_name:
                lost.append(run)
            _delete_now(cluster, rivals, rival)
            _delete_now(cluster, namespace, big)
    assert lost == [], f"the rival took the node in runs {lost} of {RUNS}"
