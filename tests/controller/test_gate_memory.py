"""The eviction gate's memory of first refusals (``controller.gate.gate.FirstRefusals``): the first
time counts, later refusals never move it, and it is forgotten after its time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ckpt_preempt.controller.gate.gate import FirstRefusals

KEEP = 900.0


@given(st.lists(st.floats(0, KEEP, allow_nan=False), min_size=1, max_size=20))
def test_the_first_refusal_counts_until_forgotten(offsets):
    memory = FirstRefusals(KEEP)
    times = sorted(offsets)
    for t in times:
        memory.note("u", t)
        assert memory.get("u", t) == times[0]  # later refusals never move it
    assert memory.get("u", times[0] + KEEP - 1) == times[0]
    assert memory.get("u", times[0] + KEEP + 1) is None  # forgotten: a new disruption
    assert memory.get("other", times[0]) is None


def test_pruning_keeps_what_still_counts():
    memory = FirstRefusals(KEEP)
    for i in range(2048):
        memory.note(f"old-{i}", 0.0)
    memory.note("recent", 2 * KEEP)
    for i in range(2048):  # a later burst prunes the forgotten ones
        memory.note(f"new-{i}", 2 * KEEP)
    assert memory.get("recent", 2 * KEEP) == 2 * KEEP
    assert len(memory._at) <= 2048 + 1
