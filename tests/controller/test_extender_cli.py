"""`ckpt-preempt extender` as a process: a port in use is one line and exit 2; the latency
benchmark runs as documented (small size; no timing asserted)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_extender_on_a_port_in_use_is_one_line(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "ckpt_preempt.controller.app.cli", "extender", "--kubeconfig",
             str(kubeconfig), "--listen", f"127.0.0.1:{port}"],
            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [f"ckpt-preempt extender: cannot listen on 127.0.0.1:{port}: "
                     f"{lines[0].rsplit(': ', 1)[-1]}"], done.stderr
    assert "Traceback" not in done.stderr


def test_extender_latency_benchmark_reports_both_verbs():
    out = subprocess.run(
        [sys.executable, "-m", "bench.extender_latency", "--nodes", "300", "--requests", "20"],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["nodes"] == 300 and doc["nodes_per_request"] == 144  # 48 % of 300
    for verb in ("filter", "prioritize"):
        assert 0 < doc[verb]["p50_ms"] <= doc[verb]["p99_ms"] <= doc[verb]["max_ms"]
    assert doc["target_p99_ms"] == 10.0 and isinstance(doc["meets_target"], bool)
