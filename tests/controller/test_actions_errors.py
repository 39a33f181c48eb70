"""The client's exception types never leave ``Actions``: a refused write is ``WriteFailed``
with the HTTP status, an unreachable API server ``WriteFailed`` with none; ``Conflict`` and
``NotLeader`` keep their meaning; a write refused by the guard is never sent."""

from __future__ import annotations

from unittest import mock

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import ReadTimeoutError

from ckpt_preempt.controller.writes.actions import (
    Actions,
    Conflict,
    NotLeader,
    WriteFailed,
    WriteGuard,
)
from ckpt_preempt.policies.lifecycle.plan_record import (
    Mode,
    PlannedPlacement,
    PlannedVictim,
    PlanRecord,
    State,
)
from tests.controller.fakes import T0


def plan() -> PlanRecord:
    return PlanRecord(
        id="p-1", state=State.PLANNED, mode=Mode.NOMINATE, created=T0, deadline=T0 + 60,
        evict_by=T0 + 180, bind_by=T0 + 480,
        placements=(PlannedPlacement(uid="uid-pre", namespace="team", name="pre", node="n1"),),
        victims=(PlannedVictim(uid="uid-v0", namespace="team", name="v0", node="n1",
                               drain=True, workload="pod:uid-v0"),))


def _actions(error: BaseException | None, *, may_write: bool = True) -> Actions:
    act = Actions(client.ApiClient(), plan_namespace="ckpt-preempt",
                  guard=WriteGuard(may_write=lambda: may_write))
    act.core = mock.MagicMock()
    if error is not None:
        act.core.create_namespaced_config_map.side_effect = error
    return act


def test_a_refused_write_is_write_failed_with_its_status_and_message():
    body = '{"kind":"Status","message":"configmaps is forbidden: no"}'
    err = ApiException(status=403, reason="Forbidden")
    err.body = body
    with pytest.raises(WriteFailed) as got:
        _actions(err).create_plan(plan())
    assert got.value.status == 403
    assert "403 Forbidden: configmaps is forbidden: no" in str(got.value)
    assert isinstance(got.value.__cause__, ApiException)


def test_an_unreachable_api_server_is_write_failed_without_a_status():
    timeout = ReadTimeoutError(None, "/api", "read timed out")
    with pytest.raises(WriteFailed) as got:
        _actions(timeout).create_plan(plan())
    assert got.value.status is None and "ReadTimeoutError" in str(got.value)


def test_a_conflict_stays_a_conflict():
    with pytest.raises(Conflict):
        _actions(ApiException(status=409, reason="Conflict")).create_plan(plan())


def test_without_the_lease_nothing_is_sent():
    act = _actions(None, may_write=False)
    with pytest.raises(NotLeader):
        act.create_plan(plan())
    act.core.create_namespaced_config_map.assert_not_called()


def test_an_eviction_refused_every_time_is_blocked_and_a_gone_pod_is_no_eviction():
    from ckpt_preempt.controller.writes.actions import Blocked
    from tests.controller.fakes import pod

    victim = pod("v0", node="n1")
    act = _actions(None)
    act.evict_attempts = 2
    pdb = ApiException(status=429, reason="Too Many Requests")
    act.core.create_namespaced_pod_eviction.side_effect = pdb
    with pytest.raises(Blocked) as got:
        act.evict(victim)
    assert "refused: 429 Too Many Requests" in str(got.value)
    assert act.core.create_namespaced_pod_eviction.call_count == 2  # retried
    act.core.create_namespaced_pod_eviction.side_effect = ApiException(status=404)
    assert act.evict(victim) is False
    act.core.create_namespaced_pod_eviction.side_effect = ApiException(status=403)
    with pytest.raises(WriteFailed):
        act.evict(victim)
