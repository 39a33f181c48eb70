"""Declared gang sizes: an exact total from a pod label or annotation (Kueue, LWS, ours), a
minimum from a group object (Volcano and coscheduling PodGroup minMember), and ``readiness``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_preempt.policies.model import gangs
from ckpt_preempt.policies.model.gangs import (
    BY_ID,
    CONVENTIONS,
    MAX_GANG_SIZE,
    Readiness,
    readiness,
)


def test_lws_size_annotation_is_the_groups_exact_total():
    # LWS puts the group key on pods as a label and the size (leader included) as an annotation
    member, problems = gangs.detect(
        "ns", {"leaderworkerset.sigs.k8s.io/group-key": "0a1b2c"},
        {"leaderworkerset.sigs.k8s.io/size": "4"})
    assert problems == ()
    assert (member.convention, member.name, member.total) == ("lws", "0a1b2c", 4)


def test_a_bad_lws_size_leaves_the_group_undeclared():
    member, (e,) = gangs.detect(
        "ns", {"leaderworkerset.sigs.k8s.io/group-key": "0a1b2c"},
        {"leaderworkerset.sigs.k8s.io/size": "four"})
    assert (member.name, member.total) == ("0a1b2c", None)
    assert e.key == "leaderworkerset.sigs.k8s.io/size"


def test_jobset_pods_declare_no_total():
    """global-replicas counts Jobs, not pods: it must not be read as the gang's size."""
    member, _ = gangs.detect("ns", {"jobset.sigs.k8s.io/jobset-name": "js",
                                    "jobset.sigs.k8s.io/global-replicas": "4",
                                    "jobset.sigs.k8s.io/replicatedjob-replicas": "4"}, {})
    assert (member.convention, member.total) == ("jobset", None)
    assert BY_ID["jobset"].total_key is None


def test_group_objects_belong_to_volcano_and_coscheduling_only():
    assert {c.id: c.group_object for c in CONVENTIONS if c.group_object} == {
        "volcano": "podgroups.scheduling.volcano.sh",
        "coscheduling": "podgroups.scheduling.x-k8s.io",
    }
    # a convention has an exact total on its pods or a group object's minimum, never both
    assert not [c for c in CONVENTIONS if c.total_key and c.group_object]


def test_gang_key_is_what_detect_returns():
    member, _ = gangs.detect("team", {"scheduling.x-k8s.io/pod-group": "pg"}, {})
    assert member.key == gangs.gang_key("team", "coscheduling", "pg") == "team/coscheduling/pg"


@pytest.mark.parametrize(
    ("members", "total", "minimum", "want"),
    [
        pytest.param(1, None, None, Readiness.COMPLETE, id="nothing declared"),
        pytest.param(3, 4, None, Readiness.INCOMPLETE, id="short of the total"),
        pytest.param(4, 4, None, Readiness.COMPLETE, id="the total"),
        pytest.param(5, 4, None, Readiness.OVERFULL, id="past the total"),
        pytest.param(2, None, 3, Readiness.INCOMPLETE, id="short of the minimum"),
        pytest.param(3, None, 3, Readiness.COMPLETE, id="the minimum"),
        pytest.param(9, None, 3, Readiness.COMPLETE, id="past the minimum: elastic, fine"),
        pytest.param(4, 4, 6, Readiness.INCOMPLETE, id="both: the stricter holds"),
    ],
)
def test_readiness(members, total, minimum, want):
    assert readiness(members, total=total, minimum=minimum) is want


_sizes = st.integers(min_value=1, max_value=MAX_GANG_SIZE)
_declared = st.one_of(st.none(), _sizes)


@given(members=_sizes, total=_declared, minimum=_declared)
def test_complete_means_every_declared_member_exists(members, total, minimum):
    got = readiness(members, total=total, minimum=minimum)
    if got is Readiness.COMPLETE:
        assert total is None or members == total
        assert minimum is None or members >= minimum
    if got is Readiness.OVERFULL:
        assert total is not None and members > total


@given(members=_sizes, total=_declared, minimum=_sizes)
def test_a_minimum_never_makes_a_gang_ready_sooner(members, total, minimum):
    """Learning a group object's minMember can only hold a gang back, never admit it early."""
    without = readiness(members, total=total, minimum=None)
    with_min = readiness(members, total=total, minimum=minimum)
    if with_min is Readiness.COMPLETE:
        assert without is Readiness.COMPLETE
    if without is Readiness.OVERFULL:
        assert with_min is Readiness.OVERFULL


@given(members=_sizes, total=_declared, minimum=_declared)
def test_one_more_member_never_goes_back_to_waiting(members, total, minimum):
    before = readiness(members, total=total, minimum=minimum)
    after = readiness(members + 1, total=total, minimum=minimum)
    if before is not Readiness.INCOMPLETE:
        assert after is not Readiness.INCOMPLETE
