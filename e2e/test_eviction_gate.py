"""The eviction gate with a real `kubectl drain` against the local control plane: the drain
waits for the training pod's checkpoint, a pod that never acks goes at its deadline, a dead
gate blocks nothing (failurePolicy Ignore) and a server-side dry run writes nothing (it is
allowed with a warning).

Each test prints one JSON line with the drain's wall time (`pytest -s` shows them)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from ckpt_preempt.policies.lifecycle.plan_record import (
    DONE_ANNOTATION,
    DRAIN_ANNOTATION,
    DrainRequest,
    drain_to_annotation,
)
from e2e.harness import kube
from e2e.harness.eviction_gate_run import (
    ack,
    drain,
    drain_request,
    gate_config,
    running_gate,
    start_drain,
)

pytestmark = pytest.mark.e2e
KUBECTL_RETRY_SECONDS = 5  # kubectl drain waits this long after a 429 (k8s.io/kubectl drain)
HOLD = "e2e.ckpt-preempt.io/hold"  # a finalizer: the pod stays Terminating until it is removed


def _report(**fields) -> None:
    print(json.dumps({"measure": "eviction-gate-drain", **fields}))


def _training_pod(cluster, namespace, node, name="train", seconds=30):
    kube.create_pod(cluster, namespace, name, node_name=node, checkpoint="on-request",
                    checkpoint_seconds=seconds)
    kube.wait_pod_running(cluster, namespace, name)


def test_drain_waits_for_the_checkpoint_then_completes(cluster, namespace, gpu_nodes, tmp_path):
    (node,) = gpu_nodes(1)
    _training_pod(cluster, namespace, node)
    with running_gate(cluster, namespace, tmp_path / "gate", gate_config()):
        start = time.monotonic()
        proc = start_drain(cluster, node, timeout=60)
        request = kube.wait_for("the gate's drain request",
                                lambda: drain_request(cluster, namespace, "train"), timeout=20)
        assert request.plan.startswith("disruption/")
        assert request.deadline - request.requested == pytest.approx(30, abs=0.01)
        asked = time.monotonic() - start
        event = kube.wait_event(cluster, namespace, "EvictionDelayed", name="train", timeout=10)
        assert request.plan in event.note
        time.sleep(KUBECTL_RETRY_SECONDS + 2)  # at least one retry meets the standing request
        assert proc.poll() is None, proc.communicate()
        assert cluster.core.read_namespaced_pod("train", namespace).metadata.deletion_timestamp \
            is None
        acked_at = time.monotonic()
        ack(cluster, namespace, "train", request.plan)
        out, err = proc.communicate(timeout=40)
        total = time.monotonic() - start
    assert proc.returncode == 0, err
    assert "pod/train evicted" in out
    kube.wait_pod_gone(cluster, namespace, "train")
    _report(case="ack after 7 s", asked_s=round(asked, 2), ack_to_done_s=round(
        time.monotonic() - acked_at, 2), total_s=round(total, 2))
    assert time.monotonic() - acked_at <= KUBECTL_RETRY_SECONDS + 5


def test_drain_with_an_immediate_ack_costs_one_retry(cluster, namespace, gpu_nodes, tmp_path):
    """The drain's extra wall time when the pod checkpoints at once (an agent that acks within
    a second), against the same drain with the gate's process killed."""
    nodes = gpu_nodes(2)
    for i, node in enumerate(nodes):
        _training_pod(cluster, namespace, node, name=f"train-{i}")
    with running_gate(cluster, namespace, tmp_path / "gate", gate_config()) as gate:
        stop = threading.Event()

        def agent():  # acks as soon as the request appears, as the agent's hook would
            while not stop.is_set():
                r = drain_request(cluster, namespace, "train-0")
                if r is not None:
                    ack(cluster, namespace, "train-0", r.plan)
                    return
                time.sleep(0.1)
        t = threading.Thread(target=agent, daemon=True)
        t.start()
        done, with_gate = drain(cluster, nodes[0], timeout=60)
        stop.set()
        assert done.returncode == 0, done.stderr
        assert drain_request(cluster, namespace, "train-0") is None  # evicted and gone
        gate.stop()  # killed: the API server cannot reach it (failurePolicy Ignore)
        done, without = drain(cluster, nodes[1], timeout=60)
        assert done.returncode == 0, done.stderr
        assert "checkpoint" not in done.stderr
    _report(case="immediate ack vs gate down", with_gate_s=round(with_gate, 2),
            gate_down_s=round(without, 2), extra_s=round(with_gate - without, 2))
    assert without < KUBECTL_RETRY_SECONDS  # no retry at all: the dead gate blocked nothing
    assert with_gate < without + KUBECTL_RETRY_SECONDS + 5


