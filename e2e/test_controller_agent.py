"""The checkpoint agent on its own (no controller), against the real API server, with the
agent's RBAC (its own pod only): each hook kind acknowledges a drain request written the way the
controller writes it; removing the request cancels it (no ack is written afterwards, even by a
hook that finishes later, and the API server itself refuses an ack that lost that race); the
example training loop keeps running through a request and a cancel, and on SIGTERM saves and
exits 75 (``EXIT_CHECKPOINTED``)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import config

import ckpt_preempt_sdk as sdk
from ckpt_preempt.controller.agent import agent_process, progress
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model import annotations as ann
from e2e.harness import kube
from e2e.harness.controller_run import (
    free_port,
    grant_agent,
    start_agent,
    user_kubeconfig,
)
from tests.controller.test_example import start_loop

pytestmark = pytest.mark.e2e


def _drain(plan: str) -> str:
    now = time.time()
    return plan_record.drain_to_annotation(plan_record.DrainRequest(plan=plan, requested=now,
                                                                deadline=now + 30))


def _annotate(cluster, namespace, pod, value: str | None) -> None:
    """Write (or, with None, remove) the drain request, as the controller does."""
    cluster.core.patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": {
        plan_record.DRAIN_ANNOTATION: value}}})


def _annotations(cluster, namespace, pod) -> dict[str, str]:
    return cluster.core.read_namespaced_pod(pod, namespace).metadata.annotations or {}


def _acked(cluster, namespace, pod, plan):
    got = _annotations(cluster, namespace, pod)
    return got.get(plan_record.DONE_ANNOTATION) == plan or kube.NotYet(str(got))


def _up(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _agent_for(cluster, namespace, pod, tmp_path, *hook):
    """An agent process for `pod` with the agent's RBAC, its endpoint up and its watch running."""
    kube.create_pod(cluster, namespace, pod, checkpoint="on-request")
    grant_agent(cluster, namespace, pod)
    kubeconfig = user_kubeconfig(cluster, "ckpt-preempt-agent", tmp_path / "kc")
    port = free_port()
    proc = start_agent(cluster, kubeconfig, namespace, pod, tmp_path, *hook, port=port)
    kube.wait_for("the agent endpoint", lambda: _up(port), timeout=30)
    time.sleep(1)  # the agent's watch is established
    return proc, port, kubeconfig


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(10)


@pytest.mark.parametrize("hook", ["exec", "http", "sdk"])
def test_agent_acknowledges_through_each_hook(cluster, namespace, tmp_path, hook):
    server, seen = None, []
    if hook == "exec":
        marker = tmp_path / "saved"
        args = ["--exec", f"{sys.executable} -c \"import os,pathlib; pathlib.Path("
                f"'{marker}').write_text(os.environ['CKPT_PREEMPT_PLAN'])\""]
    elif hook == "http":
        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *a):
                pass
        server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        args = ["--http", f"http://127.0.0.1:{server.server_address[1]}/checkpoint"]
    else:
        args = []
    agent, port, _ = _agent_for(cluster, namespace, "w", tmp_path, *args)
    try:
        client = sdk.Checkpointer(f"http://127.0.0.1:{port}", poll_seconds=0)
        if hook == "sdk":  # periodic report first, then a request answered by the SDK
            client.checkpointed()
            kube.wait_for("last-checkpoint", lambda: "ckpt-preempt.io/last-checkpoint" in
                          _annotations(cluster, namespace, "w"))
            assert client.events() == []
        _annotate(cluster, namespace, "w", _drain("plan-1"))
        if hook == "sdk":
            (event,) = client.events(timeout=30)
            assert (event.state, event.plan) == (sdk.State.REQUESTED, "plan-1")
            assert client.done("plan-1")
        kube.wait_for("the ack", lambda: _acked(cluster, namespace, "w", "plan-1"), timeout=30)
        if hook == "exec":
            assert marker.read_text() == "plan-1"
        if hook == "http":
            assert seen and seen[0]["plan"] == "plan-1" and seen[0]["action"] == "checkpoint"
        # a repeated request for the same plan is not run twice; a malformed one is ignored
        _annotate(cluster, namespace, "w", _drain("plan-1"))
        _annotate(cluster, namespace, "w", "{oops")
        time.sleep(2)
        if hook == "http":
            assert len(seen) == 1
        assert client.status().state is sdk.State.ACKED  # the malformed value changed nothing
        assert agent.poll() is None
    finally:
        _stop(agent)
        if server:
            server.shutdown()


