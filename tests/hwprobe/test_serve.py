"""The serve loop and the Node patch, without NVML or a cluster."""

import json
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from ckpt_preempt.hwprobe import serve
from ckpt_preempt.hwprobe.errors import NvmlUnavailable, PublishError
from ckpt_preempt.hwprobe.publish import node_patch
from ckpt_preempt.hwprobe.verify import load_spec
from ckpt_preempt.policies.model.topology import ANNOTATION
from tests.hwprobe import layouts


def run_loop(topologies, *, spec="hgx-h100-8", publish_fails=False):
    registry = CollectorRegistry()
    feed = iter(topologies)
    published = []

    def probe():
        topo = next(feed)
        if isinstance(topo, Exception):
            raise topo
        return topo

    def publish(topo, verified, gpu_use=None):
        if publish_fails:
            raise PublishError("API answered 503")
        published.append(verified)

    count = serve.run(probe=probe, publish=publish, spec=load_spec(spec) if spec else None,
                      metrics=serve.Metrics.create(registry), interval=0,
                      iterations=len(topologies), sleep=lambda s: None)
    return count, published, registry


def test_publishes_only_on_change():
    healthy = layouts.hgx_h100()
    broken = layouts.hgx_h100(down={3: (7,)})
    count, published, registry = run_loop([healthy, healthy, broken, broken, healthy])
    assert count == 3
    assert published == [True, False, True]
    assert registry.get_sample_value("hwprobe_verified") == 1
    assert registry.get_sample_value("hwprobe_gpus") == 8
    assert registry.get_sample_value("hwprobe_nvlink_active_links", {"gpu": "3"}) == 18
    assert registry.get_sample_value("hwprobe_publishes_total") == 3


def test_probe_failures_are_counted_not_fatal():
    count, _, registry = run_loop([NvmlUnavailable("driver gone"), layouts.hgx_h100()])
    assert count == 1
    assert registry.get_sample_value("hwprobe_probe_failures_total") == 1


def test_publish_failure_retries_next_round():
    count, _, registry = run_loop([layouts.hgx_h100()] * 2, publish_fails=True)
    assert count == 0
    assert registry.get_sample_value("hwprobe_publishes_total") == 0


def test_rising_counters_between_rounds_fail_verify():
    a = layouts.hgx_h100(errors={1: {4: {"crc_flit": 0}}})
    b = layouts.hgx_h100(errors={1: {4: {"crc_flit": 4}}})
    _, published, registry = run_loop([a, b])
    assert published == [True, False]
    assert registry.get_sample_value("hwprobe_verify_findings") == 1  # "rising" says it all


def test_node_patch_removes_stale_hwprobe_labels_only():
    patch = node_patch(layouts.l40s(), verified=None, spec=None, current_labels={
        "hwprobe.ckpt-preempt.io/clique": "old.1", "kubernetes.io/hostname": "n1"})
    labels = patch["metadata"]["labels"]
    assert labels["hwprobe.ckpt-preempt.io/clique"] is None
    assert "kubernetes.io/hostname" not in labels
    value = json.loads(patch["metadata"]["annotations"][ANNOTATION])
    assert value["nvlink_domains"] == [[0], [1], [2], [3]]


def _get(server, path):
    url = f"http://127.0.0.1:{server.server_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_health_endpoints_follow_the_last_probe_and_publish():
    registry = CollectorRegistry()
    metrics = serve.Metrics.create(registry)
    health = serve.Health(publishing=True)
    server = serve.start_server(0, "127.0.0.1", registry, health)
    outcomes = iter([None, "API answered 403", None])

    def publish(topo, verified, gpu_use=None):
        err = next(outcomes)
        if err:
            raise PublishError(err)

    def step(topo):
        def probe():
            if isinstance(topo, Exception):
                raise topo
            return topo

        serve.run(probe=probe, publish=publish, spec=None, metrics=metrics, interval=0,
                  iterations=1, sleep=lambda s: None, health=health)

    try:
        assert _get(server, "/healthz") == (200, "ok\n")
        assert _get(server, "/readyz") == (503, "probe: no probe yet\n")
        step(layouts.hgx_h100())
        assert _get(server, "/readyz") == (200, "ok\n")
        step(layouts.hgx_h100(down={3: (7,)}))  # changed: publishes, and the API refuses
        assert _get(server, "/readyz") == (503, "publish: API answered 403\n")
        assert _get(server, "/healthz") == (200, "ok\n")
        step(NvmlUnavailable("driver gone"))
        assert _get(server, "/readyz") == (503, "probe: driver gone\n")
        step(layouts.hgx_h100())  # changed again, published
        assert _get(server, "/readyz") == (200, "ok\n")
        status, body = _get(server, "/metrics")
        assert status == 200 and "hwprobe_publishes_total 2.0" in body
    finally:
        server.shutdown()
        server.server_close()


def test_without_publishing_ready_needs_only_a_probe():
    health = serve.Health(publishing=False)
    assert health.not_ready() == "probe: no probe yet"
    health.probed(None)
    assert health.not_ready() is None


def test_port_in_use_raises_oserror():
    registry = CollectorRegistry()
    health = serve.Health(publishing=False)
    first = serve.start_server(0, "127.0.0.1", registry, health)
    try:
        with pytest.raises(OSError):
            serve.start_server(first.server_port, "127.0.0.1", registry, health)
    finally:
        first.shutdown()
        first.server_close()
