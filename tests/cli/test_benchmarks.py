"""The benchmarks run as documented (small sizes; no timing is asserted, only their output)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_plan_latency_benchmark_plans_every_sample_and_reports_both_paths():
    out = subprocess.run(
        [sys.executable, "bench/plan_latency.py", "--pods", "12000", "--samples", "12"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["nodes"] == 4278 and doc["running_pods"] == 12000 and doc["samples"] == 12
    assert doc["feasible_plans"] == 12
    for path in ("warm_ms", "cold_ms"):
        assert 0 < doc[path]["p50"] <= doc[path]["p99"] <= doc[path]["max"]
    assert sum(k["n"] for k in doc["warm_ms_by_preemptor"].values()) == 12
    assert doc["max_rss_mib"] >= doc["rss_mib_after_imports"] > 0
