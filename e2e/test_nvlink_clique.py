"""An ``nvlink: required`` gang on rack-scale NVLink (GB200/GB300 NVL72 fabric cliques)
lands inside one clique: through the extender's filter (against the real kube-scheduler) and
through the controller's gated gang admission (the planner).

The kwok nodes carry the topology annotation hwprobe publishes (built by hwprobe's own
``report.annotation`` from a 4-GPU compute tray whose GPUs are all attached to one fabric
clique), so the extender reads the clique exactly as it would from a real rack.
"""

from __future__ import annotations

import pytest

from ckpt_preempt.controller.convert import ADMISSION_GATE, TOPOLOGY_ANNOTATION
from ckpt_preempt.hwprobe import report
from ckpt_preempt.hwprobe.model import Fabric, Gpu, Pair, PcieLevel, Topology
from e2e import kube
from e2e.test_controller_support import (
    HIGH_NEVER,
    config_for,
    exists,
    priority_classes,
    running_controller,
)
from e2e.test_extender_support import running_extender
from e2e.test_extender_support import scheduler_config as extender_config

pytestmark = pytest.mark.e2e
GPUS = 4  # a GB200 compute tray
CLUSTER_UUID = "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60"
NVLINK_REQUIRED = {"ckpt-preempt.io/nvlink": "required"}


def tray_annotation(clique_id: int | None) -> dict:
    """What ``hwprobe publish`` writes for a tray in clique ``clique_id`` (None: no fabric)."""
    fabric = None if clique_id is None else Fabric(
        state="COMPLETED", status="SUCCESS", cluster_uuid=CLUSTER_UUID, clique_id=clique_id)
    gpus = tuple(Gpu(index=i, fabric=fabric) for i in range(GPUS))
    pairs = {(a, b): Pair(a=a, b=b, pcie=PcieLevel.SYS, nvlinks=18)
             for a in range(GPUS) for b in range(a + 1, GPUS)}
    return {TOPOLOGY_ANNOTATION: report.annotation(Topology(gpus=gpus, pairs=pairs))}


def test_an_nvlink_gang_lands_inside_one_clique(
        cluster, namespace, pool, gpu_nodes, scheduler_config, tmp_path):
    """Racks A and B (two trays each) and a tray in no clique. The first member may take any
    clique's tray but not the clique-less one; the second must join the first's clique even
    though that tray is the busiest by CPU (default scoring would spread it elsewhere)."""
    racks = {}
    for rack, clique_id in (("a", 1), ("b", 2), ("x", None)):
        racks[rack] = gpu_nodes(1 if clique_id is None else 2, prefix=f"{pool}-{rack}",
                                gpus=GPUS, annotations=tray_annotation(clique_id))
    (plain,) = racks["x"]
    clique_of = {n: rack for rack, names in racks.items() for n in names}
    with running_extender(cluster, tmp_path) as (_, url):
        scheduler_config(extender_config(url))
        kube.create_pod(cluster, namespace, "train-0", gpus=GPUS, pool=pool, gang="train",
                        gang_total=2, annotations=NVLINK_REQUIRED)
        first = kube.wait_pod_running(cluster, namespace, "train-0").spec.node_name
        assert first != plain
        (partner,) = [n for n in racks[clique_of[first]] if n != first]
        # make the partner tray the least attractive to default scoring
        kube.create_pod(cluster, namespace, "cpu-filler", cpu="40", pool=pool,
                        node_name=partner)
        kube.wait_pod_running(cluster, namespace, "cpu-filler")
        kube.create_pod(cluster, namespace, "train-1", gpus=GPUS, pool=pool, gang="train",
                        gang_total=2, annotations=NVLINK_REQUIRED)
        assert kube.wait_pod_running(cluster, namespace, "train-1").spec.node_name == partner
        # a third member has no room left in that clique: it waits, saying why
        kube.create_pod(cluster, namespace, "train-2", gpus=GPUS, pool=pool, gang="train",
                        gang_total=3, annotations=NVLINK_REQUIRED)
        pod = kube.wait_pod_unschedulable(cluster, namespace, "train-2")
        message = kube.condition(pod, "PodScheduled").message
        assert "nvlink-gang-in-another-clique" in message, message


def test_a_gated_nvlink_gang_is_admitted_inside_one_clique(cluster, namespace, pool, gpu_nodes):
    """Gated gang admission plans the whole gang with the planner: rack A has one free tray
    and rack B two. Without cliques the members would fill the first free trays by name (one
    in A, one in B); with them, both go to B."""
    a = gpu_nodes(2, prefix=f"{pool}-a", gpus=GPUS, annotations=tray_annotation(1))
    b = gpu_nodes(2, prefix=f"{pool}-b", gpus=GPUS, annotations=tray_annotation(2))
    priority_classes(cluster)
    kube.create_pod(cluster, namespace, "occupant", gpus=GPUS, pool=pool,
                    priority_class=HIGH_NEVER, node_name=a[1])
    kube.wait_pod_running(cluster, namespace, "occupant")
    members = [p.metadata.name for p in kube.create_gang(
        cluster, namespace, "train", 2, gpus=GPUS, pool=pool, priority_class=HIGH_NEVER,
        annotations=NVLINK_REQUIRED, scheduling_gates=[ADMISSION_GATE])]
    with running_controller(cluster, config_for(namespace)):
        pods = [kube.wait_pod_running(cluster, namespace, m, timeout=60) for m in members]
    assert sorted(p.spec.node_name for p in pods) == sorted(b)
    assert exists(cluster, namespace, "occupant")
