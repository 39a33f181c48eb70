"""The checkpoint agent on its own SIGTERM (the kubelet sends it to every container of a deleted
pod at once): it keeps its endpoint up until a workload that saves on SIGTERM has reported its
final checkpoint, writes that report to the pod, and only then exits. A workload that never
said it saves on SIGTERM is not waited for.

The decisions with a recording writer first; then the real ``ckpt-preempt agent`` process and
the real example loop, with a small stand-in for the API server (the agent's only writes are
PATCHes of its own pod)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import ckpt_preempt_sdk as sdk
from ckpt_preempt.controller.agent import agent, agent_process
from ckpt_preempt.policies.model.annotations import LAST_CHECKPOINT
from tests.controller.test_agent import Pod
from tests.controller.test_example import Lines

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples/tiny_training/train.py"
WAIT_SECONDS = 60


def checkpointed_writes(pod: Pod) -> list[tuple[str, ...]]:
    return [w for w in pod.writer.writes if w[0] == "last-checkpoint"]


# ---------------------------------------------------------------------- decisions
def test_a_workload_that_does_not_save_on_sigterm_is_not_waited_for():
    pod = Pod()
    assert pod.agent.finish(final_seconds=WAIT_SECONDS) == \
        "the workload does not save on SIGTERM"
    assert pod.writer.writes == []


def test_the_agent_waits_for_the_final_report_and_has_written_it_when_it_returns():
    pod = Pod()
    pod.agent.saves_on_stop()
    pod.agent.checkpointed()  # a periodic one: not the last
    reported = threading.Event()

    def workload() -> None:  # saves after the agent's SIGTERM, then reports
        pod.agent.checkpointed(final=True)
        reported.set()

    t = threading.Timer(0.2, workload)
    t.start()
    why = pod.agent.finish(final_seconds=WAIT_SECONDS)
    t.join()
    assert why == "the final checkpoint was reported" and reported.is_set()
    assert len(checkpointed_writes(pod)) == 2


def test_a_final_report_whose_write_failed_is_written_before_the_agent_exits():
    pod = Pod()
    pod.agent.saves_on_stop()
    real, calls = pod.writer.checkpointed, []

    def flaky(*, at: float) -> None:
        calls.append(at)
        if len(calls) == 1:
            raise OSError("connection reset")
        real(at=at)

    pod.writer.checkpointed = flaky
    with pytest.raises(OSError):  # the SDK gets a 503; the agent still owes this write
        pod.agent.checkpointed(final=True)
    assert checkpointed_writes(pod) == []
    why = pod.agent.finish(final_seconds=WAIT_SECONDS)
    assert why.endswith("the last report written again"), why
    assert len(checkpointed_writes(pod)) == 1 and calls[0] == calls[1]


def test_the_wait_ends_when_the_signalled_workload_is_gone(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    pod = Pod(agent.SignalHook(pid=child.pid))
    pod.agent.saves_on_stop()
    assert pod.agent.finish(final_seconds=WAIT_SECONDS) == \
        "the workload exited without a final checkpoint report"


def test_the_wait_is_bounded():
    pod = Pod()
    pod.agent.saves_on_stop()
    assert pod.agent.finish(final_seconds=0.2) == "no final checkpoint report within 0.2 s"


def test_the_sdk_says_it_saves_on_sigterm_only_once_the_handler_is_installed():
    pod = Pod()
    server = agent_process.serve(pod.agent, "127.0.0.1", 0)
    ckpt = sdk.Checkpointer(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        ckpt.status()
        assert not pod.agent._saves_on_stop
        stop = ckpt.install_stop_handler()
        stop.restore()  # the test's own SIGTERM handling stays as it was
        ckpt.status()
        assert pod.agent._saves_on_stop and not pod.agent._final
        assert ckpt.saved_on_stop() == sdk.EXIT_CHECKPOINTED
        assert pod.agent._final and len(checkpointed_writes(pod)) == 1
    finally:
        server.shutdown()


# ---------------------------------------------------------------------- real processes
class FakeApiServer:
    """Answers the agent's watch of its pod (held open, no events) and records its PATCHes."""

    def __init__(self) -> None:
        self.patches: list[tuple[float, dict]] = []
        self.closing = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the list-and-watch: nothing changes on this pod
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.flush()
                outer.closing.wait(30)

            def do_PATCH(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.patches.append((time.monotonic(), json.loads(body)))
                pod = {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "trainer", "namespace": "team"}}
                data = json.dumps(pod).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def kubeconfig(self, path: Path) -> Path:
        url = f"http://127.0.0.1:{self.http.server_address[1]}"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        return path

    def close(self) -> None:
        self.closing.set()
        self.http.shutdown()


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_to_agent_and_loop_together_the_final_checkpoint_reaches_the_pod(tmp_path):
    api, port = FakeApiServer(), free_port()
    agent_log = open(tmp_path / "agent.log", "w+")  # noqa: SIM115
    agent_proc = subprocess.Popen(
        [sys.executable, "-m", "ckpt_preempt.controller.app.cmd_agent",
         "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")), "--pod", "trainer",
         "--namespace", "team", "--listen", f"127.0.0.1:{port}",
         "--signal-pidfile", str(tmp_path / "train.pid")],
        cwd=REPO, stdout=agent_log, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    probe = sdk.Checkpointer(f"http://127.0.0.1:{port}")
    end = time.monotonic() + WAIT_SECONDS
    while True:  # the agent's endpoint is up before the loop starts, as a sidecar's would be
        try:
            probe.status()
            break
        except sdk.AgentUnavailable:
            assert time.monotonic() < end, "the agent's endpoint never came up"
            time.sleep(0.1)
    loop = subprocess.Popen(
        [sys.executable, str(TRAIN), "--dir", str(tmp_path / "run"), "--steps", "100000000",
         "--every", "100", "--step-seconds", "0.002", "--save-seconds", "1",
         "--pidfile", str(tmp_path / "train.pid"), "--agent-url", f"http://127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = Lines(loop)
    try:
        lines.wait_for("training from step")
        while not api.patches:  # a periodic report reached the pod: the loop has told the
            assert time.monotonic() < end, "no periodic report"  # agent it saves on SIGTERM
            time.sleep(0.05)
        sent = time.monotonic()
        agent_proc.send_signal(signal.SIGTERM)  # the agent first: the harder order
        loop.send_signal(signal.SIGTERM)
        assert loop.wait(WAIT_SECONDS) == sdk.EXIT_CHECKPOINTED
        saved = int(lines.wait_for("evicted: saved at step").split()[-1])
        assert agent_proc.wait(WAIT_SECONDS) == 0
    finally:
        for p in (loop, agent_proc):
            p.kill()
        api.close()
    agent_log.seek(0)
    log = agent_log.read()
    assert "the final checkpoint was reported" in log, log
    after = [body for at, body in api.patches if at > sent]  # the final report (and perhaps
    assert after and all(LAST_CHECKPOINT in b["metadata"]["annotations"] for b in after), \
        (api.patches, log)  # a periodic one the loop made in the step it stopped after)
    assert json.loads((tmp_path / "run/checkpoint.json").read_text())["step"] == saved
