"""bench/kueue_rows.py on a tiny seeded cut (two seeds of training/stress and openb/stress at
scale 0.02): it writes what it prints, reports every row against kube-default and the strongest
existing baseline, and its figures keep what the rows guarantee. Bad arguments: exit 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import kueue_rows
from ckpt_preempt.policies.sim import planners

ROOT = Path(__file__).resolve().parents[2]
CELLS = ("training/stress", "openb/stress")


def _run(*args: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.kueue_rows", *args, "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("kueue_rows") / "kueue_rows.json"
    run = _run("--first-seed", "1", "--seeds", "2", "--scale", "0.02", "--cells",
               ",".join(CELLS), out=out)
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    written = json.loads(out.read_text())
    assert printed["wall_seconds"] == written["wall_seconds"] and "wall time:" in run.stderr
    for cell in CELLS:
        assert set(printed["cells"][cell]["rows"]) == {
            r["policy"] for r in written["cells"][cell]["rows"]}
    return written


def test_every_row_is_reported_against_both_references(doc):
    assert doc["seeds"] == [1, 2] and list(doc["cells"]) == list(CELLS)
    want = [*kueue_rows.BASELINES, planners.SHIPPED, *planners.KUEUE_ROWS]
    for cell in doc["cells"].values():
        rows = {r["policy"]: r for r in cell["rows"]}
        assert list(rows) == want
        assert cell["strongest_existing_baseline"] in planners.TIMING_BASELINES
        assert rows["kube-default"]["ratio_vs_kube_default"]["median"] == 1.0
        assert rows[cell["strongest_existing_baseline"]]["ratio_vs_strongest_existing"][
            "median"] == 1.0
        for r in rows.values():
            assert r["lost_gpu_hours"]["n"] == 2 and r["preemptor_wait_p95_min"] >= 0


def test_the_rows_keep_their_guarantees(doc):
    for cell in doc["cells"].values():
        rows = {r["policy"]: r for r in cell["rows"]}
        per_seed = cell["per_seed_lost_gpu_hours"]
        # only rows that save on SIGTERM save; Kueue's rows take whole workloads
        for name, r in rows.items():
            saves = r["sigterm_saved"] + r["sigterm_failed"]
            assert saves == 0 or planners.row(name)[1] is not None, name
        kueue = [n for n in planners.KUEUE_ROWS
                 if planners.row(n)[0] in (planners.KUEUE_POLICY, planners.OURS_UNDER_KUEUE)]
        assert len(kueue) == 3
        for name in kueue:
            assert rows[name]["gangs_broken"] == 0 and rows[name]["plans_invalid"] == 0
        # the generators' checkpoints take 30-180 s: the default 30 s grace covers none
        assert per_seed["kube-default+sigterm"] == per_seed["kube-default"]
    # not vacuous: the sized grace saved victims somewhere
    assert any(r["sigterm_saved"] > 0 for c in doc["cells"].values() for r in c["rows"])


@pytest.mark.parametrize("args", [
    ("--seeds", "0"), ("--scale", "2"), ("--cells", "openb/steady"),
    ("--baselines", "greedy-checkpoint"), ("--baselines", "fifo"),
], ids=["no seeds", "scale above 1", "unknown cell", "without kube-default", "unknown policy"])
def test_bad_arguments_exit_2(tmp_path, args):
    run = _run(*args, out=tmp_path / "x.json")
    assert run.returncode == 2 and run.stderr.startswith("kueue_rows:")
    assert not (tmp_path / "x.json").exists()