def test_a_pod_that_never_acks_is_evicted_at_its_deadline(cluster, namespace, gpu_nodes,
                                                          tmp_path):
    (node,) = gpu_nodes(1)
    _training_pod(cluster, namespace, node, seconds=8)
    with running_gate(cluster, namespace, tmp_path / "gate", gate_config()):
        done, took = drain(cluster, node, timeout=60)
        assert done.returncode == 0, done.stderr
    _report(case="never acks, checkpoint-seconds 8", total_s=round(took, 2))
    assert 8 <= took <= 8 + KUBECTL_RETRY_SECONDS + 5
    kube.wait_pod_gone(cluster, namespace, "train")


def test_a_server_side_dry_run_drain_writes_nothing(cluster, namespace, gpu_nodes, tmp_path):
    (node,) = gpu_nodes(1)
    _training_pod(cluster, namespace, node)
    before = cluster.core.read_namespaced_pod("train", namespace).metadata.resource_version
    with running_gate(cluster, namespace, tmp_path / "gate", gate_config()):
        done, _ = drain(cluster, node, "--dry-run=server", timeout=8)
    # allowed (a refused dry run would make kubectl retry for ever), with a warning saying
    # what the real eviction would meet, and nothing written: no drain request, the pod as it was
    assert done.returncode == 0, done.stderr
    assert "a real eviction would be refused" in done.stderr and "(dry run)" in done.stderr
    pod = cluster.core.read_namespaced_pod("train", namespace)
    assert pod.metadata.resource_version == before
    assert drain_request(cluster, namespace, "train") is None
    assert not cluster.core.read_node(node).spec.unschedulable  # not even cordoned


def test_a_terminating_pod_is_not_asked_again(cluster, namespace, gpu_nodes, tmp_path):
    """With a real kubelet's grace period (a finalizer here: kwok deletes at once), the acked pod
    stays Terminating while the drain waits; later Evictions of it pass and ask nothing."""
    (node,) = gpu_nodes(1)
    _training_pod(cluster, namespace, node)
    cluster.core.patch_namespaced_pod("train", namespace, {"metadata": {"finalizers": [HOLD]}})
    with running_gate(cluster, namespace, tmp_path / "gate", gate_config()):
        proc = start_drain(cluster, node, timeout=60)
        try:
            request = kube.wait_for("the gate's drain request",
                                    lambda: drain_request(cluster, namespace, "train"),
                                    timeout=20)
            ack(cluster, namespace, "train", request.plan)
            kube.wait_for("the pod to be terminating", lambda: cluster.core.read_namespaced_pod(
                "train", namespace).metadata.deletion_timestamp, timeout=20)
            assert proc.poll() is None  # kubectl waits for the pod to be gone
            kube.evict(cluster, namespace, "train")  # allowed: terminating, nothing to ask
            assert drain_request(cluster, namespace, "train") == request
        finally:
            cluster.core.patch_namespaced_pod("train", namespace,
                                              {"metadata": {"finalizers": None}})
        _, err = proc.communicate(timeout=40)
    assert proc.returncode == 0, err


def test_a_stale_acknowledged_checkpoint_is_asked_again_before_the_drain(
        cluster, namespace, gpu_nodes, tmp_path):
    """An early warning's checkpoint at a cordon an hour ago, acknowledged: the drain now would
    lose the hour since, so the gate asks again (a new id) and the drain waits for that ack."""
    (node,) = gpu_nodes(1)
    _training_pod(cluster, namespace, node, seconds=20)
    hour_ago = time.time() - 3600
    early = DrainRequest(plan="disruption/cordon-an-hour-ago", requested=hour_ago,
                         deadline=hour_ago + 20)
    cluster.core.patch_namespaced_pod("train", namespace, {"metadata": {"annotations": {
        DRAIN_ANNOTATION: drain_to_annotation(early), DONE_ANNOTATION: early.plan}}})
    with running_gate(cluster, namespace, tmp_path / "gate", gate_config()):
        proc = start_drain(cluster, node, timeout=60)
        again = kube.wait_for("a new drain request", lambda: (
            r if (r := drain_request(cluster, namespace, "train")) and r.plan != early.plan
            else kube.NotYet(f"still {r and r.plan}")), timeout=20)
        assert again.plan.startswith("disruption/") and again.requested > hour_ago + 3000
        assert proc.poll() is None  # the drain waits for the new checkpoint
        ack(cluster, namespace, "train", again.plan)
        out, err = proc.communicate(timeout=40)
    assert proc.returncode == 0, err
    assert "pod/train evicted" in out
