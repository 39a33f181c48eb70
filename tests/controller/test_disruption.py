"""controller.planning.disruption (early warning) with a recording fake of our own write interface,
and
the config keys that drive it. The same behaviour against the real API server:
e2e/test_early_warning.py."""

from __future__ import annotations

import pytest

from ckpt_preempt.controller.core.config import Config, ConfigError, parse
from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.planning.disruption import EarlyWarning
from ckpt_preempt.policies.lifecycle import plan_record
from tests.controller.fakes import T0, FakeCache, RecordingActions, node, pod
from tests.controller.test_stepper import CKPT

KARPENTER = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def _rig(cfg: Config, *pods):
    cache = FakeCache(pods=pods, nodes=[node("n1", taints=[KARPENTER]), node("n2")])
    actions = RecordingActions(cache, dry_run=cfg.dry_run, clock=lambda: T0)
    return cache, actions, EarlyWarning(actions, cfg, convert.scope(cfg), convert.limits(cfg))


def _step(ew: EarlyWarning, cache: FakeCache, now: float, held=()) -> list[str]:
    return ew.step(cache.nodes.items(), cache.pods.items(), now, held)


def test_asks_the_on_request_pods_of_a_tainted_node_once_with_their_own_deadline():
    cfg = Config(namespaces=("team",))
    cache, actions, ew = _rig(cfg, pod("a", node="n1", annotations=CKPT),
                              pod("b", node="n1"), pod("c", node="n2", annotations=CKPT),
                              pod("d", node="n1", annotations=CKPT, ns="elsewhere"),
                              pod("e", node="n1", annotations=CKPT, uid="held"))
    assert _step(ew, cache, T0, held={"held"}) == ["team/a"]
    (call,) = actions.of("request_checkpoint")
    assert call.plan.startswith("disruption/") and call.args["deadline"] == T0 + 60
    assert call.args["only_if_unchanged"]
    assert actions.event_reasons("team/a") == [Reason.DISRUPTION_CHECKPOINT_REQUESTED]
    assert plan_record.drain_requested(cache.pod_by_uid("uid-a").annotations, call.plan)
    assert _step(ew, cache, T0 + 1, held={"held"}) == []  # it carries the request: once
    assert len(actions.of("request_checkpoint")) == 1


def test_dry_run_writes_nothing_and_reports_each_round_once():
    cfg = Config(namespaces=("team",), dry_run=True)
    cache, actions, ew = _rig(cfg, pod("a", node="n1", annotations=CKPT))
    for t in range(5):
        assert _step(ew, cache, T0 + t) == []
    assert actions.writes == []
    assert [e.message[:10] for e in actions.events] == ["(dry run) "]


def test_off_switch_and_excluded_namespaces_ask_nobody():
    off = Config(namespaces=("team",), early_warning=False)
    cache, actions, ew = _rig(off, pod("a", node="n1", annotations=CKPT))
    assert _step(ew, cache, T0) == [] and actions.verbs(events=True) == []
    skip = Config(early_warning_excluded_namespaces=("team",))
    cache, actions, ew = _rig(skip, pod("a", node="n1", annotations=CKPT))
    assert _step(ew, cache, T0) == [] and actions.verbs(events=True) == []


def test_a_pod_changed_since_it_was_read_is_asked_on_a_later_pass_of_the_same_round():
    cfg = Config(namespaces=("team",))
    cache, actions, ew = _rig(cfg, pod("a", node="n1", annotations=CKPT))
    stale = cache.pod_by_uid("uid-a")
    cache.change_pod("uid-a", labels={"touched": "yes"})
    assert ew.step(cache.nodes.items(), [stale], T0) == []
    assert _step(ew, cache, T0 + 1) == ["team/a"]
    (first, second) = actions.of("request_checkpoint")
    assert first.plan == second.plan  # the same round


@pytest.mark.parametrize("data, why", [
    ({"earlyWarningSignals": ["karpenter.sh/disrupted:Sometimes"]}, "effect must be one of"),
    ({"earlyWarningSignals": [""]}, "expected a taint key"),
    ({"earlyWarningSignals": "karpenter.sh/disrupted"}, "must be a list of strings"),
    ({"earlyWarningWindowSeconds": 0}, "must be a positive number"),
    ({"evictionRequestResponder": "checkpoint"}, "domain-prefixed"),
])
def test_bad_early_warning_config_is_one_clear_error(data, why):
    with pytest.raises(ConfigError, match=why):
        parse(data)


def test_config_defaults_and_overrides():
    assert Config().early_warning and "karpenter.sh/disrupted:NoSchedule" in \
        Config().early_warning_signals
    cfg = parse({"earlyWarningSignals": ["example.com/maintenance"],
                 "earlyWarningWindowSeconds": 30, "evictionRequestResponder":
                 "ckpt-preempt.io/checkpoint"})
    assert cfg.early_warning_signals == ("example.com/maintenance",)
    assert cfg.early_warning_window_seconds == 30.0
