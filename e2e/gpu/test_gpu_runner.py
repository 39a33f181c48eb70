"""Runs the GPU-runner suite (e2e/gpu/run.py) where real NVML is present; skips elsewhere."""

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
HERE = Path(__file__).resolve().parent


def _real_nvml() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _real_nvml(), reason="no NVIDIA driver (libnvidia-ml.so.1) here")
def test_gpu_runner_suite(tmp_path):
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, str(HERE / "run.py"), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["report"]["schema"] == "hwprobe/v1"
    assert result["failed"] == []
