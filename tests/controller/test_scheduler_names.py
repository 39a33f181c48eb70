"""``schedulerNames``: pods of a scheduler not listed are left alone entirely (never a
preemptor, never a victim, never asked to checkpoint) but still hold the capacity they use."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ckpt_preempt.controller.core import config
from ckpt_preempt.controller.core.config import DEFAULT_SCHEDULER, ConfigError
from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.times import rfc3339
from tests.controller.fakes import T0, FakeCache, Rig, node, pod

OTHER = "volcano"


def test_default_is_kube_schedulers_name():
    assert config.Config().scheduler_names == (DEFAULT_SCHEDULER,) == ("default-scheduler",)
    assert config.parse({"schedulerNames": ["default-scheduler", "gpu-scheduler"]}
                        ).scheduler_names == ("default-scheduler", "gpu-scheduler")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param([], "schedulerNames must name at least one scheduler", id="empty list"),
        pytest.param([""], "schedulerNames: '' is not a scheduler name", id="empty name"),
        pytest.param([" x"], "schedulerNames: ' x' is not a scheduler name", id="blank around"),
        pytest.param("default-scheduler", "schedulerNames must be a list of strings",
                     id="a string, not a list"),
        pytest.param([3], "schedulerNames must be a list of strings", id="a number"),
    ],
)
def test_bad_scheduler_names_are_one_clear_line(value, message):
    with pytest.raises(ConfigError) as e:
        config.parse({"schedulerNames": value})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_pod_info_reads_the_scheduler_name_and_defaults_it_like_the_api_server():
    spec = {"containers": [{"name": "c"}]}
    meta = {"name": "p", "namespace": "team", "uid": "u"}
    assert records.pod_info({"metadata": meta, "spec": spec}).scheduler_name == DEFAULT_SCHEDULER
    got = records.pod_info({"metadata": meta, "spec": {**spec, "schedulerName": OTHER}})
    assert got.scheduler_name == OTHER


def test_scope_covers_only_the_listed_schedulers():
    scope = convert.scope(config.Config())
    ours, theirs = pod("a"), replace(pod("b"), scheduler_name=OTHER)
    assert scope.covers(ours) and not scope.covers(theirs)
    assert convert.scope(config.Config(scheduler_names=(OTHER,))).covers(theirs)
    assert convert.Scope().covers(theirs)  # an empty scope covers everything


# World: two 8-GPU nodes, each full with a low-priority pod; the one on n1 (of another
# scheduler) checkpointed a minute ago, the one on n2 (ours) three hours ago, so by lost work
# the other scheduler's pod is the cheaper victim.
FRESH = {ann.CHECKPOINT: "periodic", ann.LAST_CHECKPOINT: rfc3339(T0 - 60)}
STALE = {ann.CHECKPOINT: "periodic", ann.LAST_CHECKPOINT: rfc3339(T0 - 3 * 3600)}


def _cluster(*, preemptor_scheduler: str = DEFAULT_SCHEDULER) -> FakeCache:
    theirs = replace(pod("theirs", node="n1", annotations=FRESH), scheduler_name=OTHER)
    ours = pod("ours", node="n2", annotations=STALE)
    pre = replace(pod("pre", priority=1000, pending=True), scheduler_name=preemptor_scheduler)
    return FakeCache(nodes=[node("n1"), node("n2")], pods=[theirs, ours, pre])


def test_another_schedulers_pod_is_never_a_victim_even_when_cheapest():
    rig = Rig(_cluster())
    rig.tick(T0)
    (plan,) = rig.actions.of("create_plan")
    assert plan.args["victims"] == ("uid-ours",)
    # listing its scheduler makes it ours again, and then it is the cheaper victim
    rig = Rig(_cluster(), scheduler_names=(DEFAULT_SCHEDULER, OTHER))
    rig.tick(T0)
    (plan,) = rig.actions.of("create_plan")
    assert plan.args["victims"] == ("uid-theirs",)


def test_another_schedulers_pod_is_never_planned_for():
    rig = Rig(_cluster(preemptor_scheduler=OTHER))
    calls = rig.tick(T0) + rig.tick(T0 + 10)
    assert [c for c in calls if c.verb != "emit"] == []
    assert rig.actions.event_reasons("team/pre") == []
