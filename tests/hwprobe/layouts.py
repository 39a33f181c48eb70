"""Named machine layouts as plain data, for the pure-model tests (no NVML anywhere)."""

from __future__ import annotations

from ckpt_preempt.hwprobe.model import (
    Fabric,
    Gpu,
    NvLink,
    Pair,
    PcieLevel,
    RemoteType,
    Topology,
    with_nvlink_counts,
)

SWITCHES = ("00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0", "00000000:08:00.0")


def switch_links(per_switch=(5, 5, 4, 4), *, version="4.0", speed=26562, down=(), errors=None):
    """Links of one GPU on an NVSwitch baseboard: the remote is the switch, not the peer."""
    links, n = [], 0
    for sw, count in enumerate(per_switch):
        for _ in range(count):
            active = n not in down
            links.append(NvLink(
                link=n, active=active,
                remote_type=RemoteType.SWITCH if active else None,
                remote_bus_id=SWITCHES[sw % len(SWITCHES)] if active else None,
                version=version if active else None, speed_mbps=speed if active else None,
                errors=(errors or {}).get(n, {"replay": 0, "recovery": 0, "crc_flit": 0,
                                              "crc_data": 0}),
            ))
            n += 1
    return tuple(links)


def make_gpu(index, *, name="NVIDIA H100 80GB HBM3", links=(), cpus=None, fabric=None, **kw):
    bus_id = f"00000000:{index + 0x18:02X}:00.0"
    return Gpu(index=index, uuid=f"GPU-{index:04d}", name=name, bus_id=bus_id, links=links,
               cpu_affinity=cpus, fabric=fabric, **kw)


def make_topology(gpus, pcie_of=lambda a, b: PcieLevel.SYS, p2p_of=None):
    gpus = tuple(gpus)
    pairs = {}
    for a in range(len(gpus)):
        for b in range(a + 1, len(gpus)):
            p2p = p2p_of(a, b) if p2p_of else {"nvlink": "OK"}
            pairs[(a, b)] = Pair(a=a, b=b, pcie=pcie_of(a, b), p2p=p2p)
    return Topology(gpus=gpus, pairs=with_nvlink_counts(gpus, pairs), driver_version="550.163.01")


def two_sockets(a, b, per_socket=4):
    return PcieLevel.NODE if a // per_socket == b // per_socket else PcieLevel.SYS


def hgx_h100(*, down=None, errors=None, gpus=8):
    """HGX H100: 18 links per GPU into 4 NVSwitches (5/5/4/4); down/errors keyed by GPU index."""
    down, errors = down or {}, errors or {}
    return make_topology(
        [make_gpu(i, links=switch_links(down=down.get(i, ()), errors=errors.get(i)),
                  cpus="0-55" if i < 4 else "56-111") for i in range(gpus)],
        pcie_of=two_sockets,
    )


def direct_links(peer_bus, count, total=18, version="4.0", speed=26562):
    links = [NvLink(link=n, active=True, remote_type=RemoteType.GPU, remote_bus_id=peer_bus,
                    version=version, speed_mbps=speed) for n in range(count)]
    links += [NvLink(link=n, active=False) for n in range(count, total)]
    return tuple(links)


def h100_nvl(bridge_links=12):
    """4 H100 NVL cards bridged in pairs 0-1 and 2-3."""
    bus = [f"00000000:{i + 0x18:02X}:00.0" for i in range(4)]
    gpus = [make_gpu(i, name="NVIDIA H100 NVL", links=direct_links(bus[i ^ 1], bridge_links),
                     cpus="0-31" if i < 2 else "32-63") for i in range(4)]
    return make_topology(gpus, pcie_of=lambda a, b: two_sockets(a, b, per_socket=2))


def l40s(gpus=4):
    return make_topology(
        [make_gpu(i, name="NVIDIA L40S", cpus="0-31" if i < gpus // 2 else "32-63")
         for i in range(gpus)],
        pcie_of=lambda a, b: two_sockets(a, b, per_socket=gpus // 2),
        p2p_of=lambda a, b: {"nvlink": "NOT_SUPPORTED"},
    )


def gb200_tray(state="COMPLETED", uuid="6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60"):
    """Switch trays invisible from the node: remote type UNKNOWN, no PCI id."""
    links = tuple(NvLink(link=n, active=True, remote_type=RemoteType.UNKNOWN, version="5.0",
                         speed_mbps=53125) for n in range(18))
    fabric = Fabric(state=state, status="SUCCESS", cluster_uuid=uuid, clique_id=4)
    return make_topology([make_gpu(i, name="NVIDIA GB200", links=links, fabric=fabric)
                          for i in range(4)])


def single_gpu_vm():
    return make_topology([make_gpu(0, name="NVIDIA H200",
                                   links=tuple(NvLink(link=n, active=False) for n in range(18)))])
