"""CLI behaviour that needs no NVML: missing library, bad specs, bench skip."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_preempt.hwprobe import cli

CLI = "ckpt_preempt.hwprobe.cli"
REPO = Path(__file__).resolve().parents[2]


def run_cli(*args, **env):
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("HWPROBE_NVML_LIBRARY", "MOCK_NVML_CONFIG", "LD_LIBRARY_PATH")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-m", CLI, *args], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=60)


def nvml_present() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.parametrize("args", [["show"], ["report", "--json"], ["verify", "--expect",
                                                                     "single-gpu"], ["bench"]])
@pytest.mark.skipif(nvml_present(), reason="this machine has a real NVML library")
def test_no_nvml_library_is_one_line_and_exit_2(args):
    done = run_cli(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("hwprobe: NVML unavailable: LibraryNotFound")
    assert "Traceback" not in done.stderr


def test_unloadable_library_path_is_exit_2(tmp_path):
    done = run_cli("show", HWPROBE_NVML_LIBRARY=str(tmp_path / "nope.so"))
    assert done.returncode == 2
    assert done.stderr.startswith("hwprobe: cannot load HWPROBE_NVML_LIBRARY=")
    assert "Traceback" not in done.stderr


def test_unknown_spec_is_a_usage_error(monkeypatch, capsys):
    from tests.hwprobe import layouts

    monkeypatch.setattr(cli, "_probe", layouts.hgx_h100)
    with pytest.raises(SystemExit) as done:
        cli.main(["verify", "--expect", "no-such-machine"])
    assert done.value.code == 2
    assert "argument --expect: unknown spec 'no-such-machine'" in capsys.readouterr().err


@pytest.mark.parametrize(("spec", "code"), [("hgx-h100-8", 0), ("dgx-a100-8", 1)])
def test_verify_exit_codes(monkeypatch, capsys, spec, code):
    from tests.hwprobe import layouts

    monkeypatch.setattr(cli, "_probe", layouts.hgx_h100)
    assert cli.main(["verify", "--expect", spec]) == code
    out = capsys.readouterr().out
    assert out.startswith("OK: matches" if code == 0 else "FAIL: ")


def test_bench_skips_cleanly_without_cuda(monkeypatch, capsys):
    from ckpt_preempt.hwprobe import bench
    from tests.hwprobe import layouts

    monkeypatch.setattr(bench, "_torch", lambda: None)
    monkeypatch.setattr(bench, "_cupy", lambda: None)
    monkeypatch.setattr(cli, "_probe", layouts.hgx_h100)
    assert cli.main(["bench"]) == 0
    assert '"skipped": "no CUDA: neither torch with CUDA nor cupy importable"' in (
        capsys.readouterr().out)


def test_publish_needs_a_node(monkeypatch, capsys):
    from tests.hwprobe import layouts

    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.setattr(cli, "_probe", layouts.hgx_h100)
    with pytest.raises(SystemExit) as done:
        cli.main(["publish"])
    assert done.value.code == 2
    assert "hwprobe publish: error: publish needs --node" in capsys.readouterr().err
