"""policies.disruption.grace_period: the grace a pod being created gets, and the bounds no pod
can lift (never lowered, never above the cap unless the pod set more itself)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_preempt.policies.disruption import grace_period as gp

CAP = 600.0
MARGIN = 30
LIMITS = gp.GraceLimits(max_checkpoint_seconds=CAP, margin_seconds=MARGIN)
SECONDS = "ckpt-preempt.io/checkpoint-seconds"


def pod(declared: str | None = None, grace: int | None = None, namespace: str = "team-a",
        **annotations: str) -> gp.NewPod:
    ann = {**annotations, **({SECONDS: declared} if declared is not None else {})}
    return gp.NewPod(namespace=namespace, name="train-0", annotations=ann, grace_seconds=grace)


@pytest.mark.parametrize(("p", "outcome", "grace", "capped"), [
    pytest.param(pod(), gp.Outcome.NOT_DECLARED, None, False, id="no annotation: unchanged"),
    pytest.param(pod("120"), gp.Outcome.SET, 150, False, id="120 s: 120 + margin"),
    pytest.param(pod("2m"), gp.Outcome.SET, 150, False, id="a duration, as the planner reads it"),
    pytest.param(pod("0.2"), gp.Outcome.SET, 31, False, id="a fraction rounds up to a second"),
    pytest.param(pod("1"), gp.Outcome.SET, 31, False, id="small: 1 + margin"),
    pytest.param(pod("1000000h"), gp.Outcome.SET, 630, True, id="huge: the cap plus the margin"),
    pytest.param(pod("600"), gp.Outcome.SET, 630, False, id="exactly the cap is not capped"),
    pytest.param(pod("9" * 400), gp.Outcome.MALFORMED, None, False,
                 id="beyond a float (infinite): malformed, unchanged"),
    pytest.param(pod("NaN"), gp.Outcome.MALFORMED, None, False, id="NaN: unchanged"),
    pytest.param(pod("inf"), gp.Outcome.MALFORMED, None, False, id="inf: unchanged"),
    pytest.param(pod("-5"), gp.Outcome.MALFORMED, None, False, id="negative: unchanged"),
    pytest.param(pod("0"), gp.Outcome.MALFORMED, None, False, id="zero: unchanged"),
    pytest.param(pod("1e9"), gp.Outcome.MALFORMED, None, False,
                 id="exponent notation is not a duration: unchanged"),
    pytest.param(pod(""), gp.Outcome.MALFORMED, None, False, id="empty: unchanged"),
    pytest.param(pod("120", grace=3600), gp.Outcome.KEPT, None, False,
                 id="the user's larger value is kept"),
    pytest.param(pod("1000000h", grace=3600), gp.Outcome.KEPT, None, True,
                 id="the user's value above the cap is kept too"),
    pytest.param(pod("120", grace=150), gp.Outcome.KEPT, None, False,
                 id="the user's equal value: nothing to patch"),
    pytest.param(pod("120", grace=10), gp.Outcome.SET, 150, False,
                 id="the user's smaller value is raised"),
    pytest.param(pod("120", grace=0), gp.Outcome.SET, 150, False, id="zero is raised"),
    pytest.param(pod("120", grace=-1), gp.Outcome.KEPT, None, False,
                 id="a negative value is left to the API server's validation"),
    pytest.param(pod("120", namespace="kube-system"), gp.Outcome.EXCLUDED, None, False,
                 id="kube-system is never changed"),
    pytest.param(pod("120", **{"ckpt-preempt.io/last-checkpoint": "yesterday"}), gp.Outcome.SET,
                 150, False, id="a bad last-checkpoint does not hide how long a save takes"),
])
def test_decide(p, outcome, grace, capped):
    d = gp.decide(p, LIMITS)
    assert (d.outcome, d.grace_seconds, d.capped) == (outcome, grace, capped), d.reason
    assert d.changes == (grace is not None)


def test_without_a_margin_a_short_checkpoint_keeps_the_default():
    limits = gp.GraceLimits(max_checkpoint_seconds=CAP, margin_seconds=0)
    d = gp.decide(pod("10"), limits)
    assert (d.outcome, d.grace_seconds) == (gp.Outcome.KEPT, None)
    assert "Kubernetes' default 30 s is kept" in d.reason
    assert gp.decide(pod("45"), limits).grace_seconds == 45


def test_reasons_say_why():
    assert "no ckpt-preempt.io/checkpoint-seconds" in gp.decide(pod(), LIMITS).reason
    bad = gp.decide(pod("NaN"), LIMITS).reason
    assert "checkpoint-seconds='NaN'" in bad and "left unchanged" in bad
    long = gp.decide(pod("x" * 5000), LIMITS).reason
    assert len(long) < 200 and "..." in long  # a warning the client prints: shown cut
    capped = gp.decide(pod("2h"), LIMITS).reason
    assert "capped at maxCheckpointSeconds 600 s" in capped and "= 630 s" in capped


def test_limits():
    assert LIMITS.cap_seconds == 630
    assert gp.GraceLimits(max_checkpoint_seconds=90.5, margin_seconds=0).cap_seconds == 91
    # kube-system stays excluded whatever else is listed
    other = gp.GraceLimits(excluded_namespaces=frozenset({"ckpt-preempt"}))
    assert other.excluded_namespaces == {"kube-system", "ckpt-preempt"}
    assert gp.decide(pod("120", namespace="ckpt-preempt"), other).outcome is gp.Outcome.EXCLUDED
    for bad in ({"max_checkpoint_seconds": math.nan}, {"max_checkpoint_seconds": 0},
                {"margin_seconds": -1}, {"margin_seconds": 1.5}, {"margin_seconds": True}):
        with pytest.raises(ValueError):
            gp.GraceLimits(**bad)


def test_the_default_margin_is_the_kubernetes_default_grace():
    # not required, but the two 30s are easy to confuse: this pins which is which
    assert gp.DEFAULT_MARGIN_SECONDS == 30 and gp.KUBERNETES_DEFAULT_GRACE_SECONDS == 30
    assert gp.GraceLimits().margin_seconds == gp.DEFAULT_MARGIN_SECONDS


declared_values = st.one_of(
    st.text(max_size=30),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-10**30, max_value=10**30).map(str),
    st.tuples(st.integers(0, 10**12), st.sampled_from(["h", "m", "s", ""])).map(
        lambda t: f"{t[0]}{t[1]}"),
    st.none(),
)


@given(declared=declared_values,
       grace=st.one_of(st.none(), st.integers(min_value=-10, max_value=10**12)),
       cap=st.floats(min_value=0.001, max_value=1e7, allow_nan=False),
       margin=st.integers(min_value=0, max_value=3600),
       namespace=st.sampled_from(["team-a", "kube-system", "ckpt-preempt"]))
def test_never_lowers_and_never_above_the_cap_unless_the_pod_set_more(declared, grace, cap,
                                                                      margin, namespace):
    limits = gp.GraceLimits(max_checkpoint_seconds=cap, margin_seconds=margin,
                            excluded_namespaces=frozenset({"ckpt-preempt"}))
    d = gp.decide(pod(declared, grace=grace, namespace=namespace), limits)
    effective = gp.KUBERNETES_DEFAULT_GRACE_SECONDS if grace is None else grace
    final = d.grace_seconds if d.changes else effective
    assert final >= effective  # never lowers
    assert final <= max(limits.cap_seconds, effective)  # the cap, unless the pod set more
    if d.changes:
        assert d.outcome is gp.Outcome.SET and (grace is None or grace >= 0)
        assert isinstance(d.grace_seconds, int) and d.grace_seconds > effective
        assert namespace == "team-a" and declared is not None
    # idempotent: the API server may call again with the patched pod (another webhook entry)
    again = gp.decide(pod(declared, grace=final, namespace=namespace), limits)
    assert not again.changes
