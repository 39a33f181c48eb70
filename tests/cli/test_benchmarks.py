"""The benchmarks run as documented (small sizes; no timing is asserted, only their output)."""

import json
import subprocess
import sys
from pathlib import Path

from ckpt_preempt.policies.sim import planners

ROOT = Path(__file__).resolve().parents[2]


def test_plan_latency_benchmark_plans_every_sample_and_reports_both_paths():
    out = subprocess.run(
        [sys.executable, "-m", "bench.plan_latency", "--pods", "12000", "--samples", "12"],
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


def test_plan_latency_with_silent_pods_plans_the_same_with_and_without_caches():
    # report parity holds reporters here; the bench's own asserts (caches, warming and carried
    # caches change no plan) run on the held views
    out = subprocess.run(
        [sys.executable, "-m", "bench.plan_latency", "--pods", "12000", "--samples", "12",
         "--silent-share", "0.5", "--no-cold"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["silent_share"] == 0.5 and doc["feasible_plans"] == 12
    bad = subprocess.run([sys.executable, "-m", "bench.plan_latency", "--silent-share", "2"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "--silent-share must be between 0 and 1" in bad.stderr


def test_silencing_removes_reports_of_periodic_pods_only_and_keeps_the_cluster():
    import random
    from dataclasses import replace

    from bench import plan_latency
    from ckpt_preempt.policies.model.model import CheckpointMode
    _, pods = plan_latency.cluster(3000, random.Random(3))
    quiet = plan_latency.silenced(pods, 0.5, random.Random(3))
    assert plan_latency.silenced(pods, 0.0, random.Random(3)) is pods
    changed = [(a, b) for a, b in zip(pods, quiet, strict=True) if a != b]
    periodic = [p for p in pods if p.checkpoint is CheckpointMode.PERIODIC]
    assert 0.3 * len(periodic) < len(changed) < 0.7 * len(periodic)
    for a, b in changed:
        assert a.checkpoint is CheckpointMode.PERIODIC and b.last_checkpoint is None
        assert b == replace(a, last_checkpoint=None)


def test_fairness_benchmark_reports_every_variant_against_the_first():
    out = subprocess.run(
        [sys.executable, "-m", "bench.fairness", "--seeds", "1,2", "--scale", "0.03",
         "--unknown", "start-time,assume:30m", "--penalties", "0,900", "--jobs", "1"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    variants = [(v["unknown_checkpoint"], v["fairness_penalty_seconds"]) for v in doc["variants"]]
    assert variants == [("start-time", 0.0), ("start-time", 900.0), ("assume:30m", 0.0),
                        ("assume:30m", 900.0)]
    assert len(doc["runs"]) == 2 * (1 + 4)
    first, *rest = doc["variants"]
    assert "paired_difference" not in first["lost_gpu_hours"]
    for v in rest:
        lost = v["lost_gpu_hours"]
        lo, hi = lost["ci95"]
        assert lo <= lost["mean"] <= hi and "paired_difference" in lost
        assert len(v["max_preemptions_per_workload"]["per_seed"]) == 2
    for r in doc["runs"]:
        assert r["plans_invalid"] == 0
        assert sum(int(n) * k for n, k in r["preemptions_per_workload"].items()) >= r[
            "preemptions"]


def test_timing_benchmark_compares_totals_with_timing_off_and_the_strongest(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "bench.timing", "--seeds", "1", "--scale", "0.03", "--jobs", "1",
         "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=900,
    )
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout)
    doc = json.loads((tmp_path / "timing.json").read_text())
    assert [c["cell"] for c in doc["cells"]] == list(line["cells"]) == [
        "openb/stress", "training/replay", "openb/stress (ends not declared)"]
    for cell in doc["cells"]:
        assert cell["strongest_baseline_by_total"] in planners.TIMING_BASELINES
        assert any("(timing off)" in k for k in cell["ratios_total"])
        for p in cell["policies"].values():
            assert p["plans_invalid"] == 0
            assert p["total_gpu_hours"]["median"] >= p["lost_median"] - 1e-3
    assert "## openb/stress (ends not declared)" in (tmp_path / "timing.md").read_text()
    bad = subprocess.run([sys.executable, "-m", "bench.timing", "--seeds", "0"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_incentive_benchmark_scores_a_policy_blind_to_reports_zero(tmp_path):
    out_file = tmp_path / "incentive.json"
    out = subprocess.run(
        [sys.executable, "-m", "bench.incentive", "--worlds", "12", "--policies",
         "kube-default,checkpoint-aware", "--out", str(out_file)],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out_file.read_text())
    assert doc["worlds"] == [1, 12] and set(doc["results"]) == {"kube-default",
                                                                 "checkpoint-aware"}
    blind = doc["results"]["kube-default"]
    # kube-default never reads a report: the same hits whichever job reports, and the
    # tie-break that prefers one job's name cancels out over the two positions
    assert blind["worlds_hit_more_than_if_silent"] == 0 == blind["worlds_hit_more_than_twin"]
    assert blind["extra_hits_max"] == 0 == blind["hits_over_twin_max"]
    assert blind["lost_with_report_over_without"]["median"] == 1.0
    # the printed table carries what the JSON measured, policy by policy
    for policy, r in doc["results"].items():
        assert (f"| {policy} | {r['worlds_hit_more_than_if_silent']} of 12 | "
                f"{r['extra_hits_mean']:+.2f} / {r['extra_hits_max']:+g} |") in out.stdout


def test_incentive_benchmark_refuses_bad_flags_in_one_line():
    for flags in (["--worlds", "0"], ["--policies", "no-such-policy"]):
        out = subprocess.run([sys.executable, "-m", "bench.incentive", *flags],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert out.returncode == 2, flags
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_loss_concentration_shares_and_same_largest_eviction():
    from bench import loss_concentration as lc

    assert lc.shares(10.0, [1.0, 6.0, 2.0, 1.0]) == (0.6, 0.9)
    assert lc.shares(0.0, []) == (0.0, 0.0)
    rows = {("c", 1): {"a": {"lost": 10.0, "losses": [8.0, 1.0]},
                       "b": {"lost": 9.0, "losses": [8.02, 0.5]}},
            ("c", 2): {"a": {"lost": 4.0, "losses": [1.0, 1.0]},
                       "b": {"lost": 2.0, "losses": [2.0]}}}
    (entry,) = lc.summarise(rows, ["c"], [1, 2], ("a", "b"))
    assert [s["same_under_every_policy"] for s in entry["seeds"]] == [True, False]
    assert entry["policies"]["a"]["largest_share"]["median"] == (0.8 + 0.25) / 2
    assert entry["policies"]["b"]["top3_share"]["median"] == round((8.52 / 9 + 1.0) / 2, 3)
    assert entry["seeds"][1]["largest_gpu_hours"] == {"a": 1.0, "b": 2.0}


def test_loss_concentration_refuses_bad_flags_in_one_line():
    for flags in (["--cells", "no/such"], ["--policies", "no-such-policy"], ["--jobs", "0"]):
        out = subprocess.run([sys.executable, "-m", "bench.loss_concentration", *flags],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert out.returncode == 2, flags
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
