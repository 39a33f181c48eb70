"""`ckpt-preempt simulate --protocol fgd`: FGD's benchmark from the command line, as a user runs
it (one seed on a 10 % subsample; the full run is bench/placement.py's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ckpt_preempt.policies.placement import benchmark

ROOT = Path(__file__).resolve().parents[2]


def simulate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ckpt_preempt.controller.app.cli", "simulate", "--protocol", "fgd",
         *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_one_json_line_with_every_policy_named_and_the_bench_numbers():
    done = simulate("--scale", "0.1", "--seed", "42", "--policies", "Random,BestFit,FGD,Ours")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["trace"] == "openb_pod_list_default.csv" and line["seeds"] == [42]
    assert list(line["median_130"]) == ["Random", "BestFit", "FGD", "Ours"]
    assert line["gap_to_paper_pp"] == {}  # a subsample is not the paper's cluster
    # the same numbers as the shared benchmark code computes directly
    data = ROOT / "policies" / "data"
    setup = benchmark.prepare(line["trace"], (data / benchmark.NODE_LIST).read_text(),
                              (data / line["trace"]).read_text(), [42], 0.1)
    rows = benchmark.compare(setup, ["Random", "Ours"])
    assert line["median_130"]["Ours"] == rows["Ours"]["median_130"]
    assert line["median_130"]["Random"] == rows["Random"]["median_130"]
    # the ordering FGD's paper reports holds even on a small cluster
    assert line["median_130"]["Random"] < line["median_130"]["BestFit"]


def test_json_document_has_curves_and_the_multigpu_workload_picks_its_trace():
    done = simulate("--scale", "0.05", "--workload", "openb-multigpu20", "--policies", "FGD",
                    "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["trace"] == "openb_pod_list_multigpu20.csv"
    assert doc["seeds"] == [benchmark.protocol.PAPER_SEEDS[0]]
    curve = doc["policies"]["FGD"]["curve"]
    allocated = [curve[str(b)] for b in range(benchmark.HEADLINE_BIN + 1)]
    assert all(0 <= a <= 100 for a in allocated)
    assert allocated[50] < allocated[-1] == doc["policies"]["FGD"]["median_130"]
