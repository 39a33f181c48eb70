"""The hwprobe/v1 report, the annotation contract and the labels."""

import json

import jsonschema
import pytest

from ckpt_preempt.hwprobe.report import annotation, full_report, json_schema, labels, matrix
from ckpt_preempt.policies.model.topology import ANNOTATION
from tests.hwprobe import layouts

LAYOUTS = {
    "hgx_h100": layouts.hgx_h100,
    "h100_nvl": layouts.h100_nvl,
    "l40s": layouts.l40s,
    "gb200_tray": layouts.gb200_tray,
    "single_gpu_vm": layouts.single_gpu_vm,
}


@pytest.mark.parametrize("name", LAYOUTS)
def test_full_report_and_annotation_match_the_schema(name):
    topo = LAYOUTS[name]()
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    doc = json.loads(json.dumps(full_report(topo, verified=True, spec="x", findings=[])))
    jsonschema.validate(doc, schema)
    jsonschema.validate(json.loads(annotation(topo)), schema)


@pytest.mark.parametrize("name", LAYOUTS)
def test_planner_contract_keys(name):
    """policies.model.topology.parse_node_topology reads exactly these keys."""
    topo = LAYOUTS[name]()
    value = json.loads(annotation(topo, verified=False, spec="s"))
    assert value["schema"] == "hwprobe/v1"
    assert value["gpu_count"] == topo.gpu_count
    assert value["verified"] is False
    flat = sorted(i for domain in value["nvlink_domains"] for i in domain)
    assert flat == list(range(topo.gpu_count))
    assert json.loads(annotation(topo))["verified"] is None


@pytest.mark.parametrize("name", LAYOUTS)
def test_the_planner_parses_every_annotation(name):
    from ckpt_preempt.policies.model import topology
    topo = LAYOUTS[name]()
    parsed = topology.parse_node_topology(annotation(topo, verified=True, spec="s"))
    assert parsed.gpu_count == topo.gpu_count
    assert sorted(map(sorted, parsed.domains)) == topo.nvlink_domains
    assert parsed.verified is True


def test_annotation_is_compact():
    assert len(annotation(layouts.hgx_h100())) < 1024
    assert ANNOTATION == "hwprobe.ckpt-preempt.io/topology"


def test_matrix_rows():
    assert matrix(layouts.h100_nvl()) == [
        ["X", "NV12", "SYS", "SYS"], ["NV12", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "NV12"], ["SYS", "SYS", "NV12", "X"],
    ]


def test_labels():
    got = labels(layouts.gb200_tray(), verified=True)
    assert got == {
        "hwprobe.ckpt-preempt.io/gpu-count": "4",
        "hwprobe.ckpt-preempt.io/nvlink-domain-size": "4",
        "hwprobe.ckpt-preempt.io/nvlink-domains": "1",
        "hwprobe.ckpt-preempt.io/nvswitch": "true",
        "hwprobe.ckpt-preempt.io/verified": "true",
        "hwprobe.ckpt-preempt.io/clique": "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.4",
    }
    assert labels(layouts.l40s())["hwprobe.ckpt-preempt.io/verified"] == "unknown"
