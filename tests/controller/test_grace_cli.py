"""`ckpt-preempt grace-webhook` as a process: every bad flag, file or port is one line on stderr
and exit 2, never a traceback; with good files it answers AdmissionReviews at /mutate over TLS
with the cap from the controller config, and /healthz."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GRACE = [sys.executable, "-m", "ckpt_preempt.controller.app.cli", "grace-webhook"]
PROG = "ckpt-preempt grace-webhook"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(d / "tls.key"),
                    "-out", str(d / "tls.crt"), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return d / "tls.crt", d / "tls.key"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GRACE, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def _one_line(done: subprocess.CompletedProcess, says: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr


def test_bad_flags_and_files_are_one_line(tmp_path, certs):
    cert, key = certs
    _one_line(_run("--tls-key", str(key)), "--tls-cert")
    _one_line(_run("--tls-cert", "/nonexistent", "--tls-key", str(key)),
              f"{PROG}: error: argument --tls-cert: /nonexistent: no such file")
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    _one_line(_run("--tls-cert", str(tmp_path / "junk.pem"), "--tls-key", str(key)),
              f"{PROG}: cannot load the TLS certificate and key: --tls-cert "
              f"{tmp_path / 'junk.pem'}: not a PEM certificate")
    _one_line(_run("--tls-cert", str(key), "--tls-key", str(cert)),
              f"{PROG}: cannot load the TLS certificate and key: --tls-cert {key}: not a PEM "
              "certificate")
    (tmp_path / "bad.yaml").write_text("maxCheckpointSeconds: -1\n")
    _one_line(_run("--tls-cert", str(cert), "--tls-key", str(key), "--config",
                   str(tmp_path / "bad.yaml")), f"{PROG}: config")
    _one_line(_run("--tls-cert", str(cert), "--tls-key", str(key), "--margin-seconds", "-1"),
              "--margin-seconds")
    _one_line(_run("--tls-cert", str(cert), "--tls-key", str(key), "--margin-seconds", "1.5"),
              "--margin-seconds")
    _one_line(_run("--tls-cert", str(cert), "--tls-key", str(key), "--listen", "nowhere"),
              "--listen")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = _run("--tls-cert", str(cert), "--tls-key", str(key), "--listen",
                    f"127.0.0.1:{port}")
    _one_line(done, f"{PROG}: cannot listen on 127.0.0.1:{port}")


def _post(url: str, body: object, ctx: ssl.SSLContext) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
        return json.loads(r.read())


def test_serves_reviews_at_mutate_with_the_configs_cap(tmp_path, certs):
    cert, key = certs
    (tmp_path / "config.yaml").write_text("maxCheckpointSeconds: 100\n")
    proc = subprocess.Popen([*GRACE, "--tls-cert", str(cert), "--tls-key", str(key), "--config",
                             str(tmp_path / "config.yaml"), "--margin-seconds", "20",
                             "--listen", "127.0.0.1:0"], cwd=ROOT, stderr=subprocess.PIPE,
                            text=True)
    try:
        first = proc.stderr.readline()
        assert f"{PROG}: listening on 127.0.0.1:" in first and "(cap 120 s)" in first, first
        port = int(first.split("127.0.0.1:")[1].split()[0])
        base = f"https://127.0.0.1:{port}"
        ctx = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(f"{base}/healthz", context=ctx, timeout=30) as r:
            assert r.status == 200 and r.read() == b"ok\n"
        pod = {"metadata": {"name": "p", "annotations": {
            "ckpt-preempt.io/checkpoint-seconds": "1h"}}, "spec": {}}
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE", "namespace": "team-a", "object": pod}}
        answer = _post(f"{base}/mutate", body, ctx)["response"]
        assert answer["allowed"] is True and answer["uid"] == "u-1"
        assert json.loads(base64.b64decode(answer["patch"])) == [
            {"op": "add", "path": "/spec/terminationGracePeriodSeconds", "value": 120}]
        with pytest.raises(urllib.error.HTTPError) as e:
            _post(f"{base}/validate", body, ctx)
        assert e.value.code == 404
        with pytest.raises(urllib.error.HTTPError) as e:
            _post(f"{base}/mutate", {"not": "a review"}, ctx)
        assert e.value.code == 400
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0
