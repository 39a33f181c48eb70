"""The elastic example (examples/pytorch_dcp/elastic.py): torchrun's elastic agents shrink the
job from 3 ranks to 2 and it keeps training from the checkpoint the leaving rank's SIGTERM made
all ranks save; SIGTERM to the whole job saves, exits 75, and a restart resumes there."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.examples.pytorch_env import EXAMPLE, torch_python

_ = torch_python  # a fixture, used by name
ELASTIC = EXAMPLE / "elastic.py"


def test_the_run_shrinks_from_three_ranks_to_two_and_loses_no_checkpointed_step(
        torch_python, tmp_path):
    run = tmp_path / "run"
    r = subprocess.run([str(torch_python), str(ELASTIC), "--dir", str(run), "--steps", "30",
                        "--leave-at", "12", "--every", "5"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "world size 3, training from step 0" in r.stdout
    # the leaving rank's SIGTERM: one more step together, all save it, then it leaves
    assert "rank 0: saved on stop at step 13 in step-00000013" in r.stdout
    assert "world size 2, training from step 13" in r.stdout
    rows = [json.loads(line) for line in (run / "loss.jsonl").read_text().splitlines()]
    assert [x["step"] for x in rows] == list(range(1, 31))  # no step trained twice or lost
    assert {x["world"] for x in rows if x["step"] <= 13} == {3}
    assert {x["world"] for x in rows if x["step"] > 13} == {2}
    # it kept learning across the shrink: the loss stays far below the untrained one
    assert max(x["loss"] for x in rows if x["step"] > 13) < rows[0]["loss"] / 2


@pytest.mark.parametrize(("args", "says"), [
    (["--steps", "10", "--leave-at", "10"], "--leave-at must be below --steps"),
    (["--steps", "x"], "not a whole number"),
    (["--every", "0"], "must be >= 1"),
])
def test_bad_input_is_one_line_before_torch_is_imported(tmp_path, args, says):
    r = subprocess.run([sys.executable, str(ELASTIC), "--dir", str(tmp_path), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1
