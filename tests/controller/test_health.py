"""The health client's queries and node mapping, a source that cannot be read, and what the
reconciler does with a report: failing nodes get no plan, degrading nodes' checkpointing pods
are asked to checkpoint (once, rate-limited, never evicted), unknown changes nothing.
A real Prometheus answers in e2e/test_health_*.py."""

from __future__ import annotations

from dataclasses import dataclass

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.core.metrics import Metrics
from ckpt_preempt.controller.health import health
from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.planning.reconcile import Reconciler
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model import health as ph
from ckpt_preempt.policies.model.health import GpuKey, Health, HealthReport
from e2e.harness.localcluster import free_port
from tests.controller.fakes import T0, FakeCache, RecordingActions, node, pod
from tests.controller.test_reconcile import OLD
from tests.controller.test_stepper import CKPT, PERIODIC

RULES = {r.name: r for r in ph.DEFAULT_RULES}
LABELS = ("Hostname", "hostname")


def test_one_query_per_rule_for_the_whole_cluster_returning_only_what_fires():
    q = health.rule_queries(ph.DEFAULT_RULES, 300)
    assert q["nvlink-crc-flit-error-rate"] == q["nvlink-crc-flit-errors"] == \
        "rate(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[300s]) > 0"  # the looser one
    assert q["pcie-replay-rate"] == "rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[300s]) * 60 > 8"
    assert q["xid-critical"] == q["xid-memory"] == "DCGM_FI_DEV_XID_ERRORS > 0"
    only_failing = health.rule_queries([RULES["nvlink-crc-data-error-rate"]], 60)
    assert only_failing["nvlink-crc-data-error-rate"].endswith("[60s]) >= 100")
    assert health.coverage_query(("Hostname",)) == "count by (Hostname) (DCGM_FI_DEV_XID_ERRORS)"
    assert len(set(q.values())) == len(RULES) - 3  # one query per field and reading


def test_samples_map_to_nodes_by_either_hostname_label_a_mapping_or_the_short_name():
    cfg = Config(prometheus_url="http://127.0.0.1:1", health_node_names=("dgx-7=node-a",))
    source = health.PrometheusHealth(cfg)
    known = {"node-a", "node-b"}
    assert source._key({"Hostname": "node-b", "gpu": "3"}, known) == GpuKey("node-b", "3")
    assert source._key({"hostname": "node-b", "gpu": "0"}, known) == GpuKey("node-b", "0")
    assert source._key({"Hostname": "dgx-7", "gpu": "1"}, known) == GpuKey("node-a", "1")
    assert source._key({"Hostname": "node-b.example.com", "gpu": "2"}, known) == \
        GpuKey("node-b", "2")
    assert source._key({"gpu": "2"}, known) is None  # no node: not counted anywhere


def test_an_unreadable_source_makes_everything_unknown_and_says_so():
    metrics = Metrics()
    cfg = Config(prometheus_url=f"http://127.0.0.1:{free_port()}", health_query_timeout_seconds=1)
    source = health.PrometheusHealth(cfg, metrics)
    report = source.refresh()
    assert not report.source_up and report.state("n1") is Health.UNKNOWN
    assert cfg.prometheus_url in report.problem
    assert metrics.registry.get_sample_value("ckpt_preempt_health_source_up") == 0
    assert source.readiness_detail().startswith(f"health: unknown (prometheus {cfg.prometheus_url}")
    assert health.explain_health(Config(), ["n1"])[0].reasons == (
        "no health data: no prometheusUrl configured",)


# -- the reconciler --------------------------------------------------------------------------------
@dataclass
class Reported:
    """A health source that says what the test says (the real one is tested against a real
    Prometheus in e2e)."""

    now: HealthReport

    def report(self) -> HealthReport:
        return self.now


def _report(**nodes: Health) -> HealthReport:
    rule = {Health.FAILING: "xid-critical", Health.DEGRADED: "nvlink-crc-flit-errors"}
    value = {Health.FAILING: 79.0, Health.DEGRADED: 3.0}
    readings: dict[str, dict[GpuKey, float]] = {}
    for name, state in nodes.items():
        if state in rule:
            readings.setdefault(rule[state], {})[GpuKey(name, "0")] = value[state]
    return ph.judge(ph.DEFAULT_RULES, dict.fromkeys(nodes, 8), readings)


def _rig(cache: FakeCache, report: HealthReport, **cfg) -> tuple[Reconciler, RecordingActions,
                                                                 Reported]:
    config = Config(namespaces=("team",), **cfg)
    actions = RecordingActions(cache, dry_run=config.dry_run, clock=lambda: T0)
    source = Reported(report)
    return Reconciler(cache, actions, config, Metrics(), clock=lambda: T0,
                      health=source), actions, source


def _cluster(pre: bool) -> FakeCache:
    pods = [pod("v0", node="n1", gpus=4, annotations=CKPT),
            pod("v1", node="n1", gpus=4, annotations=PERIODIC),
            pod("w0", node="n2", gpus=8, annotations=OLD)]
    if pre:
        pods.append(pod("pre", priority=1000, pending=True))
    return FakeCache(nodes=[node("n1"), node("n2")], pods=pods)


def test_a_failing_node_gets_no_plan_even_where_victims_lose_least():
    rec, actions, _ = _rig(_cluster(pre=True), _report(n1=Health.FAILING, n2=Health.HEALTHY),
                           health_checkpoint=False)
    rec.tick()
    (stored,) = rec.cache.plans.items()
    assert plan_record.plan_from_annotation(stored.raw).nodes == {"n2"}
    assert not actions.of("request_checkpoint") or all(
        c.target == "team/w0" for c in actions.of("request_checkpoint"))


