"""`ckpt-preempt kueue-boost` as a process against a real Kueue (v0.17.0, PriorityBoost gate on;
e2e/harness/kueue.py): it writes `kueue.x-k8s.io/priority-boost` on admitted Workloads from their
pods' unsaved work, and Kueue then preempts, among equal priorities, the Job that checkpointed
most recently instead of the most recently admitted one (without kueue-boost, Kueue's own order).
Then what a tenant cannot do with it: pods in its own namespace that name another namespace's
Workload (annotation and controlling owner) move nothing there, and a pod that lies about its
checkpoint (before its start, malformed) gets no more boost than an honest one that saved
nothing since its start.

Unsaved work is charged from a pod's start at most (policies/kueue/boost.py), and the first
bucket is 0.25 GPU-hours: pods here are made to have run for hours by patching their
status.startTime (the admin playing the kubelet of a long run)."""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime

import pytest
from kubernetes import client

from ckpt_preempt.controller.kueue.workloads import WORKLOAD_ANNOTATION
from ckpt_preempt.policies.kueue import boost as rule
from e2e.harness import kube, kueue
from e2e.harness.kueue_boost_run import running_kueue_boost
from e2e.harness.kueue_fixtures import HIGH, LOW, cluster, kq, namespace  # noqa: F401
from e2e.harness.trust import tenant

pytestmark = pytest.mark.e2e
ns = namespace("boost")
GPUS = 8
HOUR = 3600.0
CHECKPOINT, LAST = "ckpt-preempt.io/checkpoint", "ckpt-preempt.io/last-checkpoint"


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _since_epoch(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _running_pod(kq: kueue.RunningKueue, ns: str, job: str):
    def probe():
        pods = kq.job_pods(ns, job)
        running = [p for p in pods if p.status.phase == "Running" and p.spec.node_name
                   and p.metadata.deletion_timestamp is None]
        return running[0] if running else kube.NotYet(
            [(p.metadata.name, p.status.phase, p.spec.node_name) for p in pods])
    return kq.wait(f"a Running pod of Job {ns}/{job}", probe, timeout=90)


def _long_running(kq: kueue.RunningKueue, ns: str, job: str, hours: float):
    """Job `job`'s Running pod, made to have started `hours` ago (status.startTime, which kwok
    set once when it ran the pod)."""
    pod = _running_pod(kq, ns, job)
    return kq.c.core.patch_namespaced_pod_status(pod.metadata.name, ns, {"status": {
        "startTime": _rfc3339(time.time() - hours * HOUR)}})


def _boost(kq: kueue.RunningKueue, ns: str, job: str) -> str | None:
    wl = kq.workload_for(ns, job)
    return ((wl or {}).get("metadata", {}).get("annotations") or {}).get(kueue.BOOST_ANNOTATION)


def _wait_boost(kq, kb, ns: str, job: str, timeout: float = 60) -> int:
    def probe():
        assert kb.alive(), kb.tail()
        value = _boost(kq, ns, job)
        return rule.effective_boost(value) or kube.NotYet(f"boost {value!r}")
    try:
        return kq.wait(f"kueue-boost to boost Job {ns}/{job}", probe, timeout=timeout)
    except kube.WaitTimeout as e:
        raise kube.WaitTimeout(f"{e}\n{kb.tail()}") from None


def _reserved_at(workload: dict) -> float:
    return _since_epoch(kueue.condition(workload, "QuotaReserved")["lastTransitionTime"])


@pytest.mark.parametrize("booster", [True, False], ids=["kueue-boost", "without-kueue-boost"])
def test_kueue_preempts_the_job_that_checkpointed_most_recently(kq, cluster, ns, pool, gpu_nodes,
                                                                tmp_path, booster):
    gpu_nodes(2)
    q = kq.make_queue(ns, gpus=2 * GPUS, pool=pool)
    # The older Job checkpoints (its pod's report is fresh); the newer one's last checkpoint is
    # 3 hours old: 24 GPU-hours unsaved.
    kq.make_job(ns, "older", queue=q, gpus=GPUS, priority_class=LOW, grace_seconds=1,
                pod_annotations={CHECKPOINT: "periodic", LAST: _rfc3339(time.time())})
    older = kq.wait_admitted(ns, "older")
    time.sleep(1.5)  # Kueue's order among equals: QuotaReserved time, 1 s resolution
    kq.make_job(ns, "newer", queue=q, gpus=GPUS, priority_class=LOW, grace_seconds=1,
                pod_annotations={CHECKPOINT: "periodic",
                                 LAST: _rfc3339(time.time() - 3 * HOUR)})
    newer = kq.wait_admitted(ns, "newer")
    assert _reserved_at(newer) > _reserved_at(older)
    _long_running(kq, ns, "older", 4)
    _long_running(kq, ns, "newer", 4)

    run = running_kueue_boost(cluster, tmp_path / "boost", namespaces=[ns]) if booster \
        else contextlib.nullcontext()
    with run as kb:
        if booster:
            assert _wait_boost(kq, kb, ns, "newer") == rule.DEFAULT_RULE.bucket(
                GPUS * 3 * HOUR)
            assert _boost(kq, ns, "older") is None  # a fresh checkpoint: nothing to protect
            time.sleep(3)  # Kueue's cache takes the update from its informer
        else:
            assert _boost(kq, ns, "older") is None and _boost(kq, ns, "newer") is None
        kq.make_job(ns, "high", queue=q, gpus=GPUS, priority_class=HIGH, grace_seconds=1)
        victim, survivor = ("older", "newer") if booster else ("newer", "older")
        evicted = kq.wait_evicted(ns, victim)
        assert kueue.condition(evicted, "Preempted")["reason"] == "InClusterQueue"
        kq.wait_admitted(ns, "high")
        kept = kq.workload_for(ns, survivor)
        assert kueue.condition(kept, "Admitted"), kept.get("status")
        assert not kueue.condition(kept, "Evicted"), kept.get("status")


def _forged_pod(name: str, *, workload: str, job: str, job_uid: str, node: str,
                extra_owner: dict | None = None) -> dict:
    """A pod naming Workload `workload` by Kueue's annotation and Job `job` as its controlling
    owner, on `node`, with a huge request and a checkpoint 10 hours old."""
    body = kube.pod_body(name, gpus=1000, checkpoint="periodic",
                         last_checkpoint=_rfc3339(time.time() - 10 * HOUR),
                         annotations={WORKLOAD_ANNOTATION: workload}, node_name=node)
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid,
         "controller": True}, *([extra_owner] if extra_owner else [])]
    return body


