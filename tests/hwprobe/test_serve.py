"""The serve loop and the Node patch, without NVML or a cluster."""

import json

from prometheus_client import CollectorRegistry

from ckpt_preempt.hwprobe import serve
from ckpt_preempt.hwprobe.errors import NvmlUnavailable, PublishError
from ckpt_preempt.hwprobe.publish import node_patch
from ckpt_preempt.hwprobe.report import ANNOTATION
from ckpt_preempt.hwprobe.verify import load_spec
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

    def publish(topo, verified):
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
