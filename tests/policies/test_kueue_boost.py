"""The Kueue priority-boost rule (policies/kueue/boost.py), table-driven."""

from __future__ import annotations

import pytest

from ckpt_preempt.policies.kueue import boost
from ckpt_preempt.policies.kueue.boost import BoostRule, Workload, decide
from ckpt_preempt.policies.model.model import CheckpointMode, Pod, Resources
from ckpt_preempt.policies.planner.cost import lost_gpu_seconds

NOW = 1_000_000.0
HOUR = 3600.0
RULE = BoostRule()  # first bucket 900 GPU-s, 16 buckets, 25 % dead band


def pod(name="p", *, gpus=1, mig_milli=0, age=10 * HOUR, checkpoint_age=None, node="n1",
        malformed=False, terminating=False, ns="team-a") -> Pod:
    return Pod(uid=f"uid-{name}", name=name, namespace=ns, node=node,
               requests=Resources(gpus=gpus, gpu_milli=mig_milli), start_time=NOW - age,
               checkpoint=CheckpointMode.PERIODIC,
               last_checkpoint=None if checkpoint_age is None else NOW - checkpoint_age,
               checkpoint_malformed=malformed, terminating=terminating)


def wl(priority=0, annotation=None, admitted=True) -> Workload:
    return Workload(namespace="team-a", name="w", priority=priority, annotation=annotation,
                    admitted=admitted)


def boost_of(workload, pods, *, in_use=(0, 1000), unknown_age=None, rule=RULE) -> int:
    return decide(workload, pods, now=NOW, priorities_in_use=in_use, unknown_age=unknown_age,
                  rule=rule).boost


@pytest.mark.parametrize(("gpu_seconds", "bucket"), [
    pytest.param(0, 0, id="nothing unsaved: no boost"),
    pytest.param(899, 0, id="just under the first bucket"),
    pytest.param(900, 1, id="the first bucket's edge"),
    pytest.param(1799, 1, id="below the first doubling"),
    pytest.param(1800, 2, id="one doubling"),
    pytest.param(900 * 2 ** 14, 15, id="fourteen doublings"),
    pytest.param(1e15, 16, id="capped at max_boost"),
])
def test_buckets_are_log_scale(gpu_seconds, bucket):
    assert RULE.bucket(gpu_seconds) == bucket


@pytest.mark.parametrize(("priority", "in_use", "cap"), [
    pytest.param(0, (0, 1000), 16, id="wide gap: max_boost"),
    pytest.param(0, (0, 5, 1000), 4, id="next class 5 above: at most 4"),
    pytest.param(5, (0, 5, 1000), 16, id="from 5 the next is 1000"),
    pytest.param(0, (0, 1), 0, id="adjacent priorities: no boost at all"),
    pytest.param(-3, (), 2, id="Kueue's default priority 0 is always in use"),
    pytest.param(7, (0, 10), 2, id="a priority that is no class value: room to the next"),
    pytest.param(1000, (0, 1000), 16, id="the highest priority: max_boost"),
])
def test_the_band_never_reaches_the_next_priority_in_use(priority, in_use, cap):
    d = decide(wl(priority), [pod(age=1e9)], now=NOW, priorities_in_use=in_use,
               unknown_age=None)
    assert d.cap == cap and d.boost == cap  # 1e9 GPU-s unsaved wants the top bucket


def test_more_unsaved_work_is_a_higher_boost_and_a_fresh_checkpoint_none():
    fresh = boost_of(wl(), [pod(gpus=8, checkpoint_age=60)])
    hour = boost_of(wl(), [pod(gpus=8, checkpoint_age=HOUR)])
    day = boost_of(wl(), [pod(gpus=8, age=48 * HOUR, checkpoint_age=24 * HOUR)])
    assert fresh == 0 < hour < day


def test_workload_unsaved_work_is_the_sum_of_the_planner_charge_of_its_live_pods():
    pods = [pod("a", gpus=4, checkpoint_age=HOUR), pod("b", gpus=2, checkpoint_age=2 * HOUR),
            pod("pending", node=None), pod("going", terminating=True)]
    want = sum(lost_gpu_seconds(p, NOW, drain=False, max_checkpoint_seconds=0)[0]
               for p in pods[:2])
    assert boost.unsaved_gpu_seconds(pods, NOW, None) == want == 4 * HOUR + 4 * HOUR


def test_mig_slices_count_as_their_fraction_of_a_gpu():
    whole = boost.unsaved_gpu_seconds([pod(gpus=1, checkpoint_age=HOUR)], NOW, None)
    slice_3g = boost.unsaved_gpu_seconds([pod(gpus=0, mig_milli=428, checkpoint_age=HOUR)],
                                         NOW, None)
    assert slice_3g == pytest.approx(0.428 * whole)


