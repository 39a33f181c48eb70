"""bench/placement.py: a short seeded run end to end, and bad input as one clear line."""

from __future__ import annotations

import json

import pytest

from bench import placement
from ckpt_preempt.policies.placement import benchmark, ours, protocol
from ckpt_preempt.policies.placement.devices import PodShape, new_node


def test_short_run_writes_results_and_one_json_line(tmp_path, capsys):
    rc = placement.main([
        "--fraction", "0.05", "--seeds", "42", "--policies", "BestFit,FGD,Ours",
        "--budget", "0.1", "--offline", "--out", str(tmp_path)])
    assert rc == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert set(line["median_130"]) == {"BestFit", "FGD", "Ours"}
    assert all(80 < v <= 100 for v in line["median_130"].values())
    assert line["offline_ffd_130"]["Ours"] >= line["median_130"]["BestFit"]
    saved = json.loads((tmp_path / "placement.json").read_text())
    assert saved["openb_pod_list_default.csv"]["budget"]["10% of nodes"]["fallbacks"] >= 0
    assert (tmp_path / "placement.png").stat().st_size > 10_000


def test_candidates_are_compared_with_fgd_by_seed(tmp_path, capsys):
    label = "least-GPU tie-break"
    rc = placement.main(["--fraction", "0.05", "--seeds", "42,43", "--candidates", label,
                         "--out", str(tmp_path)])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert set(rows) == {"FGD", "Ours", label}
    for name in ("Ours", label):
        pairs = zip(rows[name]["per_seed_130"], rows["FGD"]["per_seed_130"], strict=True)
        diffs = [a - b for a, b in pairs]
        low, high = rows[name]["vs_FGD"]["ci95_pp"]
        assert min(diffs) - 1e-9 <= low <= rows[name]["vs_FGD"]["median_pp"] <= high
        assert high <= max(diffs) + 1e-9
    saved = json.loads((tmp_path / "placement_candidates.json").read_text())
    assert saved["openb_pod_list_default.csv"]["seeds 42-43"][label]["vs_Ours"]["seeds_tied"] >= 0


def test_paired_difference_interval_holds_the_median():
    out = benchmark.paired_difference([96.0, 96.1, 95.9, 96.2], [95.0, 95.2, 95.1, 95.3])
    assert out["median_pp"] == 0.9 and out["seeds_ahead"] == 4
    assert 0.8 <= out["ci95_pp"][0] <= 0.9 <= out["ci95_pp"][1] <= 1.0
    with pytest.raises(ValueError):
        benchmark.paired_difference([96.0], [])


@pytest.mark.parametrize("args", [
    ["--seeds", "x"], ["--policies", "Tetris"], ["--trace", "nope.csv"], ["--budget", "2"],
    ["--candidates", "magic"]])
