"""policies.disruption.eviction_gate: the decision on one Eviction, and the limits no pod can
lift."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ckpt_preempt.policies.disruption import eviction_gate as gate
from ckpt_preempt.policies.lifecycle.plan_record import (
    DONE_ANNOTATION,
    DRAIN_ANNOTATION,
    DrainRequest,
    drain_from_annotation,
    drain_to_annotation,
)

NOW = 1_800_000_000.0
CAP = 600.0
LIMITS = gate.GateLimits(max_checkpoint_seconds=CAP)
ON_REQUEST = {"ckpt-preempt.io/checkpoint": "on-request"}


def pod(annotations: dict[str, str] | None = None, **kw) -> gate.GatedPod:
    fields = {"uid": "u-1", "namespace": "team-a", "name": "train-0", "resource_version": "41",
              "annotations": {**ON_REQUEST, **(annotations or {})}, "labels": {}, **kw}
    return gate.GatedPod(**fields)


def decide(p: gate.GatedPod, now: float = NOW, first_refused: float | None = None,
           **kw) -> gate.Decision:
    return gate.decide(p, now=now, limits=kw.pop("limits", LIMITS), first_refused=first_refused,
                       exempt_requester=kw.pop("exempt", False), **kw)


def with_request(request: DrainRequest, ack: str | None = None) -> dict[str, str]:
    return {DRAIN_ANNOTATION: drain_to_annotation(request),
            **({DONE_ANNOTATION: ack} if ack is not None else {})}


def test_first_eviction_of_an_on_request_pod_asks_it_to_checkpoint_until_its_own_seconds():
    d = decide(pod({"ckpt-preempt.io/checkpoint-seconds": "90"}))
    assert d.verdict is gate.Verdict.REQUEST and d.until == NOW + 90
    assert d.request == DrainRequest(plan=gate.disruption_id("u-1", "41"), requested=NOW,
                                     deadline=NOW + 90)
    assert d.request.plan.startswith("disruption/")
    # the request round-trips through the annotation the agent reads
    assert drain_from_annotation(drain_to_annotation(d.request)) == d.request
    assert "2027-01-15T08:01:30Z" in d.reason  # says until when


def test_pods_that_cannot_checkpoint_and_excluded_ones_are_never_delayed():
    for extra in ({"ckpt-preempt.io/checkpoint": "periodic"},
                        {"ckpt-preempt.io/checkpoint": "none"},
                        {"ckpt-preempt.io/checkpoint": "sometimes"},  # malformed
                        {"ckpt-preempt.io/checkpoint-seconds": "-5"}):  # malformed drops all
        assert decide(pod(extra)).allowed, extra
    assert decide(gate.GatedPod(uid="u", namespace="n", name="p", resource_version="1",
                                annotations={}, labels={})).allowed
    excluded = gate.GateLimits(max_checkpoint_seconds=CAP, excluded_namespaces=frozenset(
        {"team-a"}))
    assert decide(pod(), limits=excluded).allowed
    by_class = gate.GateLimits(max_checkpoint_seconds=CAP,
                               excluded_priority_classes=frozenset({"critical"}))
    assert decide(pod(priority_class="critical"), limits=by_class).allowed
    assert not decide(pod(priority_class="other"), limits=by_class).allowed
    assert decide(pod(), exempt=True).allowed
    assert decide(pod(terminating=True)).allowed


def test_a_standing_request_of_any_origin_refuses_and_writes_nothing_until_ack_or_deadline():
    for plan in ("a1b2c3", "disruption/early-warning-x", gate.disruption_id("u-1", "7")):
        req = DrainRequest(plan=plan, requested=NOW - 10, deadline=NOW + 50)
        d = decide(pod(with_request(req)))
        assert d.verdict is gate.Verdict.REFUSE and d.request is None and d.until == NOW + 50
        assert decide(pod(with_request(req, ack=plan))).allowed
        assert decide(pod(with_request(req)), now=NOW + 50).allowed


def test_a_forged_ack_for_another_disruption_does_not_release():
    req = DrainRequest(plan="disruption/aaaa", requested=NOW, deadline=NOW + 60)
    for forged in ("disruption/bbbb", "aaaa", "disruption/aaaa-", ""):
        assert decide(pod(with_request(req, ack=forged))).verdict is gate.Verdict.REFUSE


def test_dry_run_refuses_like_the_real_eviction_but_writes_nothing():
    d = decide(pod(), dry_run=True)
    assert d.verdict is gate.Verdict.REFUSE and d.request is None and d.until == NOW + CAP


def test_a_stale_request_from_an_earlier_disruption_starts_a_new_one():
    old = DrainRequest(plan="disruption/old", requested=NOW - 9000, deadline=NOW - 8000,)
    d = decide(pod(with_request(old, ack="disruption/old")))
    assert d.verdict is gate.Verdict.REQUEST and d.request.plan != "disruption/old"


def test_a_fresh_ack_releases_and_one_older_than_a_hold_asks_again():
    """An early warning's checkpoint at a cordon, the drain 20 minutes later: the work since
    that checkpoint is worth more than a new one, so the pod is asked again."""
    seconds = {"ckpt-preempt.io/checkpoint-seconds": "60"}
    req = DrainRequest(plan="disruption/cordon", requested=NOW - 1200, deadline=NOW - 1140)
    acked_pod = pod({**seconds, **with_request(req, ack="disruption/cordon")})
    fresh_until = NOW - 1200 + 60 + gate.ACK_RETRY_SLACK_SECONDS
    assert decide(acked_pod, now=fresh_until).allowed  # an ack, then a client's retries
    d = decide(acked_pod)
    assert d.verdict is gate.Verdict.REQUEST and d.request.plan != "disruption/cordon"
    assert d.until == NOW + 60
    again = pod({**seconds, **with_request(d.request, ack=d.request.plan)},
                resource_version="43")
    assert decide(again, now=NOW + 20, first_refused=NOW).allowed  # the new ack releases it


def test_same_view_same_answer_and_a_new_version_a_new_id():
    assert decide(pod()) == decide(pod())
    assert decide(pod()).request.plan != decide(pod(resource_version="42")).request.plan
    assert decide(pod()).request.plan != decide(pod(uid="u-2")).request.plan


# ------------------------------------------------------------------------ properties
times = st.floats(min_value=NOW - 10 * 86400, max_value=NOW + 10 * 365 * 86400,
                  allow_nan=False)
seconds_text = st.one_of(st.integers(0, 10**9).map(str), st.sampled_from(["1h", "9999h", "x"]))


@st.composite
def hostile_pods(draw) -> gate.GatedPod:
    """Whatever a tenant can write on its own pod: any checkpoint-seconds, any drain request
    (any plan, times anywhere), any ack, or garbage."""
    annotations = dict(ON_REQUEST)
    if draw(st.booleans()):
        annotations["ckpt-preempt.io/checkpoint-seconds"] = draw(seconds_text)
    kind = draw(st.sampled_from(["none", "request", "garbage"]))
    if kind == "request":
        requested = draw(times)
        deadline = requested + draw(st.floats(0, 10 * 365 * 86400, allow_nan=False))
        plan = draw(st.sampled_from(["abc", "disruption/x", "disruption/y"]))
        annotations[DRAIN_ANNOTATION] = drain_to_annotation(
            DrainRequest(plan=plan, requested=requested, deadline=deadline))
        if draw(st.booleans()):
            annotations[DONE_ANNOTATION] = draw(st.sampled_from(["abc", "disruption/y", "z"]))
    elif kind == "garbage":
        annotations[DRAIN_ANNOTATION] = draw(st.text(max_size=40))
    return pod(annotations, resource_version=str(draw(st.integers(1, 10**6))))


@given(hostile_pods(), st.floats(0, 10 * CAP), st.floats(0, 2 * CAP) | st.none())
def test_no_pod_holds_an_eviction_past_the_cap_from_the_first_refusal(p, elapsed, first_ago):
    first = None if first_ago is None else NOW - first_ago
    d = decide(p, now=NOW + elapsed, first_refused=first)
    if not d.allowed:
        assert d.until is not None and NOW + elapsed < d.until
        start = NOW + elapsed if first is None else min(first, NOW + elapsed)
        assert d.until <= start + CAP
    if first is not None and NOW + elapsed >= first + CAP:
        assert d.allowed


@given(hostile_pods(), st.floats(0, CAP))
def test_a_standing_unacked_request_is_never_replaced_while_it_holds(p, elapsed):
    d = decide(p, now=NOW + elapsed)
    if d.verdict is gate.Verdict.REQUEST:
        standing = p.annotations.get(DRAIN_ANNOTATION)
        try:
            req = drain_from_annotation(standing) if standing else None
        except ValueError:
            req = None
        # only when there is none, it is acknowledged, or it belongs to an earlier disruption
        done = p.annotations.get(DONE_ANNOTATION)
        assert req is None or done == req.plan \
            or NOW + elapsed > req.deadline + gate.STALE_REQUEST_SECONDS


@given(hostile_pods(), st.floats(0, 10 * CAP))
def test_an_acknowledged_request_never_holds_an_eviction_itself(p, elapsed):
    """An ack releases at once while fresh; once stale the gate asks again with a new id,
    never refuses in the acknowledged request's name."""
    try:
        req = drain_from_annotation(p.annotations.get(DRAIN_ANNOTATION, ""))
    except ValueError:
        return
    if p.annotations.get(DONE_ANNOTATION) != req.plan:
        return
    d = decide(p, now=NOW + elapsed)
    assert d.verdict is not gate.Verdict.REFUSE or req.plan not in d.reason
    if d.verdict is gate.Verdict.REQUEST:
        assert d.request.plan != req.plan


@given(hostile_pods(), st.floats(0, CAP))
def test_a_pod_that_never_acks_gets_the_deadline_once(p, elapsed):
    """Retrying after the gate's own request was written: refused until that deadline, then
    allowed; never a new request."""
    first = decide(p, now=NOW)
    if first.verdict is not gate.Verdict.REQUEST:
        return
    after = pod({**p.annotations, DRAIN_ANNOTATION: drain_to_annotation(first.request)},
                resource_version="999999999")
    d = decide(after, now=NOW + elapsed, first_refused=NOW)
    assert d.verdict is not gate.Verdict.REQUEST
    assert d.allowed == (NOW + elapsed >= first.until)


@given(hostile_pods(), times)
def test_dry_run_never_asks_for_a_write(p, now):
    assert decide(p, now=now, dry_run=True).request is None
