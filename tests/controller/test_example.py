"""The example training loop resumes from its last checkpoint and runs without an agent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TRAIN = Path(__file__).resolve().parents[2] / "examples/tiny_training/train.py"


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
