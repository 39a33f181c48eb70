"""A real Kueue (v0.17.0) preempting batch Jobs on kwok GPU nodes, on a control plane of its own
(e2e/harness/kueue.py): how Kueue stops a victim (Workload Evicted/Preempted, Job suspended, pods
deleted with their own grace period), whom it picks among equal priorities (the most recently
admitted), and that the Workload annotation kueue.x-k8s.io/priority-boost (gate PriorityBoost)
changes that choice. The base for tests of our SDK's save-on-SIGTERM and a boost controller."""

from __future__ import annotations

import sys
import time
from datetime import datetime

import pytest

from e2e.harness import kube, kueue, kueue_pods
from e2e.harness.kueue_fixtures import HIGH, LOW, cluster, kq, namespace  # noqa: F401

pytestmark = pytest.mark.e2e
tenant = namespace("tenant", name="tenant")
GRACE = 8  # the victims' terminationGracePeriodSeconds where it is measured


def _running_pod(kq: kueue.RunningKueue, ns: str, job: str):
    def probe():
        pods = kq.job_pods(ns, job)
        running = [p for p in pods if p.status.phase == "Running" and p.spec.node_name
                   and p.metadata.deletion_timestamp is None]
        return running[0] if running else kube.NotYet(
            [(p.metadata.name, p.status.phase, p.spec.node_name) for p in pods])
    return kq.wait(f"a Running pod of Job {ns}/{job}", probe, timeout=90)


