"""`make image`'s script (e2e/testbin/images/build.sh) with a podman that only records its
calls: the Dockerfile's build stage is built under its own name before the image (so it is
never left dangling, and its layers stay the next build's cache), and only after both builds
succeed are the dangling images of earlier builds pruned. What podman then does with them
(prune removes dangling images and their untagged parents, never an image a tag stands on) is
podman's; the real build runs in e2e/test_images.py.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "e2e" / "testbin" / "images" / "build.sh"
FAKE_PODMAN = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$PODMAN_CALLS"
case "$*" in
  *" build "*) [ -z "${FAIL_BUILD:-}" ] || exit 1 ;;
  *"image exists"*) exit 0 ;;
  *"image inspect"*) echo 245000000 ;;
esac
"""


def run_build(tmp: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "podman").write_text(FAKE_PODMAN)
    (bin_dir / "mmdebstrap").write_text('#!/usr/bin/env bash\ntouch "${@: -1}"\n')
    for tool in ("runc", "newuidmap"):
        (bin_dir / tool).write_text("#!/usr/bin/env bash\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    calls = tmp / "calls"
    calls.touch()
    full_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                "CKPT_IMAGES_ROOT": str(tmp / "cache"), "PODMAN_CALLS": str(calls), **env}
    full_env.pop("CKPT_IMAGE", None)
    done = subprocess.run(["bash", str(BUILD)], env=full_env, capture_output=True, text=True,
                          timeout=120)
    return done, [line for line in calls.read_text().splitlines()]


def podman_calls(calls: list[str], verb: str) -> list[list[str]]:
    return [shlex.split(c) for c in calls if f" {verb} " in f" {c} "]


@pytest.mark.parametrize("fail", [False, True], ids=["built", "build failed"])
def test_the_build_stage_is_named_and_only_a_good_build_prunes_earlier_ones(fail, tmp_path):
    done, calls = run_build(tmp_path, **({"FAIL_BUILD": "1"} if fail else {}))
    builds = podman_calls(calls, "build")
    prunes = [c for c in calls if "image prune" in c]
    if fail:
        assert done.returncode != 0 and len(builds) == 1 and prunes == [], calls
        return
    assert done.returncode == 0, done.stderr
    stage, image = builds
    assert stage[stage.index("--target") + 1] == "build"
    stage_tag, image_tag = stage[stage.index("-t") + 1], image[image.index("-t") + 1]
    assert image_tag == "localhost/ckpt-preempt:dev" and stage_tag not in (image_tag, "")
    label = next(a for a in image if a.startswith("ckpt-preempt.sources="))
    assert label in stage  # the same sources label on both
    assert calls.index(prunes[0]) > calls.index(" ".join(image)), calls  # after both builds
    assert prunes == [" ".join(["--runtime", "runc", "--cgroup-manager=cgroupfs", "image", "prune",
                                "--force", "--filter", "label=ckpt-preempt.sources"])], prunes
