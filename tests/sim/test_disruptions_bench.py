"""bench/disruptions.py on a tiny seeded cut (one seed of openb/stress at scale 0.02, the
disruption rates × 20 so that every kind occurs): it writes what it promises, and every run's
charges keep the invariants the model guarantees for the same pods in the same state (the
paired prices), whatever the seed:

- no gate drains at once: no drain extra time and no delay, in its own run and paired;
- a spot node goes at its notice's end whatever the gate does: no delay in any world;
- no Eviction reaches the gate on a 30 s notice: the gate alone changes nothing there;
- the gate holds a drain at most the admin's cap, and the early warning never ends a drain
  later than the gate alone (its request is earlier, or the same request again).

Bad arguments: one line and exit 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_preempt.policies.sim import disruptions as dis

ROOT = Path(__file__).resolve().parents[2]
SPOT = (dis.SPOT_SHORT, dis.SPOT_LONG)
DRAINS = (dis.MAINTENANCE, dis.AUTOSCALER)


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("disruptions")
    run = subprocess.run(
        [sys.executable, "-m", "bench.disruptions", "--cells", "openb/stress", "--seeds", "1",
         "--scale", "0.02", "--rate-scale", "20", "--jobs", "1", "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    written = json.loads((out / "disruptions.json").read_text())
    assert printed["rows"] == written["rows"]
    assert (out / "disruptions.md").read_text().startswith("# The disruption protocol")
    return written


def test_it_reports_every_kind_and_world_for_each_seed(doc):
    assert doc["seeds"] == [1] and doc["cells"] == ["openb/stress"]
    assert [r["world"] for r in doc["runs"]] == list(dis.WORLDS)
    assert [r["kind"] for r in doc["rows"]] == [*dis.KINDS, "all kinds"]
    for row in doc["rows"]:
        for world in dis.WORLDS:
            assert set(row["own_run"][world]) >= {"work", "restart", "delay", "total",
                                                  "per_disrupted_node", "askable_work"}
            assert ("ratio" in row["paired"][world]) == (world != "no-gate")
    # not vacuous: the cut has disruptions of every kind, evictions, and a drain the gate held
    base = doc["runs"][0]["kinds"]
    assert all(base[k]["disruptions"] > 0 for k in dis.KINDS)
    assert sum(base[k]["evictions"] for k in dis.KINDS) > 0
    assert any(x > 0 for k in DRAINS for x in base[k]["paired"]["drain_extra_seconds"]["gate"])


def test_every_run_keeps_the_model_invariants(doc):
    cap = doc["max_checkpoint_seconds"]
    for run in doc["runs"]:
        for kind, k in run["kinds"].items():
            paired, extra = k["paired"], k["paired"]["drain_extra_seconds"]
            assert paired["delay"]["no-gate"] == 0.0
            assert all(x == 0.0 for x in extra["no-gate"])
            if run["world"] == "no-gate":
                assert k["delay"] == 0.0 and all(x == 0.0 for x in k["drain_extra_seconds"])
            if kind in SPOT:
                assert k["delay"] == 0.0 and k["drain_extra_seconds"] == []
                assert all(v == 0.0 for v in paired["delay"].values())
            if kind == dis.SPOT_SHORT:
                assert paired["work"]["gate"] == paired["work"]["no-gate"]
            if kind in DRAINS:
                assert len(extra["gate"]) == len(extra["gate+warning"]) == k["disruptions"]
                for held, warned in zip(extra["gate"], extra["gate+warning"], strict=True):
                    assert 0.0 <= warned <= held + 1e-6 <= cap + 1e-6
            for world in dis.WORLDS:  # the restart is the same in every world
                assert paired["total"][world] == pytest.approx(
                    paired["work"][world] + paired["restart"] + paired["delay"][world])


def test_bad_arguments_are_one_line_and_exit_2(tmp_path):
    for args in (["--cells", "openb/nonsense"], ["--jobs", "3"], ["--seeds", "0"]):
        out = subprocess.run([sys.executable, "-m", "bench.disruptions", *args, "--out",
                              str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                             timeout=120)
        assert out.returncode == 2 and out.stdout == "", args
        assert len(out.stderr.strip().splitlines()) == 1, args