def test_progress_reports_declare_the_jobs_end_on_its_pod(cluster, namespace, tmp_path):
    """The real agent process: a loop reports 0 and then 50 of 1000 steps, 12 s apart; the
    agent writes expected-end 19 such spans after the second report, and the controller's
    annotation parser reads it as the pod's end. A malformed report is refused with its
    reason and writes nothing."""
    agent, port, _ = _agent_for(cluster, namespace, "w", tmp_path)
    try:
        client = sdk.Checkpointer(f"http://127.0.0.1:{port}", poll_seconds=0)
        t0 = time.time()
        assert client.progress(0, 1000) is None  # one report: no rate yet
        time.sleep(progress.MIN_SPAN_SECONDS + 2)
        with pytest.raises(ValueError, match="done must be between 0 and total"):
            client.progress(2000, 1000)
        t1 = time.time()
        end = client.progress(50, 1000)
        assert end == pytest.approx(t1 + 19 * (t1 - t0), abs=5)
        got = kube.wait_for("expected-end", lambda: _annotations(cluster, namespace, "w").get(
            ann.EXPECTED_END) or kube.NotYet("not written"), timeout=30)
        fields = ann.parse_pod_fields(namespace=namespace, labels={},
                                      annotations={ann.EXPECTED_END: got}, now=time.time())
        assert fields.problems == () and fields.expected_end == pytest.approx(end, abs=1)
        assert agent.poll() is None
    finally:
        _stop(agent)


def test_removing_the_request_cancels_it_and_a_hook_finishing_later_writes_no_ack(
        cluster, namespace, tmp_path):
    started, release, cancelled = (tmp_path / n for n in ("started", "release", "cancelled"))
    slow_save = (f"{sys.executable} -c \"import pathlib, time; pathlib.Path('{started}').touch()"
                 f"\nwhile not pathlib.Path('{release}').exists(): time.sleep(0.05)\"")
    on_cancel = (f"{sys.executable} -c \"import os, pathlib; pathlib.Path('{cancelled}')"
                 ".write_text(os.environ['CKPT_PREEMPT_ACTION'] + ' ' + "
                 "os.environ['CKPT_PREEMPT_PLAN'])\"")
    agent, port, _ = _agent_for(cluster, namespace, "w", tmp_path, "--exec", slow_save,
                                "--cancel-exec", on_cancel)
    client = sdk.Checkpointer(f"http://127.0.0.1:{port}", poll_seconds=0)
    try:
        assert client.events() == []
        _annotate(cluster, namespace, "w", _drain("plan-1"))
        kube.wait_for("the checkpoint hook to start", started.exists, timeout=30)
        _annotate(cluster, namespace, "w", None)  # the plan aborted
        kube.wait_for("the agent to see the cancel", lambda: client.status().state is
                      sdk.State.CANCELLED, timeout=30)
        release.touch()  # the save finishes now, after the cancel: its ack must not be written
        kube.wait_for("the cancel hook", cancelled.exists, timeout=30)
        assert cancelled.read_text() == "cancel plan-1"
        assert [(e.state, e.plan) for e in client.events()] == [
            (sdk.State.REQUESTED, "plan-1"), (sdk.State.CANCELLED, "plan-1")]
        assert not client.done("plan-1")
        assert plan_record.DONE_ANNOTATION not in _annotations(cluster, namespace, "w")
        assert agent.poll() is None
    finally:
        _stop(agent)


