"""verify: findings a human can act on, from plain data."""

import dataclasses

import pytest

from ckpt_preempt.hwprobe.errors import SpecError
from ckpt_preempt.hwprobe.render import summary_text
from ckpt_preempt.hwprobe.verify import Spec, load_spec, reference_names, verify
from tests.hwprobe import layouts


def test_every_named_reference_loads():
    names = reference_names()
    for required in ("hgx-h100-8", "dgx-a100-8", "h100-nvl", "gb200-tray", "l40s-pcie",
                     "single-gpu"):
        assert required in names
    for name in names:
        assert load_spec(name).name == name


@pytest.mark.parametrize(
    ("topo", "spec"),
    [
        pytest.param(layouts.hgx_h100(), "hgx-h100-8", id="healthy HGX H100"),
        pytest.param(layouts.h100_nvl(), "h100-nvl", id="healthy NVL pairs"),
        pytest.param(layouts.l40s(), "l40s-pcie", id="healthy L40S"),
        pytest.param(layouts.gb200_tray(), "gb200-tray", id="attached GB200 tray"),
        pytest.param(layouts.single_gpu_vm(), "single-gpu", id="single GPU VM"),
    ],
)
def test_healthy_machines_match_their_reference(topo, spec):
    verdict = verify(topo, load_spec(spec))
    assert verdict.findings == ()
    assert verdict.ok


@pytest.mark.parametrize(
    ("topo", "spec", "expected"),
    [
        pytest.param(layouts.hgx_h100(down={3: (7,)}), "hgx-h100-8",
                     ["GPU3 link 7 inactive", "GPU0↔GPU3 NV17 expected NV18"],
                     id="one NVLink down"),
        pytest.param(layouts.hgx_h100(errors={1: {4: {"crc_flit": 17}}}), "hgx-h100-8",
                     ["CRC errors on GPU1 link 4: 17 (max 0)"], id="CRC errors"),
        pytest.param(layouts.hgx_h100(gpus=7), "hgx-h100-8",
                     ["expected 8 GPUs, found 7", "NVLink domains {0,1,2,3,4,5,6}"],
                     id="a GPU fell off the bus"),
        pytest.param(layouts.hgx_h100(), "dgx-a100-8",
                     ["all GPUs are 'NVIDIA H100 80GB HBM3', expected A100",
                      "GPU0↔GPU1 NV18 expected NV12"], id="wrong machine"),
        pytest.param(layouts.h100_nvl(bridge_links=8), "h100-nvl",
                     ["GPU0: 8 of 12 NVLinks active (inactive: 8-17)",
                      "GPU0↔GPU1 NV8 expected NV12"], id="NVL bridge partly seated"),
        pytest.param(layouts.gb200_tray(state="IN_PROGRESS"), "gb200-tray",
                     ["GPU0 not attached to the NVLink fabric (state IN_PROGRESS, status SUCCESS)"],
                     id="fabric still training"),
        pytest.param(layouts.l40s(), "hgx-h100-8", ["NVSwitch not detected"], id="no NVLink"),
    ],
)
def test_faults_are_named(topo, spec, expected):
    verdict = verify(topo, load_spec(spec))
    assert not verdict.ok
    for line in expected:
        assert any(f.startswith(line) for f in verdict.findings), (line, verdict.findings)


def test_rising_counters_need_two_samples():
    before = layouts.hgx_h100(errors={1: {4: {"crc_flit": 17}}})
    after = layouts.hgx_h100(errors={1: {4: {"crc_flit": 25}}})
    verdict = verify(after, load_spec("hgx-h100-8"), earlier=before)
    assert "CRC errors rising on GPU1 link 4 (17 -> 25)" in verdict.findings


def test_p2p_disabled_is_reported():
    topo = layouts.make_topology(
        [layouts.make_gpu(i, links=layouts.switch_links()) for i in range(8)],
        p2p_of=lambda a, b: {"nvlink": "DISABLED_BY_REGKEY" if (a, b) == (0, 1) else "OK"},
    )
    assert verify(topo, load_spec("hgx-h100-8")).findings == (
        "GPU0↔GPU1 P2P over NVLink DISABLED_BY_REGKEY",)


