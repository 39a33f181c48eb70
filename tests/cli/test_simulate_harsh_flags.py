"""simulate's flags for a harsher world: silent share, lying reports, the planner's restart."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_preempt.controller.app import cmd_simulate

ROOT = Path(__file__).resolve().parents[2]


def _args(*extra: str):
    parser = argparse.ArgumentParser()
    cmd_simulate.add_arguments(parser)
    return parser.parse_args(list(extra))


def test_harsh_flags_reach_the_generator_and_the_simulator():
    _, cell, _ = cmd_simulate.validate(_args(
        "--share-silent", "0.25", "--lie-share", "0.1", "--lie-minutes", "30",
        "--report-lag-seconds", "1200", "--planner-restart-seconds", "150"))
    assert cell.params.share_silent == 0.25
    c = cell.config
    assert (c.lie_share, c.lie_minutes, c.report_lag_seconds) == (0.1, 30.0, 1200.0)
    assert c.planner_restart == (150.0, 0.0)  # the flag, per GPU, as an operator sets one knob


def test_declared_end_flags_reach_the_simulator_and_default_to_the_worlds():
    _, cell, _ = cmd_simulate.validate(_args(
        "--declared-end-share", "0.3", "--declared-end-error", "0.1"))
    assert (cell.config.declared_end_share, cell.config.declared_end_error) == (0.3, 0.1)
    _, plain, _ = cmd_simulate.validate(_args())  # the realistic world: half, from progress
    assert (plain.config.declared_end_share, plain.config.declared_end_error) == (0.5, 0.25)
    assert plain.config.declared_end_from_progress is True
    _, exact, _ = cmd_simulate.validate(_args("--world", "optimistic"))
    assert (exact.config.declared_end_share, exact.config.declared_end_error) == (1.0, 0.0)
    assert exact.config.declared_end_from_progress is False
    _, off, _ = cmd_simulate.validate(_args("--no-declared-end-from-progress"))
    assert off.config.declared_end_from_progress is False
    _, on, _ = cmd_simulate.validate(_args("--world", "optimistic", "--declared-end-from-progress"))
    assert on.config.declared_end_from_progress is True


def test_the_optimistic_world_is_nobody_silent_or_lying_and_the_realistic_a_quarter_silent():
    _, cell, _ = cmd_simulate.validate(_args("--world", "optimistic"))
    assert cell.params.share_silent == 0.0 and cell.config.lie_share == 0.0
    _, real, _ = cmd_simulate.validate(_args())
    assert real.params.share_silent == 0.25 and real.config.lie_share == 0.0
    _, flag, _ = cmd_simulate.validate(_args("--share-silent", "0.1"))
    assert flag.params.share_silent == 0.1
    c = cell.config
    # the restore time: its per-GPU term, and the fixed per-job term once per workload
    assert c.planner_restart == (c.restore_seconds, c.restore_job_gpu_seconds)


@pytest.mark.parametrize(("flag", "value"), [
    ("--lie-share", "1.5"), ("--lie-share", "nan"), ("--lie-minutes", "-1"),
    ("--share-silent", "-0.1"), ("--planner-restart-seconds", "inf"),
    ("--declared-end-share", "2"), ("--declared-end-error", "-0.5"),
])
def test_a_bad_harsh_flag_is_one_line_and_exit_2(flag, value):
    out = subprocess.run([sys.executable, "-m", "ckpt_preempt.controller.app.cli", "simulate",
                          flag, value], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert flag in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 3  # argparse: usage + one error line
