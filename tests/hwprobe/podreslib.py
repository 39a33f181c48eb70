"""The PodResources test server (``e2e/podresources``): where its build is cached, and running
it on a unix socket with a state file a test can rewrite between calls.

The key is computed exactly as ``e2e/podresources/build.sh`` computes it, so a stale build is
never used. Without the binary the tests skip, unless ``CKPT_REQUIRE_TESTBIN=1`` (CI), where
they fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "e2e" / "podresources"
RECIPE = "1"  # build.sh's RECIPE
GPU = "nvidia.com/gpu"


def server_binary() -> Path:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((SRC / name).read_bytes())
    digest.update(f"recipe={RECIPE}\n".encode())
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    root = Path(os.environ.get("CKPT_PODRESOURCES_ROOT", cache / "ckpt-preempt" / "podresources"))
    return root / digest.hexdigest()[:16] / "podresources-server"


def pod(namespace: str, name: str, *device_ids: str, resource: str = GPU) -> dict:
    """A ListPodResourcesResponse entry (protojson) with one container holding the devices."""
    devices = [{"resourceName": resource, "deviceIds": list(device_ids)}] if device_ids else []
    return {"name": name, "namespace": namespace,
            "containers": [{"name": "main", "devices": devices}]}


class Server:
    """The Go server on ``socket``; ``set`` rewrites what it answers."""

    def __init__(self, binary: Path) -> None:
        # a short directory: a unix socket path is limited to 107 bytes
        self.dir = Path(tempfile.mkdtemp(prefix="podres.", dir="/tmp"))
        self.socket = self.dir / "kubelet.sock"
        self.state = self.dir / "state.json"
        self.set([])
        self.proc = subprocess.Popen([str(binary), "-socket", str(self.socket),
                                      "-state", str(self.state)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on"):
            self.stop()
            raise RuntimeError(f"podresources-server did not start: {line!r}")

    def set(self, pods: list[dict], allocatable: list[str] | None = None,
            error: str | None = None) -> None:
        state = {"list": {"podResources": pods},
                 "allocatable": {"devices": [{"resourceName": GPU,
                                              "deviceIds": list(allocatable or [])}]}}
        if error:
            state["error"] = error
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
