"""The checkpoint agent answers the eviction gate's drain requests (plan ``disruption/<id>``)
as it answers a plan's, and its ack is what releases the gate's eviction: the request the gate
decides on, through the agent's recording fake (tests/controller/test_agent.py), back into the
gate's decision."""

from __future__ import annotations

from ckpt_preempt.policies.disruption import eviction_gate as gate
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.times import rfc3339
from ckpt_preempt_sdk import State
from tests.controller.test_agent import NOW, Pod, RecordingHook

LIMITS = gate.GateLimits(max_checkpoint_seconds=600)


def _gated(annotations: dict[str, str]) -> gate.GatedPod:
    return gate.GatedPod(uid="u-1", namespace="team-a", name="train-0", resource_version="7",
                         annotations={"ckpt-preempt.io/checkpoint": "on-request", **annotations},
                         labels={})


def test_the_agent_acks_the_gates_request_and_the_gate_then_allows():
    first = gate.decide(_gated({}), now=NOW, limits=LIMITS, first_refused=None,
                        exempt_requester=False)
    assert first.verdict is gate.Verdict.REQUEST
    hook = RecordingHook()
    pod = Pod(hook)
    pod.writer.annotations[plan_record.DRAIN_ANNOTATION] = plan_record.drain_to_annotation(
        first.request)
    pod.seen()
    retry = gate.decide(_gated(pod.writer.annotations), now=NOW + 1, limits=LIMITS,
                        first_refused=NOW, exempt_requester=False)
    assert retry.verdict is gate.Verdict.REFUSE  # asked, not acked yet
    pod.agent.process_hooks()
    assert hook.calls == [("checkpoint", first.request.plan)]
    assert pod.writer.writes == [("ack", first.request.plan)]
    assert pod.states() == [(State.REQUESTED, first.request.plan),
                            (State.ACKED, first.request.plan)]
    assert pod.writer.annotations[plan_record.DONE_ANNOTATION] == first.request.plan
    after = gate.decide(_gated(pod.writer.annotations), now=NOW + 2, limits=LIMITS,
                        first_refused=NOW, exempt_requester=False)
    assert after.allowed and first.request.plan in after.reason
    assert rfc3339(NOW) in pod.writer.annotations.values()
