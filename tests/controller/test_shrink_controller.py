"""Elastic shrink in the controller: config, the drain request naming the leaving members,
and only those members evicted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_preempt.controller.core import config
from ckpt_preempt.controller.kube import convert
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.lifecycle.plan_record import State
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.times import rfc3339
from tests.controller.fakes import T0, FakeCache, Rig, node, pod


def test_the_controller_config_turns_shrink_off_and_sets_the_rendezvous_cost():
    cfg = convert.planner_config(config.parse({"elasticShrink": False,
                                               "rendezvousCostSeconds": 15}))
    assert (cfg.shrink, cfg.rendezvous_seconds) == (False, 15.0)
    assert convert.planner_config(config.Config()).shrink
    with pytest.raises(config.ConfigError, match="rendezvousCostSeconds"):
        config.parse({"rendezvousCostSeconds": -1})


def test_the_controller_config_turns_plan_timing_off():
    # on by default, as PlannerConfig; planTiming: false evicts at the drain deadline as before
    assert convert.planner_config(config.Config()).timing
    assert not convert.planner_config(config.parse({"planTiming": False})).timing
    with pytest.raises(config.ConfigError, match="planTiming"):
        config.parse({"planTiming": "sometimes"})


def test_the_controller_config_turns_report_parity_off():
    # on by default, as PlannerConfig (policies.planner.parity); false: victims by loss alone
    assert convert.planner_config(config.Config()).report_parity
    assert not convert.planner_config(config.parse({"reportParity": False})).report_parity
    with pytest.raises(config.ConfigError, match="reportParity"):
        config.parse({"reportParity": "yes"})


def _elastic_cluster(minimum: str = "2"):
    gang = {"scheduling.ai/gang-name": "job", "scheduling.ai/gang-total": "3"}
    # three hours of unsaved work: a shrink (its re-rendezvous) is far cheaper than the gang
    periodic = {ann.CHECKPOINT: "periodic", ann.LAST_CHECKPOINT: rfc3339(T0 - 3 * 3600),
                ann.MIN_MEMBERS: minimum}
    pods = [pod(f"job-{i}", node=f"n{i}", labels=gang, annotations=periodic)
            for i in range(3)]
    pods.append(pod("pre", priority=1000, pending=True))
    return FakeCache(nodes=[node(f"n{i}") for i in range(3)], pods=pods)


def _plan(rig: Rig) -> plan_record.PlanRecord:
    (obj,) = rig.cache.plans.items()
    return plan_record.plan_from_annotation(obj.raw)


def test_a_shrink_asks_only_the_leaving_member_names_it_and_evicts_only_it():
    rig = Rig(_elastic_cluster())
    rig.tick(T0)
    r = _plan(rig)
    (victim,) = r.victims
    assert victim.shrink and victim.drain
    (asked,) = rig.actions.of("request_checkpoint")
    assert asked.target == f"team/{victim.name}"
    raw = rig.cache.pod_by_uid(victim.uid).annotations[plan_record.DRAIN_ANNOTATION]
    assert plan_record.drain_from_annotation(raw).leaving == (victim.name,)
    rig.cache.ack(victim.uid, r.id)
    rig.tick(T0 + 5)
    assert rig.state(r.id) is State.EVICTING
    rig.cache.finish_terminating()
    rig.cache.bind("uid-pre", victim.node)
    rig.tick(T0 + 10)
    assert rig.state(r.id) is State.DONE
    assert [c.target for c in rig.actions.of("evict")] == [f"team/{victim.name}"]
    stay = {f"team/job-{i}" for i in range(3)} - {f"team/{victim.name}"}
    assert not [c for c in rig.actions.calls if c.target in stay and c.verb != "emit"]


def test_with_shrink_off_the_whole_elastic_gang_is_asked_and_evicted():
    rig = Rig(_elastic_cluster(), elastic_shrink=False)
    rig.tick(T0)
    r = _plan(rig)
    assert len(r.victims) == 3 and not any(v.shrink for v in r.victims)
    assert plan_record.drain_request(r, r.victims[0].uid, T0).leaving == ()


def test_a_malformed_min_members_keeps_the_gang_whole():
    rig = Rig(_elastic_cluster(minimum="two"))
    rig.tick(T0)
    assert len(_plan(rig).victims) == 3


@given(names=st.lists(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True),
                      max_size=4, unique=True))
def test_the_drain_request_round_trips_its_leaving_members(names):
    req = plan_record.DrainRequest(plan="p-1", requested=T0, deadline=T0 + 60,
                                 leaving=tuple(names))
    assert plan_record.drain_from_annotation(plan_record.drain_to_annotation(req)) == req


@pytest.mark.parametrize("leaving", ['[]', '"job-0"', '[1]', '["job-0","job-0"]', '["Bad Name"]',
                                     'null'])
def test_a_malformed_leaving_list_makes_the_request_unreadable(leaving):
    raw = ('{"plan":"p-1","requested":"2027-01-15T08:00:00Z",'
           f'"deadline":"2027-01-15T08:01:00Z","leaving":{leaving}}}')
    with pytest.raises(plan_record.DrainFormatError):
        plan_record.drain_from_annotation(raw)


def test_a_plan_record_keeps_which_victims_leave_an_elastic_gang():
    rig = Rig(_elastic_cluster())
    rig.tick(T0)
    r = _plan(rig)
    assert plan_record.plan_from_annotation(plan_record.plan_to_annotation(r)) == r
    raw = plan_record.plan_to_annotation(r).replace('"shrink":true', '"shrink":"yes"')
    with pytest.raises(plan_record.PlanFormatError):
        plan_record.plan_from_annotation(raw)


def test_the_agent_hands_the_leaving_members_to_the_hook_the_sdk_and_the_exec_env(tmp_path):
    from ckpt_preempt.controller.agent import agent
    from ckpt_preempt_sdk import Event, Status
    from tests.controller.test_agent import RecordingWriter

    seen = []

    class Hook(agent.Hook):
        def checkpoint(self, request):
            seen.append(request.leaving)
            return False

    a = agent.CheckpointAgent(RecordingWriter(), hook=Hook(), clock=lambda: T0)
    req = plan_record.DrainRequest(plan="p-1", requested=T0, deadline=T0 + 60,
                                 leaving=("job-0", "job-2"))
    a.observe({plan_record.DRAIN_ANNOTATION: plan_record.drain_to_annotation(req)})
    a.process_hooks()
    assert seen == [("job-0", "job-2")]
    status, events = a.changes(0, 0)
    assert status.leaving == ("job-0", "job-2") and events[0].leaving == ("job-0", "job-2")
    # what the SDK reads back from the agent's JSON
    assert Status.from_json({"agent": "a", "seq": 1, "state": "requested", "plan": "p-1",
                             "deadline": T0, "leaving": ["job-0"]}).leaving == ("job-0",)
    assert Event.from_json({"seq": 1, "state": "requested", "plan": "p-1",
                            "leaving": "job-0"}).leaving == ()  # not a list: no names
    out = tmp_path / "env"
    agent.ExecHook(f"sh -c 'echo $CKPT_PREEMPT_LEAVING > {out}'").checkpoint(req)
    assert out.read_text().strip() == "job-0,job-2"
