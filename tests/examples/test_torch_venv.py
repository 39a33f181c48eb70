"""examples/pytorch_dcp/torch_venv.py: the cache key follows the requirement lines only, and a
failed install is one line, exit 1, no traceback and no venv that later counts as installed.
(The real install and the example itself: e2e/test_example_pytorch.py.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples/pytorch_dcp/torch_venv.py"
_spec = importlib.util.spec_from_file_location("torch_venv", SCRIPT)
torch_venv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(torch_venv)


def test_the_venv_is_keyed_by_the_requirement_lines_not_the_comments(tmp_path, monkeypatch):
    monkeypatch.setenv(torch_venv.CACHE_ENV, str(tmp_path / "cache"))
    a, b, c = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    a.write_text("torch==2.15.0\nnumpy==2.3.5\n")
    b.write_text("# why\ntorch==2.15.0   # pinned\n\n  numpy==2.3.5\n")
    c.write_text("torch==2.14.1\nnumpy==2.3.5\n")
    assert torch_venv.venv_dir(a) == torch_venv.venv_dir(b)
    assert torch_venv.venv_dir(a) != torch_venv.venv_dir(c)
    assert torch_venv.venv_dir(a).parent == tmp_path / "cache"
    assert torch_venv.find(a) is None


def _run(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(cache),
                                            torch_venv.CACHE_ENV: str(cache)})


def test_a_failed_install_is_one_line_and_leaves_nothing_installed(tmp_path):
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("--no-index\nckpt-preempt-no-such-package==0\n")  # fails offline, at once
    r = _run("--requirements", str(reqs), cache=tmp_path / "cache")
    assert r.returncode == 1 and r.stdout == ""
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1].startswith(f"torch venv: pip install -r {reqs} failed: ")
    found = _run("--find", "--requirements", str(reqs), cache=tmp_path / "cache")
    assert found.returncode == 1 and found.stderr.count("\n") == 1
    assert found.stderr.startswith("no torch venv at ")


def test_a_missing_requirements_file_is_one_line(tmp_path):
    r = _run("--requirements", str(tmp_path / "nope.txt"), cache=tmp_path / "cache")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