@pytest.mark.parametrize(("unknown_age", "charged"), [
    pytest.param(None, 10 * HOUR, id="start-time: the whole run"),
    pytest.param(1800.0, 1800.0, id="assume:30m: at most 30 min"),
    pytest.param(100 * HOUR, 10 * HOUR, id="never before the pod's start"),
])
def test_a_silent_pod_is_charged_by_the_planners_unknown_checkpoint_rule(unknown_age, charged):
    assert boost.unsaved_gpu_seconds([pod(age=10 * HOUR)], NOW, unknown_age) == charged


def test_a_malformed_report_is_charged_from_the_start_whatever_the_policy():
    assert boost.unsaved_gpu_seconds([pod(age=10 * HOUR, malformed=True)], NOW, 60.0) \
        == 10 * HOUR


# hysteresis: bucket 3 starts at 3600 GPU-s; its dead band reaches down to 0.75 × 3600 = 2700
@pytest.mark.parametrize(("written", "unsaved", "want"), [
    pytest.param(None, 3600, 3, id="rises at the edge"),
    pytest.param("2", 3600, 3, id="rises from the bucket below at once"),
    pytest.param("3", 3599, 3, id="just under the edge: stays"),
    pytest.param("3", 2700, 3, id="at the bottom of the dead band: stays"),
    pytest.param("3", 2699, 2, id="below the dead band: falls to the bucket"),
    pytest.param("3", 0, 0, id="a checkpoint: falls to 0 at once"),
    pytest.param("5", 3000, 2, id="far below a higher boost: falls to the bucket"),
    pytest.param("-4", 3000, 2, id="a foreign negative value is no state"),
    pytest.param("99", 3000, 2, id="above the cap is no state"),
    pytest.param("abc", 3000, 2, id="malformed is no state"),
])
def test_dead_band_below_the_written_bucket(written, unsaved, want):
    p = pod(gpus=1, age=unsaved + 1, checkpoint_age=unsaved)
    assert boost_of(wl(annotation=written), [p]) == want


def test_hovering_at_an_edge_changes_the_boost_once():
    written, changes = "2", 0
    for unsaved in [3590, 3610, 3590, 3610, 3000, 3650, 2800, 3605]:
        d = decide(wl(annotation=written), [pod(age=1e6, checkpoint_age=unsaved)], now=NOW,
                   priorities_in_use=(0, 1000), unknown_age=None)
        if d.write:
            written, changes = d.value, changes + 1
    assert (written, changes) == ("3", 1)


def test_a_smaller_band_lowers_a_written_boost_at_once_despite_the_dead_band():
    d = decide(wl(annotation="3"), [pod(checkpoint_age=3000)], now=NOW,
               priorities_in_use=(0, 2), unknown_age=None)
    assert (d.boost, d.value, d.write) == (1, "1", True)


@pytest.mark.parametrize(("admitted", "written", "want_value", "want_write"), [
    pytest.param(False, "7", None, True, id="pending or evicted: removed at once"),
    pytest.param(False, None, None, False, id="pending, none written: nothing to do"),
    pytest.param(True, None, "16", True, id="admitted: written"),
    pytest.param(True, "16", "16", False, id="already says it: not written"),
    pytest.param(True, "+16", "16", False, id="Kueue reads +16 as 16: not written"),
])
def test_only_admitted_workloads_carry_a_boost(admitted, written, want_value, want_write):
    d = decide(wl(annotation=written, admitted=admitted), [pod(age=1e9)], now=NOW,
               priorities_in_use=(0, 1000), unknown_age=None)
    assert (d.value, d.write) == (want_value, want_write)


@pytest.mark.parametrize(("raw", "value"), [
    ("0", 0), ("12", 12), ("+12", 12), ("-12", -12), (str(2**31 - 1), 2**31 - 1),
    (str(2**31), None), ("", None), (" 1", None), ("1_0", None), ("1.0", None), ("٣", None),
    (None, None),
])
def test_the_annotation_is_read_as_kueue_parses_it(raw, value):
    """strconv.ParseInt(value, 10, 32) (kueue pkg/util/priority/priority.go)."""
    assert boost.parse_boost(raw) == value


def test_no_pods_means_nothing_unsaved_and_a_written_boost_is_removed():
    d = decide(wl(annotation="4"), [], now=NOW, priorities_in_use=(0, 1000), unknown_age=None)
    assert (d.boost, d.value, d.write) == (0, None, True)


def test_rule_rejects_nonsense_settings():
    for bad in ({"first_bucket_gpu_seconds": 0}, {"max_boost": -1}, {"dead_band": 1.0}):
        with pytest.raises(ValueError):
            BoostRule(**bad)
