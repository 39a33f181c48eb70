"""Strict parsing of the ckpt-preempt.io annotations: a bad value acts as if absent (never as an
opt-out), protection only within the admin's limits, and the one builder to ``Pod``."""

from __future__ import annotations

import pytest

from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.annotations import Limits, parse_duration, parse_pod_fields
from ckpt_preempt.policies.model.model import CheckpointMode, NvlinkNeed, Resources
from ckpt_preempt.policies.model.times import parse_rfc3339

T0 = "2026-12-02T09:00:00Z"
NOW = 1796202000.0  # T0 as Unix seconds


def _parse(annotations, labels=None, limits=Limits(), now=NOW):
    return parse_pod_fields(
        namespace="ns", labels=labels or {}, annotations=annotations, now=now, limits=limits
    )


def _keys(fields):
    return [p.key for p in fields.problems]


# --- durations ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param("90", 90.0, id="bare seconds"),
        pytest.param("90.5", 90.5, id="fractional bare seconds"),
        pytest.param("90s", 90.0, id="seconds unit"),
        pytest.param("15m", 900.0, id="minutes"),
        pytest.param("1h30m", 5400.0, id="hours and minutes"),
        pytest.param("1h30m15s", 5415.0, id="all three units"),
        pytest.param("1.5h", 5400.0, id="fractional hours"),
        pytest.param("2h15s", 7215.0, id="hours and seconds, no minutes"),
        pytest.param(" 10m ", 600.0, id="surrounding blanks"),
        pytest.param("0", 0.0, id="zero"),
    ],
)
def test_parse_duration_accepts(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("  ", id="blank"),
        pytest.param("-5", id="negative"),
        pytest.param("+5", id="explicit plus"),
        pytest.param("1e3", id="exponent"),
        pytest.param("inf", id="infinity"),
        pytest.param("nan", id="not a number"),
        pytest.param("30m1h", id="units out of order"),
        pytest.param("1d", id="days are not a unit"),
        pytest.param("1H", id="upper-case unit"),
        pytest.param("h", id="unit without a number"),
        pytest.param("1.h", id="dangling decimal point"),
        pytest.param("10 m", id="blank inside"),
        pytest.param("1h 30m", id="blank between units"),
        pytest.param("PT15M", id="ISO 8601 duration"),
        pytest.param("10m\n5s", id="embedded newline"),
    ],
)
def test_parse_duration_rejects(value):
    with pytest.raises(ValueError):
        parse_duration(value)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("٣٠", id="Arabic-Indic digits"),
        pytest.param("１０m", id="full-width digits"),
    ],
)
def test_parse_duration_rejects_non_ascii_digits(value):
    with pytest.raises(ValueError):
        parse_duration(value)


# --- RFC 3339 ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param(T0, NOW, id="UTC with Z"),
        pytest.param("2026-12-02T09:00:00z", NOW, id="lower-case z"),
        pytest.param("2026-12-02T10:00:00+01:00", NOW, id="positive offset"),
        pytest.param("2026-12-02T04:30:00-04:30", NOW, id="negative offset with minutes"),
        pytest.param("2026-12-02T09:00:00+00:00", NOW, id="zero offset"),
        pytest.param("2026-12-02T09:00:00.250Z", NOW + 0.25, id="fractional seconds"),
        pytest.param("2026-12-02T09:00:00.123456789Z", NOW + 0.123456,
                     id="nanoseconds as Go writes them (truncated to microseconds)"),
        pytest.param("2026-12-02t09:00:00Z", NOW, id="lower-case t"),
        pytest.param(" 2026-12-02T09:00:00Z ", NOW, id="surrounding blanks"),
    ],
)
def test_parse_rfc3339_accepts(value, seconds):
    assert parse_rfc3339(value) == pytest.approx(seconds, abs=1e-6)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("2026-12-02", id="date only"),
        pytest.param("2026-12-02T09:00:00", id="no offset"),
        pytest.param("2026-12-02 09:00:00Z", id="space instead of T"),
        pytest.param("2026-13-02T09:00:00Z", id="month 13"),
        pytest.param("2026-02-30T09:00:00Z", id="30 February"),
        pytest.param("2026-12-02T25:00:00Z", id="hour 25"),
        pytest.param("1796202000", id="Unix seconds"),
        pytest.param("yesterday", id="prose"),
        pytest.param("2026-12-02T09:00:00+25:00", id="offset beyond a day"),
        pytest.param("T", id="a lone T"),
    ],
)
def test_parse_rfc3339_rejects(value):
    with pytest.raises(ValueError):
        parse_rfc3339(value)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("20261202T090000Z", id="ISO basic format"),
        pytest.param("2026-W49-3T09:00:00Z", id="ISO week date"),
        pytest.param("2026-12-02T09Z", id="hour only"),
        pytest.param("2026-12-02T09:00Z", id="no seconds"),
        pytest.param("2026-12-02T09:00:00+0100", id="offset without a colon"),
    ],
)
def test_parse_rfc3339_rejects_other_iso_forms(value):
    with pytest.raises(ValueError):
        parse_rfc3339(value)


