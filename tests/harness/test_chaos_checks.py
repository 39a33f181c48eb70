"""The chaos run's end checks (e2e/harness/chaos/checks.py) on hand-made audit events: an
eviction whose client was killed mid-request (the API server answered 504) may still have
gone through, so it explains a pod that is gone, and it is held to the plan check."""

from __future__ import annotations

from kubernetes import client

from e2e.harness.chaos import checks
from e2e.harness.chaos.config import VICTIM, Made
from e2e.harness.localcluster import AuditEvent

NS = "e2e-x"


def _eviction(name: str, code: int, at: float = 100.0) -> AuditEvent:
    return AuditEvent(verb="create", resource="pods", subresource="eviction", namespace=NS,
                      name=name, code=code, user="admin", user_agent="python", received=at,
                      completed=at + 0.1, request=None, response=None)


def _victim(name: str, gang: str | None = "g53") -> Made:
    return Made(namespace=NS, name=name, uid=f"uid-{name}", role=VICTIM, priority=0,
                gang=gang, gpus=1, node="n-1")


def _live(*names: str) -> list:
    return [client.V1Pod(metadata=client.V1ObjectMeta(namespace=NS, name=n)) for n in names]


def test_a_pod_gone_after_an_eviction_answered_504_did_not_vanish():
    made = {f"{NS}/g53-0": _victim("g53-0"), f"{NS}/g53-1": _victim("g53-1")}
    events = [_eviction("g53-0", 504), _eviction("g53-1", 201)]
    out = checks.check_end_state(made, events, [], _live(), [])
    assert out["vanished"] == []
    # refused outright (a PDB's 429): the pod's going is not explained by it
    refused = [_eviction("g53-0", 429), _eviction("g53-1", 201)]
    assert checks.check_end_state(made, refused, [], _live(), [])["vanished"] == [
        f"{NS}/g53-0 (victim)"]


def test_only_granted_evictions_count_as_evictions_and_doubles():
    events = [_eviction("a", 504), _eviction("a", 201, at=101.0), _eviction("b", 500)]
    assert [e.name for e in checks.evictions(events)] == ["a"]
    assert [e.name for e in checks.evictions(events, maybe=True)] == ["a", "a"]
    doubles, _ = checks.check_evictions(events, {}, {NS}, [])
    assert doubles == []  # the retry after an outcome never learnt is no second eviction


def test_an_eviction_answered_504_is_held_to_the_plan_check():
    # no stored plan names the pod: even an eviction whose outcome its client never learnt
    # is one outside a plan
    made = {f"{NS}/v": _victim("v", gang=None)}
    _, outside = checks.check_evictions([_eviction("v", 504)], made, {NS}, [])
    assert len(outside) == 1 and "no Evicting plan names it" in outside[0]


def test_a_gang_member_gone_by_a_504_eviction_beside_a_running_one_is_a_partial_gang():
    made = {f"{NS}/g53-0": _victim("g53-0"), f"{NS}/g53-1": _victim("g53-1")}
    alive = {f"{NS}/g53-1"}
    got = checks.check_gangs([_eviction("g53-0", 504)], made, alive)
    assert got == [f"gang {NS}/g53: evicted ['g53-0'], still running ['g53-1']"]
    # a 504 that did not go through (the member still runs) evicted nothing
    both = {f"{NS}/g53-0", f"{NS}/g53-1"}
    assert checks.check_gangs([_eviction("g53-0", 504)], made, both) == []
