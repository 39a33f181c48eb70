"""Shared helpers for the extender e2e tests (no tests here): start ``ckpt-preempt extender``
as a subprocess, and the KubeSchedulerConfiguration that points kube-scheduler at it (the same
fields as deploy/scheduler/scheduler-config.yaml)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from e2e.harness import kube
from e2e.harness.controller_run import REPO
from e2e.harness.localcluster import free_port

SAMPLE = REPO / "deploy" / "scheduler" / "scheduler-config.yaml"


def scheduler_config(url: str, *, preempt: bool = True, timeout: str | None = None) -> dict:
    """The sample configuration with its extender pointed at ``url``; without the preempt verb
    when ``preempt`` is False; with another ``httpTimeout`` when given."""
    sample = yaml.safe_load(SAMPLE.read_text())
    (ext,) = sample["extenders"]
    ext["urlPrefix"] = url
    if not preempt:
        del ext["preemptVerb"]
    if timeout:
        ext["httpTimeout"] = timeout
    return {"extenders": [ext]}


@contextmanager
def running_extender(c: kube.Cluster, tmp: Path, *, log_name: str = "extender.log",
                     config: dict | None = None) -> Iterator[tuple[subprocess.Popen, str]]:
    """``ckpt-preempt extender`` on a free port; yields (process, url prefix) once /readyz is
    200 (its watch cache has synced)."""
    port = free_port()
    args = [sys.executable, "-m", "ckpt_preempt.controller.app.cli", "extender",
            "--kubeconfig", str(c.kubeconfig), "--listen", f"127.0.0.1:{port}"]
    if config is not None:
        path = tmp / "extender-config.json"
        path.write_text(json.dumps(config))
        args += ["--config", str(path)]
    log = open(tmp / log_name, "wb")  # noqa: SIM115 (lives as long as the process)
    proc = subprocess.Popen(args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    base = f"http://127.0.0.1:{port}"

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"extender exited {proc.returncode}: "
                                 f"{(tmp / log_name).read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=2) as r:
                return True if r.status == 200 else kube.NotYet(str(r.status))
        except OSError as e:
            return kube.NotYet(str(e))

    try:
        kube.wait_for("the extender to be ready", ready, timeout=60)
        yield proc, base + "/ckpt"
    finally:
        stop(proc)


stop = kube.stop_process


@contextmanager
def silent_listener() -> Iterator[str]:
    """A TCP port that accepts connections (the kernel's backlog) but never answers: a hung
    extender. Yields its URL prefix."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/ckpt"


def metric(base: str, name: str) -> float:
    with urllib.request.urlopen(base.rsplit("/ckpt", 1)[0] + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name):
                return float(line.rsplit(" ", 1)[1])
    return 0.0