# --- checkpoint annotations ----------------------------------------------------------------------

@pytest.mark.parametrize(
    ("annotations", "mode", "last", "seconds"),
    [
        pytest.param({}, CheckpointMode.NONE, None, None, id="nothing: no checkpoint information"),
        pytest.param({ann.CHECKPOINT: "on-request"}, CheckpointMode.ON_REQUEST, None, None,
                     id="on-request"),
        pytest.param({ann.CHECKPOINT: " periodic "}, CheckpointMode.PERIODIC, None, None,
                     id="periodic, blanks stripped"),
        pytest.param({ann.CHECKPOINT: "none"}, CheckpointMode.NONE, None, None, id="none"),
        pytest.param({ann.LAST_CHECKPOINT: "2026-12-02T08:00:00Z"}, CheckpointMode.NONE,
                     NOW - 3600, None, id="last checkpoint an hour ago"),
        pytest.param({ann.LAST_CHECKPOINT: "2026-12-02T09:00:59Z"}, CheckpointMode.NONE, NOW,
                     None, id="slightly in the future (clock skew): clamped to now"),
        pytest.param({ann.LAST_CHECKPOINT: "2026-12-02T09:01:00Z"}, CheckpointMode.NONE, NOW,
                     None, id="exactly the skew allowance: clamped to now"),
        pytest.param({ann.CHECKPOINT: "on-request", ann.CHECKPOINT_SECONDS: "2m"},
                     CheckpointMode.ON_REQUEST, None, 120.0, id="checkpoint-seconds as duration"),
        pytest.param({ann.CHECKPOINT_SECONDS: "45"}, CheckpointMode.NONE, None, 45.0,
                     id="checkpoint-seconds as bare seconds"),
    ],
)
def test_checkpoint_fields_accepted(annotations, mode, last, seconds):
    got = _parse(annotations)
    assert (got.checkpoint, got.last_checkpoint, got.checkpoint_seconds) == (mode, last, seconds)
    assert got.problems == ()


