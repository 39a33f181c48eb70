"""Optimistic concurrency of the controller's drain-request write, on the real API server: a
request built from a stale view of the pod (``only_if_unchanged``, the health path) is refused
with 409 and writes nothing, so it never replaces a plan's request written in between; from a
fresh view it goes through."""

from __future__ import annotations

import json

import pytest

from ckpt_preempt.controller.kube import records
from ckpt_preempt.controller.writes.actions import Actions
from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube

pytestmark = pytest.mark.e2e


def _info(c: kube.Cluster, ns: str, name: str) -> records.PodInfo:
    raw = c.core.read_namespaced_pod(name, ns, _preload_content=False).data
    return records.pod_info(json.loads(raw))


def test_a_stale_view_cannot_replace_a_request_written_meanwhile(cluster, namespace):
    kube.create_pod(cluster, namespace, "victim")
    stale = _info(cluster, namespace, "victim")
    theirs = plan_record.drain_to_annotation(plan_record.DrainRequest(plan="p-9", requested=1e9,
                                                                  deadline=1e9 + 60))
    cluster.core.patch_namespaced_pod("victim", namespace, {"metadata": {"annotations": {
        plan_record.DRAIN_ANNOTATION: theirs}}})
    actions = Actions(cluster.api, plan_namespace=namespace)
    ours = plan_record.DrainRequest(plan="health-1", requested=1e9, deadline=1e9 + 30)

    assert not actions.request_checkpoint(stale, ours, only_if_unchanged=True)
    live = _info(cluster, namespace, "victim")
    assert live.annotations[plan_record.DRAIN_ANNOTATION] == theirs

    unrelated = {"metadata": {"annotations": {plan_record.DRAIN_ANNOTATION: None}}}
    cluster.core.patch_namespaced_pod("victim", namespace, unrelated)
    fresh = _info(cluster, namespace, "victim")
    assert actions.request_checkpoint(fresh, ours, only_if_unchanged=True)
    live = _info(cluster, namespace, "victim")
    assert plan_record.drain_requested(live.annotations, "health-1")
