"""The mock libnvidia-ml.so.1: where it is cached, and running the hwprobe CLI on it.

The mock libnvidia-ml.so.1 is built by ``e2e/testbin/mocknvml/build.sh`` (``make testbin``)
into ``~/.cache/ckpt-preempt/mocknvml/<key>/``; the key here is computed exactly as build.sh
computes it, so a stale build is never used. Without it the tests skip, unless
``CKPT_REQUIRE_TESTBIN=1`` (CI), where they fail.

pynvml loads the library once per process and the mock reads its profile at ``nvmlInit``, so
every probe runs ``python -m hwprobe.cli`` in a subprocess with its own ``MOCK_NVML_CONFIG``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e.harness.paths import REPO

MOCK_SRC = REPO / "e2e" / "testbin" / "mocknvml"
PROFILES = REPO / "hwprobe" / "profiles"


def mock_library() -> Path:
    """Where build.sh puts the library for the current sources (it may not exist)."""
    digest = hashlib.sha256()
    files = [MOCK_SRC / "go.mod", MOCK_SRC / "go.sum"]
    files += sorted(MOCK_SRC.glob("*.go")) + sorted(MOCK_SRC.glob("*.h"))
    for path in files:
        digest.update(path.read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    root = Path(os.environ.get("CKPT_MOCKNVML_ROOT", cache / "ckpt-preempt" / "mocknvml"))
    return root / digest.hexdigest()[:16] / "libnvidia-ml.so.1"


@dataclass(frozen=True, kw_only=True)
class MockNvml:
    library: Path
    workdir: Path

    def env(self, profile: str | Path, faults: dict | None = None) -> dict[str, str]:
        """``profile``: a name in ``hwprobe/profiles/`` or the path of a profile file."""
        config = profile if isinstance(profile, Path) else PROFILES / f"{profile}.yaml"
        env = {**os.environ, "HWPROBE_NVML_LIBRARY": str(self.library),
               "MOCK_NVML_CONFIG": str(config)}
        env.pop("MOCK_NVML_FAULTS", None)
        if faults is not None:
            path = self.workdir / f"faults-{abs(hash(json.dumps(faults, sort_keys=True)))}.yaml"
            path.write_text(yaml.safe_dump(faults))
            env["MOCK_NVML_FAULTS"] = str(path)
        return env

    def run(self, profile: str | Path, *args: str, faults: dict | None = None):
        return subprocess.run([sys.executable, "-m", "ckpt_preempt.hwprobe.cli", *args], cwd=REPO,
                              env=self.env(profile, faults), capture_output=True, text=True,
                              timeout=60)

    def report(self, profile: str | Path, *args: str, faults: dict | None = None) -> dict:
        done = self.run(profile, "report", "--json", *args, faults=faults)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)