def test_bad_input_is_one_line_and_exit_2(args, capsys):
    assert placement.main([*args, "--fraction", "0.05"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("placement: ") and "\n" not in err


def test_a_trace_with_a_bad_row_is_one_line_naming_it(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,2048,1,lots\n")
    assert placement.main(["--trace", str(bad), "--seeds", "42"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "placement: pod list line 2: gpu_milli must be a whole number >= 0, got 'lots'"


def test_loss_profile_splits_what_is_left_free():
    # One 2-GPU node: an 810-milli pod leaves 190 that only the rare 100-milli pod could use;
    # a whole-GPU pod takes the other GPU; the next whole-GPU pod fails.
    node = new_node("n", "T4", cpu_milli=64000, memory_mib=1 << 16, gpus=2)
    big = PodShape(cpu_milli=1000, gpu_count=1, gpu_milli=810)
    whole = PodShape(cpu_milli=1000, gpu_count=1, gpu_milli=1000)
    tiny = PodShape(cpu_milli=1000, gpu_count=1, gpu_milli=100)
    trace = (big,) * 30 + (tiny,) + (whole,) * 10
    pods = [big, whole, whole]
    result = protocol.run([node], pods, ours.Ours(trace), seed=1)
    prof = benchmark.loss_profile(result, pods, trace)
    assert prof["failed_gpu_pct_by_kind"] == {"1-gpu": 50.0}
    assert prof["free_pct"] == {"whole_gpus": 0.0, "usable": 0.0, "rare_fit": 9.5,
                                "dead_size": 0.0, "dead_cpu_or_memory": 0.0}
    assert prof["top_remainders"] == [{"milli": 190, "gpus": 1, "pct": 9.5}]
    assert prof["first_failure_at_pct"] == 140.5


def test_profile_run_writes_medians_per_policy(tmp_path, capsys):
    assert placement.main(["--fraction", "0.05", "--seeds", "42", "--profile",
                           "--out", str(tmp_path)]) == 0
    median = json.loads(capsys.readouterr().out)["median"]
    assert set(median) == {"FGD", "Ours", "offline FFD, Ours"}
    for prof in median.values():
        assert 100 - prof["allocation_130"] >= sum(prof["free_pct"].values()) - 0.5
    saved = json.loads((tmp_path / "placement_profile.json").read_text())
    assert saved["per_seed"]["Ours"]["42"]["allocation_130"] == median["Ours"]["allocation_130"]


def test_a_rerun_of_some_policies_keeps_the_others(tmp_path, capsys):
    common = ["--fraction", "0.05", "--seeds", "42", "--out", str(tmp_path)]
    assert placement.main([*common, "--policies", "BestFit,FGD"]) == 0
    first = json.loads((tmp_path / "placement.json").read_text())["openb_pod_list_default.csv"]
    assert placement.main([*common, "--policies", "FGD"]) == 0
    saved = json.loads((tmp_path / "placement.json").read_text())["openb_pod_list_default.csv"]
    assert list(saved["policies"]) == ["BestFit", "FGD"]
    assert saved["policies_from_earlier_run"] == ["BestFit"]
    assert saved["policies"]["BestFit"] == first["policies"]["BestFit"]
    capsys.readouterr()
    assert placement.main([*common[:2], "--seeds", "43", *common[4:], "--policies", "FGD"]) == 0
    other_seeds = json.loads((tmp_path / "placement.json").read_text())
    assert list(other_seeds["openb_pod_list_default.csv"]["policies"]) == ["FGD"]


def test_a_candidates_rerun_keeps_other_labels_and_can_reuse_fgd(tmp_path, capsys):
    common = ["--fraction", "0.05", "--seeds", "42", "--out", str(tmp_path)]
    assert placement.main([*common, "--candidates", "least-GPU tie-break"]) == 0
    first = json.loads(capsys.readouterr().out)["rows"]
    label = "rare-fit term (beta 4)"
    assert placement.main([*common, "--candidates", label, "--reuse-baselines"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows["FGD"]["from_earlier_run"] and "from_earlier_run" not in rows[label]
    assert rows["FGD"]["per_seed_130"] == first["FGD"]["per_seed_130"]
    saved = json.loads((tmp_path / "placement_candidates.json").read_text())
    assert set(saved["openb_pod_list_default.csv"]["seeds 42-42"]) == {
        "FGD", "Ours", "least-GPU tie-break", label}


def test_a_trace_above_the_ratio_runs_with_the_papers_columns(tmp_path, capsys):
    # multigpu50 asks for 183 % of the cluster: thinned, not refused; the paper has figures.
    rc = placement.main(["--trace", "openb_pod_list_multigpu50.csv", "--seeds", "42",
                         "--policies", "BestFit", "--fraction", "0.05", "--out", str(tmp_path)])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["median_130"]["BestFit"] > 50
    rows = benchmark.with_paper({"FGD": {"median_130": 97.0}}, "openb_pod_list_multigpu50.csv")
    assert rows["FGD"]["gap_pp"] == -0.17  # the paper's FGD: 97.17