VALID = {
    ann.CHECKPOINT: "on-request",
    ann.LAST_CHECKPOINT: "2026-12-02T08:30:00Z",
    ann.CHECKPOINT_SECONDS: "60",
}


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        pytest.param(ann.CHECKPOINT, "On-Request", id="checkpoint mode is case-sensitive"),
        pytest.param(ann.CHECKPOINT, "", id="empty checkpoint mode"),
        pytest.param(ann.CHECKPOINT, "always", id="unknown checkpoint mode"),
        pytest.param(ann.LAST_CHECKPOINT, "2026-12-02T08:30:00", id="last-checkpoint without zone"),
        pytest.param(ann.LAST_CHECKPOINT, "08:30", id="last-checkpoint time only"),
        pytest.param(ann.LAST_CHECKPOINT, "2026-12-02T09:01:01Z",
                     id="last-checkpoint just past the skew allowance"),
        pytest.param(ann.LAST_CHECKPOINT, "2030-01-01T00:00:00Z",
                     id="last-checkpoint years in the future"),
        pytest.param(ann.CHECKPOINT_SECONDS, "0", id="zero checkpoint-seconds"),
        pytest.param(ann.CHECKPOINT_SECONDS, "0s", id="zero checkpoint-seconds with unit"),
        pytest.param(ann.CHECKPOINT_SECONDS, "-30", id="negative checkpoint-seconds"),
        pytest.param(ann.CHECKPOINT_SECONDS, "fast", id="prose checkpoint-seconds"),
        pytest.param(ann.CHECKPOINT_SECONDS, "9" * 400, id="checkpoint-seconds overflowing to inf"),
    ],
)
def test_any_bad_checkpoint_annotation_drops_all_checkpoint_information(key, bad):
    got = _parse({**VALID, key: bad})
    assert (got.checkpoint, got.last_checkpoint, got.checkpoint_seconds) == (
        CheckpointMode.NONE, None, None
    )
    (problem,) = got.problems
    assert (problem.key, problem.value) == (key, bad)
    assert "no checkpoint information" in problem.consequence
    assert key in str(problem) and repr(bad) in str(problem)
    # the other fields are untouched
    assert got.preemptible and got.min_runtime == 0.0


def test_valid_checkpoint_annotations_all_together():
    got = _parse(VALID)
    assert got.problems == ()
    assert got.checkpoint is CheckpointMode.ON_REQUEST
    assert got.last_checkpoint == NOW - 1800
    assert got.checkpoint_seconds == 60.0


# --- min-runtime, preemptible, nvlink ----------------------------------------------------------

@pytest.mark.parametrize(
    ("value", "limits", "want", "problem"),
    [
        pytest.param("10m", Limits(), 600.0, False, id="ten minutes"),
        pytest.param("0", Limits(), 0.0, False, id="zero"),
        pytest.param("5h", Limits(), 3600.0, False, id="capped at the configured maximum"),
        pytest.param("5h", Limits(max_min_runtime=7200.0), 7200.0, False, id="a custom cap"),
        pytest.param("soon", Limits(), 0.0, True, id="garbage is ignored"),
        pytest.param("-1m", Limits(max_min_runtime=60.0), 0.0, True, id="negative is ignored"),
        pytest.param("", Limits(), 0.0, True, id="empty is ignored"),
        pytest.param("9" * 400, Limits(), 3600.0, False, id="huge: capped"),
    ],
)
def test_min_runtime(value, limits, want, problem):
    got = _parse({ann.MIN_RUNTIME: value}, limits=limits)
    assert got.min_runtime == want
    assert _keys(got) == ([ann.MIN_RUNTIME] if problem else [])
    if problem:
        assert "as if absent" in got.problems[0].consequence


ANYONE = Limits(opt_out_namespaces=frozenset({ann.ANY}))


@pytest.mark.parametrize(
    ("value", "want", "problem"),
    [
        pytest.param("true", True, False, id="true"),
        pytest.param("false", False, False, id="false opts out where allowed"),
        pytest.param(" FALSE ", False, False, id="case and blanks are forgiven"),
        pytest.param("True", True, False, id="capitalised true"),
        pytest.param("no", True, True, id="'no' is malformed: ignored, preemptible"),
        pytest.param("yes", True, True, id="'yes' is malformed: ignored"),
        pytest.param("1", True, True, id="'1' is malformed: ignored"),
        pytest.param("", True, True, id="empty is malformed: ignored"),
    ],
)
def test_preemptible(value, want, problem):
    got = _parse({ann.PREEMPTIBLE: value}, limits=ANYONE)
    assert got.preemptible is want
    assert _keys(got) == ([ann.PREEMPTIBLE] if problem else [])


def test_preemptible_by_default():
    assert _parse({}).preemptible is True