def _since_epoch(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _reserved_at(workload: dict) -> float:
    return _since_epoch(kueue.condition(workload, "QuotaReserved")["lastTransitionTime"])


def test_high_job_preempts_low_job_whose_pod_keeps_its_grace_period(kq, cluster, tenant, pool,
                                                                    gpu_nodes):
    [node] = gpu_nodes(1)  # 8 GPUs, and the ClusterQueue's quota is the same 8
    q = kq.make_queue(tenant, gpus=8, pool=pool)
    kq.make_job(tenant, "low", queue=q, gpus=8, priority_class=LOW, grace_seconds=GRACE)
    kq.wait_admitted(tenant, "low")
    victim = _running_pod(kq, tenant, "low")
    assert victim.spec.node_name == node
    assert victim.spec.node_selector == {kube.POOL_LABEL: pool}  # from the ResourceFlavor

    kq.make_job(tenant, "high", queue=q, gpus=8, priority_class=HIGH, grace_seconds=1)
    evicted = kq.wait_evicted(tenant, "low")
    assert kueue.condition(evicted, "Preempted")["reason"] == "InClusterQueue"
    # Then Kueue's Job reconciler stops the Job by suspending it (jobframework stopJob).
    kq.wait("Job low to be suspended", lambda: kq.job(tenant, "low").spec.suspend, timeout=60)
    term = kueue_pods.watch_termination(cluster, tenant, victim.metadata.name, timeout=GRACE + 90)
    # The Job controller deletes with empty DeleteOptions: the pod's own grace period applies,
    # and the pod stays Terminating (holding its GPUs) until it ends.
    assert term.grace_seconds == GRACE
    assert term.deletion_grace_seconds == GRACE
    assert term.lingered >= GRACE - 1.5, term  # deletionTimestamp has 1 s resolution
    assert term.lingered <= GRACE + 45, term  # generous: 2 loaded cores

    high = kq.wait_admitted(tenant, "high")
    assert kueue.condition(high, "Admitted")
    preemptor = _running_pod(kq, tenant, "high")
    assert preemptor.spec.node_name == node
    scheduled = kube.condition(preemptor, "PodScheduled").last_transition_time.timestamp()
    assert scheduled >= term.deadline - 1.5, "the preemptor was bound while the victim held GPUs"
    low = kq.workload_for(tenant, "low")
    assert not kueue.condition(low, "Admitted")  # requeued, waiting for quota


@pytest.mark.parametrize(("boosted", "boost", "victim"), [
    (None, None, "newer"),  # equal priority: the most recently admitted goes first
    ("newer", 100, "older"),  # the newer one protected: effective priority 100 + 100
    ("older", -100, "older"),  # the older one exposed: effective priority 100 - 100
], ids=["no-boost", "boost-newer", "lower-older"])
def test_equal_priority_victim_is_the_newest_unless_priority_boost_says_otherwise(
        kq, tenant, pool, gpu_nodes, boosted, boost, victim):
    gpu_nodes(1)
    q = kq.make_queue(tenant, gpus=8, pool=pool)
    kq.make_job(tenant, "older", queue=q, gpus=4, priority_class=LOW, grace_seconds=1)
    older = kq.wait_admitted(tenant, "older")
    # Kueue orders equal effective priorities by QuotaReserved's lastTransitionTime, newest first
    # (pkg/scheduler/preemption/common/ordering.go); condition times have 1 s resolution.
    time.sleep(1.5)
    kq.make_job(tenant, "newer", queue=q, gpus=4, priority_class=LOW, grace_seconds=1)
    newer = kq.wait_admitted(tenant, "newer")
    assert _reserved_at(newer) > _reserved_at(older)
    _running_pod(kq, tenant, "older")
    _running_pod(kq, tenant, "newer")
    if boosted:
        stored = kq.set_boost(tenant, boosted, boost)
        assert stored["metadata"]["annotations"][kueue.BOOST_ANNOTATION] == str(boost)
        # Kueue's cache takes the update from its informer: give it a moment before the
        # preemptor arrives (no assertion on this time).
        time.sleep(3)

    kq.make_job(tenant, "high", queue=q, gpus=4, priority_class=HIGH, grace_seconds=1)
    evicted = kq.wait_evicted(tenant, victim)
    assert kueue.condition(evicted, "Preempted")["reason"] == "InClusterQueue"
    kq.wait_admitted(tenant, "high")
    survivor = kq.workload_for(tenant, "newer" if victim == "older" else "older")
    assert kueue.condition(survivor, "Admitted"), survivor.get("status")
    assert not kueue.condition(survivor, "Evicted"), survivor.get("status")


# A container that saves on SIGTERM and exits: ready once its handler is installed.
CONTAINER = """
import signal, sys, time
def stop(*_):
    print("SIGTERM: saving", flush=True)
    time.sleep(1)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(600)
"""


def test_victim_container_that_exits_on_sigterm_ends_its_grace_early(kq, cluster, tenant, pool,
                                                                     gpu_nodes, tmp_path):
    grace = 120
    gpu_nodes(1)
    q = kq.make_queue(tenant, gpus=8, pool=pool)
    kq.make_job(tenant, "low", queue=q, gpus=8, priority_class=LOW, grace_seconds=grace)
    kq.wait_admitted(tenant, "low")
    victim = _running_pod(kq, tenant, "low").metadata.name
    log = tmp_path / "container.log"
    with kueue_pods.ContainerProcess(cluster, tenant, victim, [sys.executable, "-c", CONTAINER],
                                log) as container:
        kube.wait_for("the container to be ready", lambda: "ready" in log.read_text(),
                      timeout=60)
        kq.make_job(tenant, "high", queue=q, gpus=8, priority_class=HIGH, grace_seconds=1)
        kq.wait_evicted(tenant, "low")
        term = kueue_pods.watch_termination(cluster, tenant, victim, timeout=grace + 60)
        _running_pod(kq, tenant, "high")
    # What the container saw when it got SIGTERM: the Job controller's delete, with the pod's
    # own grace period (the harness's early delete later sets 0).
    assert container.deletion_grace_seconds == grace
    assert container.sigterm_at is not None and container.returncode == 0, log.read_text()
    assert not container.killed
    assert "SIGTERM: saving" in log.read_text()
    assert term.lingered < grace / 2, term  # gone once the process exited, not at the deadline
