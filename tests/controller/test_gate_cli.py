"""`ckpt-preempt gate` as a process: every bad flag, file or port is one line on stderr and exit
2, never a traceback; with good files it serves /healthz over TLS."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""
GATE = [sys.executable, "-m", "ckpt_preempt.controller.app.cli", "gate"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(d / "tls.key"),
                    "-out", str(d / "tls.crt"), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return d / "tls.crt", d / "tls.key"


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    return subprocess.run([*GATE, "--kubeconfig", str(kubeconfig), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


def _one_line(done: subprocess.CompletedProcess, starts: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and starts in lines[0], done.stderr


def test_missing_or_bad_certificate_is_one_line(tmp_path, certs):
    cert, key = certs
    _one_line(_run("--tls-key", str(key), tmp_path=tmp_path), "--tls-cert")
    _one_line(_run("--tls-cert", "/nonexistent", "--tls-key", str(key), tmp_path=tmp_path),
              "ckpt-preempt gate: error: argument --tls-cert: /nonexistent: no such file")
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    _one_line(_run("--tls-cert", str(tmp_path / "junk.pem"), "--tls-key", str(key),
                   tmp_path=tmp_path), "ckpt-preempt gate: cannot load the TLS certificate and "
                                       f"key: --tls-cert {tmp_path / 'junk.pem'}: not a PEM")
    _one_line(_run("--tls-cert", str(key), "--tls-key", str(cert), tmp_path=tmp_path),
              f"ckpt-preempt gate: cannot load the TLS certificate and key: --tls-cert {key}: "
              "not a PEM certificate")


def test_bad_config_and_port_in_use_are_one_line(tmp_path, certs):
    cert, key = certs
    (tmp_path / "bad.yaml").write_text("maxCheckpointSeconds: -1\n")
    _one_line(_run("--tls-cert", str(cert), "--tls-key", str(key), "--config",
                   str(tmp_path / "bad.yaml"), tmp_path=tmp_path), "ckpt-preempt gate: config")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = _run("--tls-cert", str(cert), "--tls-key", str(key), "--no-watch-cache",
                    "--listen", f"127.0.0.1:{port}", tmp_path=tmp_path)
    _one_line(done, f"ckpt-preempt gate: cannot listen on 127.0.0.1:{port}")
    _one_line(_run("--tls-cert", str(cert), "--tls-key", str(key), "--listen", "nowhere",
                   tmp_path=tmp_path), "--listen")


def test_serves_healthz_over_tls(tmp_path, certs):
    cert, key = certs
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*GATE, "--kubeconfig", str(kubeconfig), "--tls-cert", str(cert),
                             "--tls-key", str(key), "--no-watch-cache", "--listen",
                             f"127.0.0.1:{port}"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        assert "listening on 127.0.0.1" in proc.stderr.readline()
        ctx = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 10
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx,
                                    timeout=max(1.0, deadline - time.monotonic())) as r:
            assert r.status == 200 and r.read() == b"ok\n"
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode == 0
