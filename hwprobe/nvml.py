"""The NVML edge: read a node's GPUs, links, pairs and fabric through pynvml.

A thin reader. Each field NVML cannot answer becomes ``None`` plus a reason in
``unavailable``; only a missing library or driver raises (``NvmlUnavailable``).

pynvml pitfalls handled here (see the research notes):
- ``NVML_P2P_CAPS_INDEX_READ`` is the tuple ``(0,)`` (a trailing comma): plain ints are used.
- The number of links comes from field ``NVML_FI_DEV_NVLINK_LINK_COUNT`` (91), not from
  ``NVML_NVLINK_MAX_LINKS`` (36 in 13.x, 18 before); failing that, links are read until
  NVML says InvalidArgument/NotSupported.
- ``nvmlDeviceGetNvLinkVersion`` returns an enum (6 = NVLink 4.0), decoded by ``_VERSIONS``.
- On NVSwitch systems the remote PCI id is the switch; ``model.count_nvlinks`` handles it.
- ``nvmlDeviceGetGpuFabricInfoV`` wants a pointer to a versioned struct.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckpt_preempt.hwprobe.errors import NvmlUnavailable
from ckpt_preempt.hwprobe.model import (
    Fabric,
    Gpu,
    NvLink,
    Pair,
    PcieLevel,
    RemoteType,
    Topology,
    cpu_list,
)
from ckpt_preempt.hwprobe.model import with_nvlink_counts as _with_counts

LIBRARY_ENV = "HWPROBE_NVML_LIBRARY"  # a libnvidia-ml.so path to load instead of the system's

# nvmlNvlinkVersion_t -> NVLink version (nvml.h: NVML_NVLINK_VERSION_1_0 = 1 ... 5_0 = 7).
_VERSIONS = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
_ARCHS = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
          8: "Ada", 9: "Hopper", 10: "Blackwell", 13: "Rubin"}
_REMOTE = {0x00: RemoteType.GPU, 0x01: RemoteType.IBMNPU, 0x02: RemoteType.SWITCH}
_FABRIC_STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
_P2P_INDEXES = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3, "pci": 4}
_P2P_STATUS = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED",
               3: "IOH_TOPOLOGY_NOT_SUPPORTED", 4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED"}
_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}  # NVML_NVLINK_ERROR_DL_*
_FI_LINK_COUNT = 91
_CPU_WORDS = 16  # 1024 CPUs
_NODE_WORDS = 4  # 256 NUMA nodes
_AFFINITY_SCOPE_NODE = 0  # NVML_AFFINITY_SCOPE_NODE
_ECC_UNCORRECTED, _ECC_VOLATILE, _ECC_AGGREGATE = 1, 0, 1  # nvmlMemoryErrorType_t, EccCounterType


def _reason(err: Exception) -> str:
    name = type(err).__name__.removeprefix("NVMLError_")
    return name if name != "NVMLError" else str(err)


class _Reader:
    """Calls pynvml and turns each failed call into (None, reason)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    def call(self, fn: Callable, *args: Any) -> tuple[Any, str | None]:
        try:
            return fn(*args), None
        except self.nvml.NVMLError as err:
            return None, _reason(err)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def load(nvml: Any = None) -> Any:
    """Initialise NVML and return the pynvml module. Raises NvmlUnavailable."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as err:
            raise NvmlUnavailable("pynvml (nvidia-ml-py) is not installed") from err
    path = os.environ.get(LIBRARY_ENV)
    if path:
        # pynvml dlopens "libnvidia-ml.so.1"; a library already loaded with that soname wins.
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as err:
            raise NvmlUnavailable(f"cannot load {LIBRARY_ENV}={path}: {err}") from err
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise NvmlUnavailable(f"NVML unavailable: {_reason(err)} ({err})") from err
    return nvml


def probe(nvml: Any = None) -> Topology:
    """Read the whole topology. Initialises and shuts down NVML around the read."""
    nvml = load(nvml)
    try:
        return _read_topology(nvml)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _read_topology(nvml: Any) -> Topology:
    r = _Reader(nvml)
    unavailable: dict[str, str] = {}
    driver, why = r.call(nvml.nvmlSystemGetDriverVersion)
    if why:
        unavailable["driver_version"] = why
    count, why = r.call(nvml.nvmlDeviceGetCount)
    if why:
        raise NvmlUnavailable(f"cannot count GPUs: {why}")
    handles: list[Any] = []
    gpus: list[Gpu] = []
    for index in range(count):
        handle, why = r.call(nvml.nvmlDeviceGetHandleByIndex, index)
        handles.append(handle)
        if why:
            gpus.append(Gpu(index=index, lost=why == "GpuIsLost", unavailable={"handle": why}))
        else:
            gpus.append(_read_gpu(r, index, handle))
    pairs: dict[tuple[int, int], Pair] = {}
    failed: dict[str, dict[str, int]] = {"pcie_level": {}, "p2p": {}}  # field -> reason -> pairs
    for a in range(count):
        for b in range(a + 1, count):
            if handles[a] is not None and handles[b] is not None:
                pairs[(a, b)] = _read_pair(r, a, b, handles[a], handles[b], failed)
    for key, reasons in failed.items():
        if reasons:  # one line per field, e.g. "NotSupported (28 of 28 pairs)"
            unavailable[key] = "; ".join(f"{why} ({n} of {len(pairs)} pairs)"
                                         for why, n in sorted(reasons.items()))
    gpu_tuple = tuple(gpus)
    return Topology(gpus=gpu_tuple, pairs=_with_counts(gpu_tuple, pairs),
                    driver_version=_text(driver) if driver else None,
                    hostname=socket.gethostname(), unavailable=unavailable)


def _read_gpu(r: _Reader, index: int, h: Any) -> Gpu:
    nvml, missing = r.nvml, {}

    def get(field: str, fn: Callable, *args: Any) -> Any:
        value, why = r.call(fn, h, *args)
        if why:
            missing[field] = why
        return value

    uuid, name = get("uuid", nvml.nvmlDeviceGetUUID), get("name", nvml.nvmlDeviceGetName)
    pci = get("bus_id", nvml.nvmlDeviceGetPciInfo)
    memory = get("memory_mib", nvml.nvmlDeviceGetMemoryInfo)
    arch = get("architecture", nvml.nvmlDeviceGetArchitecture)
    cc = get("compute_capability", nvml.nvmlDeviceGetCudaComputeCapability)
    affinity = get("cpu_affinity", nvml.nvmlDeviceGetCpuAffinity, _CPU_WORDS)
    gpu_numa = get("gpu_numa_id", nvml.nvmlDeviceGetNumaNodeId)
    bus_id = _text(pci.busId) if pci is not None else None
    mig_mode, mig_devices = _read_mig(r, h, missing)
    return Gpu(
        index=index, uuid=_text(uuid) if uuid else None, name=_text(name) if name else None,
        bus_id=bus_id, memory_mib=memory.total >> 20 if memory is not None else None,
        architecture=_ARCHS.get(arch, f"arch-{arch}") if arch is not None else None,
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
        mig_mode=mig_mode, mig_devices=mig_devices,
        cpu_affinity=cpu_list(affinity) if affinity is not None else None,
        numa_node=_slot_numa(r, h, bus_id, missing), gpu_numa_id=gpu_numa,
        links=_read_links(r, h, missing), fabric=_read_fabric(r, h, missing),
        counters=_read_counters(r, h, missing), unavailable=missing,
    )


def _read_mig(r: _Reader, h: Any, missing: dict) -> tuple[str | None, tuple[str, ...]]:
    nvml = r.nvml
    mode, why = r.call(nvml.nvmlDeviceGetMigMode, h)
    if why:
        missing["mig_mode"] = why
        return None, ()
    if mode[0] != 1:
        return "disabled", ()
    most, why = r.call(nvml.nvmlDeviceGetMaxMigDeviceCount, h)
    devices = []
    for i in range(most or 0):
        mig, why = r.call(nvml.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
        if mig is not None:
            uuid, _ = r.call(nvml.nvmlDeviceGetUUID, mig)
            devices.append(_text(uuid) if uuid else f"mig-{i}")
    return "enabled", tuple(devices)


def _slot_numa(r: _Reader, h: Any, bus_id: str | None, missing: dict) -> int | None:
    """The slot's CPU-side NUMA node: NVML's memory affinity at node scope (what ``nvidia-smi
    topo -m`` prints as "NUMA Affinity"), else the kernel's sysfs entry for the bus id.

    Not ``nvmlDeviceGetNumaNodeId``: NVML documents that call only for platforms where the GPU
    is itself a NUMA node (Grace), and hwprobe reports it separately as ``gpu_numa_id``.
    """
    nvml = r.nvml
    words, why = r.call(nvml.nvmlDeviceGetMemoryAffinity, h, _NODE_WORDS, _AFFINITY_SCOPE_NODE)
    if words is not None:
        nodes = [w * 64 + bit for w, word in enumerate(words) for bit in range(64)
                 if int(word) >> bit & 1]
        if nodes:
            return nodes[0]
        why = "empty memory affinity"
    node = _sysfs_numa(bus_id)
    if node is None:
        missing["numa_node"] = f"{why}; no sysfs entry"
    return node


def _sysfs_numa(bus_id: str | None) -> int | None:
    if not bus_id:
        return None
    domain, _, rest = bus_id.lower().partition(":")
    path = Path(f"/sys/bus/pci/devices/{int(domain, 16):04x}:{rest}/numa_node")
    try:
        node = int(path.read_text())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def _read_counters(r: _Reader, h: Any, missing: dict) -> dict[str, int]:
    """``model.GPU_COUNTERS`` that NVML answers; each unreadable call gets its reason."""
    nvml, out = r.nvml, {}
    for name, counter in (("ecc_dbe_volatile", _ECC_VOLATILE),
                          ("ecc_dbe_aggregate", _ECC_AGGREGATE)):
        value, why = r.call(nvml.nvmlDeviceGetTotalEccErrors, h, _ECC_UNCORRECTED, counter)
        if why:
            missing[name] = why
        else:
            out[name] = int(value)
    rows, why = r.call(nvml.nvmlDeviceGetRemappedRows, h)
    if why:
        missing["remapped_rows"] = why
    else:
        correctable, uncorrectable, pending, failure = rows
        out.update(remapped_rows_correctable=int(correctable),
                   remapped_rows_uncorrectable=int(uncorrectable),
                   row_remap_pending=int(bool(pending)), row_remap_failure=int(bool(failure)))
    replays, why = r.call(nvml.nvmlDeviceGetPcieReplayCounter, h)
    if why:
        missing["pcie_replay"] = why
    else:
        out["pcie_replay"] = int(replays)
    return out


def _link_count(r: _Reader, h: Any, missing: dict) -> int:
    nvml = r.nvml
    values, why = r.call(nvml.nvmlDeviceGetFieldValues, h, [_FI_LINK_COUNT])
    if values is not None and values[0].nvmlReturn == 0:
        return int(values[0].value.uiVal)
    # No field: probe links until NVML says there are no more.
    n = 0
    while n < nvml.NVML_NVLINK_MAX_LINKS:
        _, why = r.call(nvml.nvmlDeviceGetNvLinkState, h, n)
        if why:
            break
        n += 1
    if n == 0:
        missing["nvlink"] = why or "no links"
    return n


def _read_links(r: _Reader, h: Any, missing: dict) -> tuple[NvLink, ...]:
    nvml = r.nvml
    links = []
    for n in range(_link_count(r, h, missing)):
        state, why = r.call(nvml.nvmlDeviceGetNvLinkState, h, n)
        if why:
            missing[f"nvlink[{n}]"] = why
            continue
        if state != 1:
            links.append(NvLink(link=n, active=False))
            continue
        kind, why = r.call(nvml.nvmlDeviceGetNvLinkRemoteDeviceType, h, n)
        if why:  # older drivers, VMs: the model tells bridges from switches by the bus id
            missing[f"nvlink[{n}].remote_type"] = why
        remote, _ = r.call(nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, n)
        version, _ = r.call(nvml.nvmlDeviceGetNvLinkVersion, h, n)
        errors = {}
        for counter, code in _COUNTERS.items():
            value, _ = r.call(nvml.nvmlDeviceGetNvLinkErrorCounter, h, n, code)
            if value is not None:
                errors[counter] = int(value)
        links.append(NvLink(
            link=n, active=True,
            remote_type=_REMOTE.get(kind, RemoteType.UNKNOWN) if kind is not None
            else RemoteType.UNKNOWN,
            remote_bus_id=_text(remote.busId) if remote is not None else None,
            version=_VERSIONS.get(version) if version is not None else None,
            speed_mbps=_link_speed(r, h, n), errors=errors,
        ))
    return tuple(links)


def _link_speed(r: _Reader, h: Any, link: int) -> int | None:
    nvml = r.nvml
    speed_field = getattr(nvml, "NVML_FI_DEV_NVLINK_GET_SPEED", 164)
    values, _ = r.call(nvml.nvmlDeviceGetFieldValues, h, [(speed_field, link)])
    if values is None or values[0].nvmlReturn != 0:
        return None
    return int(values[0].value.uiVal) or None


def _read_fabric(r: _Reader, h: Any, missing: dict) -> Fabric | None:
    nvml = r.nvml
    info_type = getattr(nvml, "c_nvmlGpuFabricInfoV_t", None)
    if info_type is None:
        missing["fabric"] = "pynvml too old"
        return None
    info = info_type()
    _, why = r.call(nvml.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(info))
    if why == "FunctionNotFound" and hasattr(nvml, "c_nvmlGpuFabricInfo_t"):
        info = nvml.c_nvmlGpuFabricInfo_t()  # drivers before the versioned call (R535)
        _, why = r.call(nvml.nvmlDeviceGetGpuFabricInfo, h, ctypes.byref(info))
    if why:
        missing["fabric"] = why
        return None
    uuid = bytes(info.clusterUuid)
    status = "SUCCESS" if info.status == 0 else _reason(nvml.NVMLError(info.status))
    return Fabric(
        state=_FABRIC_STATES.get(info.state, str(info.state)), status=status,
        cluster_uuid=_uuid_text(uuid) if any(uuid) else None, clique_id=int(info.cliqueId),
    )


def _uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _read_pair(r: _Reader, a: int, b: int, ha: Any, hb: Any,
               failed: dict[str, dict[str, int]]) -> Pair:
    nvml = r.nvml
    level, why = r.call(nvml.nvmlDeviceGetTopologyCommonAncestor, ha, hb)
    if why:
        failed["pcie_level"][why] = failed["pcie_level"].get(why, 0) + 1
    p2p, p2p_why = {}, None
    for name, index in _P2P_INDEXES.items():
        status, why = r.call(nvml.nvmlDeviceGetP2PStatus, ha, hb, index)
        p2p[name] = _P2P_STATUS.get(status, str(status)) if why is None else f"unknown: {why}"
        p2p_why = p2p_why or why
    if p2p_why:
        failed["p2p"][p2p_why] = failed["p2p"].get(p2p_why, 0) + 1
    pcie = PcieLevel(level) if level in PcieLevel._value2member_map_ else None
    return Pair(a=a, b=b, pcie=pcie, p2p=p2p)
