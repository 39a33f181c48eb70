"""openb CSV parsing: good files parse, bad ones name the line and the problem."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.sim.trace import TraceError, TracePod, parse_nodes, parse_pods

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,creation_time,deletion_time"
UNTIMED = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"
DATA = Path(__file__).resolve().parents[2] / "policies" / "data"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "traces"


def _ref(gpus: int, qos: str, creation: float, deletion: float, name: str = "r") -> TracePod:
    return TracePod(name=name, cpu_milli=1, memory_mib=1, gpus=gpus, gpu_milli=1000 * gpus,
                    qos=qos, creation=creation, deletion=deletion)


REFERENCE = [
    _ref(1, "BE", 0, 100, "one-a"), _ref(1, "BE", 50, 60, "one-b"),
    _ref(8, "LS", 1000, 5000, "eight"), _ref(2, "Burstable", 7, 9, "two"),
]


def test_pods_parse_with_fractional_gpu_defaults():
    pods = parse_pods([HEADER, "p0,1000,2048,1,470,BE,10,70", "p1,2000,4096,8,,LS,0,100"])
    assert [(p.name, p.gpus, p.gpu_milli, p.qos) for p in pods] == [
        ("p0", 1, 470, "BE"), ("p1", 8, 8000, "LS"),
    ]
    assert (pods[0].creation, pods[0].deletion) == (10.0, 70.0)
    assert [p.fractional for p in pods] == [True, False]


def test_gpu_spec_is_carried_when_present():
    pods = parse_pods([HEADER + ",gpu_spec", "p0,1,1,1,1000,BE,0,5, V100M16|V100M32 "])
    assert pods[0].gpu_spec == "V100M16|V100M32"
    assert parse_pods([HEADER, "p0,1,1,1,1000,BE,0,5"])[0].gpu_spec == ""


def test_untimed_pods_draw_times_and_qos_from_same_gpu_count():
    lines = [UNTIMED] + [f"p{i},1,1,{g},{1000 * g}" for i, g in enumerate([1, 8, 2, 1, 8] * 20)]
    pods = parse_pods(lines, reference=REFERENCE, seed=3)
    by_gpus = {g: {(r.creation, r.deletion, r.qos) for r in REFERENCE if r.gpus == g}
               for g in (1, 2, 8)}
    for p in pods:
        assert (p.creation, p.deletion, p.qos) in by_gpus[p.gpus]
    assert {(p.creation, p.deletion) for p in pods if p.gpus == 1} == {(0, 100), (50, 60)}


def test_untimed_gpu_count_missing_from_reference_takes_the_nearest():
    pods = parse_pods([UNTIMED, "a,1,1,4,4000", "b,1,1,3,3000", "c,1,1,16,16000"],
                      reference=REFERENCE)
    # 4 is nearest to 2 and 8 (ties go to the smaller: 2); 3 is nearest to 2; 16 to 8
    assert [p.qos for p in pods] == ["Burstable", "Burstable", "LS"]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_untimed_times_are_seeded_and_reproducible(seed):
    lines = [UNTIMED] + [f"p{i},1,1,1,1000" for i in range(30)]
    first = parse_pods(lines, reference=REFERENCE, seed=seed)
    assert first == parse_pods(lines, reference=REFERENCE, seed=seed)
    others = [parse_pods(lines, reference=REFERENCE, seed=seed + k) for k in (1, 2, 3)]
    assert any(o != first for o in others)  # 30 coin flips: seeds do change the draw


def test_timed_trace_without_qos_takes_the_default_or_the_reference():
    lines = ["name,cpu_milli,memory_mib,num_gpu,creation_time,deletion_time", "p,1,1,8,0,9"]
    assert parse_pods(lines)[0].qos == "BE"
    assert parse_pods(lines, reference=REFERENCE)[0].qos == "LS"
    assert parse_pods(lines, reference=REFERENCE)[0].deletion == 9.0  # own times kept


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        pytest.param([UNTIMED, "p,1,1,1,1000"], "no creation_time/deletion_time columns",
                     id="untimed file without a reference"),
        pytest.param(["name,cpu_milli,memory_mib"], "lacks column(s) num_gpu", id="no num_gpu"),
        pytest.param(["name,cpu_milli,memory_mib,num_gpu,creation_time", "p,1,1,1,0"],
                     "has creation_time but not deletion_time", id="half the times"),
        pytest.param([HEADER, "p0,1000,2048,x,1000,BE,0,1"], "line 2: num_gpu='x'",
                     id="non-numeric gpu count"),
        pytest.param([HEADER, "p0,1000,2048,1,1000,Gold,0,1"], "qos='Gold'", id="unknown qos"),
        pytest.param([HEADER, "p0,1000,2048,1,1000,BE,9,1"], "deletion_time precedes",
                     id="deleted before created"),
        pytest.param([HEADER, "p0,-5,2048,1,1000,BE,0,1"], "negative", id="negative cpu"),
        pytest.param([HEADER, "p0,1,1,1,1000,BE,0,1e999"], "line 2: deletion_time",
                     id="infinite time"),
        pytest.param([HEADER], "no rows", id="empty"),
    ],
)
def test_bad_pod_traces_name_the_problem(rows, message):
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_pods(rows, reference=REFERENCE if rows[0] != UNTIMED else None)


def test_nodes_keep_only_gpu_nodes():
    nodes = parse_nodes(["sn,cpu_milli,memory_mib,gpu,model", "a,1000,1,0,", "b,1000,1,8,G2"])
    assert [(n.name, n.gpus, n.model) for n in nodes] == [("b", 8, "G2")]
    with pytest.raises(TraceError, match="no GPU nodes"):
        parse_nodes(["sn,cpu_milli,memory_mib,gpu,model", "a,1000,1,0,"])


def _trace_files():
    found = sorted(DATA.glob("openb_pod_list_*.csv"))
    if SHARED.is_dir():
        found += sorted(SHARED.glob("openb_pod_list_*.csv"))
    return found


@pytest.mark.parametrize("path", _trace_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_openb_pod_trace_parses(path):
    reference = parse_pods((DATA / "openb_pod_list_default.csv").read_text().splitlines())
    lines = path.read_text().splitlines()
    pods = parse_pods(lines, reference=reference)
    assert len(pods) == len(lines) - 1
    assert all(p.deletion >= p.creation for p in pods)
    assert any(p.fractional for p in pods)
    # every trace but gpushare100 (all its GPU pods share one GPU) has multi-GPU pods
    assert any(p.gpus > 1 for p in pods) or path.name == "openb_pod_list_gpushare100.csv"


def test_bundled_multigpu_trace_is_bundled():
    assert (DATA / "openb_pod_list_multigpu20.csv").is_file()
