"""``simulate`` runs its replays side by side and tells a person how far it got: the same results
whatever the number of processes, one start line and one line per replay when stderr is a pipe,
a bar that reaches the end on a terminal, nothing with --no-progress."""

import io
import json
import subprocess
import sys

from bench.sim_speed import comparable
from ckpt_preempt.controller.app import sim_runner
from ckpt_preempt.policies.sim import experiment

SMALL = ["--scale", "0.02", "--floor-cuts", "2", "--seeds", "2",
         "--policies", "kube-default,checkpoint-aware-drain-timing"]


def _simulate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ckpt_preempt.controller.app.cli", "simulate", "--json", *args],
        capture_output=True, text=True, timeout=300)


def test_processes_change_nothing_but_time_and_a_pipe_gets_one_line_per_replay():
    one = _simulate(*SMALL, "--jobs", "1")
    two = _simulate(*SMALL, "--jobs", "2")
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    assert comparable(json.loads(one.stdout)) == comparable(json.loads(two.stdout))
    lines = two.stderr.strip().splitlines()
    assert lines[0].startswith("simulate: openb/stress, seeds 1..2, ")
    assert "jobs on" in lines[0] and "2 policies" in lines[0] and "2 processes" in lines[0]
    assert "expected about" in lines[0]
    done = [line for line in lines[1:] if line.startswith("simulate: [")]
    assert len(done) == 4  # 2 seeds x 2 policies
    assert {line.split("]")[0] for line in done} == {f"simulate: [{k}/4" for k in range(1, 5)}
    assert all("GPU-h lost" in line for line in done)


def test_no_progress_is_silent():
    quiet = _simulate(*SMALL, "--jobs", "2", "--no-progress")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_a_terminal_gets_a_bar_that_ends_full():
    out = io.StringIO()
    cell = experiment.Cell(scale=0.02)
    result = sim_runner.run_cell(cell, [1], ["kube-default"], sim_runner.Trace(workload="openb"),
                                 processes=1, show=True, out=out, terminal=lambda: True)
    assert result.summary_of("kube-default") is not None
    text = out.getvalue()
    assert "simulate: openb/stress" in text and "100%" in text