def test_pcie_levels_checked_by_socket():
    topo = layouts.l40s()
    spec = Spec(name="t", pcie_same_numa="PHB", pcie_cross_numa="SYS")
    assert verify(topo, spec).findings == ("GPU0↔GPU1 NODE expected PHB",
                                           "GPU2↔GPU3 NODE expected PHB")


def test_yaml_file_spec(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("gpu_count: [4, 8]\nnvlink:\n  domain_size: 2\n")
    spec = load_spec(str(path))
    assert spec.name == "mine"
    assert verify(layouts.h100_nvl(), spec).ok


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("gpu_cnt: 8\n", r"unknown keys \['gpu_cnt'\]", id="typo in a key"),
        pytest.param("nvlink:\n  pair_link: 8\n", r"unknown keys \['pair_link'\]",
                     id="typo nested"),
        pytest.param("[1, 2]\n", "must be a mapping", id="not a mapping"),
        pytest.param("a: [\n", "not valid YAML", id="broken YAML"),
        pytest.param("pcie: {same_numa: NEAR}\n", "PCIe level 'NEAR'", id="unknown PCIe level"),
        pytest.param("nvlink: [1]\n", "nvlink must be a mapping", id="nvlink not a mapping"),
        pytest.param("fabric: {attach: true}\n", r"unknown keys \['attach'\]", id="fabric typo"),
    ],
)
def test_bad_spec_files(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        load_spec(str(path))


def test_unknown_reference_lists_the_known_ones():
    with pytest.raises(SpecError, match="hgx-h100-8"):
        load_spec("hgx-h100-9")


def nvlink_unreadable(gpus=8):
    """What a driver (or a mock) that answers NotSupported for NVLink and topology gives."""
    topo = layouts.make_topology(
        [layouts.make_gpu(i, unavailable={"nvlink": "NotSupported"}) for i in range(gpus)],
        pcie_of=lambda a, b: None, p2p_of=lambda a, b: {"nvlink": "unknown: NotSupported"})
    pairs = gpus * (gpus - 1) // 2
    return dataclasses.replace(
        topo, unavailable={"pcie_level": f"NotSupported ({pairs} of {pairs} pairs)"})


def test_unreadable_nvlink_is_named_not_called_inactive():
    findings = verify(nvlink_unreadable(), load_spec("hgx-h100-8")).findings
    assert findings[0] == "NVSwitch not detected (NVLink unreadable on 8 of 8 GPUs: NotSupported)"
    assert findings[1:9] == tuple(
        f"GPU{i} NVLink unreadable (NotSupported): cannot confirm 18 active links"
        for i in range(8))
    assert not any("inactive" in f or "P2P" in f for f in findings)


def test_unreadable_pcie_levels_are_one_finding():
    spec = Spec(name="t", pcie_same_numa="NODE", pcie_cross_numa="SYS")
    assert verify(nvlink_unreadable(4), spec).findings == (
        "PCIe level unreadable: NotSupported (6 of 6 pairs); "
        "cannot confirm same_numa NODE / cross_numa SYS",)
    assert verify(nvlink_unreadable(4), Spec(name="t", gpu_counts=(4,))).ok


def test_show_gives_the_reasons():
    text = summary_text(nvlink_unreadable(2))
    assert "NVLink: no NVLink peers (link state NotSupported on GPU 0,1)" in text
    assert ("PCIe: common ancestor unreadable: NotSupported (1 of 1 pairs); N/A in the matrix"
            in text)


# Every value a spec can hold, with nonsense: one SpecError whose one line names the key.
NONSENSE = [
    ("gpu_count: -3", "gpu_count must be a positive integer, got -3"),
    ("gpu_count: 0", "gpu_count must be a positive integer, got 0"),
    ("gpu_count: 2.5", "gpu_count must be a positive integer, got 2.5"),
    ("gpu_count: eight", "gpu_count must be a positive integer, got 'eight'"),
    ("gpu_count: '8'", "gpu_count must be a positive integer, got '8'"),
    ("gpu_count: true", "gpu_count must be a positive integer, got True"),
    ("gpu_count: [4, -8]", "gpu_count must be a positive integer, got -8"),
    ("gpu_count: []", "gpu_count must be a count or a non-empty list of counts"),
    ("gpu_count: {a: 1}", "gpu_count must be a positive integer, got {'a': 1}"),
    ("gpu_name: 100", "gpu_name must be a string, got 100"),
    ("gpu_name: ''", "gpu_name must not be empty"),
    ("name: [x]", "name must be a string, got ['x']"),
    ("description: 3", "description must be a string, got 3"),
    ("nvswitch: 'no'", "nvswitch must be true or false, got 'no'"),
    ("nvswitch: 1", "nvswitch must be true or false, got 1"),
    ("nvlink: {active_links_per_gpu: -1}",
     "nvlink.active_links_per_gpu must be an integer from 1 to 36, got -1"),
    ("nvlink: {active_links_per_gpu: 99}",
     "nvlink.active_links_per_gpu must be an integer from 1 to 36, got 99"),
    ("nvlink: {pair_links: 0}", "nvlink.pair_links must be an integer from 1 to 36, got 0"),
    ("nvlink: {pair_links: 18.5}",
     "nvlink.pair_links must be an integer from 1 to 36, got 18.5"),
    ("nvlink: {active_links_per_gpu: 12, pair_links: 18}",
     "nvlink.pair_links 18 is more than nvlink.active_links_per_gpu 12"),
    ("nvlink: {domain_size: -2}", "nvlink.domain_size must be a positive integer, got -2"),
    ("{gpu_count: 4, nvlink: {domain_size: 8}}", "nvlink.domain_size 8 is more than gpu_count 4"),
    ("nvlink: {domains: [[0, -1]]}",
     "nvlink.domains GPU index must be an integer >= 0, got -1"),
    ("nvlink: {domains: [[0, 1], [1, 2]]}", "nvlink.domains names GPU 1 twice"),
    ("nvlink: {domains: []}", "nvlink.domains must be a list of non-empty lists"),
    ("nvlink: {domains: [[]]}", "nvlink.domains must be a list of non-empty lists"),
    ("nvlink: {domains: [0, 1]}", "nvlink.domains must be a list of non-empty lists"),
    ("{gpu_count: 4, nvlink: {domains: [[0, 1, 2, 3, 4]]}}",
     "nvlink.domains GPU index must be an integer from 0 to 3, got 4"),
    ("nvlink: {p2p: maybe}", "nvlink.p2p must be true or false, got 'maybe'"),
    ("pcie: {same_numa: NEAR}", "pcie.same_numa: PCIe level 'NEAR' is not one of"),
    ("pcie: {cross_numa: 50}", "pcie.cross_numa: PCIe level 50 is not one of"),
    ("fabric: {attached: 'yes'}", "fabric.attached must be true or false, got 'yes'"),
    ("max_link_errors: -1", "max_link_errors must be an integer >= 0, got -1"),
    ("max_link_errors: 0.5", "max_link_errors must be an integer >= 0, got 0.5"),
]


@pytest.mark.parametrize(("text", "message"), NONSENSE, ids=[t for t, _ in NONSENSE])
def test_nonsense_values_are_refused_in_one_line(tmp_path, text, message):
    path = tmp_path / "nonsense.yaml"
    path.write_text(text + "\n")
    with pytest.raises(SpecError) as err:
        load_spec(str(path))
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"spec nonsense: {message}"), line


@pytest.mark.parametrize("name", reference_names())
def test_every_named_reference_passes_validation(name):
    assert load_spec(name).name == name
