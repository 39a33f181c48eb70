"""Mapping the kubelet's device IDs to NVML indices, and the serve loop's gpu-use annotation,
without NVML, a kubelet or a cluster."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from ckpt_preempt.hwprobe import gpu_use, serve
from ckpt_preempt.hwprobe.podresources import Answer, Observation, PodDevices
from ckpt_preempt.policies.model.gpu_use import parse_gpu_use
from tests.hwprobe import layouts

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)


def answer(*pods, allocatable=()):
    return Answer(pods=tuple(PodDevices(namespace=ns, name=name, device_ids=tuple(ids))
                             for ns, name, ids in pods), allocatable=tuple(allocatable))


def test_uuids_replicas_and_indices_map_to_nvml_indices():
    topo = layouts.hgx_h100()  # uuids GPU-0000 .. GPU-0007
    body = gpu_use.content(topo, answer(("b", "p", ["GPU-0005", "GPU-0001::2"]),
                                        ("a", "q", ["3", "3"]),
                                        allocatable=[f"GPU-{i:04d}" for i in range(8)]))
    assert body == {"schema": "hwprobe-gpu-use/v1", "gpu_count": 8, "pods": [
        {"namespace": "a", "name": "q", "gpus": [3]},
        {"namespace": "b", "name": "p", "gpus": [1, 5]}]}


@pytest.mark.parametrize("bad", ["GPU-0008", "GPU-", "", "MIG-0000", "8", "0:0"])
def test_a_device_id_nvml_does_not_know_refuses_the_whole_report(bad):
    topo = layouts.hgx_h100()
    with pytest.raises(gpu_use.UnknownDevice, match="names no GPU NVML reports"):
        gpu_use.content(topo, answer(("a", "ok", ["GPU-0000"]), ("a", "bad", [bad])))
    with pytest.raises(gpu_use.UnknownDevice):
        gpu_use.content(topo, answer(allocatable=["GPU-0000", bad]))


def test_annotation_carries_the_time_and_parses_for_the_planner():
    body = gpu_use.content(layouts.hgx_h100(), answer(("a", "p", ["GPU-0002"])))
    value = gpu_use.annotation(body, T0 + timedelta(microseconds=700))
    assert '"observed":"2026-12-03T12:00:00Z"' in value
    report = parse_gpu_use(value)
    assert report.observed == T0.timestamp()
    assert report.pods == (("a", "p", frozenset({2})),)


def loop(observations, clock_steps, *, refresh=300.0):
    """Run the serve loop over one topology with these observations; returns the published
    gpu-use values (None: removed)."""
    registry = CollectorRegistry()
    feed, times = iter(observations), iter(clock_steps)
    published = []
    serve.run(probe=layouts.hgx_h100, publish=lambda topo, verified, use: published.append(use),
              spec=None, metrics=serve.Metrics.create(registry), interval=0,
              iterations=len(observations), sleep=lambda s: None,
              observe_use=lambda topo: next(feed), refresh=refresh,
              clock=lambda: T0 + timedelta(seconds=next(times)))
    return published, registry


def seen(*pods):
    body = gpu_use.content(layouts.hgx_h100(), answer(*pods))
    return Observation(body, "GPUs in use", False)


NO_SOCKET = Observation(None, "no PodResources socket at /x: GPUs in use not published", False)


def test_serve_publishes_on_change_and_refreshes_the_time():
    a, b = seen(("a", "p", ["GPU-0000"])), seen(("a", "p", ["GPU-0000"]), ("a", "q", ["GPU-0001"]))
    published, registry = loop([a, a, a, b, NO_SOCKET, NO_SOCKET], [0, 60, 300, 360, 420, 480])
    times = [parse_gpu_use(v).observed - T0.timestamp() if v else None for v in published]
    # first, then the refresh at 300 s, the change at 360 s, then removed once
    assert times == [0, 300, 360, None]
    assert registry.get_sample_value("hwprobe_gpus_in_use") == -1


def test_serve_logs_each_message_once(caplog):
    problem = Observation(None, "GPUs in use not published: UNAVAILABLE", True)
    with caplog.at_level(logging.INFO, logger="ckpt_preempt.hwprobe.serve"):
        loop([NO_SOCKET, NO_SOCKET, problem, problem, NO_SOCKET], range(5))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [("INFO", NO_SOCKET.message), ("WARNING", problem.message),
                     ("INFO", NO_SOCKET.message)]