@pytest.mark.parametrize(
    ("limits", "namespace", "priority_class", "honoured"),
    [
        pytest.param(Limits(), "ns", "batch", False, id="by default nobody may opt out"),
        pytest.param(Limits(opt_out_namespaces=frozenset({"ns"})), "ns", "", True,
                     id="a listed namespace"),
        pytest.param(Limits(opt_out_namespaces=frozenset({"other"})), "ns", "batch", False,
                     id="another namespace"),
        pytest.param(Limits(opt_out_priority_classes=frozenset({"batch"})), "ns", "batch", True,
                     id="a listed priority class"),
        pytest.param(Limits(opt_out_priority_classes=frozenset({"batch"})), "ns", "", False,
                     id="no priority class is not a listed one"),
        pytest.param(Limits(opt_out_priority_classes=frozenset({ann.ANY})), "ns", "", False,
                     id="'*' classes: a pod without a class still may not"),
        pytest.param(Limits(opt_out_priority_classes=frozenset({ann.ANY})), "ns", "x", True,
                     id="'*' classes: any class"),
        pytest.param(ANYONE, "ns", "", True, id="'*' namespaces: everyone"),
    ],
)
def test_opt_out_only_where_the_admin_allows_it(limits, namespace, priority_class, honoured):
    got = parse_pod_fields(namespace=namespace, labels={}, annotations={ann.PREEMPTIBLE: "false"},
                           now=NOW, limits=limits, priority_class=priority_class)
    assert got.preemptible is not honoured
    if honoured:
        assert got.problems == ()
    else:
        (p,) = got.problems
        assert p.key == ann.PREEMPTIBLE and "not allowed" in p.problem
        assert namespace in p.problem and "optOutNamespaces" in p.problem
        assert p.consequence == "ignored: preemptible"


@pytest.mark.parametrize(
    ("value", "want", "problem"),
    [
        pytest.param("required", NvlinkNeed.REQUIRED, False, id="required"),
        pytest.param("preferred", NvlinkNeed.PREFERRED, False, id="preferred"),
        pytest.param(" none ", NvlinkNeed.NONE, False, id="none, blanks stripped"),
        pytest.param("Required", NvlinkNeed.NONE, True, id="case-sensitive: ignored, none"),
        pytest.param("yes", NvlinkNeed.NONE, True, id="garbage: treated as none"),
    ],
)
def test_nvlink(value, want, problem):
    got = _parse({ann.NVLINK: value})
    assert got.nvlink is want
    assert _keys(got) == ([ann.NVLINK] if problem else [])


# --- gangs through the annotation parser --------------------------------------------------------

@pytest.mark.parametrize(
    ("labels", "annotations", "key", "gang", "total"),
    [
        pytest.param({"scheduling.ai/gang-name": "-bad"}, {}, "scheduling.ai/gang-name", None,
                     None, id="malformed gang name label: no gang"),
        pytest.param({"scheduling.ai/gang-name": "ok", "scheduling.ai/gang-total": "zero"}, {},
                     "scheduling.ai/gang-total", "ns/seed/ok", None,
                     id="malformed gang total: a gang of undeclared size"),
        pytest.param({}, {"scheduling.k8s.io/group-name": "a b"}, "scheduling.k8s.io/group-name",
                     None, None, id="malformed Volcano annotation: no gang"),
        pytest.param({"scheduling.ai/gang-name": "-bad", "kueue.x-k8s.io/pod-group-name": "k"},
                     {}, "scheduling.ai/gang-name", "ns/kueue/k", None,
                     id="malformed first convention: the next one names the gang"),
    ],
)
def test_bad_gang_value_acts_as_if_absent(labels, annotations, key, gang, total):
    got = _parse(annotations, labels=labels)
    assert got.preemptible is True
    assert (got.gang, got.gang_total) == (gang, total)
    assert _keys(got) == [key]
    assert "as if absent" in got.problems[0].consequence


def test_gang_fields_from_labels():
    got = _parse({}, labels={"kueue.x-k8s.io/pod-group-name": "job",
                             "kueue.x-k8s.io/pod-group-total-count": "4"})
    assert (got.gang, got.gang_total, got.problems) == ("ns/kueue/job", 4, ())


