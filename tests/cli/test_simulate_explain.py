"""The `ckpt-preempt simulate` and `explain --snapshot` commands, run as a user runs them."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ckpt_preempt.controller.app import cmd_simulate
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.sim import planners

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "snapshot-example.yaml"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ckpt_preempt.controller.app.cli", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )


def test_simulate_json_and_plot_on_a_small_bundled_replay(tmp_path):
    png = tmp_path / "lost.png"
    out = cli("simulate", "--scale", "0.05", "--window-hours", "2", "--seed", "2", "--json",
              "--plot", str(png))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [p["policy"] for p in doc["policies"]] == list(planners.REPORTED)
    assert doc["seeds"] == [2] and doc["protocol"] == "stress" and doc["scale"] == 0.05
    g, w = doc["generator"], doc["workload_per_seed"]["2"]
    assert g["seed"] == 2 and g["load"] == 1.3
    assert w["offered_load"] > 1.0 and 0 < w["synthetic_pod_share"] < 1
    assert doc["strongest_baseline"] in planners.REPORTED
    by = {p["policy"]: p for p in doc["policies"]}
    for p in by.values():
        assert p["plans_invalid"] == 0
        assert p["preemptions"] > 0
        assert p["ratio_vs_strongest"]["n"] == 1
    assert by["checkpoint-aware"]["gangs_broken"] == 0
    assert by["kube-default"]["ratio_vs_kube_default"]["median"] == 1.0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    floor = doc["floor"]  # computed in this run, on the default number of cuts of its cell
    assert floor["cell"] == "openb/stress" and floor["seeds"] == [2]
    assert floor["cuts"] == cmd_simulate.FLOOR_CUTS
    assert set(floor["vs_floor"]) == set(planners.REPORTED)


def test_simulate_prints_each_policy_at_or_above_the_floor():
    out = cli("simulate", "--scale", "0.03", "--window-hours", "1", "--seed", "1",
              "--floor-cuts", "16")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = next(k for k, line in enumerate(lines) if line.startswith("loss ÷ floor"))
    assert "of 16 seeded 2-node cuts of openb/stress (seed 1)" in lines[head]
    assert "not this run's totals" in lines[head]
    rows = {line.split()[0]: line.split()[1:]
            for line in lines[head + 1:head + 1 + len(planners.REPORTED)]}
    assert set(rows) == set(planners.REPORTED)
    for policy, (median, low, high, *mark) in rows.items():
        low, high = float(low.strip("[,")), float(high.strip("]"))
        assert 1.0 <= low <= float(median) <= high, policy  # the floor is a lower bound
        assert mark == (["(ours)"] if policy not in planners.TIMING_BASELINES else [])


def test_simulate_without_floor_cuts_prints_no_floor():
    out = cli("simulate", "--scale", "0.03", "--window-hours", "1", "--floor-cuts", "0",
              "--policies", "kube-default", "--json")
    assert out.returncode == 0, out.stderr
    assert "floor" not in json.loads(out.stdout)


def test_simulate_two_seeds_prints_intervals_in_the_table():
    out = cli("simulate", "--scale", "0.03", "--window-hours", "1", "--seeds", "2",
              "--policies", "kube-default,checkpoint-aware")
    assert out.returncode == 0, out.stderr
    assert "2 seed(s)" in out.stdout and "95 % bootstrap interval" in out.stdout
    assert "÷ strongest baseline (kube-default)" in out.stdout
    assert "generator: scale=0.03, load=1.3, window_hours=1.0" in out.stdout
    assert "simulator: grace_seconds=30.0" in out.stdout


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


def test_plot_into_a_folder_that_takes_no_files_fails_before_the_simulation(monkeypatch, capsys):
    # /proc passes os.access for root and is a directory, but no file can be created there
    def never(*a, **k):
        raise AssertionError("simulated before validating --plot")

    monkeypatch.setattr(cmd_simulate.experiment, "run_cell", never)
    monkeypatch.setattr(cmd_simulate.trace_files, "load", never)
    assert cmd_simulate.run(_args("--plot", "/proc/x.png")) == 2
    assert "--plot: directory /proc is not writable" in capsys.readouterr().err


def test_plot_onto_a_directory_is_refused(tmp_path):
    (tmp_path / "d.png").mkdir()
    problem = cmd_simulate.plot_problem(tmp_path / "d.png", importer=lambda name: None)
    assert problem == f"--plot: {tmp_path / 'd.png'} is a directory"


def test_plot_check_accepts_a_writable_png_path(tmp_path):
    assert cmd_simulate.plot_problem(tmp_path / "x.png", importer=lambda name: None) is None


def test_cost_flags_reach_the_simulator_config():
    _, cell, seeds = cmd_simulate.validate(_args(
        "--seeds", "3", "--seed", "7", "--restore-seconds", "60", "--drain-failure-share", "0.1",
        "--grace-seconds", "5", "--restore-job-gpu-seconds", "120", "--replay-windows", "2"))
    assert seeds == [7, 8, 9]
    assert cell.config.restore_seconds == 60 and cell.config.drain_failure_share == 0.1
    assert cell.config.grace_seconds == 5 and cell.config.restore_job_gpu_seconds == 120
    assert cell.params.replay_windows == 2


def test_simulate_rejects_a_trace_without_gpu_counts(tmp_path):
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,gpu_milli\np,1,1,1000\n")
    out = cli("simulate", "--pods", str(bad))
    assert out.returncode == 2 and "lacks column(s) num_gpu" in out.stderr
    assert "Traceback" not in out.stderr


def test_explain_example_picks_the_fresh_gang_and_kube_default_differs():
    out = cli("explain", "--snapshot", str(EXAMPLE), "--compare", "-o", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    ours, kube = doc["plan"], doc["kube_default"]
    assert ours["policy"] == "checkpoint-aware" and kube["policy"] == "kube-default"
    assert doc["now"] == "2026-12-02T12:00:00Z" and doc["pod"] == "prod/serve-llm"
    assert sorted(v["name"] for g in ours["victim_groups"] for v in g["victims"]) == [
        "trainer-0", "trainer-1"]
    assert ours["placements"] == [{"pod_uid": "prod/serve-llm", "node": "node-a"}]
    assert ours["lost_gpu_hours"] == pytest.approx(8 * 300 / 3600, abs=1e-4)
    (group,) = ours["victim_groups"]
    assert group["gang"] == {"namespace": "ml", "name": "llm",
                             "convention": "scheduling.ai gang labels"}
    assert {v["workload"] for v in group["victims"]} == {"ml/llm (scheduling.ai gang labels)"}
    reasons = {r["node"]: r["reason"] for r in ours["rejections"]}
    assert reasons["node-c"] == "nvlink-required-but-topology-unknown"
    assert reasons["node-b"] == "another-node-loses-less-work"
    assert [v["name"] for g in kube["victim_groups"] for v in g["victims"]] == ["notebook"]
    assert kube["drain_deadline"] == "2026-12-02T12:00:30Z"


def _keys(value, path=""):
    """Every key path of a JSON document, lists entered."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield f"{path}.{k}"
            yield from _keys(v, f"{path}.{k}")
    elif isinstance(value, list):
        for v in value:
            yield from _keys(v, f"{path}[]")


