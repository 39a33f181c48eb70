"""The example training loop: it resumes, keeps training after a checkpoint request and a
cancel, and on SIGTERM saves and exits ``sdk.EXIT_CHECKPOINTED`` (75, never 0). The agent here
is the real one (its endpoint and signal hook) with a recording fake of its API writes;
e2e/test_controller_agent.py runs the same loop against a real API server."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import ckpt_preempt_sdk as sdk
from ckpt_preempt.controller.agent import agent, agent_process
from tests.controller.test_agent import DONE, Pod

TRAIN = Path(__file__).resolve().parents[2] / "examples/tiny_training/train.py"
WAIT_SECONDS = 60.0


def run(tmp_path: Path, steps: int) -> str:
    r = subprocess.run([sys.executable, str(TRAIN), "--dir", str(tmp_path), "--steps",
                        str(steps), "--every", "20", "--step-seconds", "0",
                        "--agent-url", "http://127.0.0.1:1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_resumes_from_the_last_checkpoint(tmp_path):
    assert "finished" in run(tmp_path, 40)
    out = run(tmp_path, 60)
    assert "resumed from step 40" in out and "finished" in out


class Lines:
    """A process's output lines, read in the background."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.q: queue.Queue[str] = queue.Queue()
        self.all: list[str] = []
        threading.Thread(target=lambda: [self.q.put(line) for line in proc.stdout],
                         daemon=True).start()

    def wait_for(self, text: str) -> str:
        end = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < end:
            try:
                line = self.q.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                break
            self.all.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} in {self.all}")


def start_loop(tmp_path: Path, agent_url: str) -> tuple[subprocess.Popen, Lines]:
    proc = subprocess.Popen(
        [sys.executable, str(TRAIN), "--dir", str(tmp_path / "run"), "--steps", "100000000",
         "--every", "100000000", "--step-seconds", "0.005", "--pidfile",
         str(tmp_path / "train.pid"), "--agent-url", agent_url],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = Lines(proc)
    lines.wait_for("training from step")
    return proc, lines


def test_evicted_loop_saves_and_exits_75(tmp_path):
    proc, lines = start_loop(tmp_path, "http://127.0.0.1:1")
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_SECONDS) == sdk.EXIT_CHECKPOINTED
        saved = lines.wait_for("evicted: saved at step")
    finally:
        proc.kill()
    state = json.loads((tmp_path / "run/checkpoint.json").read_text())
    assert saved.split()[-1] == str(state["step"])


def test_request_is_acked_and_training_goes_on_through_a_cancel(tmp_path):
    pod = Pod(agent.SignalHook(pidfile=str(tmp_path / "train.pid")))
    server = agent_process.serve(pod.agent, "127.0.0.1", 0)
    stop = threading.Event()

    def run_hooks() -> None:  # the agent's hook thread
        while not stop.is_set():
            pod.agent.process_hooks(block_seconds=0.1)

    threading.Thread(target=run_hooks, daemon=True).start()
    proc, lines = start_loop(tmp_path, f"http://127.0.0.1:{server.server_address[1]}")
    try:
        pod.request("p1")  # the agent signals SIGUSR1; the loop saves and acks through the SDK
        line = lines.wait_for("checkpoint on request for plan p1")
        assert "acked=True" in line and "training on" in line
        assert pod.writer.acks() == [("ack", "p1")]
        assert pod.writer.annotations[DONE] == "p1"
        saved = json.loads((tmp_path / "run/checkpoint.json").read_text())["step"]
        pod.seen()
        pod.withdraw()  # the plan aborts: SIGUSR2, and a cancelled event
        lines.wait_for("checkpoint request for plan p1 cancelled")
        pod.request("p2")  # a new plan, still the same process
        assert "acked=True" in lines.wait_for("checkpoint on request for plan p2")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_SECONDS) == sdk.EXIT_CHECKPOINTED
        last = int(lines.wait_for("evicted: saved at step").split()[-1])
        assert last > saved  # it trained between the request and the eviction
    finally:
        proc.kill()
        stop.set()
        server.shutdown()
    acks, final = pod.writer.acks()[:-1], pod.writer.acks()[-1]
    assert acks == [("ack", "p1"), ("ack", "p2")]
    assert final[0] == "last-checkpoint"  # the checkpoint saved on SIGTERM, reported

