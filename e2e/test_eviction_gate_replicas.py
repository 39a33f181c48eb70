"""Gate replicas against the real API server: two replicas that answer the same Evictions at
the same moment write one drain request per pod and give the same answer, with no leader; and
the gate's HTTPS server answers bad requests with a 400, never a crash. Plus the burst
benchmark's short seeded run (e2e/harness/gate_burst.py; `python -m bench.eviction_gate` runs it
long)."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.request
import uuid

import pytest

from ckpt_preempt.controller.gate import gate_server
from ckpt_preempt.controller.gate.gate import Gate, GateSettings
from ckpt_preempt.policies.disruption.eviction_gate import GateLimits
from e2e.harness import kube
from e2e.harness.eviction_gate_run import drain_request, make_certs
from e2e.harness.gate_burst import burst
from e2e.harness.localcluster import free_port

pytestmark = pytest.mark.e2e
PODS = 6


def _review(namespace: str, name: str, *, dry_run: bool = False) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "name": name, "namespace": namespace, "operation": "CREATE",
        "subResource": "eviction", "dryRun": dry_run,
        "userInfo": {"username": "system:serviceaccount:kube-system:cluster-autoscaler"},
        "object": {"apiVersion": "policy/v1", "kind": "Eviction",
                   "metadata": {"name": name, "namespace": namespace}}}}


def _gate(cluster) -> Gate:
    return Gate(kube.client_copy(cluster.api), GateSettings(
        limits=GateLimits(max_checkpoint_seconds=120)))


def test_two_replicas_racing_write_one_request_per_pod_and_answer_alike(cluster, namespace):
    names = [f"train-{i}" for i in range(PODS)]
    for n in names:
        kube.create_pod(cluster, namespace, n, checkpoint="on-request")
    replicas = [_gate(cluster), _gate(cluster)]
    answers: dict[tuple[int, str], dict] = {}
    start = threading.Barrier(len(replicas))

    def answer(i: int) -> None:
        start.wait()
        for n in names:
            answers[i, n] = replicas[i].review(_review(namespace, n))["response"]
    threads = [threading.Thread(target=answer, args=(i,)) for i in range(len(replicas))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in replicas:
        r.flush()
    assert sum(r.counts.get("written", 0) for r in replicas) == PODS
    for n in names:
        request = drain_request(cluster, namespace, n)
        assert request.plan.startswith("disruption/")
        for i in range(len(replicas)):
            # one answer: refused, naming the one request that was written
            assert answers[i, n]["allowed"] is False
            assert answers[i, n]["status"]["code"] == 429
            assert f"({request.plan})" in answers[i, n]["status"]["message"]


def test_a_dry_run_review_writes_nothing_and_warns(cluster, namespace):
    kube.create_pod(cluster, namespace, "train", checkpoint="on-request")
    before = cluster.core.read_namespaced_pod("train", namespace).metadata.annotations
    gate = _gate(cluster)
    out = gate.review(_review(namespace, "train", dry_run=True))["response"]
    gate.flush()  # nothing was queued; a write, had one been, has landed by now
    assert out["allowed"] is True and "a real eviction would be refused" in out["warnings"][0]
    assert cluster.core.read_namespaced_pod("train", namespace).metadata.annotations == before
    assert "written" not in gate.counts and drain_request(cluster, namespace, "train") is None


def test_the_server_answers_bad_requests_with_400(cluster, tmp_path):
    cert, key, _ = make_certs(tmp_path)
    port = free_port()
    server = gate_server.serve(_gate(cluster), "127.0.0.1", port,
                               gate_server.tls_context(str(cert), str(key)))
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))

    def post(path: str, body: bytes) -> int:
        req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
    try:
        for body in (b"not json", b"[]", b'{"request": 1}', b'{"request": {"uid": 5}}',
                     b"[" * 100000):
            assert post("/validate", body) == 400, body[:20]
        assert post("/elsewhere", b"{}") == 404
        ok = post("/validate", json.dumps(_review("nowhere", "gone")).encode())
        assert ok == 200  # a pod that does not exist: allowed (nothing to protect)
    finally:
        server.shutdown()


def test_burst_benchmark_short_seeded_run(cluster, tmp_path):
    result = burst(cluster, pods=8, evictions=24, workers=4, seed=1, workdir=tmp_path)
    # every Eviction refused; one request written per pod, whatever the retries decided while
    # their pod's request was being written (the same id: one write lands)
    assert result["statuses"] == {"429": 24}
    answers = result["answers"]
    assert answers["written"] == 8 and answers["request"] >= 8
    assert answers["request"] + answers.get("refuse", 0) == 24
    assert result["at_webhook_ms"]["n"] == 24 and result["client_ms"]["n"] == 24
    print(json.dumps(result))

