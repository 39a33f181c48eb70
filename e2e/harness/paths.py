"""Where things are: the repository root, found from this file (e2e/harness/paths.py)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTBIN = REPO / "e2e" / "testbin"  # the build scripts of the test binaries
