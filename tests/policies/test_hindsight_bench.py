"""bench/floor.py runs as documented on a tiny seeded set and reports what it promises; bad
arguments are one clear line and a non-zero exit."""

import json
import subprocess
import sys
from pathlib import Path

from ckpt_preempt.policies.sim import planners

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.floor", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


def test_the_floor_benchmark_reports_every_policy_against_the_floor():
    out = _run("--seeds", "3", "--max-simulations", "400",
               "--styles", "openb/replay,training/replay", "--procs", "2")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["seeds"] == [1, 2, 3]
    assert list(doc["styles"]) == ["openb/replay", "training/replay"]
    compared = 0
    for style in doc["styles"].values():
        n = style["instances"]
        assert n + style["seeds_without_preemption"] + style["seeds_too_large"] == 3
        assert set(style["policies"]) == set(planners.KNOWN)
        for entry in style["policies"].values():
            # no policy ever loses less than the floor on the same instance
            assert all(lost >= floor - 1e-9 for lost, floor in zip(
                entry["lost_gpu_hours"], style["floor_gpu_hours"], strict=True))
            assert 0 <= entry["reaches_floor"] <= n
            if entry["vs_floor"] is not None:
                low, high = entry["vs_floor"]["ci95"]
                assert 1.0 - 1e-9 <= low <= entry["vs_floor"]["median"] <= high
                compared += 1
        if style["instances"]:  # the best reachable is never above the strongest baseline
            assert style["strongest_baseline"] in planners.TIMING_BASELINES
            assert style["floor_vs_strongest"]["ci95"][1] <= 1.0 + 1e-9
            assert style["floor_vs_best_baseline"]["ci95"][1] <= 1.0 + 1e-9
    assert compared > 0  # the tiny set has instances where somebody preempts


def test_bad_arguments_are_one_line_and_exit_2():
    out = _run("--styles", "openb/nonsense")
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "styles" in out.stderr
