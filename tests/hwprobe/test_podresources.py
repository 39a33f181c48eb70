"""hwprobe against the kubelet's PodResources API, end to end: the real generated
``v1.PodResourcesLister`` service (``e2e/podresources``, Go, on a unix socket) and the mock
NVML (``e2e/testbin/mocknvml``), through the hwprobe CLI in a subprocess, as the DaemonSet runs.
"""

from __future__ import annotations

import json
import time

import pytest

from ckpt_preempt.policies.model import gpu_use
from tests.hwprobe.podreslib import pod

pytestmark = pytest.mark.mocknvml


def nvl(i: int) -> str:
    """The UUID the mock gives GPU i of the h100-nvl profile (uuid_prefix 4e100000)."""
    return f"GPU-4e100000-{i:04x}-{i:012x}"


def gpu_use_of(nvml, profile, kubelet, *args):
    return nvml.run(profile, "gpu-use", "--pod-resources-socket", str(kubelet.socket), *args)


def test_maps_uuids_to_nvml_indices(mocknvml, kubelet):
    kubelet.set([pod("ml", "train", nvl(3), nvl(2)), pod("ml", "cpu-only"),
                  pod("ml", "nic", "mlx5_0", resource="rdma/hca"),
                  pod("web", "shared", nvl(0) + "::3")],
                 allocatable=[nvl(i) for i in range(4)])
    before = time.time()
    done = gpu_use_of(mocknvml, "h100-nvl", kubelet)
    assert done.returncode == 0, done.stderr
    report = gpu_use.parse_gpu_use(done.stdout)
    assert report.gpu_count == 4
    assert report.pods == (("ml", "train", frozenset({2, 3})), ("web", "shared", frozenset({0})))
    assert before - 1 <= report.observed <= time.time()
    assert json.loads(done.stdout)["schema"] == gpu_use.SCHEMA


def test_mig_uuids_and_index_ids_name_their_gpu(mocknvml, kubelet):
    kubelet.set([pod("a", "mig", "MIG-a100a1a0-0002-000000000001"), pod("a", "by-index", "5"),
                 pod("a", "mig-index", "7:0")])
    done = gpu_use_of(mocknvml, "a100-mig", kubelet)
    assert done.returncode == 0, done.stderr
    assert gpu_use.parse_gpu_use(done.stdout).pods == (
        ("a", "by-index", frozenset({5})), ("a", "mig", frozenset({2})),
        ("a", "mig-index", frozenset({7})))


def test_the_answer_is_read_on_every_call(mocknvml, kubelet):
    kubelet.set([pod("ml", "a", nvl(0))])
    first = gpu_use_of(mocknvml, "h100-nvl", kubelet)
    kubelet.set([])
    second = gpu_use_of(mocknvml, "h100-nvl", kubelet)
    assert gpu_use.parse_gpu_use(first.stdout).pods == (("ml", "a", frozenset({0})),)
    assert gpu_use.parse_gpu_use(second.stdout).pods == ()


@pytest.mark.parametrize(("pods", "allocatable", "expected"), [
    ([pod("ml", "x", "GPU-00000000-dead-000000000000")], None,
     "device ID 'GPU-00000000-dead-000000000000' names no GPU NVML reports (4 GPUs)"),
    ([], ["GPU-ffffffff-0000-000000000000"],
     "device ID 'GPU-ffffffff-0000-000000000000' names no GPU NVML reports (4 GPUs)"),
    ([pod("ml", "x", "9")], None, "device ID '9' names no GPU NVML reports (4 GPUs)"),
])
def test_bad_device_ids_are_one_line_and_no_report(mocknvml, kubelet, pods, allocatable,
                                                     expected):
    kubelet.set(pods, allocatable=allocatable)
    done = gpu_use_of(mocknvml, "h100-nvl", kubelet)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"hwprobe: GPUs in use not published: {expected}\n"


def test_an_api_error_is_one_line(mocknvml, kubelet):
    kubelet.set([], error="kubelet restarting")
    done = gpu_use_of(mocknvml, "h100-nvl", kubelet)
    assert done.returncode == 2
    assert done.stderr == (f"hwprobe: GPUs in use not published: PodResources API at "
                           f"{kubelet.socket}: UNAVAILABLE: kubelet restarting\n")


def test_no_socket_is_one_line(mocknvml, tmp_path):
    missing = tmp_path / "kubelet.sock"
    done = mocknvml.run("h100-nvl", "gpu-use", "--pod-resources-socket", str(missing))
    assert done.returncode == 2
    assert done.stderr.startswith(f"hwprobe: no PodResources socket at {missing}: GPUs in use "
                                  "not published")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_socket_from_the_environment(mocknvml, kubelet):
    kubelet.set([pod("ml", "a", nvl(1))])
    env = {**mocknvml.env("h100-nvl"), "HWPROBE_POD_RESOURCES_SOCKET": str(kubelet.socket)}
    import subprocess
    import sys

    from e2e.harness.mock_nvml import REPO

    done = subprocess.run([sys.executable, "-m", "ckpt_preempt.hwprobe.cli", "gpu-use"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert gpu_use.parse_gpu_use(done.stdout).pods == (("ml", "a", frozenset({1})),)
