"""Gang membership from every convention, label or annotation, with a fixed precedence; a
malformed value is passed over as if absent and reported."""

from __future__ import annotations

import itertools

import pytest

from ckpt_preempt.policies.model import gangs
from ckpt_preempt.policies.model.gangs import CONVENTIONS, MAX_GANG_SIZE, GangError, parse_total

BY_ID = {c.id: c for c in CONVENTIONS}


def detect(namespace, labels, annotations):
    """The gang of well-formed metadata (no problems expected)."""
    member, problems = gangs.detect(namespace, labels, annotations)
    assert problems == ()
    return member


def test_conventions_are_the_documented_six_in_order():
    assert [c.id for c in CONVENTIONS] == ["seed", "kueue", "volcano", "coscheduling", "lws",
                                           "jobset"]
    assert [c.name_key for c in CONVENTIONS] == [
        "scheduling.ai/gang-name",
        "kueue.x-k8s.io/pod-group-name",
        "scheduling.k8s.io/group-name",
        "scheduling.x-k8s.io/pod-group",
        "leaderworkerset.sigs.k8s.io/group-key",
        "jobset.sigs.k8s.io/jobset-name",
    ]


@pytest.mark.parametrize(
    ("conv", "where"),
    [pytest.param(c, where, id=f"{c.id} as {where}")
     for c in CONVENTIONS for where in ("label", "annotation")],
)
def test_each_convention_detected_as_label_or_annotation(conv, where):
    meta = {conv.name_key: "train-7"}
    labels, annotations = (meta, {}) if where == "label" else ({}, meta)
    got = detect("team", labels, annotations)
    assert got is not None
    assert (got.key, got.convention, got.name, got.total) == (
        f"team/{conv.id}/train-7", conv.id, "train-7", None
    )


@pytest.mark.parametrize(
    ("conv", "total_where"),
    [pytest.param(c, w, id=f"{c.id} total as {w}")
     for c in CONVENTIONS if c.total_key for w in ("label", "annotation")],
)
def test_declared_totals(conv, total_where):
    labels = {conv.name_key: "job"}
    annotations = {}
    (labels if total_where == "label" else annotations)[conv.total_key] = "16"
    assert detect("ns", labels, annotations).total == 16


@pytest.mark.parametrize(
    ("first", "second"),
    [pytest.param(a, b, id=f"{a.id} wins over {b.id}")
     for a, b in itertools.combinations(CONVENTIONS, 2)],
)
def test_precedence_first_convention_wins(first, second):
    labels = {first.name_key: "one", second.name_key: "two"}
    got = detect("ns", labels, {})
    assert (got.convention, got.name) == (first.id, "one")
    # split across label and annotation, the order still holds
    got = detect("ns", {second.name_key: "two"}, {first.name_key: "one"})
    assert (got.convention, got.name) == (first.id, "one")


def test_label_wins_over_annotation_for_the_same_key():
    key = BY_ID["volcano"].name_key
    assert detect("ns", {key: "from-label"}, {key: "from-annotation"}).name == "from-label"


def test_same_name_in_two_namespaces_or_conventions_is_two_gangs():
    a = detect("ns-a", {BY_ID["seed"].name_key: "job"}, {})
    b = detect("ns-b", {BY_ID["seed"].name_key: "job"}, {})
    c = detect("ns-a", {BY_ID["jobset"].name_key: "job"}, {})
    assert len({a.key, b.key, c.key}) == 3


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        pytest.param({}, {}, id="no metadata"),
        pytest.param({"app": "x"}, {"other.io/gang-name": "y"}, id="unrelated keys"),
        pytest.param({"scheduling.ai/gang-total": "8"}, {}, id="a total without a name"),
    ],
)
def test_no_gang(labels, annotations):
    assert detect("ns", labels, annotations) is None