def test_the_api_server_refuses_an_ack_for_a_request_that_changed(cluster, namespace, tmp_path):
    """The agent's own write, with the agent's credentials: the ack's JSON-patch test."""
    kube.create_pod(cluster, namespace, "w", checkpoint="on-request")
    grant_agent(cluster, namespace, "w")
    api = config.new_client_from_config(config_file=str(
        user_kubeconfig(cluster, "ckpt-preempt-agent", tmp_path / "kc")))
    writer = agent_process.KubePodWriter(api, namespace=namespace, name="w")
    first, second = _drain("plan-1"), _drain("plan-2")
    _annotate(cluster, namespace, "w", first)
    assert writer.ack(plan="plan-1", drain_raw=first, at=time.time())
    assert _annotations(cluster, namespace, "w")[plan_record.DONE_ANNOTATION] == "plan-1"
    _annotate(cluster, namespace, "w", second)  # replaced by another plan
    assert not writer.ack(plan="plan-1", drain_raw=first, at=time.time())
    _annotate(cluster, namespace, "w", None)  # withdrawn
    assert not writer.ack(plan="plan-2", drain_raw=second, at=time.time())
    assert _annotations(cluster, namespace, "w")[plan_record.DONE_ANNOTATION] == "plan-1"


def test_example_loop_keeps_training_through_a_request_and_a_cancel(cluster, namespace,
                                                                    tmp_path):
    pidfile = tmp_path / "train.pid"
    port = free_port()
    loop, lines = start_loop(tmp_path, f"http://127.0.0.1:{port}")
    agent = None
    try:
        kube.create_pod(cluster, namespace, "trainer", checkpoint="on-request")
        grant_agent(cluster, namespace, "trainer")
        kubeconfig = user_kubeconfig(cluster, "ckpt-preempt-agent", tmp_path / "kc")
        agent = start_agent(cluster, kubeconfig, namespace, "trainer", tmp_path,
                            "--signal-pidfile", str(pidfile), port=port)
        kube.wait_for("the agent endpoint", lambda: _up(port), timeout=30)
        time.sleep(1)  # the agent's watch is established
        _annotate(cluster, namespace, "trainer", _drain("plan-1"))
        kube.wait_for("the ack", lambda: _acked(cluster, namespace, "trainer", "plan-1"),
                      timeout=30)
        assert "training on" in lines.wait_for("checkpoint on request for plan plan-1")
        saved = json.loads((tmp_path / "run/checkpoint.json").read_text())["step"]
        _annotate(cluster, namespace, "trainer", None)  # the plan aborted
        lines.wait_for("checkpoint request for plan plan-1 cancelled")
        assert loop.poll() is None and agent.poll() is None
        loop.send_signal(signal.SIGTERM)  # evicted after all (the kubelet's SIGTERM)
        assert loop.wait(30) == sdk.EXIT_CHECKPOINTED  # saved on the SIGTERM
        assert int(lines.wait_for("evicted: saved at step").split()[-1]) > saved
    finally:
        if loop.poll() is None:
            loop.kill()
        if agent is not None:
            _stop(agent)


def test_agent_cannot_touch_other_pods(cluster, namespace, tmp_path):
    kube.create_pod(cluster, namespace, "mine")
    kube.create_pod(cluster, namespace, "theirs")
    grant_agent(cluster, namespace, "mine")
    kubeconfig = user_kubeconfig(cluster, "ckpt-preempt-agent", tmp_path / "kc")
    r = subprocess.run([sys.executable, "-c", (
        "import sys; from kubernetes import client, config;"
        f"api = config.new_client_from_config(config_file='{kubeconfig}');"
        "core = client.CoreV1Api(api);"
        f"core.read_namespaced_pod('mine', '{namespace}');"
        f"core.patch_namespaced_pod('theirs', '{namespace}', "
        "{'metadata': {'annotations': {'x': 'y'}}})")], capture_output=True, text=True)
    assert r.returncode != 0 and "403" in r.stderr, r.stderr[-500:]
