"""Which GPUs are in use: the kubelet's device IDs (``podresources``) mapped to the NVML
indices hwprobe reads, as the Node annotation ``policies.model.gpu_use.ANNOTATION``. Pure.

Device IDs, as the NVIDIA device plugin hands them to the kubelet for ``nvidia.com/gpu``
(github.com/NVIDIA/k8s-device-plugin internal/rm/devices.go@03973a97: ``BuildDevice`` sets
the ID to the GPU's UUID; ``NewAnnotatedID`` appends ``::<replica>`` when a GPU is shared by
time-slicing or MPS; with ``--device-id-strategy=index`` the ID is the NVML index, ``i:j`` for
MIG device j of GPU i):

- ``GPU-<uuid>`` and ``GPU-<uuid>::<n>``: the GPU with that NVML UUID;
- ``MIG-<uuid>``: the GPU whose MIG device has that UUID;
- ``<i>`` and ``<i>:<j>``: NVML index i.

An ID that names no GPU NVML reports is bad data: the whole report is refused (one line, no
annotation), never half-published.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from ckpt_preempt.hwprobe.errors import HwprobeError
from ckpt_preempt.hwprobe.model import Topology
from ckpt_preempt.policies.model.gpu_use import format_gpu_use, report_body

if TYPE_CHECKING:
    from ckpt_preempt.hwprobe.podresources import Answer

GPU_RESOURCE = "nvidia.com/gpu"
REPLICA_SEPARATOR = "::"


class UnknownDevice(HwprobeError):
    """The kubelet's answer does not fit what NVML reports; nothing is published."""


def _indices(topo: Topology) -> dict[str, int]:
    by_id: dict[str, int] = {}
    for gpu in topo.gpus:
        by_id[str(gpu.index)] = gpu.index
        if gpu.uuid:
            by_id[gpu.uuid] = gpu.index
        for j, mig in enumerate(gpu.mig_devices):
            by_id[mig] = gpu.index
            by_id[f"{gpu.index}:{j}"] = gpu.index
    return by_id


def gpu_index(device_id: str, by_id: dict[str, int]) -> int:
    base = device_id.split(REPLICA_SEPARATOR, 1)[0]
    if base in by_id:
        return by_id[base]
    raise UnknownDevice(f"device ID {device_id!r} names no GPU NVML reports "
                        f"({len({*by_id.values()})} GPUs)")


def in_use(topo: Topology, answer: Answer) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    """(namespace, name, sorted GPU indices) of every pod holding a GPU, sorted."""
    by_id = _indices(topo)
    for device in answer.allocatable:
        gpu_index(device, by_id)  # the kubelet's devices must be NVML's GPUs
    pods = []
    for pod in answer.pods:
        gpus = tuple(sorted({gpu_index(d, by_id) for d in pod.device_ids}))
        pods.append((pod.namespace, pod.name, gpus))
    return tuple(sorted(pods))


def content(topo: Topology, answer: Answer) -> dict:
    """The report without its time: what changes when allocations change."""
    return report_body(topo.gpu_count, in_use(topo, answer))


def annotation(body: dict, observed: datetime) -> str:
    """The value written to the Node: ``content`` and when it was observed."""
    return format_gpu_use(body, observed.timestamp())
