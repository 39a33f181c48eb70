"""KEP-4563's EvictionRequest API on a control plane of its own with the EvictionRequestAPI gate
on and lifecycle.k8s.io/v1alpha1 served (LocalCluster(eviction_request=True)): what v1.37.2
does with an EvictionRequest for a pod that names our responder, and what the controller says.

What it shows (docs/eviction-request.md): the API server stores the EvictionRequest and keeps
the Pod's spec.evictionResponders, but nothing turns the request into a lifecycle.k8s.io
Eviction or makes a responder Active, so a responder has nothing to act on; the controller,
with evictionRequestResponder set, says so in one log line and writes nothing for it.
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from kubernetes import client

from ckpt_preempt.controller.planning import disruption_api
from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.controller_run import config_for, reasons, running_controller

pytestmark = pytest.mark.e2e
RESPONDER = "ckpt-preempt.io/checkpoint"
REQUESTER = "e2e.example.com/maintenance"
GROUP, VERSION = disruption_api.GROUP, disruption_api.VERSION
QUIET_SECONDS = 15.0  # how long nothing may happen to the request


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kube.own_local_cluster(tmp_path_factory.mktemp("evreq"), eviction_request=True)


def test_an_eviction_request_is_stored_but_nothing_hands_it_to_a_responder(
        cluster, namespace, pool, gpu_nodes, caplog):
    (node,) = gpu_nodes(1)
    body = kube.pod_body("train", gpus=8, pool=pool, node_name=node, checkpoint="on-request",
                         checkpoint_seconds=30)
    body["spec"]["evictionResponders"] = [{"name": RESPONDER, "priority": 10000}]
    pod = cluster.core.create_namespaced_pod(namespace, body)
    kube.wait_pod_running(cluster, namespace, "train")
    custom = client.CustomObjectsApi(cluster.api)
    # the field is kept (the client's models predate it: read the raw object)
    live = json.loads(cluster.core.read_namespaced_pod("train", namespace,
                                                       _preload_content=False).data)
    assert live["spec"]["evictionResponders"] == [{"name": RESPONDER, "priority": 10000}]
    request = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "EvictionRequest",
               "metadata": {"name": pod.metadata.uid},
               "spec": {"target": {"pod": {"name": "train", "uid": pod.metadata.uid}},
                        "requester": REQUESTER, "intent": "Eviction"}}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "evictionrequests",
                                           request)
    caplog.set_level(logging.INFO, logger=disruption_api.log.name)
    cfg = config_for(namespace, eviction_request_responder=RESPONDER)
    with running_controller(cluster, cfg) as ctl:
        kube.wait_for("the controller's report", lambda: ctl.reconciler.eviction_requests
                      .support is disruption_api.Support.SERVED, timeout=30)
        time.sleep(QUIET_SECONDS)
        stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace,
                                                     "evictionrequests", pod.metadata.uid)
        handoffs = custom.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                        "evictions")["items"]
    assert not (stored.get("status") or {}).get("conditions"), stored  # nobody processed it
    assert handoffs == []  # no Eviction for any responder, not even the default evictor
    lines = [r.getMessage() for r in caplog.records if r.name == disruption_api.log.name]
    assert len(lines) == 1 and "is served, but no evictionrequest-controller" in lines[0]
    live = cluster.core.read_namespaced_pod("train", namespace)
    assert live.metadata.deletion_timestamp is None
    assert plan_record.DRAIN_ANNOTATION not in (live.metadata.annotations or {})
    assert reasons(cluster, namespace, "train") == []
