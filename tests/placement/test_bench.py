"""bench/placement.py: a short seeded run end to end, and bad input as one clear line."""

from __future__ import annotations

import json

import pytest

from bench import placement


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


@pytest.mark.parametrize("args", [
    ["--seeds", "x"], ["--policies", "Tetris"], ["--trace", "nope.csv"], ["--budget", "2"]])
def test_bad_input_is_one_line_and_exit_2(args, capsys):
    assert placement.main([*args, "--fraction", "0.05"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("placement: ") and "\n" not in err
