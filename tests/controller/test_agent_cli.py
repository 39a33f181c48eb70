"""``ckpt-preempt agent`` on bad input: one line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLI = "ckpt_preempt.controller.app.cli"
REPO = Path(__file__).resolve().parents[2]
POD = ["--pod", "p", "--namespace", "n"]


@pytest.mark.parametrize(("args", "says"), [
    (["--namespace", "n"], "--pod and --namespace"),
    ([*POD, "--cancel-exec", "true"], "--cancel-exec needs --exec"),
    ([*POD, "--http-cancel", "http://x"], "--http-cancel needs --http"),
    ([*POD, "--exec", "'unbalanced"], "--exec: No closing quotation"),
    ([*POD, "--exec", "   "], "--exec: empty command"),
    ([*POD, "--signal-pid", "1", "--signal", "SIGNOPE"], "unknown signal 'SIGNOPE'"),
    ([*POD, "--signal-pid", "1", "--cancel-signal", "nope"], "unknown signal 'nope'"),
    ([*POD, "--listen", "localhost"], "expected HOST:PORT"),
    ([*POD, "--listen", "127.0.0.1:99999"], "expected HOST:PORT"),
    ([*POD, "--log-level", "chatty"], "ckpt-preempt agent: "),
    ([*POD, "--kubeconfig", "/nonexistent/kubeconfig"], "cannot load Kubernetes credentials"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, says):
    r = subprocess.run([sys.executable, "-m", CLI, "agent", *args], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
