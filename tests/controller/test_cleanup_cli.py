"""``ckpt-preempt cleanup`` on bad input: one line on stderr, a non-zero exit, no traceback.
What it removes is tested against the real API server in e2e/test_helm_lifecycle.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLI = "ckpt_preempt.controller.cli"
REPO = Path(__file__).resolve().parents[2]


def _cleanup(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", CLI, "cleanup", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("args", "says"), [
    ([], "the following arguments are required: --namespace"),
    (["-n", "x", "--kubeconfig", "/etc/passwd"], "not a kubeconfig"),
    (["-n", "x", "--kubeconfig", "/nonexistent/kubeconfig"], "cannot load cluster credentials"),
    (["-n", "x", "--kubeconfig", "k", "--in-cluster"], "not allowed with argument"),
    (["-n", "x", "--log-level", "chatty"], "ckpt-preempt cleanup: "),
])
def test_bad_input_is_one_line_and_exit_code_2(args, says):
    r = _cleanup(*args)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_an_unreachable_api_server_is_one_line_and_exit_code_1(tmp_path):
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    r = _cleanup("-n", "x", "--kubeconfig", str(kubeconfig))
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("ckpt-preempt cleanup: ") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
