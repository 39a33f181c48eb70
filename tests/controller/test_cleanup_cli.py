"""``ckpt-preempt cleanup`` when the API server does not answer: one line on stderr naming it and
why, exit code 2 (as ``explain``), no traceback (bad flags and credentials:
tests/cli/test_bad_input.py; what it removes, against the real API server:
e2e/test_helm_lifecycle.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLI = "ckpt_preempt.controller.app.cli"
REPO = Path(__file__).resolve().parents[2]


def test_an_unreachable_api_server_is_one_line_and_exit_code_2(tmp_path):
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    r = subprocess.run([sys.executable, "-m", CLI, "cleanup", "-n", "x", "--kubeconfig",
                        str(kubeconfig)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("ckpt-preempt cleanup: cannot reach the API server at "
                               "127.0.0.1:9: connection refused") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stdout == ""
