"""Scenario 7 (e2e/test_controller_compare.py) run through kube-scheduler's own preemption with
the extender's preemptVerb: the victims are the ones the checkpoint-aware planner picks, and
the GPU-hours lost are the planner's, not kube-default's."""

from __future__ import annotations

import json

import pytest

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.explain import explain_live
from e2e.harness import kube
from e2e.harness.controller_run import HIGH_KUBE, HIGH_NEVER, exists, priority_classes
from e2e.harness.extender_run import metric, running_extender
from e2e.harness.extender_run import scheduler_config as extender_config
from e2e.test_controller_compare import WORKLOAD, _lost, _make

pytestmark = pytest.mark.e2e


def _planner_pick(cluster, namespace, pool, probe) -> tuple[list[str], float]:
    """What ckpt-preempt's planner would evict for one 8-GPU pod right now: asked through a
    `preemptionPolicy: Never` twin (kube-scheduler does not preempt for it), then deleted."""
    kube.create_pod(cluster, namespace, probe, gpus=8, pool=pool, priority_class=HIGH_NEVER)
    kube.wait_pod_unschedulable(cluster, namespace, probe)
    plan = explain_live.explain(cluster.api, namespace, probe, Config()).plan
    cluster.core.delete_namespaced_pod(probe, namespace, grace_period_seconds=0)
    kube.wait_pod_gone(cluster, namespace, probe)
    names = sorted(v.name.rsplit("-", 1)[0] for v in plan.victims)
    return names, plan.lost_gpu_seconds / 3600


def test_scenario7_through_preempt_verb_loses_what_the_planner_loses(
        cluster, namespace, pool, gpu_nodes, scheduler_config, tmp_path, capsys):
    priority_classes(cluster)
    nodes = gpu_nodes(4)
    _make(cluster, namespace, pool, nodes, "e")
    with running_extender(cluster, tmp_path) as (_, url):
        scheduler_config(extender_config(url))
        gone: list[str] = []
        planned: list[str] = []
        for i in range(2):  # two 8-GPU preemptors that keep PreemptLowerPriority
            pick, _ = _planner_pick(cluster, namespace, pool, f"probe{i}")
            planned += pick
            kube.create_pod(cluster, namespace, f"big{i}", gpus=8, pool=pool,
                            priority_class=HIGH_KUBE)
            kube.wait_pod_running(cluster, namespace, f"big{i}", timeout=90)
            now_gone = [n for n, *_ in WORKLOAD
                        if n not in gone and not exists(cluster, namespace, f"{n}-e")]
            assert now_gone == pick, (i, now_gone, pick)
            gone += now_gone
        calls = metric(url, 'ckpt_preempt_extender_requests_total{code="200",verb="preempt"}')
    report = {"victims": gone, "planner": planned, "lost_gpu_hours": round(_lost(gone), 2)}
    with capsys.disabled():
        print("scenario 7 via preemptVerb:", json.dumps(report))
    assert calls >= 2  # kube-scheduler asked the extender for each preemption
    assert sorted(gone) == ["b", "d"]  # as the planner (kube-default alone evicts a and d)
    assert _lost(gone) < _lost(["a", "d"])
