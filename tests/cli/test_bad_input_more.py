"""More bad input, as a user meets it: broken files, an API server that cannot be reached or is
reached without TLS verification, a webhook's unusable TLS files, hwprobe's arguments checked
before NVML. The same rule as tests/cli/test_bad_input.py (whose helpers run each command in a
fresh process with no credentials and no NVML): one line on stderr naming what is wrong, the
right exit code, no traceback.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.cli.test_bad_input import (
    CONTROLLER,
    HWPROBE,
    MISSING,
    REPO,
    assert_one_line,
    bare_env,
    run,
)

BROKEN_JSON = '{"now": 5,\n "nodes": []\n "pods": []}\n'  # a comma missing after line 2
BROKEN_YAML = "namespaces: [team-a\nleaseName: x\n"  # a flow sequence left open


def kubeconfig(tmp: Path, server: str, *, insecure: bool = False) -> Path:
    path = tmp / "kubeconfig"
    skip = ", insecure-skip-tls-verify: true" if insecure else ""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'{skip}}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    return path


def refused_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        return closed.getsockname()[1]  # closed again: connecting is refused


# ------------------------------------------------------------------ 1. a file that does not parse
def test_a_malformed_json_snapshot_is_one_line_with_its_line_and_column(tmp_path):
    snap = tmp_path / "snapshot.json"
    snap.write_text(BROKEN_JSON)
    assert_one_line(run(CONTROLLER, ["explain", "--snapshot", str(snap)], tmp_path),
                    "ckpt-preempt explain",
                    f"{snap}: not valid JSON at line 3 column 2: Expecting ',' delimiter", 2)


@pytest.mark.parametrize("args", [["explain", "ns/pod"], ["run", "--listen", "127.0.0.1:0"],
                                  ["extender", "--listen", "127.0.0.1:0"]],
                         ids=["explain", "run", "extender"])
def test_a_malformed_yaml_config_is_one_line_with_its_line_and_column(args, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(BROKEN_YAML)
    assert_one_line(run(CONTROLLER, [*args, "--config", str(config)], tmp_path), "ckpt-preempt",
                    f"config {config}: not valid YAML at line 2 column 10: expected ',' or ']'",
                    2)


def test_a_malformed_yaml_kubeconfig_is_one_line_with_its_line_and_column(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(BROKEN_YAML)
    assert_one_line(run(CONTROLLER, ["cleanup", "-n", "x", "--kubeconfig", str(config)],
                        tmp_path), "ckpt-preempt cleanup",
                    f"kubeconfig {config}: not valid YAML at line 2 column 10", 2)


# ---------------------------------------------------------------- 2. an unreachable API server
@pytest.mark.parametrize("args", [["explain", "ns/pod"], ["cleanup", "-n", "x"],
                                  ["cleanup", "-n", "x", "--dry-run"]],
                         ids=["explain", "cleanup", "cleanup dry run"])
def test_an_unreachable_api_server_is_named_with_why_and_exit_2(args, tmp_path):
    port = refused_port()
    config = kubeconfig(tmp_path, f"https://127.0.0.1:{port}")
    done = run(CONTROLLER, [*args, "--kubeconfig", str(config)], tmp_path)
    assert_one_line(done, "ckpt-preempt",
                    f"cannot reach the API server at 127.0.0.1:{port}: connection refused", 2)


def test_run_logs_one_line_per_retry_step_and_none_of_urllib3s(tmp_path):
    port = refused_port()
    config = kubeconfig(tmp_path, f"https://127.0.0.1:{port}")
    home = tmp_path / "home"
    home.mkdir()
    with subprocess.Popen([sys.executable, "-m", CONTROLLER, "run", "--kubeconfig", str(config),
                           "--listen", "127.0.0.1:0"], cwd=REPO, env=bare_env(home),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        time.sleep(6)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    records = [json.loads(line) for line in err.splitlines()]
    assert not [r for r in records if r["logger"].startswith("urllib3")], err
    retries = [r["msg"] for r in records if "failed (attempt" in r["msg"]]
    assert retries, err
    why = f"cannot reach the API server at 127.0.0.1:{port}: connection refused; retrying in"
    assert all(why in msg for msg in retries), retries
    steps = [msg.split(" (attempt ")[0] + msg.split(" (attempt ")[1].split(")")[0]
             for msg in retries]
    assert len(steps) == len(set(steps)), retries  # each loop's attempt n is logged once
    discovery = [r for r in records if r["logger"] == "ckpt_preempt.group_crds"]
    assert len(discovery) == 1, discovery  # asked every second, said once
    assert len(records) < 60, err


# ---------------------------------------------------------- 3. TLS verification turned off
@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> dict[str, Path]:
    """Two self-signed certificates and their keys (a.crt, a.key, b.crt, b.key)."""
    d = tmp_path_factory.mktemp("tls")
    for name in ("a", "b"):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                        "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.crt")],
                       check=True, capture_output=True)
    (d / "junk.pem").write_text("not a PEM file\n")
    return {p.name: p for p in d.iterdir()}


class EmptyLists(BaseHTTPRequestHandler):
    """An API server whose every list is empty."""

    def do_GET(self):
        body = json.dumps({"kind": "List", "apiVersion": "v1", "items": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_insecure_skip_tls_verify_is_one_warning_not_one_per_request(certificates, tmp_path):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certificates["a.crt"], certificates["a.key"])
    server = ThreadingHTTPServer(("127.0.0.1", 0), EmptyLists)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = kubeconfig(tmp_path, f"https://127.0.0.1:{server.server_address[1]}",
                            insecure=True)
        done = run(CONTROLLER, ["explain", "ns/pod", "--kubeconfig", str(config)], tmp_path)
    finally:
        server.shutdown()
    assert done.returncode == 2, done.stderr
    assert "InsecureRequestWarning" not in done.stderr, done.stderr
    warning, error = done.stderr.splitlines()  # exactly two lines
    assert warning.startswith("TLS certificate verification is off for the API server https://")
    assert error == "ckpt-preempt explain: pod ns/pod not found"


# ---------------------------------------------------------------- 4. a webhook's TLS files
@pytest.mark.parametrize("command", ["gate", "grace-webhook"])
@pytest.mark.parametrize(("cert", "key", "says"), [
    ("b.crt", "a.key", "--tls-key {key} does not match the certificate in --tls-cert {cert}"),
    ("junk.pem", "a.key", "--tls-cert {cert}: not a PEM certificate"),
    ("a.key", "a.crt", "--tls-cert {cert}: not a PEM certificate"),
    ("a.crt", "junk.pem", "--tls-key {key}: not a PEM private key"),
], ids=["key of another certificate", "junk certificate", "swapped", "junk key"])
def test_unusable_tls_files_are_named_with_what_is_wrong(command, cert, key, says, certificates,
                                                         tmp_path):
    cert, key = certificates[cert], certificates[key]
    done = run(CONTROLLER, [command, "--tls-cert", str(cert), "--tls-key", str(key),
                            "--listen", "127.0.0.1:0"], tmp_path)
    assert_one_line(done, f"ckpt-preempt {command}: cannot load the TLS certificate and key: ",
                    says.format(cert=cert, key=key), 2)
    assert "PEM lib" not in done.stderr


# ------------------------------------------------------ 5. a path that is missing or a directory
@pytest.mark.parametrize(("args", "says"), [
    (["explain", "--snapshot", "{dir}"], "argument --snapshot: {dir}: is a directory"),
    (["explain", "ns/pod", "--config", "{dir}"], "argument --config: {dir}: is a directory"),
    (["run", "--config", "{dir}"], "argument --config: {dir}: is a directory"),
    (["simulate", "--pods", "{dir}"], "argument --pods: {dir}: is a directory"),
    (["simulate", "--protocol", "fgd", "--pods", "{dir}"],
     "argument --pods: {dir}: is a directory"),
    (["simulate", "--nodes", f"{MISSING}/n.csv"],
     f"argument --nodes: {MISSING}/n.csv: no such file"),
    (["gate", "--tls-cert", "{dir}", "--tls-key", "{dir}"],
     "argument --tls-cert: {dir}: is a directory"),
    (["grace-webhook", "--tls-cert", "{file}", "--tls-key", f"{MISSING}/k"],
     f"argument --tls-key: {MISSING}/k: no such file"),
    (["simulate", "--plot", "/proc/x.png"], "--plot: directory /proc is not writable"),
], ids=["snapshot dir", "explain config dir", "run config dir", "simulate pods dir",
        "fgd pods dir", "simulate nodes missing", "gate cert dir", "grace key missing",
        "plot in /proc"])
def test_a_path_that_cannot_be_used_is_said_in_words(args, says, tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    fill = {"dir": str(tmp_path), "file": str(file)}
    done = run(CONTROLLER, [a.format(**fill) for a in args], tmp_path)
    assert_one_line(done, "ckpt-preempt", says.format(**fill), 2)
    assert "Errno" not in done.stderr


def test_a_file_error_no_command_caught_is_said_in_words(monkeypatch, capsys):
    from ckpt_preempt.controller.app import cli, cmd_simulate

    def run_that_fails(args):
        raise IsADirectoryError(21, "Is a directory", "/var/x")

    monkeypatch.setattr(cmd_simulate, "run", run_that_fails)
    assert cli.main(["simulate"]) == 2
    assert capsys.readouterr().err == "ckpt-preempt: /var/x: is a directory\n"


# -------------------------------------------------- 6. hwprobe: its arguments before NVML
@pytest.mark.parametrize(("args", "says"), [
    (["verify", "--expect", "no-such-machine"],
     "hwprobe verify: error: argument --expect: unknown spec 'no-such-machine'"),
    (["report", "--expect", f"{MISSING}/spec.yaml"],
     f"hwprobe report: error: argument --expect: cannot read spec {MISSING}/spec.yaml: no such"),
    (["serve", "--expect", "{broken}", "--no-publish"],
     "hwprobe serve: error: argument --expect: spec {broken}: not valid YAML at line 2 column 10"),
    (["publish"], "hwprobe publish: error: publish needs --node NAME"),
], ids=["verify unknown spec", "report missing spec", "serve broken spec", "publish no node"])
def test_hwprobe_refuses_bad_arguments_before_looking_for_nvml(args, says, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text(BROKEN_YAML)
    done = run(HWPROBE, [a.format(broken=broken) for a in args], tmp_path)
    assert_one_line(done, "hwprobe", says.format(broken=broken), 2)
    assert "NVML" not in done.stderr