def test_unknown_health_changes_nothing():
    rec, actions, _ = _rig(_cluster(pre=True), ph.unknown("prometheus down"))
    rec.tick()
    (stored,) = rec.cache.plans.items()
    assert plan_record.plan_from_annotation(stored.raw).nodes == {"n1"}  # as without health
    assert "HealthCheckpointRequested" not in actions.event_reasons()


def test_a_degrading_node_asks_its_checkpointing_pods_once_and_evicts_nobody():
    cache = _cluster(pre=False)
    rec, actions, source = _rig(cache, _report(n1=Health.HEALTHY, n2=Health.HEALTHY),
                                health_checkpoint_interval_seconds=600)
    rec.tick()
    assert not actions.of("request_checkpoint")
    source.now = _report(n1=Health.DEGRADED, n2=Health.HEALTHY)
    rec.tick()
    (asked,) = actions.of("request_checkpoint")
    assert asked.target == "team/v0" and asked.plan.startswith(health.HEALTH_PLAN_PREFIX)
    assert asked.args["deadline"] == T0 + 60  # the pod's checkpoint-seconds
    (event,) = [c for c in actions.events if c.reason == "HealthCheckpointRequested"]
    assert event.target == "team/v0" and "node n1 turned degraded: gpu 0: NVLink CRC" in \
        event.message and "no eviction follows" in event.message
    assert not actions.of("evict") and not actions.of("create_plan")
    for report in (_report(n1=Health.DEGRADED), ph.unknown("down"),
                   _report(n1=Health.DEGRADED), _report(n1=Health.FAILING)):
        source.now = report
        rec.tick()  # still degraded, unknown in between, then worse: no second round
    assert len(actions.of("request_checkpoint")) == 1


def test_another_plans_request_is_never_replaced_and_dry_run_only_says_so():
    cache = _cluster(pre=False)
    theirs = plan_record.drain_to_annotation(plan_record.DrainRequest(plan="p-9", requested=T0,
                                                                  deadline=T0 + 60))
    cache.change_pod("uid-v0", annotations={**CKPT, plan_record.DRAIN_ANNOTATION: theirs})
    rec, actions, _ = _rig(cache, _report(n1=Health.FAILING))
    rec.tick()
    assert not actions.of("request_checkpoint")
    rec, actions, _ = _rig(_cluster(pre=False), _report(n1=Health.DEGRADED), dry_run=True)
    rec.tick()
    assert not actions.of("request_checkpoint")
    assert [c.message[:10] for c in actions.events] == ["(dry run) "]


def _proactive(cache: FakeCache, seen) -> tuple[health.ProactiveCheckpoint, RecordingActions]:
    """The health pass's checkpoint requests, having seen every node healthy with ``seen``."""
    config = Config(namespaces=("team",))
    actions = RecordingActions(cache, clock=lambda: T0)
    proactive = health.ProactiveCheckpoint(actions, config, convert.scope(config),
                                           convert.limits(config), Metrics())
    proactive.step(_report(n1=Health.HEALTHY), [seen], T0)
    return proactive, actions


def test_a_request_built_from_a_stale_view_never_replaces_a_plan_request_written_meanwhile():
    cache = _cluster(pre=False)
    stale = cache.pod_by_uid("uid-v0")  # what the health pass read, before a plan asked
    theirs = plan_record.drain_to_annotation(plan_record.DrainRequest(plan="p-9", requested=T0,
                                                                  deadline=T0 + 60))
    cache.change_pod("uid-v0", annotations={**CKPT, plan_record.DRAIN_ANNOTATION: theirs})
    proactive, actions = _proactive(cache, stale)
    assert proactive.step(_report(n1=Health.DEGRADED), [stale], T0 + 1) == []
    (tried,) = actions.of("request_checkpoint")
    assert tried.args["only_if_unchanged"]
    assert cache.pod_by_uid("uid-v0").annotations[plan_record.DRAIN_ANNOTATION] == theirs
    fresh = cache.pod_by_uid("uid-v0")  # the next pass sees the plan's request: it stands
    assert proactive.step(_report(n1=Health.DEGRADED), [fresh], T0 + 2) == []
    assert len(actions.of("request_checkpoint")) == 1
    assert "HealthCheckpointRequested" not in actions.event_reasons()


def test_a_pod_changed_only_elsewhere_since_it_was_read_is_asked_on_the_next_pass():
    cache = _cluster(pre=False)
    stale = cache.pod_by_uid("uid-v0")
    cache.change_pod("uid-v0", labels={"touched": "yes"})  # e.g. a label: a new resourceVersion
    proactive, actions = _proactive(cache, stale)
    assert proactive.step(_report(n1=Health.DEGRADED), [stale], T0 + 1) == []
    fresh = cache.pod_by_uid("uid-v0")
    assert proactive.step(_report(n1=Health.DEGRADED), [fresh], T0 + 2) == ["team/v0"]
    assert plan_record.drain_requested(cache.pod_by_uid("uid-v0").annotations,
                                     actions.of("request_checkpoint")[-1].plan)
    assert proactive.step(_report(n1=Health.DEGRADED), [cache.pod_by_uid("uid-v0")],
                          T0 + 3) == []  # asked once
