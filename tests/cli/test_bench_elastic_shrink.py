"""bench/elastic_shrink.py runs as documented, on a small size (its output only)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_elastic_shrink_benchmark_reports_paired_ratios_for_every_policy(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run(
        [sys.executable, "-m", "bench.elastic_shrink", "--seeds", "2", "--scale", "0.03",
         "--protocols", "stress", "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout)["protocols"]["stress"]
    ratios = line["lost_ratio_shrink_on_vs_off"]
    # the kube baselines never shrink: on and off are the same runs
    assert ratios["kube-default"] in (None, {"median": 1.0, "low": 1.0, "high": 1.0, "n": 2})
    doc = json.loads(out.read_text())["protocols"]["stress"]
    assert doc["seeds"] == [1, 2]
    for setting in ("on", "off"):
        for policy, m in doc["medians"][setting].items():
            assert m["plans_invalid"] == 0, policy
            if setting == "off":
                assert m["shrinks"] == 0, policy
    assert doc["medians"]["on"]["kube-default"]["shrinks"] == 0


def test_bad_arguments_are_one_line_and_exit_2():
    r = subprocess.run([sys.executable, "-m", "bench.elastic_shrink", "--seeds", "0"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
