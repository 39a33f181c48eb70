"""Cuts of a simulated cell (policies/sim/floor_cuts.py): what a cut keeps, and that the floor
the hindsight search finds on real cuts is never above any policy's loss."""

import functools

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ckpt_preempt.controller.app import trace_files
from ckpt_preempt.policies.sim import experiment, floor_cuts, hindsight, planners, stats
from ckpt_preempt.policies.sim.engine import SimConfig

TOLERANCE_GPU_HOURS = 1e-9
CELL = experiment.Cell(workload="openb", protocol="stress", scale=0.03)


@functools.cache
def _cell_workload():
    pods, nodes = trace_files.load(CELL.workload)
    return experiment.build(CELL, 1, pods, nodes)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 10_000), st.integers(1, 3), st.integers(2, 10), st.integers(1, 3))
def test_a_cut_keeps_its_limits_and_the_cells_jobs(index, nodes, jobs, high):
    w, used = _cell_workload()
    key = floor_cuts.cut_key(CELL.label, 1, index)
    small, kept = floor_cuts.cut(w, used, key, nodes=nodes, jobs=jobs, high=high)
    assert (small, kept) == floor_cuts.cut(w, used, key, nodes=nodes, jobs=jobs, high=high)
    assert len(kept) == nodes and all(n in used for n in kept)
    assert len(small.jobs) <= jobs and sum(j.high for j in small.jobs) <= high
    assert small.capacity_gpus == sum(n.gpus for n in kept)
    assert all(floor_cuts.fits(j, kept) and j.done_before == 0 for j in small.jobs)
    assert all(j.duration >= floor_cuts.LOW_MIN_DURATION_SECONDS
               for j in small.jobs if not j.high)
    assert [j.id for j in small.jobs] == list(range(len(small.jobs)))
    lows = [j.arrival for j in small.jobs if not j.high]
    assert all(0 <= a <= floor_cuts.FILL_SECONDS for a in lows)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 10_000))
def test_the_floor_of_a_tiny_cut_is_never_above_any_policy(index):
    w, used = _cell_workload()
    small, kept = floor_cuts.cut(w, used, floor_cuts.cut_key(CELL.label, 1, index),
                                 jobs=8, high=2)
    try:  # the search alone, not started from the best policy: it must find each one's path
        r = hindsight.floor(small, kept, SimConfig(), max_simulations=1500,
                            start_from_policies=False)
    except hindsight.HindsightLimit:
        assume(False)
    for name, lost in r.policy_gpu_hours.items():
        assert r.floor_gpu_hours <= lost + TOLERANCE_GPU_HOURS, name


def _result(floor: float, **losses: float) -> hindsight.HindsightResult:
    return hindsight.HindsightResult(floor_gpu_hours=floor, policy_gpu_hours=losses,
                                     decisions=1, simulations=1, choices=(), script=())


def test_ratios_count_only_cuts_with_a_floor_above_zero():
    cuts = [floor_cuts.CutFloor(key="a", jobs=3, result=_result(1.0, p=2.0, q=1.0)),
            floor_cuts.CutFloor(key="b", jobs=3, result=_result(2.0, p=3.0, q=2.0)),
            floor_cuts.CutFloor(key="c", jobs=3, result=_result(0.0, p=1.0, q=0.0)),
            floor_cuts.CutFloor(key="d", jobs=3, result=None)]
    s = floor_cuts.summarise("x/stress", [1], cuts, ["p", "q"])
    assert (s.cuts, s.contended, s.positive, s.too_large) == (4, 3, 2, 1)
    ratios = dict(s.ratios)
    assert ratios["p"] == stats.bootstrap_ratio([2.0, 3.0], [1.0, 2.0], seed=1)
    assert ratios["q"].median == ratios["q"].low == 1.0
    text = s.lines(ours=["q"])
    assert "over the 2 of 4 seeded 2-node cuts of x/stress (seed 1)" in text[0]
    assert "1 cuts too large" in text[0] and "not this run's totals" in text[0]
    assert text[2].split() == ["q", "1.00", "[1.00,", "1.00]", "(ours)"]


def test_every_registry_policy_has_a_ratio_on_a_contended_cut():
    w, used = _cell_workload()
    cuts = [floor_cuts.floor_of(w, used, SimConfig(), floor_cuts.cut_key(CELL.label, 1, k),
                                max_simulations=500) for k in range(1, 9)]
    s = floor_cuts.summarise(CELL.label, [1], cuts, planners.KNOWN)
    assert s.positive > 0  # these eight cuts of the cell contend
    assert all(e is not None and e.low >= 1.0 - TOLERANCE_GPU_HOURS for _, e in s.ratios)