def test_total_only_comes_from_the_winning_convention():
    labels = {BY_ID["seed"].name_key: "job", BY_ID["kueue"].total_key: "4"}
    assert detect("ns", labels, {}).total is None


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("a", id="one character"),
        pytest.param("job_1.v2-x", id="underscore, dot and dash inside"),
        pytest.param("9lives", id="leading digit"),
        pytest.param("x" * 253, id="253 characters"),
    ],
)
def test_valid_names(name):
    assert detect("ns", {BY_ID["seed"].name_key: name}, {}).name == name


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("-job", id="leading dash"),
        pytest.param("job-", id="trailing dash"),
        pytest.param("job.", id="trailing dot"),
        pytest.param("_job", id="leading underscore"),
        pytest.param("a b", id="blank inside"),
        pytest.param(" job", id="leading blank"),
        pytest.param("job/1", id="slash"),
        pytest.param("jöb", id="non-ASCII letter"),
        pytest.param("x" * 254, id="254 characters"),
    ],
)
@pytest.mark.parametrize("conv", [pytest.param(c, id=c.id) for c in CONVENTIONS])
def test_malformed_name_is_reported_and_acts_as_absent(conv, name):
    member, (e,) = gangs.detect("ns", {}, {conv.name_key: name})
    assert member is None
    assert (e.key, e.value) == (conv.name_key, name)
    assert isinstance(e, GangError) and isinstance(e, ValueError)


def test_a_malformed_name_lets_the_next_convention_decide():
    member, (e,) = gangs.detect(
        "ns", {BY_ID["seed"].name_key: "-bad", BY_ID["kueue"].name_key: "fine"}, {})
    assert (member.convention, member.name, e.key) == ("kueue", "fine", BY_ID["seed"].name_key)


def test_trailing_newline_in_a_name_is_malformed():
    member, problems = gangs.detect("ns", {}, {BY_ID["volcano"].name_key: "job\n"})
    assert member is None and len(problems) == 1


def test_prefixes_are_each_conventions_once_in_order():
    assert gangs.PREFIXES == ("scheduling.ai/", "kueue.x-k8s.io/", "scheduling.k8s.io/",
                              "scheduling.x-k8s.io/", "leaderworkerset.sigs.k8s.io/",
                              "jobset.sigs.k8s.io/")


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param("1", 1, id="one"),
        pytest.param("8", 8, id="eight"),
        pytest.param(" 8 ", 8, id="blanks stripped"),
        # str.strip drops \x1f but int() does not: this one once escaped as a ValueError
        pytest.param("1\x1f", 1, id="control whitespace stripped before converting"),
        pytest.param(str(MAX_GANG_SIZE), MAX_GANG_SIZE, id="the maximum"),
    ],
)
def test_parse_total_accepts(value, want):
    assert parse_total("k", value) == want


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("0", id="zero"),
        pytest.param("-1", id="negative"),
        pytest.param("+4", id="explicit plus"),
        pytest.param("08", id="leading zero"),
        pytest.param("1.5", id="fraction"),
        pytest.param("4e1", id="exponent"),
        pytest.param("", id="empty"),
        pytest.param("eight", id="prose"),
        pytest.param(str(MAX_GANG_SIZE + 1), id="one past the maximum"),
        pytest.param("9" * 20, id="huge"),
        pytest.param("٣", id="non-ASCII digit"),
    ],
)
def test_parse_total_rejects(value):
    with pytest.raises(GangError) as e:
        parse_total("scheduling.ai/gang-total", value)
    assert e.value.key == "scheduling.ai/gang-total"
    assert e.value.value == value


@pytest.mark.parametrize("conv", [pytest.param(c, id=c.id) for c in CONVENTIONS if c.total_key])
def test_malformed_total_leaves_the_gang_without_a_declared_size(conv):
    member, (e,) = gangs.detect("ns", {conv.name_key: "job"}, {conv.total_key: "0"})
    assert (member.name, member.total) == ("job", None)
    assert e.key == conv.total_key
