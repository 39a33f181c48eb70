"""The PyTorch DCP example stopped by SIGTERM alone (no request before it, no agent): both
ranks save a DCP checkpoint of the step they stop at, the launcher exits
``sdk.EXIT_CHECKPOINTED`` (75), and a restart resumes from exactly that step and computes the
same losses as a run that never stopped (tolerance as in e2e/test_example_pytorch.py)."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

import ckpt_preempt_sdk as sdk
from tests.examples.pytorch_env import START_SECONDS, Output, losses, torch_python, trainer

_ = torch_python  # a fixture, used by name
NO_AGENT = ("--agent-url", "http://127.0.0.1:1")
STEPS_BEFORE_STOP = 10
STEPS_AFTER = 8
SAME_LOSS = {"rel": 1e-9, "abs": 1e-12}


def test_sigterm_saves_the_step_and_the_restart_continues_the_same_loss_curve(torch_python,
                                                                              tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(trainer(torch_python, run, "--step-seconds", "0.01", *NO_AGENT),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Output(proc)
    try:
        out.wait_for(r"^training from step 0$", START_SECONDS)
        end = time.monotonic() + START_SECONDS
        while len(losses(run)) < STEPS_BEFORE_STOP:
            assert time.monotonic() < end, losses(run)
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(START_SECONDS) == sdk.EXIT_CHECKPOINTED
    finally:
        if proc.poll() is None:
            proc.kill()
    stopped = int(out.wait_for(r"^evicted at step (\d+)$", 10)[1])
    assert (run / "checkpoints/latest").read_text() == f"step-{stopped:08d}"
    before = losses(run)
    assert [s for s, _ in before] == list(range(1, stopped + 1))

    steps = stopped + STEPS_AFTER
    again = subprocess.run(trainer(torch_python, run, "--steps", str(steps), *NO_AGENT),
                           capture_output=True, text=True, timeout=START_SECONDS)
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    assert f"resumed from step {stopped} (step-{stopped:08d})" in again.stdout, again.stdout
    after = losses(run)[len(before):]
    assert [s for s, _ in after] == list(range(stopped + 1, steps + 1))  # none lost or doubled

    ref = tmp_path / "reference"  # the same run, never stopped
    whole = subprocess.run(trainer(torch_python, ref, "--steps", str(steps), *NO_AGENT),
                           capture_output=True, text=True, timeout=START_SECONDS)
    assert whole.returncode == 0, whole.stdout + whole.stderr[-3000:]
    expected = dict(losses(ref))
    for step, loss in before + after:
        assert loss == pytest.approx(expected[step], **SAME_LOSS), step
