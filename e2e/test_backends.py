"""What e2e tests do when their cluster is not available: skip with directions, or, in CI
(CKPT_REQUIRE_TESTBIN=1), fail. Runs pytest on the bench self-tests in a subprocess, so it needs
neither a testbin nor Docker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.conftest import docker_problem
from e2e.harness.localcluster import BINARIES, TestbinMissing, find_testbin

REPO = Path(__file__).resolve().parent.parent
TARGET = "e2e/test_bench.py::test_gpu_pod_is_scheduled_onto_fake_gpu_node_and_runs"


def _pytest(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CKPT_REQUIRE_TESTBIN", "E2E_CLUSTER", "CKPT_TESTBIN", "KUBECONFIG")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *(args or [TARGET]), "-rs", "-p", "no:cacheprovider",
         f"--basetemp={tmp_path / 'run'}"],
        cwd=REPO, env={**clean, **env}, capture_output=True, text=True, timeout=120)


def test_missing_testbin_skips_and_says_how_to_get_it(tmp_path):
    r = _pytest(tmp_path, CKPT_TESTBIN=str(tmp_path / "nowhere"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 skipped" in r.stdout and "make testbin" in r.stdout, r.stdout


def test_missing_testbin_fails_when_ci_requires_it(tmp_path):
    r = _pytest(tmp_path, CKPT_TESTBIN=str(tmp_path / "nowhere"), CKPT_REQUIRE_TESTBIN="1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 error" in r.stdout and "CKPT_REQUIRE_TESTBIN=1" in r.stdout, r.stdout


@pytest.mark.skipif(docker_problem() is None, reason="Docker works here: kind would really run")
def test_kind_backend_without_docker_skips_with_reason(tmp_path):
    r = _pytest(tmp_path, E2E_CLUSTER="kind")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 skipped" in r.stdout and "needs a running Docker engine" in r.stdout, r.stdout


def test_existing_backend_without_kubeconfig_skips(tmp_path):
    r = _pytest(tmp_path, E2E_CLUSTER="existing")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 skipped" in r.stdout and "KUBECONFIG" in r.stdout, r.stdout


@pytest.mark.e2e
def test_failed_test_report_carries_every_component_log(tmp_path):
    try:
        find_testbin()
    except TestbinMissing as e:
        pytest.skip(str(e))
    failing = tmp_path / "test_fails.py"
    failing.write_text("def test_fails(cluster, namespace):\n    assert False, 'on purpose'\n")
    r = _pytest(tmp_path, "-p", "e2e.conftest", str(failing))
    assert r.returncode == 1 and "on purpose" in r.stdout, r.stdout + r.stderr
    for name in BINARIES:
        assert f" {name} log " in r.stdout, f"no {name} log section in:\n{r.stdout[-3000:]}"
