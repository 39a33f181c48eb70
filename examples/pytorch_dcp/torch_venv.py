"""The PyTorch example's own virtual environment: created once, cached outside the repository.

    python examples/pytorch_dcp/torch_venv.py          # install if needed; print its python
    python examples/pytorch_dcp/torch_venv.py --find   # print its python, or exit 1 if absent

The venv lives in ~/.cache/ckpt-preempt/torch-venv/<key> (CKPT_TORCH_VENV_CACHE moves the
parent folder), where <key> is the first 12 hex digits of the sha256 of the requirement lines of
requirements.txt: a changed requirement gets a new venv, an unchanged one is reused. A venv
counts only once its install finished (a stamp file written last); a half-made one is removed
and made again. Standard library only: it runs with the product's python and never installs
torch into that venv.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements.txt"
CACHE_ENV = "CKPT_TORCH_VENV_CACHE"
DEFAULT_CACHE = Path.home() / ".cache/ckpt-preempt/torch-venv"
STAMP = ".installed"
INSTALL_TIMEOUT_SECONDS = 30 * 60  # cold: 7 min measured; a stuck one must end


class InstallFailed(RuntimeError):
    """The venv could not be made (no network, no disk, a pip error)."""


def requirements(file: Path = REQUIREMENTS) -> str:
    """The requirement lines, without comments: editing a comment reuses the venv."""
    lines = (line.split("#", 1)[0].strip() for line in file.read_text().splitlines())
    return "".join(f"{line}\n" for line in lines if line)


def venv_dir(file: Path = REQUIREMENTS) -> Path:
    key = hashlib.sha256(requirements(file).encode()).hexdigest()[:12]
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE) / key


def find(file: Path = REQUIREMENTS) -> Path | None:
    """The venv's python if the venv is complete, else None."""
    d = venv_dir(file)
    return d / "bin/python" if (d / STAMP).exists() else None


def ensure(file: Path = REQUIREMENTS, log=sys.stderr) -> Path:
    """The venv's python, installing the venv first if needed (one installer at a time)."""
    d = venv_dir(file)
    d.parent.mkdir(parents=True, exist_ok=True)
    with open(d.parent / f"{d.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second caller waits, then finds it made
        if (d / STAMP).exists():
            return d / "bin/python"
        shutil.rmtree(d, ignore_errors=True)
        print(f"installing {file.name} into {d} (cold: 2.8 GB, 4-7 min)", file=log,
              flush=True)
        try:
            venv.create(d, with_pip=True)
        except subprocess.CalledProcessError as e:
            raise InstallFailed(f"python -m venv {d} failed (exit {e.returncode})") from e
        pip_log = d / "pip.log"
        try:
            with open(pip_log, "wb") as out:
                r = subprocess.run([str(d / "bin/python"), "-m", "pip", "install",
                                    "--disable-pip-version-check", "-r", str(file)],
                                   stdout=out, stderr=subprocess.STDOUT,
                                   timeout=INSTALL_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired as e:
            raise InstallFailed(f"pip install took over {INSTALL_TIMEOUT_SECONDS} s") from e
        if r.returncode != 0:
            tail = pip_log.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise InstallFailed(f"pip install -r {file} failed: {tail[0]}")
        check = subprocess.run([str(d / "bin/python"), "-c", "import torch.distributed as d; "
                                "assert d.is_available() and d.is_gloo_available()"],
                               capture_output=True, text=True)
        if check.returncode != 0:
            raise InstallFailed("torch installed but torch.distributed with gloo is missing: "
                                + (check.stderr.strip().splitlines() or ["?"])[-1])
        (d / STAMP).write_text(requirements(file))
        return d / "bin/python"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--find", action="store_true", help="only print an installed venv's python")
    ap.add_argument("--requirements", type=Path, default=REQUIREMENTS,
                    help="another requirements file (default: this example's)")
    args = ap.parse_args(argv)
    try:
        if args.find:
            python = find(args.requirements)
            if python is None:
                print(f"no torch venv at {venv_dir(args.requirements)}", file=sys.stderr)
                return 1
            print(python)
            return 0
        print(ensure(args.requirements))
    except (InstallFailed, OSError) as e:
        print(f"torch venv: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
