"""Other projects' names for the last checkpoint (``LAST_CHECKPOINT_ALIASES``): read only when
ours is absent, parsed as strictly as ours, and never able to make a pod cheaper than ours says
or than reporting nothing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.annotations import Limits, parse_pod_fields
from ckpt_preempt.policies.model.model import Resources
from ckpt_preempt.policies.model.times import rfc3339
from ckpt_preempt.policies.planner import cost

VOLCANO = "volcano.sh/last-checkpoint-time"
NOW = 1796202000.0  # 2026-12-02T09:00:00Z
START = NOW - 7200.0
ASSUMED_AGE = 600.0  # an unknown-checkpoint policy that assumes a checkpoint 10 minutes old


def _parse(annotations):
    return parse_pod_fields(namespace="ns", labels={}, annotations=annotations, now=NOW,
                            limits=Limits())


def _lost(annotations) -> float:
    """Seconds of work evicting a pod started at START with these annotations loses, under a
    policy that assumes pods reporting nothing checkpointed ASSUMED_AGE ago."""
    pod, _ = ann.build_pod(uid="u", name="p", namespace="ns", labels={}, annotations=annotations,
                           now=NOW, requests=Resources(gpus=1), node="n", start_time=START)
    return cost.work_since_checkpoint(pod, NOW, unknown_age=ASSUMED_AGE)


def test_the_volcano_key_is_an_alias_and_the_watch_cache_keeps_it():
    assert VOLCANO in ann.LAST_CHECKPOINT_ALIASES
    assert VOLCANO.startswith(ann.PREFIXES)


def test_the_alias_alone_is_read_like_ours():
    got = _parse({VOLCANO: "2026-12-02T08:00:00Z"})
    assert (got.last_checkpoint, got.problems) == (NOW - 3600, ())
    assert _lost({VOLCANO: "2026-12-02T08:00:00Z"}) == _lost(
        {ann.LAST_CHECKPOINT: "2026-12-02T08:00:00Z"}) == 3600.0


@pytest.mark.parametrize("alias", ["2026-12-02T08:59:00Z", "2026-12-02T07:00:00Z", "garbage"])
def test_ours_wins_when_both_are_set(alias):
    got = _parse({ann.LAST_CHECKPOINT: "2026-12-02T08:00:00Z", VOLCANO: alias})
    assert (got.last_checkpoint, got.checkpoint_malformed, got.problems) == (NOW - 3600, False, ())


@pytest.mark.parametrize("alias", ["2026-12-02T08:59:00Z", "garbage"])
def test_a_malformed_value_of_ours_is_never_rescued_by_the_alias(alias):
    got = _parse({ann.LAST_CHECKPOINT: "yesterday", VOLCANO: alias})
    assert (got.last_checkpoint, got.checkpoint_malformed) == (None, True)
    assert [p.key for p in got.problems] == [ann.LAST_CHECKPOINT]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("2026-12-02T08:00:00", id="no zone"),
        pytest.param("1796198400", id="unix seconds"),
        pytest.param("2026-12-02 08:00:00Z", id="blank instead of T"),
        pytest.param("2026-12-02T09:01:01Z", id="past the skew allowance"),
        pytest.param("2099-01-01T00:00:00Z", id="far future"),
        pytest.param("", id="empty"),
    ],
)
def test_a_malformed_or_future_alias_drops_all_checkpoint_information(bad):
    got = _parse({ann.CHECKPOINT: "on-request", ann.CHECKPOINT_SECONDS: "60", VOLCANO: bad})
    assert (got.checkpoint, got.last_checkpoint, got.checkpoint_seconds) == (
        ann.CheckpointMode.NONE, None, None)
    assert got.checkpoint_malformed
    (problem,) = got.problems
    assert (problem.key, problem.value) == (VOLCANO, bad)
    assert _lost({VOLCANO: bad}) == NOW - START > _lost({})  # from its start, not ASSUMED_AGE


# Any string, and well-formed times around now (past, skewed, future).
_values = st.one_of(
    st.text(max_size=40),
    st.floats(min_value=START - 86400, max_value=NOW + 86400).map(rfc3339),
)


@given(ours=st.one_of(st.none(), _values), alias=_values)
def test_an_alias_never_makes_a_pod_cheaper_than_ours_or_than_nothing(ours, alias):
    """With ours set, the alias changes nothing; without, it costs exactly what our annotation
    with the same value would (so it is as strict as ours, malformed and future values
    included)."""
    with_alias = {VOLCANO: alias} | ({} if ours is None else {ann.LAST_CHECKPOINT: ours})
    if ours is not None:
        assert _lost(with_alias) == _lost({ann.LAST_CHECKPOINT: ours})
    else:
        assert _lost(with_alias) == _lost({ann.LAST_CHECKPOINT: alias})
    assert 0.0 <= _lost(with_alias) <= NOW - START


@given(alias=_values)
def test_a_bad_alias_is_charged_from_the_start_whatever_the_policy(alias):
    """Never cheaper than reporting nothing: a rejected alias costs the whole run, more than the
    ASSUMED_AGE a pod reporting nothing is charged."""
    got = _parse({VOLCANO: alias})
    if got.problems:
        assert got.checkpoint_malformed and got.last_checkpoint is None
        assert _lost({VOLCANO: alias}) == NOW - START >= _lost({})
    else:
        assert got.last_checkpoint is not None and got.last_checkpoint <= NOW
