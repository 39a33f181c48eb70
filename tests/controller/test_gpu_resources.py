"""What counts as a GPU: configured whole-GPU names, MIG slices as fractions, and the planner's
cost of a fraction (controller/core/gpu_resources.py, policies cost and search)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_preempt.controller.core import config, gpu_resources
from ckpt_preempt.controller.core.gpu_resources import GpuResources, mig_milli
from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.policies.model import snapshot_io
from ckpt_preempt.policies.model.model import MILLI_PER_GPU, Node, Pod, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import cost, preemption
from tests.controller import test_extender as ext

NOW = 1_800_000_000.0
AMD = GpuResources(whole=frozenset({"amd.com/gpu", "nvidia.com/gpu"}))


def pod_json(requests: dict, **spec) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}], **spec}}


@pytest.mark.parametrize(("name", "want"), [
    ("nvidia.com/mig-1g.5gb", 142), ("nvidia.com/mig-1g.10gb+me", 142),
    ("nvidia.com/mig-2g.20gb", 285), ("nvidia.com/mig-3g.40gb", 428),
    ("nvidia.com/mig-4g.40gb", 571), ("nvidia.com/mig-7g.80gb", 1000),
    ("nvidia.com/gpu", None), ("nvidia.com/mig-0g.5gb", None), ("nvidia.com/mig-1g", None),
    ("example.com/mig-1g.5gb", None),
])
def test_mig_profiles_are_their_compute_slices_of_seven(name, want):
    assert mig_milli(name) == want


def test_requests_count_configured_names_and_mig_fractions():
    r = records.pod_requests(pod_json({"cpu": "1", "amd.com/gpu": "2", "nvidia.com/gpu": "1",
                                       "nvidia.com/mig-2g.20gb": "2"})["spec"], AMD)
    assert (r.gpus, r.gpu_milli) == (3, 2 * 285)
    default = records.pod_requests(pod_json({"amd.com/gpu": "2"})["spec"])
    assert (default.gpus, default.gpu_milli) == (0, 0)  # amd.com/gpu not configured


def test_init_containers_take_the_max_of_mig_slices_too():
    spec = pod_json({"nvidia.com/mig-1g.5gb": "1"})["spec"]
    spec["initContainers"] = [{"name": "i", "resources": {"requests": {
        "nvidia.com/mig-1g.5gb": "3"}}}]
    assert records.pod_requests(spec).gpu_milli == 3 * 142


def test_node_allocatable_counts_whole_gpus_and_mig_slices():
    n = records.node_info({"metadata": {"name": "n"}, "status": {"allocatable": {
        "cpu": "8", "amd.com/gpu": "4", "nvidia.com/mig-1g.10gb": "7"}}}, AMD)
    assert (n.allocatable.gpus, n.allocatable.gpu_milli) == (4, 7 * 142)


def test_a_bad_gpu_quantity_plans_the_pod_as_requesting_nothing():
    p = records.pod_info(pod_json({"nvidia.com/mig-1g.5gb": "lots"}))
    assert p.requests is None


@pytest.mark.parametrize(("data", "why"), [
    ({"gpuResources": []}, "at least one"),
    ({"gpuResources": ["gpu"]}, "not an extended resource name"),
    ({"gpuResources": ["nvidia.com/mig-1g.5gb"]}, "MIG slice"),
    ({"gpuResources": "amd.com/gpu"}, "list of strings"),
    ({"gpuDraDrivers": ["Not_A_Driver"]}, "DNS subdomain"),
    ({"gpuDeviceClasses": ["x/y"]}, "DNS subdomain"),
])
def test_config_refuses_bad_gpu_names_in_one_line(data, why):
    with pytest.raises(config.ConfigError, match=why) as e:
        config.parse(data)
    assert "\n" not in str(e.value)


def test_config_gpu_keys_and_defaults():
    cfg = config.parse({"gpuResources": ["amd.com/gpu", "gpu.intel.com/i915"],
                        "gpuDraDrivers": []})
    g = gpu_resources.from_config(cfg)
    assert g.whole == {"amd.com/gpu", "gpu.intel.com/i915"} and not g.dra_drivers
    d = gpu_resources.from_config(config.Config())
    assert d == gpu_resources.DEFAULT and d.dra


# ------------------------------------------------------------------------------ planner cost

ages = st.floats(min_value=1.0, max_value=30 * 86400.0)
profiles = st.sampled_from(["1g.5gb", "1g.10gb+me", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"])


def _pod(uid: str, requests: Resources, age: float, **kw) -> Pod:
    return Pod(uid=uid, name=uid, requests=requests, node="n", start_time=NOW - age, **kw)


@given(age=ages, profile=profiles, restart=st.sampled_from([0.0, 120.0]),
       drain=st.booleans())
def test_a_mig_pod_never_costs_more_than_a_full_gpu_pod_nor_nothing(age, profile, restart,
                                                                     drain):
    mig = Resources(gpu_milli=mig_milli(f"nvidia.com/mig-{profile}"))
    kw = {"drain": drain, "max_checkpoint_seconds": 600.0, "restart_seconds": restart}
    lost_mig, _ = cost.lost_gpu_seconds(_pod("m", mig, age), NOW, **kw)
    lost_full, _ = cost.lost_gpu_seconds(_pod("f", Resources(gpus=1), age), NOW, **kw)
    assert 0 < lost_mig <= lost_full
    assert lost_mig == pytest.approx(lost_full * mig.gpu_milli / MILLI_PER_GPU)


def _mig_snapshot(*pods: Pod) -> Snapshot:
    node = Node(name="n", allocatable=Resources(cpu_milli=64_000, memory_mib=1 << 20, gpus=1,
                                                gpu_milli=7 * 142))
    return Snapshot(now=NOW, nodes=(node,), pods=pods)


def test_a_mig_preemptor_evicts_a_mig_victim_and_loses_its_fraction():
    slice_ = Resources(gpu_milli=3 * 142)
    victims = [_pod(f"v{i}", slice_, 3600.0 * (i + 1)) for i in range(2)]
    full = _pod("full", Resources(gpus=1), 60.0)  # a whole GPU: frees no MIG slice
    pre = Pod(uid="pre", name="pre", priority=10, requests=slice_)
    got = preemption.plan(_mig_snapshot(*victims, full, pre), [pre])
    assert got.feasible and [v.uid for v in got.victims] == ["v0"]  # the younger slice
    assert got.victim_groups[0].lost_gpu_seconds == pytest.approx(3600.0 * 3 * 142 / 1000)


def test_a_whole_gpu_preemptor_does_not_evict_mig_slices():
    victims = [_pod(f"v{i}", Resources(gpu_milli=142), 60.0) for i in range(7)]
    busy = _pod("busy", Resources(gpus=1), 60.0, priority=100)
    pre = Pod(uid="pre", name="pre", priority=10, requests=Resources(gpus=1))
    got = preemption.plan(_mig_snapshot(*victims, busy, pre), [pre])
    assert not got.feasible and not got.victims


def test_a_mig_preemptor_that_fits_evicts_nobody():
    pre = Pod(uid="pre", name="pre", priority=10, requests=Resources(gpu_milli=142))
    got = preemption.plan(_mig_snapshot(_pod("v", Resources(gpu_milli=142), 60.0), pre), [pre])
    assert got.feasible and not got.victims


def test_snapshot_documents_carry_mig_slices():
    doc = {"now": NOW, "nodes": [{"name": "n", "gpus": 0, "gpu_milli": 994}],
           "pods": [{"name": "v", "node": "n", "gpu_milli": 994, "start_time": NOW - 3600},
                    {"name": "pre", "gpu_milli": 142, "priority": 10}],
           "preemptor": "default/pre"}
    snap, pre, problems = snapshot_io.from_dict(doc)
    assert not problems and snap.nodes[0].allocatable.gpu_milli == 994
    assert snapshot_io.node_to_dict(snap.nodes[0])["gpu_milli"] == 994
    got = preemption.plan(snap, pre)
    assert got.victim_groups[0].lost_gpu_seconds == pytest.approx(3600 * 0.994)


@pytest.mark.parametrize(("alloc", "asked", "want"), [
    ({"nvidia.com/mig-3g.40gb": "2"}, {"nvidia.com/mig-3g.40gb": "1"}, None),
    ({"nvidia.com/mig-3g.40gb": "2", "nvidia.com/gpu": "4"}, {"nvidia.com/mig-3g.40gb": "1"},
     None),
    ({"nvidia.com/mig-1g.10gb": "7"}, {"nvidia.com/mig-3g.40gb": "1"}, "MIG_PROFILE"),
    ({"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-1g.10gb": "4"},
     {"nvidia.com/mig-3g.40gb": "1"}, "MIG_PROFILE"),  # pooled slices: not exact, closed
    ({"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-1g.10gb": "4"}, {"nvidia.com/gpu": "1"},
     None),
    ({"nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-1g.10gb": "0"},
     {"nvidia.com/mig-3g.40gb": "1"}, None),  # a profile with none left is no other profile
])
def test_a_mig_preemptor_only_uses_nodes_whose_slices_are_all_its_profile(alloc, asked, want):
    n = records.node_info({"metadata": {"name": "n"}, "status": {"allocatable": alloc}})
    p = records.pod_info(pod_json(asked))
    got = convert.node_exclusion(n, [p])
    assert (got.name if got else None) == want


def test_extender_preempt_frees_the_mig_slices_the_preemptor_asks_for():
    """Two 3g slices asked: the extender keeps both offered victims, not the cheaper alone."""
    mig = {"nvidia.com/mig-3g.40gb": "2"}
    node = ext.node_json("n0", gpus=0)
    node["status"]["allocatable"].update(mig)
    pods = []
    for name, ago in (("old", 5 * ext.HOUR), ("new", ext.HOUR / 10)):
        p = ext.pod_json(name, node="n0", started_ago=ago)
        p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/mig-3g.40gb"] = "1"
        pods.append(p)
    server, url = ext.serve([node], pods)
    pre = ext.pod_json("p", priority=1000)
    pre["spec"]["containers"][0]["resources"]["requests"].update(mig)
    try:
        code, out = ext.post(url + "/preempt", {
            "Pod": pre, "NodeNameToMetaVictims": ext._victims(n0=["old", "new"])})
    finally:
        server.stop()
    assert code == 200 and out == {"NodeNameToMetaVictims": ext._victims(n0=["old", "new"])}
