"""The checkpoint agent on its own (no controller): each hook kind acknowledges a drain request
written the way the controller writes it; the SDK reports periodic checkpoints."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from controller import sdk
from e2e import kube
from e2e.test_controller_support import (
    free_port,
    grant_agent,
    start_agent,
    user_kubeconfig,
)
from policies import lifecycle

pytestmark = pytest.mark.e2e


def _request(cluster, namespace, pod, plan):
    now = time.time()
    raw = lifecycle.drain_to_annotation(lifecycle.DrainRequest(plan=plan, requested=now,
                                                       deadline=now + 30))
    cluster.core.patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": {
        lifecycle.DRAIN_ANNOTATION: raw}}})


def _acked(cluster, namespace, pod, plan):
    ann = cluster.core.read_namespaced_pod(pod, namespace).metadata.annotations or {}
    return ann.get(lifecycle.DONE_ANNOTATION) == plan or kube.NotYet(str(ann))


def _up(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("hook", ["exec", "http", "sdk"])
def test_agent_acknowledges_through_each_hook(cluster, namespace, tmp_path, hook):
    kube.create_pod(cluster, namespace, "w", checkpoint="on-request")
    grant_agent(cluster, namespace, "w")
    kubeconfig = user_kubeconfig(cluster, "ckpt-preempt-agent", tmp_path / "kc")
    port, server, seen = free_port(), None, []
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
    agent = start_agent(cluster, kubeconfig, namespace, "w", tmp_path, *args, port=port)
    try:
        kube.wait_for("the agent endpoint", lambda: _up(port), timeout=30)
        client = sdk.Checkpointer(f"http://127.0.0.1:{port}", poll_seconds=0)
        if hook == "sdk":  # periodic report first, then a request answered by polling
            client.checkpointed()
            kube.wait_for("last-checkpoint", lambda: "ckpt-preempt.io/last-checkpoint" in (
                cluster.core.read_namespaced_pod("w", namespace).metadata.annotations or {}))
        time.sleep(1)  # the agent's watch is established
        _request(cluster, namespace, "w", "plan-1")
        if hook == "sdk":
            kube.wait_for("the SDK to see the request", client.requested, timeout=30)
            assert client.done()
        kube.wait_for("the ack", lambda: _acked(cluster, namespace, "w", "plan-1"), timeout=30)
        if hook == "exec":
            assert marker.read_text() == "plan-1"
        if hook == "http":
            assert seen and seen[0]["plan"] == "plan-1"
        # a repeated request for the same plan is not run twice; a malformed one is ignored
        _request(cluster, namespace, "w", "plan-1")
        cluster.core.patch_namespaced_pod("w", namespace, {"metadata": {"annotations": {
            lifecycle.DRAIN_ANNOTATION: "{oops"}}})
        time.sleep(2)
        if hook == "http":
            assert len(seen) == 1
        assert agent.poll() is None
    finally:
        agent.terminate()
        agent.wait(10)
        if server:
            server.shutdown()


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
