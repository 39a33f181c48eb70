"""The `ckpt-preempt simulate` and `explain --snapshot` commands, run as a user runs them."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ckpt_preempt.controller import cmd_simulate
from ckpt_preempt.policies.sim import planners

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "snapshot-example.yaml"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ckpt_preempt.controller.cli", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )


def test_simulate_json_and_plot_on_a_small_bundled_replay(tmp_path):
    png = tmp_path / "lost.png"
    out = cli("simulate", "--scale", "0.05", "--window-hours", "2", "--seed", "2", "--json",
              "--plot", str(png))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [p["policy"] for p in doc["policies"]] == list(planners.POLICIES)
    assert doc["seeds"] == [2] and doc["protocol"] == "stress" and doc["scale"] == 0.05
    g, w = doc["generator"], doc["workload_per_seed"]["2"]
    assert g["seed"] == 2 and g["load"] == 1.3
    assert w["offered_load"] > 1.0 and 0 < w["synthetic_pod_share"] < 1
    assert doc["strongest_baseline"] in planners.POLICIES
    by = {p["policy"]: p for p in doc["policies"]}
    for p in by.values():
        assert p["plans_invalid"] == 0
        assert p["preemptions"] > 0
        assert p["ratio_vs_strongest"]["n"] == 1
    assert by["checkpoint-aware"]["gangs_broken"] == 0
    assert by["kube-default"]["ratio_vs_kube_default"]["median"] == 1.0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_two_seeds_prints_intervals_in_the_table():
    out = cli("simulate", "--scale", "0.03", "--window-hours", "1", "--seeds", "2",
              "--policies", "kube-default,checkpoint-aware")
    assert out.returncode == 0, out.stderr
    assert "2 seed(s)" in out.stdout and "95 % bootstrap interval" in out.stdout
    assert "÷ strongest baseline (kube-default)" in out.stdout
    assert "generator: scale=0.03, load=1.3, window_hours=1.0" in out.stdout
    assert "simulator: grace_seconds=30.0" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--policies", "fifo"], "unknown policy 'fifo'", id="unknown policy"),
        pytest.param(["--policies", " , "], "--policies is empty", id="empty policies"),
        pytest.param(["--pods", "/nonexistent.csv"], "No such file", id="missing trace"),
        pytest.param(["--scale", "0"], "scale must be in", id="zero scale"),
        pytest.param(["--checkpoint-seconds", "90,30"], "MIN <= MAX", id="inverted range"),
        pytest.param(["--seeds", "0"], "--seeds must be at least 1", id="no seeds"),
        pytest.param(["--protocol", "chaos"], "unknown protocol 'chaos'", id="unknown protocol"),
        pytest.param(["--workload", "imagenet"], "unknown workload 'imagenet'",
                     id="unknown workload"),
        pytest.param(["--utilisation", "0"], "--utilisation must be positive", id="utilisation"),
        pytest.param(["--utilisation", "nan"], "--utilisation must be positive", id="nan"),
        pytest.param(["--restore-seconds", "-1"], "--restore-seconds must be a finite number",
                     id="negative cost"),
        pytest.param(["--policies", "kube-default,kube-default"], "names a policy twice",
                     id="duplicate policy"),
        pytest.param(["--plot", "/nonexistent/dir/lost.png"], "does not exist", id="plot dir"),
        pytest.param(["--plot", "lost.pdf"], "should end in .png", id="plot suffix"),
    ],
)
def test_simulate_bad_input_is_one_line_and_exit_2(args, message):
    out = cli("simulate", *args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def _args(*extra: str):
    parser = argparse.ArgumentParser()
    cmd_simulate.add_arguments(parser)
    return parser.parse_args(list(extra))


def test_plot_problems_are_found_before_any_simulation(tmp_path, monkeypatch, capsys):
    def never(*a, **k):
        raise AssertionError("simulated before validating --plot")

    monkeypatch.setattr(cmd_simulate.experiment, "run_cell", never)
    monkeypatch.setattr(cmd_simulate.trace_files, "load", never)
    missing = tmp_path / "missing" / "x.png"
    assert cmd_simulate.run(_args("--plot", str(missing))) == 2
    assert "does not exist" in capsys.readouterr().err

    def no_matplotlib(name):
        raise ImportError(name)

    real = cmd_simulate.plot_problem
    monkeypatch.setattr(cmd_simulate, "plot_problem",
                        lambda path: real(path, importer=no_matplotlib))
    assert cmd_simulate.run(_args("--plot", str(tmp_path / "x.png"))) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_plot_check_accepts_a_writable_png_path(tmp_path):
    assert cmd_simulate.plot_problem(tmp_path / "x.png", importer=lambda name: None) is None


def test_cost_flags_reach_the_simulator_config():
    _, cell, seeds = cmd_simulate.validate(_args(
        "--seeds", "3", "--seed", "7", "--restore-seconds", "60", "--drain-failure-share", "0.1",
        "--grace-seconds", "5"))
    assert seeds == [7, 8, 9]
    assert cell.config.restore_seconds == 60 and cell.config.drain_failure_share == 0.1
    assert cell.config.grace_seconds == 5


def test_a_share_above_one_is_refused():
    with pytest.raises(ValueError, match="--drain-overrun-share must be a share"):
        cmd_simulate.validate(_args("--drain-overrun-share", "1.5"))


def test_simulate_rejects_a_trace_without_gpu_counts(tmp_path):
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,gpu_milli\np,1,1,1000\n")
    out = cli("simulate", "--pods", str(bad))
    assert out.returncode == 2 and "lacks column(s) num_gpu" in out.stderr
    assert "Traceback" not in out.stderr


def test_explain_example_picks_the_fresh_gang_and_kube_default_differs():
    out = cli("explain", "--snapshot", str(EXAMPLE), "--compare", "-o", "json")
    assert out.returncode == 0, out.stderr
    ours, kube = json.loads(out.stdout)
    assert ours["policy"] == "checkpoint-aware" and kube["policy"] == "kube-default"
    assert sorted(v["name"] for g in ours["victim_groups"] for v in g["victims"]) == [
        "trainer-0", "trainer-1"]
    assert ours["placements"] == [{"pod_uid": "prod/serve-llm", "node": "node-a"}]
    assert ours["lost_gpu_hours"] == pytest.approx(8 * 300 / 3600, rel=1e-3)
    reasons = {r["node"]: r["reason"] for r in ours["rejections"]}
    assert reasons["node-c"] == "nvlink-required-but-topology-unknown"
    assert reasons["node-b"] == "another-node-loses-less-work"
    assert [v["name"] for g in kube["victim_groups"] for v in g["victims"]] == ["notebook"]


def test_explain_text_warns_on_malformed_annotations_and_stays_safe(tmp_path):
    doc = yaml.safe_load(EXAMPLE.read_text())
    for p in doc["pods"]:
        if p["name"].startswith("trainer-"):
            p["annotations"]["ckpt-preempt.io/last-checkpoint"] = "five minutes ago"
    snap = tmp_path / "snap.yaml"
    snap.write_text(yaml.safe_dump(doc))
    out = cli("explain", "--snapshot", str(snap))
    assert out.returncode == 0
    assert "last-checkpoint='five minutes ago'" in out.stderr
    assert "treated as having no checkpoint information" in out.stderr
    # without a trusted checkpoint the gang costs 8 GPUs x 10 h, more than node-b's 48 GPU-h
    assert "place prod/serve-llm on node-b" in out.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("now: 5\nnodes: []\npods: []\n", "preemptor must name",
                     id="no preemptor"),
        pytest.param("now: yesterday\n", "now: expected RFC 3339", id="bad time"),
        pytest.param("[1, 2]\n", "must be a mapping", id="not a mapping"),
        pytest.param("now: 5\npods: [{name: a, node: x}]\npreemptor: a\n",
                     "unknown node x", id="pod on unknown node"),
    ],
)
def test_explain_bad_snapshot_is_exit_2(tmp_path, content, message):
    snap = tmp_path / "snap.yaml"
    snap.write_text(content)
    out = cli("explain", "--snapshot", str(snap))
    assert out.returncode == 2, out.stdout
    assert message in out.stderr and "Traceback" not in out.stderr
