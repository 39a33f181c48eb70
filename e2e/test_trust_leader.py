"""A leader frozen (SIGSTOP) mid-drain past its Lease writes nothing once it resumes, although
its stale view says the drain deadline has passed and the victim is due for eviction. Judged
from the API server: its audit log (the frozen replica runs as a user of its own, with exactly
deploy/rbac/controller.yaml), the Events' reportingInstance, and the Lease's holder."""

from __future__ import annotations

import dataclasses
import signal
import time

import pytest

from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    plans,
    pod_events,
    priority_classes,
    start_controller_process,
    user_kubeconfig,
)
from e2e.harness.localcluster import read_audit
from e2e.harness.trust import CONTROLLER_USER, controller_rbac

pytestmark = pytest.mark.e2e
CHECKPOINT_SECONDS = 3
WATCH_AFTER_RESUME_SECONDS = 6.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kube.own_local_cluster(tmp_path_factory.mktemp("audited"), audit=True)


def _holder(c: kube.Cluster, cfg) -> str | None:
    return c.coordination.read_namespaced_lease(cfg.lease_name, cfg.lease_namespace) \
        .spec.holder_identity


def _stop(proc) -> None:
    proc.send_signal(signal.SIGCONT)
    proc.terminate()
    try:
        proc.wait(10)
    except Exception:
        proc.kill()
        proc.wait()


def test_leader_stopped_past_its_lease_writes_nothing_after_it_resumes(
        cluster, namespace, pool, gpu_nodes, tmp_path):
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "victim", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node, checkpoint="on-request",
                    checkpoint_seconds=CHECKPOINT_SECONDS)
    kube.wait_pod_running(cluster, namespace, "victim")
    running_since = time.monotonic()
    cfg = config_for(namespace)
    with controller_rbac(cluster, namespace):
        as_user = dataclasses.replace(cluster, kubeconfig=user_kubeconfig(
            cluster, CONTROLLER_USER, tmp_path / "first.kubeconfig"))
        first = start_controller_process(as_user, cfg, tmp_path, identity="first",
                                         log_name="first.log")
        second = None
        try:
            kube.wait_for("the first replica to lead", lambda: _holder(cluster, cfg) == "first"
                          if cluster.coordination.list_namespaced_lease(namespace).items
                          else False, timeout=60)
            second = start_controller_process(cluster, cfg, tmp_path, identity="second",
                                              log_name="second.log")
            # the victim has worked longer than it takes to checkpoint: it is drained
            time.sleep(max(0.0, running_since + CHECKPOINT_SECONDS + 1 - time.monotonic()))
            kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool,
                            priority_class=HIGH_NEVER)
            kube.wait_for("the first replica to ask the victim to checkpoint", lambda: (
                plan_record.DRAIN_ANNOTATION in (cluster.core.read_namespaced_pod(
                    "victim", namespace).metadata.annotations or {})), timeout=60, interval=0.05)
            first.send_signal(signal.SIGSTOP)
            kube.wait_for("the second replica to take the Lease over",
                          lambda: _holder(cluster, cfg) == "second", timeout=30)
            events_rv = int(cluster.core.list_namespaced_event(namespace).metadata
                            .resource_version)
            resumed = time.time()
            first.send_signal(signal.SIGCONT)
            until = time.monotonic() + WATCH_AFTER_RESUME_SECONDS
            while time.monotonic() < until:
                assert _holder(cluster, cfg) == "second"
                time.sleep(0.2)
            assert first.poll() is None, "the first replica exited"
            pod = kube.wait_pod_running(cluster, namespace, "big", timeout=60)
            kube.wait_for("the plan to be stored as Done", lambda: [
                r.state for r in plans(cluster, namespace)] == [plan_record.State.DONE],
                timeout=30)
        finally:
            _stop(first)
            if second:
                _stop(second)

    writes = [e for e in read_audit(cluster.local.audit_log) if e.user == CONTROLLER_USER]
    assert [e for e in writes if e.received < resumed] != [], "the first replica never wrote"
    late = [(e.verb, e.resource, e.subresource, e.name, e.code) for e in writes
            if e.received >= resumed]
    assert late == [], "the first replica wrote after it resumed"
    events = pod_events(cluster, namespace)
    assert {e.reporting_instance for e in events} == {"first", "second"}
    assert [(e.reason, e.involved_object.name) for e in events
            if e.reporting_instance == "first" and int(e.metadata.resource_version) > events_rv
            ] == []
    assert [e.involved_object.name for e in events if e.reason == "Evicted"] == ["victim"]
    assert pod.spec.node_name == node
    assert len(plans(cluster, namespace)) == 1
