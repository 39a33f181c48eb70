"""Native PodGroups on the default control plane, where scheduling.k8s.io/v1beta1 is not served:
the controller says so once and runs without them, and never lists them."""

from __future__ import annotations

import logging

import pytest

from ckpt_preempt.controller.kube.watch import ClusterCache
from e2e.harness import kube

pytestmark = pytest.mark.e2e


def test_absent_podgroup_api_is_one_log_line_and_never_listed(cluster, namespace, caplog):
    caplog.set_level(logging.INFO, logger="ckpt_preempt.podgroups")
    cache = ClusterCache(kube.client_copy(cluster.api), plan_namespace=namespace)
    cache.start()
    try:
        assert cache.wait_synced(30)
    finally:
        cache.stop()
    assert cache.podgroups.served is False
    assert cache.podgroups.items() == [] and cache.podgroups.relists == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "ckpt_preempt.podgroups"]
    assert len(lines) == 1 and "is not served" in lines[0], lines
