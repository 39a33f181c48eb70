"""The kubectl the test bench builds (e2e/testbin/kubectl/build.sh), for tests that drive
``kubectl drain`` (no tests here).

    kubectl()   the cached binary: skips when it is not built, fails under CKPT_REQUIRE_TESTBIN=1
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from e2e.harness.paths import REPO

KUBECTL_SRC = REPO / "e2e/testbin/kubectl"
KUBECTL_RECIPE = "1"  # must match RECIPE in testbin/kubectl/build.sh


def kubectl_key() -> str:
    """Same hash testbin/kubectl/build.sh computes over go.mod, go.sum and its recipe version."""
    data = (KUBECTL_SRC / "go.mod").read_bytes() + (KUBECTL_SRC / "go.sum").read_bytes()
    return hashlib.sha256(data + f"recipe={KUBECTL_RECIPE}\n".encode()).hexdigest()[:16]


def kubectl() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    root = Path(os.environ.get("CKPT_KUBECTL_ROOT", cache / "ckpt-preempt" / "kubectl"))
    path = root / kubectl_key() / "kubectl"
    if not path.is_file():
        why = f"kubectl not built ({path}): run e2e/testbin/kubectl/build.sh"
        if os.environ.get("CKPT_REQUIRE_TESTBIN") == "1":
            pytest.fail(f"{why} [CKPT_REQUIRE_TESTBIN=1, so this is a failure]", pytrace=False)
        pytest.skip(why)
    return path
