"""The `ckpt-preempt simulate` and `explain --snapshot` commands, run as a user runs them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "snapshot-example.yaml"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )


def test_simulate_json_and_plot_on_a_small_bundled_replay(tmp_path):
    png = tmp_path / "lost.png"
    out = cli("simulate", "--scale", "0.05", "--window-hours", "2", "--seed", "2", "--json",
              "--plot", str(png))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [r["policy"] for r in doc["results"]] == [
        "kube-default", "checkpoint-aware", "checkpoint-aware-drain"]
    w = doc["workload"]
    assert w["seed"] == 2 and w["scale"] == 0.05 and w["load"] == 1.3
    assert w["offered_load"] > 1.0 and w["extra_pods_drawn"] > 0
    for r in doc["results"]:
        assert r["plans_invalid"] == 0
        assert r["preemptions"] > 0
    assert doc["results"][1]["gangs_broken"] == 0
    assert set(doc["lost_work_ratio_vs_kube_default"]) == {
        "checkpoint-aware", "checkpoint-aware-drain"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--policies", "fifo"], "unknown policy 'fifo'", id="unknown policy"),
        pytest.param(["--pods", "/nonexistent.csv"], "No such file", id="missing trace"),
        pytest.param(["--scale", "0"], "scale must be in", id="zero scale"),
        pytest.param(["--checkpoint-seconds", "90,30"], "MIN <= MAX", id="inverted range"),
    ],
)
def test_simulate_bad_input_is_one_line_and_exit_2(args, message):
    out = cli("simulate", *args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_simulate_rejects_a_trace_without_times(tmp_path):
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\n")
    out = cli("simulate", "--pods", str(bad))
    assert out.returncode == 2 and "lacks column(s) qos" in out.stderr


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
