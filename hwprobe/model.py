"""Pure topology model: what the NVML edge read, and what follows from it.

Purely computational; no NVML, no I/O, no clock. Everything here is built from plain values,
so tests describe machines as data.

Pair levels follow ``nvidia-smi topo -m``: ``NV#`` (# bonded NVLinks) wins over the PCIe
path, which is one of PIX (at most one PCIe bridge), PXB (several bridges, no host bridge),
PHB (through a host bridge), NODE (across host bridges inside one NUMA node) and SYS (across
the inter-socket link).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum


class PcieLevel(IntEnum):
    """nvmlGpuTopologyLevel_t values, ordered from closest to farthest."""

    INTERNAL = 0
    PIX = 10  # NVML_TOPOLOGY_SINGLE
    PXB = 20  # NVML_TOPOLOGY_MULTIPLE
    PHB = 30  # NVML_TOPOLOGY_HOSTBRIDGE
    NODE = 40
    SYS = 50


class RemoteType(StrEnum):
    """What the far end of an NVLink is (nvmlIntNvLinkDeviceType_t)."""

    GPU = "GPU"
    SWITCH = "SWITCH"
    IBMNPU = "IBMNPU"
    UNKNOWN = "UNKNOWN"  # not visible: NCCL and we treat it as a switch (VMs, NVL72 trays)


# Expected unidirectional GB/s between two GPUs whose only path is PCIe. Nominal figures for
# a Gen4/Gen5 x16 slot: P2P measures 22-26 GB/s through one switch or host bridge, less when
# traffic crosses root complexes, and SYS usually has no P2P at all (host-staged copies).
PCIE_EXPECTED_GBPS = {
    PcieLevel.PIX: 24.0,
    PcieLevel.PXB: 24.0,
    PcieLevel.PHB: 22.0,
    PcieLevel.NODE: 20.0,
    PcieLevel.SYS: 12.0,
}

# Nominal per-link, per-direction GB/s by NVLink version: NVIDIA's per-GPU NVLink figures are
# bidirectional totals, so a GPU's per-direction figure is half, spread over its links.
#   A100 SXM: 600 GB/s over 12 NVLink 3 links -> 300 per direction, 25 per link
#     (https://www.nvidia.com/en-us/data-center/a100/, "NVLink: 600GB/s").
#   H100 SXM: 900 GB/s over 18 NVLink 4 links -> 450 per direction, 25 per link;
#   H100 NVL: 600 GB/s over the 12-link bridge -> 300 per direction
#     (https://www.nvidia.com/en-us/data-center/h100/, specifications table, "NVIDIA NVLink").
#   B200 and GB200: 1.8 TB/s over 18 NVLink 5 links -> 900 per direction, 50 per link
#     (https://www.nvidia.com/en-us/data-center/hgx/ and
#      https://www.nvidia.com/en-us/data-center/gb200-nvl72/, "NVLink bandwidth").
#   NVLink 1 (P100, 160 GB/s over 4 links) and 2 (V100, 300 GB/s over 6 links) are 20 and 25.
# NVML's speed field is the signalling rate (25.781, 26.562, 53.125 GB/s per link), 3-6 % above
# these; it is used only when the version is unreadable, rounded down to the nominal figure.
NVLINK_NOMINAL_GBPS_PER_LINK = {"1.0": 20.0, "2.0": 25.0, "2.2": 25.0, "3.0": 25.0, "3.1": 25.0,
                                "4.0": 25.0, "5.0": 50.0}

ERROR_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")

# Per-GPU health counters the NVML edge reads (``Gpu.counters``) and ``dcgm_check`` compares
# with dcgm-exporter: ECC double-bit errors (volatile since the driver loaded, aggregate over the
# GPU's life), row remapping (counts, and 0/1 for a pending remap and a failed one) and PCIe
# replays.
GPU_COUNTERS = ("ecc_dbe_volatile", "ecc_dbe_aggregate", "remapped_rows_correctable",
                "remapped_rows_uncorrectable", "row_remap_pending", "row_remap_failure",
                "pcie_replay")


@dataclass(frozen=True, kw_only=True)
class NvLink:
    """One physical NVLink of a GPU. ``None`` fields were not readable (see the GPU's reasons)."""

    link: int
    active: bool
    remote_type: RemoteType | None = None
    remote_bus_id: str | None = None  # on NVSwitch systems: the switch, not the peer GPU
    version: str | None = None  # "4.0": the NVLink version, decoded from NVML's enum
    speed_mbps: int | None = None  # per direction: NVML's signalling rate, not the data rate
    errors: dict[str, int] = field(default_factory=dict)  # ERROR_COUNTERS -> count


@dataclass(frozen=True, kw_only=True)
class Fabric:
    """Multi-node NVLink fabric membership (nvmlGpuFabricInfo)."""

    state: str  # NOT_SUPPORTED | NOT_STARTED | IN_PROGRESS | COMPLETED
    status: str  # "SUCCESS" or the NVML error name
    cluster_uuid: str | None  # None when all zero
    clique_id: int

    @property
    def attached(self) -> bool:
        return self.state == "COMPLETED" and self.status == "SUCCESS" and bool(self.cluster_uuid)

    @property
    def clique(self) -> str | None:
        """The GPU Feature Discovery form, ``<clusterUUID>.<cliqueId>``."""
        return f"{self.cluster_uuid}.{self.clique_id}" if self.attached else None


@dataclass(frozen=True, kw_only=True)
class Gpu:
    index: int
    uuid: str | None = None
    name: str | None = None
    bus_id: str | None = None
    memory_mib: int | None = None
    architecture: str | None = None
    compute_capability: str | None = None
    mig_mode: str | None = None  # enabled | disabled | None (not supported)
    mig_devices: tuple[str, ...] = ()
    cpu_affinity: str | None = None  # "0-55,112-167"
    numa_node: int | None = None  # CPU-side NUMA node of the slot (NVML memory affinity, sysfs)
    gpu_numa_id: int | None = None  # the GPU's own memory NUMA node (Grace systems)
    links: tuple[NvLink, ...] = ()
    fabric: Fabric | None = None
    counters: dict[str, int] = field(default_factory=dict)  # GPU_COUNTERS -> value, if readable
    lost: bool = False
    unavailable: dict[str, str] = field(default_factory=dict)  # field -> reason

    @property
    def active_links(self) -> tuple[NvLink, ...]:
        return tuple(link for link in self.links if link.active)


@dataclass(frozen=True, kw_only=True)
class Pair:
    """Two GPUs, ``a < b``. ``p2p`` maps read/write/nvlink/atomics/pci to an NVML status name."""

    a: int
    b: int
    pcie: PcieLevel | None
    nvlinks: int = 0
    p2p: dict[str, str] = field(default_factory=dict)

    @property
    def level(self) -> str:
        if self.nvlinks:
            return f"NV{self.nvlinks}"
        return self.pcie.name if self.pcie is not None else "N/A"


@dataclass(frozen=True, kw_only=True)
class Topology:
    gpus: tuple[Gpu, ...]
    pairs: dict[tuple[int, int], Pair]
    driver_version: str | None = None
    hostname: str | None = None
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def pair(self, a: int, b: int) -> Pair | None:
        return self.pairs.get((min(a, b), max(a, b)))

    def level(self, a: int, b: int) -> str:
        if a == b:
            return "X"
        pair = self.pair(a, b)
        return pair.level if pair is not None else "N/A"

    @property
    def nvswitch(self) -> bool:
        """True when GPUs reach each other through switches (visible or not) rather than bridges."""
        buses = frozenset(_norm_bus(g.bus_id) for g in self.gpus if g.bus_id)
        return any(_switch_uplinks(gpu, buses) for gpu in self.gpus)

    @property
    def nvlink_domains(self) -> list[list[int]]:
        return nvlink_domains(len(self.gpus), self.pairs.values())

    def expected_gbps(self, a: int, b: int) -> float | None:
        pair = self.pair(a, b)
        return None if pair is None else expected_gbps(pair, self.gpus[a], self.gpus[b])

    @property
    def clique(self) -> str | None:
        """The node's fabric clique: only when every GPU is attached, all to the same one."""
        cliques = {gpu.fabric.clique if gpu.fabric else None for gpu in self.gpus}
        return cliques.pop() if len(cliques) == 1 else None


def count_nvlinks(a: Gpu, b: Gpu, gpu_buses: frozenset[str] = frozenset()) -> int:
    """Bonded NVLinks between two GPUs, as ``nvidia-smi topo -m`` counts them.

    Direct bridges are counted per link whose remote is the peer's bus id. Through switches,
    the remote PCI id is the switch, not the peer (on NVSwitch baseboards, counting by peer id
    finds nothing), so two GPUs share ``min(up-links of a, up-links of b)`` into each switch;
    switches the node cannot see are one anonymous switch plane. A link whose remote type is
    unknown but whose remote bus id is one of ``gpu_buses`` (normalised) is a bridge, not a switch.
    """
    direct = sum(
        1
        for link in a.active_links
        if link.remote_type in (RemoteType.GPU, RemoteType.UNKNOWN)
        and _same_bus(link.remote_bus_id, b.bus_id)
    )
    ups_a, ups_b = _switch_uplinks(a, gpu_buses), _switch_uplinks(b, gpu_buses)
    via_switch = sum(min(n, ups_b.get(switch, 0)) for switch, n in ups_a.items())
    return direct + via_switch


def _switch_uplinks(gpu: Gpu, gpu_buses: frozenset[str]) -> dict[str, int]:
    ups: dict[str, int] = {}
    for link in gpu.active_links:
        to_gpu = link.remote_bus_id is not None and _norm_bus(link.remote_bus_id) in gpu_buses
        if link.remote_type is RemoteType.SWITCH or (
                link.remote_type is RemoteType.UNKNOWN and not to_gpu):
            key = _norm_bus(link.remote_bus_id) if link.remote_bus_id else "invisible"
            ups[key] = ups.get(key, 0) + 1
    return ups


def _norm_bus(bus_id: str) -> str:
    """PCI ids come as 00000000:18:00.0 (NVML) or 0000:18:00.0 (sysfs); compare without case."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{int(domain, 16):08x}:{rest}" if rest else domain


def bus_key(bus_id: str) -> str:
    """A PCI bus id in one comparable form, whichever tool wrote it (NVML, sysfs, DCGM)."""
    return _norm_bus(bus_id)


def _same_bus(x: str | None, y: str | None) -> bool:
    return bool(x and y) and _norm_bus(x) == _norm_bus(y)


def nvlink_domains(gpu_count: int, pairs: Iterable[Pair]) -> list[list[int]]:
    """Connected components of the NVLink graph, sorted; every GPU is in exactly one.

    A GPU without an NVLink peer is a domain of its own. On switch fabrics and bridged pairs a
    component is also a clique; on partial meshes (DGX-1) it is not, which ``verify`` checks
    through the per-pair levels.
    """
    parent = list(range(gpu_count))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for pair in pairs:
        if pair.nvlinks and pair.a < gpu_count and pair.b < gpu_count:
            parent[root(pair.a)] = root(pair.b)
    groups: dict[int, list[int]] = {}
    for i in range(gpu_count):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values())


def expected_gbps(pair: Pair, a: Gpu, b: Gpu) -> float | None:
    """Nominal unidirectional bandwidth between two GPUs (what ``bench`` should approach)."""
    if pair.nvlinks:
        per_link = _link_gbps(a) or _link_gbps(b)
        return round(pair.nvlinks * per_link, 1) if per_link else None
    if pair.pcie is None:
        return None
    return PCIE_EXPECTED_GBPS.get(pair.pcie)


def _link_gbps(gpu: Gpu) -> float | None:
    """Nominal per-link GB/s: by NVLink version, else NVML's signalling rate rounded down."""
    for link in gpu.active_links:
        if link.version in NVLINK_NOMINAL_GBPS_PER_LINK:
            return NVLINK_NOMINAL_GBPS_PER_LINK[link.version]
    for link in gpu.active_links:
        if link.speed_mbps:
            return nominal_link_gbps(link.speed_mbps)
    return None


def nominal_link_gbps(speed_mbps: int) -> float:
    """The largest nominal per-link figure not above a signalling rate (26562 MB/s -> 25.0)."""
    rate = speed_mbps / 1000.0
    below = [g for g in set(NVLINK_NOMINAL_GBPS_PER_LINK.values()) if g <= rate]
    return max(below) if below else rate


def with_nvlink_counts(gpus: tuple[Gpu, ...], pairs: dict[tuple[int, int], Pair]) -> dict:
    """Pairs with ``nvlinks`` filled in from the GPUs' links (the edge reads the rest)."""
    buses = frozenset(_norm_bus(g.bus_id) for g in gpus if g.bus_id)
    out = {}
    for (a, b), pair in pairs.items():
        out[(a, b)] = Pair(a=a, b=b, pcie=pair.pcie, p2p=pair.p2p,
                           nvlinks=count_nvlinks(gpus[a], gpus[b], buses))
    return out


def cpu_list(words: Iterable[int]) -> str:
    """A CPU bitmask (64-bit words, lowest first) as a Linux cpu list: ``0-55,112-167``."""
    cpus = [w * 64 + bit for w, word in enumerate(words) for bit in range(64) if word >> bit & 1]
    ranges: list[str] = []
    start = prev = None
    for cpu in [*cpus, None]:
        if start is not None and (cpu is None or cpu != prev + 1):
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if cpu is not None and start is None:
            start = cpu
        prev = cpu
    return ",".join(ranges)