def test_a_tenants_pods_do_not_move_another_namespaces_boost(kq, cluster, ns, pool, gpu_nodes,
                                                             tmp_path):
    nodes = gpu_nodes(2)
    q = kq.make_queue(ns, gpus=GPUS, pool=pool)
    kq.make_job(ns, "a", queue=q, gpus=GPUS, priority_class=LOW, grace_seconds=1,
                pod_annotations={CHECKPOINT: "periodic", LAST: _rfc3339(time.time())})
    workload = kq.wait_admitted(ns, "a")["metadata"]["name"]
    pod = _running_pod(kq, ns, "a")
    spare = next(n for n in nodes if n != pod.spec.node_name)  # no Job of Kueue's lands there
    job_uid = kq.job(ns, "a").metadata.uid
    with kube.temporary_namespace(cluster, "tenant-b") as other, tenant(cluster, other) as api, \
            running_kueue_boost(cluster, tmp_path / "boost", namespaces=[ns, other]) as kb:
        tenant_core = client.CoreV1Api(api)
        # The garbage collector deletes a pod whose only owner is not in its namespace; a
        # second owner of the tenant's own (a pod) keeps the forged ones alive.
        holder = tenant_core.create_namespaced_pod(other, kube.pod_body(
            "holder", pool="e2e-no-such-pool"))
        mine = {"apiVersion": "v1", "kind": "Pod", "name": "holder",
                "uid": holder.metadata.uid}
        for i in range(3):
            tenant_core.create_namespaced_pod(other, _forged_pod(
                f"forged-{i}", workload=workload, job="a", job_uid=job_uid, node=spare,
                extra_owner=mine))

        def forged_running():
            pods = [p for p in tenant_core.list_namespaced_pod(other).items
                    if p.metadata.name.startswith("forged-")]
            ok = len(pods) == 3 and all(p.status.phase == "Running"
                                        and p.metadata.deletion_timestamp is None for p in pods)
            return ok or kube.NotYet([(p.metadata.name, p.status.phase) for p in pods])
        kube.wait_for("the forged pods to run", forged_running, timeout=60)
        time.sleep(6)  # several passes (--interval 1) with 3000 GPUs' unsaved work in sight
        assert kb.alive(), kb.tail()
        assert kube.wait_for("the forged pods to stay", forged_running, timeout=5)
        assert _boost(kq, ns, "a") is None, kb.tail()

        # The same pod in A's own namespace does count: the forged ones were strong enough.
        cluster.core.create_namespaced_pod(ns, _forged_pod(
            "own", workload=workload, job="a", job_uid=job_uid, node=spare))
        assert _wait_boost(kq, kb, ns, "a") > 0


def test_a_pod_lying_about_its_checkpoint_gets_no_more_boost_than_an_honest_one(
        kq, cluster, ns, pool, gpu_nodes, tmp_path):
    gpu_nodes(3)
    q = kq.make_queue(ns, gpus=3 * GPUS, pool=pool)
    claims = {  # all three pods started 3 hours ago
        "honest": None,  # reports its start as its last checkpoint: nothing saved since
        "before-start": _rfc3339(time.time() - 30 * HOUR),
        "malformed": "yesterday",
    }
    for job in claims:
        kq.make_job(ns, job, queue=q, gpus=GPUS, priority_class=LOW, grace_seconds=1,
                    pod_annotations={CHECKPOINT: "periodic"})
    for job, claim in claims.items():
        kq.wait_admitted(ns, job)
        pod = _long_running(kq, ns, job, 3)
        started = _rfc3339(pod.status.start_time.timestamp())
        cluster.core.patch_namespaced_pod(pod.metadata.name, ns, {"metadata": {
            "annotations": {LAST: claim or started}}})

    with running_kueue_boost(cluster, tmp_path / "boost", namespaces=[ns]) as kb:
        honest = _wait_boost(kq, kb, ns, "honest")
        time.sleep(4)  # several more passes
        boosts = {job: rule.effective_boost(_boost(kq, ns, job)) for job in claims}
    assert honest == boosts["honest"] == rule.DEFAULT_RULE.bucket(GPUS * 3 * HOUR) > 0, boosts
    # what the early claim would be worth if it were believed: 30 hours unsaved
    assert rule.DEFAULT_RULE.bucket(GPUS * 30 * HOUR) > boosts["honest"]
    assert boosts["before-start"] <= boosts["honest"], boosts
    assert boosts["malformed"] <= boosts["honest"], boosts
