"""Native PodGroups on the default control plane, where scheduling.k8s.io/v1beta1 is not served:
the controller says so once and runs without them, and no request for them is retried."""

from __future__ import annotations

import logging

import pytest

from ckpt_preempt.controller.watch import ClusterCache
from e2e import kube

pytestmark = pytest.mark.e2e


def test_absent_podgroup_api_is_one_log_line_and_no_informer(cluster, namespace, caplog):
    caplog.set_level(logging.INFO, logger="ckpt_preempt.podgroups")
    cache = ClusterCache(kube.client_copy(cluster.api), plan_namespace=namespace)
    assert cache.podgroups is None
    assert [i.kind for i in cache.informers] == ["nodes", "pods", "pdbs", "plans"]
    cache.start()
    try:
        assert cache.wait_synced(30)
    finally:
        cache.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "ckpt_preempt.podgroups"]
    assert len(lines) == 1 and "is not served" in lines[0], lines
