"""Shared by the PyTorch example's tests (tests/examples, e2e/test_example_pytorch.py): the
example venv's python as a fixture, the trainer's command line, its output and its losses.

torch lives in its own cached venv (examples/pytorch_dcp/torch_venv.py), never in the product's.
When it cannot be installed the tests skip, unless CKPT_REQUIRE_TORCH=1 (CI), where they fail.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/pytorch_dcp"
REQUIRE_TORCH_ENV = "CKPT_REQUIRE_TORCH"
INSTALL_TIMEOUT_SECONDS = 35 * 60  # torch_venv.py gives pip 30 min; a cold install took 7
START_SECONDS = 180  # importing torch twice on a loaded 2-core machine took up to 40 s


@pytest.fixture(scope="session")
def torch_python() -> Path:
    """The example venv's python, installed on first use (cold 4-7 min, then cached)."""
    try:
        r = subprocess.run([sys.executable, str(EXAMPLE / "torch_venv.py")], capture_output=True,
                           text=True, timeout=INSTALL_TIMEOUT_SECONDS)
        why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
    except subprocess.TimeoutExpired:
        r, why = None, f"torch_venv.py took over {INSTALL_TIMEOUT_SECONDS} s"
    if r is None or r.returncode != 0:
        if os.environ.get(REQUIRE_TORCH_ENV) == "1":
            pytest.fail(f"{why} [{REQUIRE_TORCH_ENV}=1, so this is a failure]", pytrace=False)
        pytest.skip(f"the PyTorch example's venv could not be installed: {why}")
    return Path(r.stdout.strip())


def trainer(python: Path, run: Path, *args: str) -> list[str]:
    return [str(python), str(EXAMPLE / "train.py"), "--dir", str(run), *args]


class Output:
    """A process's output lines, read in the background."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.q: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=lambda: [self.q.put(line) for line in proc.stdout],
                         daemon=True).start()

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = self.q.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            if m := re.search(pattern, line):
                return m
        raise AssertionError(f"no line matching {pattern!r} in {self.seen}")


def losses(run: Path) -> list[tuple[int, float]]:
    """(step, loss) as rank 0 logged them, in order (a resumed run appends)."""
    path = run / "loss.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    return [(r["step"], r["loss"]) for r in rows]