def test_every_problem_is_reported_once_and_none_protects():
    got = _parse(
        {ann.CHECKPOINT: "x", ann.MIN_RUNTIME: "x", ann.PREEMPTIBLE: "x", ann.NVLINK: "x"},
        labels={"scheduling.ai/gang-name": "_x"},
    )
    assert sorted(_keys(got)) == sorted(
        [ann.CHECKPOINT, ann.MIN_RUNTIME, ann.PREEMPTIBLE, ann.NVLINK, "scheduling.ai/gang-name"]
    )
    assert got.preemptible is True and got.min_runtime == 0.0 and got.gang is None
    assert got.checkpoint_malformed


# --- the unknown-checkpoint policy --------------------------------------------------------------

@pytest.mark.parametrize(
    ("value", "kind", "seconds"),
    [
        pytest.param("start-time", "start-time", None, id="start-time"),
        pytest.param(" cluster-median ", "cluster-median", None, id="cluster-median"),
        pytest.param("assume:30m", "assume", 1800.0, id="assume a duration"),
        pytest.param("assume:90", "assume", 90.0, id="assume bare seconds"),
    ],
)
def test_parse_unknown_checkpoint(value, kind, seconds):
    got = ann.parse_unknown_checkpoint(value)
    assert (got.kind, got.seconds) == (kind, seconds)
    assert ann.parse_unknown_checkpoint(str(got)) == got  # what the config default writes


@pytest.mark.parametrize("value", ["", "median", "assume:", "assume:0", "assume:-5m",
                                   "assume:soon", "Start-Time", "assume 30m"])
def test_parse_unknown_checkpoint_rejects(value):
    with pytest.raises(ValueError):
        ann.parse_unknown_checkpoint(value)


# --- the builder --------------------------------------------------------------------------------

def test_build_pod_carries_metadata_and_parsed_fields():
    pod, problems = ann.build_pod(
        uid="u", name="p", namespace="ns", labels={"kueue.x-k8s.io/pod-group-name": "g"},
        annotations={**VALID, ann.MIN_RUNTIME: "10m", ann.NVLINK: "required"}, now=NOW,
        priority=5, priority_class="batch", requests=Resources(gpus=2), node="n",
        start_time=NOW - 7200, owner_uid="job-1",
    )
    assert problems == ()
    assert (pod.uid, pod.name, pod.namespace, pod.priority, pod.node) == ("u", "p", "ns", 5, "n")
    assert (pod.requests, pod.start_time, pod.owner_uid) == (Resources(gpus=2), NOW - 7200,
                                                             "job-1")
    assert (pod.checkpoint, pod.last_checkpoint, pod.checkpoint_seconds) == (
        CheckpointMode.ON_REQUEST, NOW - 1800, 60.0)
    assert (pod.min_runtime, pod.nvlink, pod.gang) == (600.0, NvlinkNeed.REQUIRED, "ns/kueue/g")
    assert pod.workload == "ns/kueue/g"  # a gang counts as one workload for fairness
    assert pod.preemptible and not pod.checkpoint_malformed


@pytest.mark.parametrize(("owner", "gang", "want"), [
    pytest.param(None, None, "ns/pod/u", id="a bare pod: itself"),
    pytest.param("job-1", None, "ns/owner/job-1", id="its controlling owner"),
    pytest.param("job-1", "g", "ns/seed/g", id="its gang"),
])
def test_workload_key(owner, gang, want):
    labels = {"scheduling.ai/gang-name": gang} if gang else {}
    pod, _ = ann.build_pod(uid="u", name="p", namespace="ns", labels=labels, annotations={},
                           now=NOW, owner_uid=owner)
    assert pod.workload == want


def test_build_pod_out_of_scope_is_never_a_victim_and_problems_are_returned():
    pod, problems = ann.build_pod(uid="u", name="p", namespace="ns", labels={},
                                  annotations={ann.LAST_CHECKPOINT: "now"}, now=NOW,
                                  in_scope=False)
    assert not pod.preemptible and pod.checkpoint_malformed
    assert [p.key for p in problems] == [ann.LAST_CHECKPOINT]
