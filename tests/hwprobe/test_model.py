"""Pure topology model, from plain data."""

import pytest

from ckpt_preempt.hwprobe.model import Pair, PcieLevel, cpu_list, nvlink_domains
from tests.hwprobe import layouts


@pytest.mark.parametrize(
    ("topo", "a", "b", "want"),
    [
        pytest.param(layouts.hgx_h100(), 0, 7, "NV18", id="HGX H100: NV18 through the switches"),
        pytest.param(layouts.hgx_h100(down={3: (7,)}), 3, 5, "NV17",
                     id="one link down on GPU3: its pairs drop to NV17"),
        pytest.param(layouts.hgx_h100(down={3: (7,)}), 2, 5, "NV18",
                     id="pairs without GPU3 stay NV18"),
        pytest.param(layouts.h100_nvl(), 0, 1, "NV12", id="NVL bridge: NV12 inside a pair"),
        pytest.param(layouts.h100_nvl(), 1, 2, "SYS", id="NVL: PCIe level across pairs"),
        pytest.param(layouts.l40s(), 0, 1, "NODE", id="L40S: NODE within a socket"),
        pytest.param(layouts.l40s(), 1, 2, "SYS", id="L40S: SYS across sockets"),
        pytest.param(layouts.gb200_tray(), 0, 3, "NV18", id="GB200: invisible switches count"),
        pytest.param(layouts.hgx_h100(), 4, 4, "X", id="self is X"),
    ],
)
def test_pair_level(topo, a, b, want):
    assert topo.level(a, b) == want
    assert topo.level(b, a) == want


@pytest.mark.parametrize(
    ("topo", "domains", "nvswitch"),
    [
        pytest.param(layouts.hgx_h100(), [list(range(8))], True, id="HGX: one 8-GPU domain"),
        pytest.param(layouts.h100_nvl(), [[0, 1], [2, 3]], False, id="NVL: two bridged pairs"),
        pytest.param(layouts.l40s(), [[0], [1], [2], [3]], False, id="PCIe only: singletons"),
        pytest.param(layouts.gb200_tray(), [[0, 1, 2, 3]], True, id="GB200 tray"),
        pytest.param(layouts.single_gpu_vm(), [[0]], False,
                     id="VM with inactive links: a singleton, not an error"),
    ],
)
def test_domains_and_switch_detection(topo, domains, nvswitch):
    assert topo.nvlink_domains == domains
    assert topo.nvswitch is nvswitch
    flat = sorted(i for d in topo.nvlink_domains for i in d)
    assert flat == list(range(topo.gpu_count))


def test_domains_ignore_pairs_outside_the_gpu_range():
    pairs = [Pair(a=0, b=1, pcie=PcieLevel.SYS, nvlinks=4), Pair(a=1, b=9, pcie=None, nvlinks=2)]
    assert nvlink_domains(3, pairs) == [[0, 1], [2]]


def test_partial_link_loss_on_one_switch_plane():
    # GPU0 loses both links to switch 2 (links 10-13 on a 5/5/4/4 board): NV14 to everyone.
    topo = layouts.hgx_h100(down={0: (10, 11, 12, 13)})
    assert {topo.level(0, b) for b in range(1, 8)} == {"NV14"}


@pytest.mark.parametrize(
    ("topo", "a", "b", "want"),
    [
        # NVIDIA's nominal per-direction figures (model.NVLINK_NOMINAL_GBPS_PER_LINK cites them),
        # not NVML's signalling rate (18 x 26.562 = 478.1, 18 x 53.125 = 956.2).
        pytest.param(layouts.hgx_h100(), 0, 1, 450.0, id="H100 SXM: NV18 = 450"),
        pytest.param(layouts.gb200_tray(), 0, 1, 900.0, id="GB200: NVLink5 x 18 = 900"),
        pytest.param(layouts.hgx_h100(down={0: (0,)}), 0, 1, 425.0, id="NV17 = 17 x 25"),
        pytest.param(layouts.h100_nvl(), 0, 1, 300.0, id="H100 NVL bridge: NV12 = 300"),
        pytest.param(layouts.make_topology([layouts.make_gpu(
            i, name="NVIDIA A100-SXM4-80GB", links=layouts.switch_links(
                (2,) * 6, version="3.0", speed=25781)) for i in range(8)]),
            0, 7, 300.0, id="A100 SXM: NV12 = 300"),
        pytest.param(layouts.make_topology([layouts.make_gpu(
            i, name="NVIDIA B200", links=layouts.switch_links(
                (5, 5, 4, 4), version="5.0", speed=53125)) for i in range(8)]),
            0, 7, 900.0, id="B200: NV18 = 900"),
        pytest.param(layouts.make_topology([layouts.make_gpu(
            i, links=layouts.switch_links(version=None)) for i in range(2)]),
            0, 1, 450.0, id="version unreadable: signalling rate rounded down"),
        pytest.param(layouts.l40s(), 0, 1, 20.0, id="NODE nominal"),
        pytest.param(layouts.l40s(), 0, 3, 12.0, id="SYS nominal"),
    ],
)
def test_expected_bandwidth(topo, a, b, want):
    assert topo.expected_gbps(a, b) == want


@pytest.mark.parametrize(
    ("words", "want"),
    [
        pytest.param([0xFF_FFFF_FFFF_FFFF], "0-55", id="first 56 CPUs"),
        pytest.param([0, 0xFFFF], "64-79", id="second word"),
        pytest.param([0b1011], "0-1,3", id="gaps"),
        pytest.param([0, 0], "", id="empty"),
    ],
)
def test_cpu_list(words, want):
    assert cpu_list(words) == want


def test_fabric_clique_needs_completed_state_and_a_uuid():
    assert layouts.gb200_tray().clique == "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.4"
    assert layouts.gb200_tray(state="IN_PROGRESS").clique is None
    assert layouts.gb200_tray(uuid=None).clique is None
    topo = layouts.gb200_tray()
    partly = type(topo)(gpus=(*topo.gpus[:3], layouts.make_gpu(3)), pairs=topo.pairs)
    assert partly.clique is None  # one GPU off the fabric: the node is not in the clique


def test_unreadable_remote_types_still_give_domains():
    """VMs and old drivers: no remote type. Bridges are told apart from switches by bus id."""
    from ckpt_preempt.hwprobe.model import NvLink, RemoteType

    nvl = layouts.h100_nvl()
    blind = [layouts.make_gpu(g.index, name=g.name, cpus=g.cpu_affinity, links=tuple(
        NvLink(link=x.link, active=x.active, remote_type=RemoteType.UNKNOWN if x.active else None,
               remote_bus_id=x.remote_bus_id, speed_mbps=x.speed_mbps) for x in g.links))
        for g in nvl.gpus]
    topo = layouts.make_topology(blind, pcie_of=lambda a, b: layouts.two_sockets(a, b, 2))
    assert topo.nvlink_domains == [[0, 1], [2, 3]]
    assert topo.level(0, 1) == "NV12"
    assert topo.nvswitch is False


@pytest.mark.parametrize(
    ("speed_mbps", "want"),
    [(25781, 25.0), (26562, 25.0), (53125, 50.0), (19000, 19.0)],
)
def test_nominal_link_rate_from_signalling_rate(speed_mbps, want):
    from ckpt_preempt.hwprobe.model import nominal_link_gbps

    assert nominal_link_gbps(speed_mbps) == want
