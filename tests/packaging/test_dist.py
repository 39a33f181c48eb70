"""The distributions as a user gets them: built, checked, and installed into fresh environments.

`python -m build` makes the wheel and sdist of ckpt-preempt and of the SDK; `twine check` reads
their metadata; then each wheel goes into a new virtual environment with nothing else in it.
Installing ckpt-preempt's dependencies needs the package index (or pip's cache), as CI has.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SDK_DIST = "ckpt-preempt-sdk"
MAIN_DIST = "ckpt-preempt"
IMPORT_NAME = "ckpt_preempt"


def run(*args: object, **kw) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{args}: {r.stdout[-2000:]}{r.stderr[-2000:]}"
    return r


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    logs = []
    for source in (REPO / "sdk", REPO):
        r = run(sys.executable, "-m", "build", "--outdir", out, source)
        logs.append(r.stdout + r.stderr)
    (out.parent / "build.log").write_text("\n".join(logs))
    return out


def test_the_build_is_quiet_about_data_folders(dist):
    # setuptools warns for every data folder Python could import that is not declared
    log = (dist.parent / "build.log").read_text()
    assert "Package would be ignored" not in log, log[:3000]


def fresh_venv(where: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    return where / "bin"


def wheel(dist: Path, name: str) -> Path:
    (found,) = dist.glob(f"{name.replace('-', '_')}-*.whl")
    return found


def test_build_makes_a_wheel_and_an_sdist_of_each_and_twine_accepts_them(dist):
    names = sorted(p.name for p in dist.iterdir())
    assert len(names) == 4, names
    assert [n for n in names if n.endswith(".tar.gz")] == [
        "ckpt_preempt-0.1.0.tar.gz", "ckpt_preempt_sdk-0.1.0.tar.gz"]
    r = run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()))
    assert r.stdout.count("PASSED") == 4, r.stdout


def test_the_wheel_adds_one_import_name_and_carries_its_data(dist):
    with zipfile.ZipFile(wheel(dist, MAIN_DIST)) as z:
        members = z.namelist()
    tops = {m.split("/")[0] for m in members if not m.split("/")[0].endswith(".dist-info")}
    assert tops == {IMPORT_NAME}, tops  # no generic controller/ or policies/ in site-packages
    for data in ("ckpt_preempt/policies/data/openb_node_list_gpu_node.csv",
                 "ckpt_preempt/hwprobe/schema/hwprobe-v1.json",
                 "ckpt_preempt/hwprobe/specs/hgx-h100-8.yaml"):
        assert data in members


def test_the_sdk_installs_alone_with_no_dependencies(dist, tmp_path):
    bin_ = fresh_venv(tmp_path / "sdk-only")
    run(bin_ / "python", "-m", "pip", "install", "--quiet", "--no-index", wheel(dist, SDK_DIST))
    listed = json.loads(run(bin_ / "python", "-m", "pip", "list", "--format", "json").stdout)
    assert {p["name"] for p in listed} - {"pip", "setuptools"} == {SDK_DIST}
    probe = ("import ckpt_preempt_sdk as sdk, sys; "
             "print(sdk.Checkpointer.__name__, sorted(m for m in sys.modules if m.startswith("
             "('kubernetes', 'pynvml', 'prometheus', 'ckpt_preempt.'))))")
    assert run(bin_ / "python", "-c", probe).stdout.split() == ["Checkpointer", "[]"]


def test_a_fresh_venv_gets_working_commands(dist, tmp_path):
    bin_ = fresh_venv(tmp_path / "full")
    run(bin_ / "python", "-m", "pip", "install", "--quiet", "--find-links", dist, MAIN_DIST)
    sim = run(bin_ / "ckpt-preempt", "simulate", "--scale", "0.02", "--seeds", "1",
              "--policies", "cost-aware", "--json", cwd=tmp_path)
    result = json.loads(sim.stdout)  # the bundled openb trace was found inside the wheel
    assert result["workload"] == "openb" and result["policies"], result
    assert "usage: hwprobe" in run(bin_ / "hwprobe", "--help").stdout
    for generic in ("controller", "policies", "hwprobe"):
        r = subprocess.run([bin_ / "python", "-c", f"import {generic}"], capture_output=True,
                           cwd=tmp_path)
        assert r.returncode != 0, f"{generic} is importable from site-packages"


def test_the_image_build_copies_every_folder_the_wheel_maps():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    folders = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    copied = {line.split()[1] for line in (REPO / "deploy/Dockerfile").read_text().splitlines()
              if line.startswith("COPY ") and "--" not in line.split()[1]}
    assert folders <= copied, f"deploy/Dockerfile does not COPY {sorted(folders - copied)}"
