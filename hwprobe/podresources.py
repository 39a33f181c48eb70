"""The kubelet's PodResources API (gRPC, v1): which devices the kubelet gave each pod.

The service is ``v1.PodResourcesLister`` on the unix socket
``/var/lib/kubelet/pod-resources/kubelet.sock`` (the kubelet's root dir, then
``pod-resources``, then ``kubelet.sock``: k8s.io/kubernetes@v1.37.2
pkg/kubelet/kubelet_getters.go ``getPodResourcesDir``, pkg/kubelet/kubeletconfig/defaults.go
``DefaultKubeletPodResourcesDirName``, pkg/kubelet/apis/podresources/constants.go ``Socket``,
with ``.sock`` added by pkg/kubelet/util/util_unix.go ``LocalEndpoint``).
``List`` answers every active pod's containers with their devices per resource name;
``GetAllocatableResources`` the devices the node has. The messages are those of
k8s.io/kubelet@v0.37.2 pkg/apis/podresources/v1/api.proto. Only the fields read here are
declared below (by their field numbers there); protobuf skips the others.

The v1 API and ``GetAllocatableResources`` are GA and always on (their gates,
``KubeletPodResources`` and ``KubeletPodResourcesGetAllocatable``, were removed after GA; see
pkg/features/kube_features.go at v1.37.2). ``List`` returns only active pods by default
(``KubeletPodResourcesListUseActivePods``, on by default since 1.34, same file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

from ckpt_preempt.hwprobe import gpu_use
from ckpt_preempt.hwprobe.errors import HwprobeError
from ckpt_preempt.hwprobe.model import Topology

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
SOCKET_ENV = "HWPROBE_POD_RESOURCES_SOCKET"
SERVICE = "v1.PodResourcesLister"
TIMEOUT_SECONDS = 10.0
MAX_MESSAGE_BYTES = 16 * 2**20  # gRPC's default, 4 MiB, is tight for a node with many pods


class PodResourcesError(HwprobeError):
    """The kubelet's PodResources API could not be asked, or answered nonsense."""


@dataclass(frozen=True, kw_only=True)
class PodDevices:
    """The devices of one resource the kubelet gave one pod (all its containers together)."""

    namespace: str
    name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Answer:
    pods: tuple[PodDevices, ...]  # pods holding at least one device of the resource
    allocatable: tuple[str, ...]  # the node's device IDs of the resource


def default_socket() -> str:
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


# (message, [(field name, number, label, type, message type)]); numbers from api.proto
_STRING, _MESSAGE = 9, 11  # FieldDescriptorProto.TYPE_*
_OPTIONAL, _REPEATED = 1, 3  # FieldDescriptorProto.LABEL_*
_MESSAGES = (
    ("ListPodResourcesRequest", []),
    ("AllocatableResourcesRequest", []),
    ("ContainerDevices", [("resource_name", 1, _OPTIONAL, _STRING, None),
                          ("device_ids", 2, _REPEATED, _STRING, None)]),
    ("ContainerResources", [("name", 1, _OPTIONAL, _STRING, None),
                            ("devices", 2, _REPEATED, _MESSAGE, "ContainerDevices")]),
    ("PodResources", [("name", 1, _OPTIONAL, _STRING, None),
                      ("namespace", 2, _OPTIONAL, _STRING, None),
                      ("containers", 3, _REPEATED, _MESSAGE, "ContainerResources")]),
    ("ListPodResourcesResponse", [("pod_resources", 1, _REPEATED, _MESSAGE, "PodResources")]),
    ("AllocatableResourcesResponse", [("devices", 1, _REPEATED, _MESSAGE, "ContainerDevices")]),
)


@cache
def messages() -> dict:
    """The message classes, built from the declarations above in a pool of their own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="ckpt_preempt_podresources_v1.proto",
                                              package="v1", syntax="proto3")
    for name, fields in _MESSAGES:
        msg = file.message_type.add(name=name)
        for fname, number, label, ftype, type_name in fields:
            f = msg.field.add(name=fname, number=number, label=label, type=ftype)
            if type_name:
                f.type_name = f".v1.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{name}"))
            for name, _ in _MESSAGES}


def _call(channel, method: str, request: str, response: str):
    m = messages()
    stub = channel.unary_unary(f"/{SERVICE}/{method}",
                               request_serializer=m[request].SerializeToString,
                               response_deserializer=m[response].FromString)
    return stub(m[request](), timeout=TIMEOUT_SECONDS)


def query(socket: str, resource: str) -> Answer:
    """Ask the kubelet at ``socket`` (List and GetAllocatableResources) about ``resource``.
    Raises PodResourcesError with one line saying why not."""
    import grpc

    options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    try:
        with grpc.insecure_channel(f"unix://{socket}", options=options) as channel:
            listed = _call(channel, "List", "ListPodResourcesRequest",
                           "ListPodResourcesResponse")
            alloc = _call(channel, "GetAllocatableResources", "AllocatableResourcesRequest",
                          "AllocatableResourcesResponse")
    except grpc.RpcError as err:
        code = err.code().name if hasattr(err, "code") else "UNKNOWN"
        detail = err.details() if hasattr(err, "details") else str(err)
        raise PodResourcesError(f"PodResources API at {socket}: {code}: {detail}") from err
    pods = []
    for pod in listed.pod_resources:
        ids = [i for c in pod.containers for d in c.devices if d.resource_name == resource
               for i in d.device_ids]
        if ids:
            pods.append(PodDevices(namespace=pod.namespace, name=pod.name,
                                   device_ids=tuple(ids)))
    allocatable = tuple(i for d in alloc.devices if d.resource_name == resource
                        for i in d.device_ids)
    return Answer(pods=tuple(pods), allocatable=allocatable)


@dataclass(frozen=True)
class Observation:
    body: dict | None  # gpu_use.content, or None: nothing to publish
    message: str  # one line for the log
    problem: bool  # the kubelet answered badly or not at all (not: there is no socket)


def observe(topo: Topology, socket: str, resource: str = gpu_use.GPU_RESOURCE) -> Observation:
    """The GPUs in use (``gpu_use.content``), or why there is no report: no socket (the
    kubelet's directory is not mounted, or no kubelet), the API refused or could not be
    reached, or its devices are not NVML's GPUs."""
    if not os.path.exists(socket):
        return Observation(None, f"no PodResources socket at {socket}: GPUs in use not "
                           f"published (mount the kubelet's pod-resources directory, or set "
                           f"{SOCKET_ENV})", False)
    try:
        body = gpu_use.content(topo, query(socket, resource))
    except HwprobeError as err:
        return Observation(None, f"GPUs in use not published: {err}", True)
    held = sum(len(p["gpus"]) for p in body["pods"])
    return Observation(body, f"GPUs in use: {held} of {topo.gpu_count}, in "
                       f"{len(body['pods'])} pod(s)", False)
