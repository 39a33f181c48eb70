"""Without the EvictionRequestAPI gate (the session's control plane), a controller configured
with an eviction responder says once that the API is not served, and does nothing else."""

from __future__ import annotations

import logging
import time

import pytest

from ckpt_preempt.controller.planning import disruption_api
from e2e.harness import kube
from e2e.harness.controller_run import config_for, running_controller

pytestmark = pytest.mark.e2e


def test_absent_api_is_one_log_line_and_nothing_else(cluster, namespace, caplog):
    caplog.set_level(logging.DEBUG, logger=disruption_api.log.name)
    cfg = config_for(namespace, eviction_request_responder="ckpt-preempt.io/checkpoint")
    with running_controller(cluster, cfg) as ctl:
        kube.wait_for("the controller's report", lambda: ctl.reconciler.eviction_requests
                      .support is disruption_api.Support.ABSENT, timeout=30)
        time.sleep(3)  # more passes: still one line
    lines = [r.getMessage() for r in caplog.records if r.name == disruption_api.log.name]
    assert lines == ["EvictionRequest API (lifecycle.k8s.io/v1alpha1) is not served; "
                     "evictionRequestResponder has no effect"]


def test_without_a_responder_name_discovery_is_not_even_asked(cluster, namespace, caplog):
    caplog.set_level(logging.DEBUG, logger=disruption_api.log.name)
    with running_controller(cluster, config_for(namespace)) as ctl:
        kube.wait_for("a pass", lambda: ctl.reconciler.early_warning is not None
                      and ctl.is_leader, timeout=30)
        time.sleep(2)
        assert ctl.reconciler.eviction_requests.support is None
    assert [r for r in caplog.records if r.name == disruption_api.log.name] == []
