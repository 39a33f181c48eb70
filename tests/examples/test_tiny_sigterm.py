"""examples/tiny_training on SIGTERM, as a real process: it saves, reports that checkpoint to
the agent (the real endpoint, a recording fake of its API writes) as its final one, exits
``sdk.EXIT_CHECKPOINTED`` well within a default grace period, and a restart resumes from that
step. A slow save (``--save-seconds``) survives more SIGTERMs, and a SIGKILL in the middle of
it leaves a whole checkpoint to resume from."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import ckpt_preempt_sdk as sdk
from ckpt_preempt.controller.agent import agent_process
from ckpt_preempt.policies.model.annotations import LAST_CHECKPOINT
from tests.controller.test_agent import Pod
from tests.controller.test_example import Lines

TRAIN = Path(__file__).resolve().parents[2] / "examples/tiny_training/train.py"
GRACE_SECONDS = 30  # Kubernetes' default terminationGracePeriodSeconds
WAIT_SECONDS = 60


def start(run: Path, agent_url: str, *args: str) -> tuple[subprocess.Popen, Lines]:
    proc = subprocess.Popen(
        [sys.executable, str(TRAIN), "--dir", str(run), "--steps", "100000000",
         "--step-seconds", "0.002", "--agent-url", agent_url, *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = Lines(proc)
    lines.wait_for("training from step")
    return proc, lines


def wait_for_checkpoint(run: Path) -> None:
    end = time.monotonic() + WAIT_SECONDS
    while not (run / "checkpoint.json").exists():
        assert time.monotonic() < end, "no periodic checkpoint"
        time.sleep(0.05)


def step_of(run: Path) -> int:
    return json.loads((run / "checkpoint.json").read_text())["step"]


def resume(run: Path, steps: int) -> str:
    r = subprocess.run([sys.executable, str(TRAIN), "--dir", str(run), "--steps", str(steps),
                        "--step-seconds", "0", "--agent-url", "http://127.0.0.1:1"],
                       capture_output=True, text=True, timeout=WAIT_SECONDS)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_sigterm_saves_reports_exits_75_and_the_restart_resumes_there(tmp_path):
    pod = Pod()
    server = agent_process.serve(pod.agent, "127.0.0.1", 0)
    run = tmp_path / "run"
    try:
        proc, lines = start(run, f"http://127.0.0.1:{server.server_address[1]}", "--every", "20")
        wait_for_checkpoint(run)  # it has trained a while
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(WAIT_SECONDS)
        took = time.monotonic() - sent
        saved = int(lines.wait_for("evicted: saved at step").split()[-1])
    finally:
        proc.kill()
        server.shutdown()
    assert code == sdk.EXIT_CHECKPOINTED == 75
    assert took < GRACE_SECONDS, f"{took:.1f} s: past a default grace period"
    assert saved > 0 and step_of(run) == saved
    assert pod.agent._saves_on_stop and pod.agent._final  # the loop said so, then reported it
    assert pod.writer.writes[-1][0] == "last-checkpoint" and LAST_CHECKPOINT in \
        pod.writer.annotations
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.json"]  # no temporary file
    out = resume(run, saved + 5)
    assert f"resumed from step {saved}\n" in out and "finished" in out


def test_more_sigterms_during_a_slow_save_do_not_abort_it(tmp_path):
    run = tmp_path / "run"
    proc, lines = start(run, "http://127.0.0.1:1", "--save-seconds", "2")
    try:
        proc.send_signal(signal.SIGTERM)
        stopping = int(lines.wait_for("stopping at step").split()[3].rstrip(":"))
        proc.send_signal(signal.SIGTERM)  # the save takes 2 s: these land during it
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_SECONDS) == sdk.EXIT_CHECKPOINTED
        assert int(lines.wait_for("evicted: saved at step").split()[-1]) == stopping
    finally:
        proc.kill()
    assert step_of(run) == stopping


def test_sigkill_in_the_middle_of_a_slow_save_leaves_a_whole_checkpoint(tmp_path):
    run = tmp_path / "run"
    proc, lines = start(run, "http://127.0.0.1:1", "--every", "50", "--save-seconds", "30")
    try:
        wait_for_checkpoint(run)  # a periodic one: what must survive
        before = step_of(run)
        proc.send_signal(signal.SIGTERM)
        lines.wait_for("stopping at step")
        proc.kill()  # the grace period ran out 30 s before the save could end
        assert proc.wait(WAIT_SECONDS) == -signal.SIGKILL
    finally:
        proc.kill()
    assert step_of(run) >= before  # whole (it parses), and no older than the periodic one
    kept = step_of(run)
    assert f"resumed from step {kept}\n" in resume(run, kept + 5)
