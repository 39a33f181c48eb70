"""openb CSV parsing: good files parse, bad ones name the line and the problem."""

import pytest

from policies.sim.trace import TraceError, parse_nodes, parse_pods

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,creation_time,deletion_time"


def test_pods_parse_with_fractional_gpu_defaults():
    pods = parse_pods([HEADER, "p0,1000,2048,1,470,BE,10,70", "p1,2000,4096,8,,LS,0,100"])
    assert [(p.name, p.gpus, p.gpu_milli, p.qos) for p in pods] == [
        ("p0", 1, 470, "BE"), ("p1", 8, 8000, "LS"),
    ]
    assert (pods[0].creation, pods[0].deletion) == (10.0, 70.0)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        pytest.param(["name,cpu_milli,memory_mib,num_gpu"], "lacks column(s) qos, creation_time",
                     id="multigpu20-style file without times"),
        pytest.param([HEADER, "p0,1000,2048,x,1000,BE,0,1"], "line 2: num_gpu='x'",
                     id="non-numeric gpu count"),
        pytest.param([HEADER, "p0,1000,2048,1,1000,Gold,0,1"], "qos='Gold'", id="unknown qos"),
        pytest.param([HEADER, "p0,1000,2048,1,1000,BE,9,1"], "deletion_time precedes",
                     id="deleted before created"),
        pytest.param([HEADER, "p0,-5,2048,1,1000,BE,0,1"], "negative", id="negative cpu"),
        pytest.param([HEADER], "no rows", id="empty"),
    ],
)
def test_bad_pod_traces_name_the_problem(rows, message):
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_pods(rows)


def test_nodes_keep_only_gpu_nodes():
    nodes = parse_nodes(["sn,cpu_milli,memory_mib,gpu,model", "a,1000,1,0,", "b,1000,1,8,G2"])
    assert [(n.name, n.gpus, n.model) for n in nodes] == [("b", 8, "G2")]
    with pytest.raises(TraceError, match="no GPU nodes"):
        parse_nodes(["sn,cpu_milli,memory_mib,gpu,model", "a,1000,1,0,"])
