"""hwprobe/v1 topology reports as the planner reads them, and worst-case NVLink fit."""

from __future__ import annotations

import json

import pytest

from ckpt_preempt.policies.model.topology import (
    SCHEMA,
    NodeTopology,
    TopologyError,
    parse_node_topology,
    single_domain,
)


def _report(**over):
    doc = {"schema": SCHEMA, "gpu_count": 8, "nvlink_domains": [list(range(8))], "verified": True}
    doc.update(over)
    return json.dumps(doc)


def _islands(*sizes):
    domains, first = [], 0
    for s in sizes:
        domains.append(frozenset(range(first, first + s)))
        first += s
    return NodeTopology(gpu_count=first, domains=tuple(domains))


@pytest.mark.parametrize(
    ("value", "count", "domains", "verified"),
    [
        pytest.param(_report(), 8, [set(range(8))], True, id="HGX: one domain of eight"),
        pytest.param(_report(nvlink_domains=[[0, 1, 2, 3], [4, 5, 6, 7]]), 8,
                     [{0, 1, 2, 3}, {4, 5, 6, 7}], True, id="two islands of four"),
        pytest.param(_report(nvlink_domains=[[3, 1], [0], [2]], gpu_count=4), 4,
                     [{1, 3}, {0}, {2}], True, id="unordered indices and singleton domains"),
        pytest.param(_report(gpu_count=0, nvlink_domains=[]), 0, [], True, id="no GPUs"),
        pytest.param(_report(verified=False), 8, [set(range(8))], False, id="verified false"),
        pytest.param(_report(verified=None), 8, [set(range(8))], None, id="verified null"),
        pytest.param(json.dumps({"schema": SCHEMA, "gpu_count": 2, "nvlink_domains": [[0, 1]]}),
                     2, [{0, 1}], None, id="verified absent"),
        pytest.param(_report(extra={"links": 18}, host="n1"), 8, [set(range(8))], True,
                     id="fields for people are ignored"),
    ],
)
def test_parse_accepts(value, count, domains, verified):
    got = parse_node_topology(value)
    assert got.gpu_count == count
    assert [set(d) for d in got.domains] == domains
    assert got.verified is verified


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("{", id="not JSON"),
        pytest.param("[]", id="a list, not an object"),
        pytest.param("null", id="null"),
        pytest.param(_report(schema="hwprobe/v2"), id="another schema"),
        pytest.param(json.dumps({"gpu_count": 1, "nvlink_domains": [[0]]}), id="no schema"),
        pytest.param(_report(gpu_count=-1, nvlink_domains=[]), id="negative GPU count"),
        pytest.param(_report(gpu_count=True, nvlink_domains=[[0]]), id="boolean GPU count"),
        pytest.param(_report(gpu_count="8"), id="string GPU count"),
        pytest.param(_report(gpu_count=8.0), id="float GPU count"),
        pytest.param(_report(nvlink_domains={"0": [0]}), id="domains not a list"),
        pytest.param(_report(nvlink_domains=None), id="domains missing"),
        pytest.param(_report(nvlink_domains=[[], list(range(8))]), id="an empty domain"),
        pytest.param(_report(nvlink_domains=[0, 1]), id="a domain that is not a list"),
        pytest.param(_report(nvlink_domains=[list(range(9))]), id="index past the GPU count"),
        pytest.param(_report(nvlink_domains=[[-1, *range(8)]]), id="negative index"),
        pytest.param(_report(nvlink_domains=[[True, *range(1, 8)]]), id="boolean index"),
        pytest.param(_report(nvlink_domains=[[0.0, *range(1, 8)]]), id="float index"),
        pytest.param(_report(nvlink_domains=[[0, 1, 2, 3], [3, 4, 5, 6, 7]]),
                     id="a GPU in two domains"),
        pytest.param(_report(nvlink_domains=[[0, 1, 2, 3, 4, 5, 6]]), id="a GPU in no domain"),
        pytest.param(_report(verified="yes"), id="verified not a boolean"),
    ],
)
def test_parse_rejects(value):
    with pytest.raises(TopologyError):
        parse_node_topology(value)


def test_topology_error_is_a_value_error():
    assert issubclass(TopologyError, ValueError)


@pytest.mark.parametrize(
    ("topo", "free", "need", "fits"),
    [
        pytest.param(single_domain(8), 8, 8, True, id="HGX: all eight"),
        pytest.param(single_domain(8), 4, 4, True, id="HGX: any free GPUs are connected"),
        pytest.param(single_domain(8), 3, 4, False, id="HGX: not enough free"),
        pytest.param(_islands(4, 4), 8, 4, True, id="4+4 empty: an island of four"),
        pytest.param(_islands(4, 4), 4, 4, False,
                     id="4+4 with four free: they may straddle both islands"),
        pytest.param(_islands(4, 4), 5, 4, False,
                     id="4+4 with five free: three busy can block both islands"),
        pytest.param(_islands(4, 4), 8, 5, False, id="4+4: no island holds five"),
        pytest.param(_islands(6, 2), 6, 2, True, id="6+2 with six free: the big island holds two"),
        pytest.param(_islands(2, 2, 2, 2), 8, 2, True, id="four pairs, empty node"),
        pytest.param(_islands(2, 2, 2, 2), 8, 3, False, id="four pairs cannot hold three"),
        pytest.param(_islands(4, 4), 7, 4, True,
                     id="4+4 with one busy GPU: one island is surely whole"),
        pytest.param(_islands(4, 4), 6, 3, True,
                     id="4+4 with two busy: some island keeps three (joint worst case)"),
        pytest.param(_islands(4, 4), 4, 3, False,
                     id="4+4 with four busy: two in each island block both"),
        pytest.param(_islands(2, 2, 2, 2), 7, 2, True, id="four pairs, one busy: a pair is free"),
        pytest.param(_islands(2, 2, 2, 2), 4, 2, False,
                     id="four pairs, four busy: one in each pair blocks all"),
        pytest.param(_islands(6, 2), 4, 2, True,
                     id="6+2 with four busy: the big island still holds two"),
        pytest.param(_islands(6, 2), 2, 2, False, id="6+2 with six busy: both can be blocked"),
        pytest.param(_islands(4, 4), 1, 1, True, id="one GPU needs no link"),
        pytest.param(_islands(4, 4), 0, 1, False, id="one GPU, none free"),
        pytest.param(_islands(4, 4), 0, 0, True, id="no GPUs needed"),
    ],
)
def test_nvlink_fits_worst_case(topo, free, need, fits):
    assert topo.nvlink_fits(free, need) is fits


@pytest.mark.parametrize(
    ("topo", "largest"),
    [
        pytest.param(single_domain(8), 8, id="HGX"),
        pytest.param(_islands(2, 6), 6, id="uneven islands"),
        pytest.param(NodeTopology(gpu_count=0, domains=()), 0, id="no GPUs"),
    ],
)
def test_largest_domain(topo, largest):
    assert topo.largest_domain == largest
