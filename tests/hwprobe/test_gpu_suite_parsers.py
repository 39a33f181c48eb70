"""Parsers of the GPU-runner suite (e2e/gpu/run.py), on representative nvidia-smi output."""

from e2e.gpu.run import parse_fabric, parse_topo_matrix, parse_topo_numa

TOPO = """\
\x1b[4mGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m
GPU0\t X \tNV18\tNV18\tPIX\t0-55\t0\t\tN/A
GPU1\tNV18\t X \tNV18\tSYS\t0-55\t0\t\tN/A
GPU2\tNV18\tNV18\t X \tSYS\t56-111\t1\t\tN/A
NIC0\tPIX\tSYS\tSYS\t X

Legend:
  X    = Self
"""

QUERY = """\
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : 0
        ClusterUUID                       : 00000000-0000-0000-0000-000000000000
    Processes                             : None
GPU 00000000:2A:00.0
    Fabric
        State                             : In Progress
"""


def test_topo_matrix_keeps_only_the_gpu_block():
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", TOPO)
    assert parse_topo_matrix(text) == [
        ["X", "NV18", "NV18"], ["NV18", "X", "NV18"], ["NV18", "NV18", "X"]]


def test_fabric_sections():
    assert parse_fabric(QUERY) == [
        {"State": "Completed", "Status": "Success", "CliqueId": "0",
         "ClusterUUID": "00000000-0000-0000-0000-000000000000"},
        {"State": "In Progress"},
    ]


DGX_A100_TOPO = """\
\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV12\tPXB\t48-63,176-191\t3
GPU1\tNV12\t X \tPXB\t48-63,176-191\t3
mlx5_0\tPXB\tPXB\t X
"""


def test_topo_numa_column():
    import re

    assert parse_topo_numa(re.sub(r"\x1b\[[0-9;]*m", "", TOPO)) == [0, 0, 1]
    assert parse_topo_numa(DGX_A100_TOPO) == [3, 3]
    assert parse_topo_numa("GPU0\t X \t0-7\tN/A\n") == [None]


def test_parsers_on_the_output_of_a_real_h200():
    """nvidia-smi's own output, as captured on an H200 runner (e2e/gpu/results/): one GPU in a VM,
    no NVLink, fabric not applicable. The parsers read it as the suite's result recorded it."""
    import json
    import re
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "e2e/gpu/results/h200-runner-20261204"
    text = re.sub(r"\x1b\[[0-9;]*m", "", (folder / "nvidia-smi.txt").read_text())
    result = json.loads((folder / "gpu-suite.json").read_text())
    assert parse_topo_matrix(text) == [["X"]]
    assert parse_topo_numa(text) == [result["report"]["gpus"][0]["numa_node"]] == [0]
    fabric = parse_fabric(text)
    assert len(fabric) == 1 and fabric[0]["State"] == "N/A"
    assert result["query"]["fabric"] == fabric
    assert result["failed"] == [] and result["topo"]["ok"] and result["query"]["ok"]