def _values(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _values(v)
    elif isinstance(value, list):
        for v in value:
            yield from _values(v)
    else:
        yield value


def test_explain_json_has_one_shape_with_or_without_compare():
    alone = json.loads(cli("explain", "--snapshot", str(EXAMPLE), "-o", "json").stdout)
    compared = json.loads(cli("explain", "--snapshot", str(EXAMPLE), "--compare",
                              "-o", "json").stdout)
    as_yaml = yaml.safe_load(cli("explain", "--snapshot", str(EXAMPLE), "-o", "yaml").stdout)
    assert alone["kube_default"] is None and compared["kube_default"] is not None
    assert list(alone) == list(compared) == list(as_yaml) == [
        "now", "pod", "members", "warnings", "stored_plan", "plan", "kube_default", "node_health"]
    assert alone["plan"] == compared["plan"] == as_yaml["plan"]
    # the comparison plan has the same keys as ours
    assert set(_keys(compared["kube_default"])) <= set(_keys(compared["plan"]))


def test_explain_speaks_gpu_hours_and_rfc3339_only():
    doc = json.loads(cli("explain", "--snapshot", str(EXAMPLE), "--compare", "-o", "json").stdout)
    keys = set(_keys(doc))
    assert not [k for k in keys if "seconds" in k and "gpu" in k], keys
    assert ".plan.lost_gpu_hours" in keys and ".plan.victim_groups[].lost_gpu_hours" in keys
    times = [doc["now"], doc["plan"]["drain_deadline"], doc["kube_default"]["drain_deadline"]]
    assert all(isinstance(t, str) and t.endswith("Z") and "T" in t for t in times), times
    assert not [v for v in _values(doc) if isinstance(v, float) and v > 1e9]  # no epoch floats
    text = cli("explain", "--snapshot", str(EXAMPLE), "--compare").stdout
    assert "GPU-s" not in text and "GPU-h" in text
    assert "seed" not in text and "gang ml/llm (scheduling.ai gang labels)" in text
    assert "drain deadline: 2026-12-02T12:00:30Z (now + 30s)" in text


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


def test_every_gang_convention_has_a_human_name():
    from ckpt_preempt.controller.explain import explain_format
    from ckpt_preempt.policies.model import gangs

    assert set(explain_format.CONVENTION_NAMES) == {c.id for c in gangs.CONVENTIONS}
    for c in gangs.CONVENTIONS:
        shown = explain_format.gang_text(f"team/{c.id}/job")
        assert shown == f"team/job ({explain_format.CONVENTION_NAMES[c.id]})"
        assert c.id not in shown.split("(")[0]


def test_live_explain_document_has_the_snapshot_shape():
    from ckpt_preempt.controller.explain import explain_live
    from ckpt_preempt.policies.baselines import kube_default
    from ckpt_preempt.policies.model import snapshot_io
    from ckpt_preempt.policies.planner import preemption

    snap, preemptor, _ = snapshot_io.from_dict(yaml.safe_load(EXAMPLE.read_text()))
    ours = preemption.plan(snap, preemptor)
    stored = plan_record.PlanRecord(
        id="p1", state=plan_record.State.DRAINING, mode=plan_record.Mode.NOMINATE,
        created=snap.now - 60, deadline=snap.now + 60, evict_by=snap.now + 120,
        bind_by=snap.now + 180, placements=(), victims=())
    e = explain_live.Explanation(pod="prod/serve-llm", members=("prod/serve-llm",), plan=ours,
                                 kube_default=kube_default.plan(snap, preemptor),
                                 persisted=stored, warnings=("w",), now=snap.now)
    doc = explain_live.document(e)
    offline = json.loads(cli("explain", "--snapshot", str(EXAMPLE), "--compare",
                             "-o", "json").stdout)
    assert list(doc) == list(offline)
    assert json.loads(json.dumps(doc))["plan"] == offline["plan"]
    assert doc["stored_plan"] == {"id": "p1", "state": "Draining",
                                  "created": "2026-12-02T11:59:00Z", "reason": ""}
    text = explain_live.render(e)
    assert "at 2026-12-02T12:00:00Z" in text and "created 2026-12-02T11:59:00Z" in text
    assert "GPU-s" not in text and "gang ml/llm (scheduling.ai gang labels)" in text


def test_explain_shows_node_health_from_the_snapshot(tmp_path):
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["nodes"][0]["health"] = "failing"
    doc["nodes"][1]["health"] = "degraded"
    for node in doc["nodes"][2:]:
        node["health"] = "healthy"
    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = json.loads(cli("explain", "--snapshot", str(path), "-o", "json").stdout)
    health = out["node_health"]
    assert [(e["node"], e["state"]) for e in health["unhealthy"]] == [
        ("node-a", "failing"), ("node-b", "degraded")]
    assert (health["nodes"], health["unknown"]) == (len(doc["nodes"]), 0)
    assert out["plan"]["placements"]  # a plan exists, and not on the failing node
    assert "node-a" not in [pl["node"] for pl in out["plan"]["placements"]]
    text = cli("explain", "--snapshot", str(path)).stdout
    assert "  node health:\n    node-a: failing\n    node-b: degraded" in text
    unknown = json.loads(cli("explain", "--snapshot", str(EXAMPLE), "-o", "json").stdout)
    assert unknown["node_health"]["unhealthy"] == []
    assert unknown["node_health"]["unknown"] == unknown["node_health"]["nodes"] > 0


def test_explain_says_which_timing_was_chosen_and_why(tmp_path):
    doc = yaml.safe_load(EXAMPLE.read_text())
    for p in doc["pods"]:
        if p["name"].startswith("trainer-"):  # the victims: their gang ends in 2 minutes
            p["annotations"]["ckpt-preempt.io/expected-end"] = "2026-12-02T12:02:00Z"
    snap = tmp_path / "snap.yaml"
    snap.write_text(yaml.safe_dump(doc))
    out = json.loads(cli("explain", "--snapshot", str(snap), "-o", "json").stdout)
    timing = out["plan"]["timing"]
    assert timing["when"] == "after-end"
    assert timing["deadline"] == "2026-12-02T12:03:00Z"  # the end plus the report margin
    assert {w["for"] for w in timing["waits"]} == {"after-end"}
    assert timing["expected_gpu_hours"] < timing["now_gpu_hours"]
    text = cli("explain", "--snapshot", str(snap)).stdout
    assert "timing: after-end, evict by 2026-12-02T12:03:00Z (evict at now + 180s" in text
    plain = json.loads(cli("explain", "--snapshot", str(EXAMPLE), "-o", "json").stdout)
    assert plain["plan"]["timing"]["when"] == "now"


@pytest.mark.parametrize(("count", "flags", "held"), [
    pytest.param(4, (), True, id="at the default bound: held"),
    pytest.param(3, (), False, id="below it"),
    pytest.param(4, ("--max-preemptions-per-window", "0"), False, id="bound off"),
    pytest.param(1, ("--max-preemptions-per-window", "1"), True, id="a bound of one"),
])
def test_explain_holds_a_workload_at_the_starvation_bound_as_the_controller_does(
        tmp_path, count, flags, held):
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["preemption_history"] = {"ml/seed/llm": count}  # the gang the plan takes otherwise
    snap = tmp_path / "snap.yaml"
    snap.write_text(yaml.safe_dump(doc))
    out = cli("explain", "--snapshot", str(snap), *flags, "-o", "json")
    plan = json.loads(out.stdout)["plan"]
    victims = {v["name"] for g in plan["victim_groups"] for v in g["victims"]}
    assert bool(victims & {"trainer-0", "trainer-1"}) is not held
    if held:  # node-b's pods are dearer but may go; the plan moves there, and says why
        assert [pl["node"] for pl in plan["placements"]] == ["node-b"]
        text = cli("explain", "--snapshot", str(snap), *flags).stdout
        assert "node-a: not-enough-preemptible-capacity (serve-llm: 2 pod(s) " \
               "at-preemption-bound)" in text


def test_explain_refuses_bad_preemption_counts_in_one_line(tmp_path):
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["preemption_history"] = {"ml/seed/llm": -1}
    snap = tmp_path / "snap.yaml"
    snap.write_text(yaml.safe_dump(doc))
    out = cli("explain", "--snapshot", str(snap))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().endswith("preemption_history must map workload keys to counts")
    bad_flag = cli("explain", "--snapshot", str(EXAMPLE), "--max-preemptions-per-window", "-2")
    assert bad_flag.returncode == 2 and "Traceback" not in bad_flag.stderr
