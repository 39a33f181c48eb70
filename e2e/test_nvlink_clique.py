"""An ``nvlink: required`` gang on rack-scale NVLink (GB200/GB300 NVL72 fabric cliques)
lands inside one clique: through the extender's filter (against the real kube-scheduler) and
through the controller's gated gang admission (the planner).

The kwok nodes carry the topology annotation hwprobe publishes (built by hwprobe's own
``report.annotation`` from a 4-GPU compute tray whose GPUs are all attached to one fabric
clique), so the extender reads the clique exactly as it would from a real rack.
"""

from __future__ import annotations

import pytest

from ckpt_preempt.controller.kube.records import ADMISSION_GATE, TOPOLOGY_ANNOTATION
from ckpt_preempt.hwprobe import report
from ckpt_preempt.hwprobe.model import Fabric, Gpu, Pair, PcieLevel, Topology
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    config_for,
    exists,
    priority_classes,
    running_controller,
)
from e2e.harness.extender_run import running_extender
from e2e.harness.extender_run import scheduler_config as extender_config

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
    """Racks A (one tray), B (two) and C (three), and a tray in no clique; a gang of two
    four-GPU members. The first member must go to B: A cannot hold the gang, and B holds it
    more tightly than C. A CPU filler on every tray outside B makes those the placement
    scorer's choice (it packs, and its weight outweighs default scoring), so without the rule
    the first member would land outside B, and the second would not join the first."""
    racks = {}
    for rack, clique_id, trays in (("a", 1, 1), ("b", 2, 2), ("c", 3, 3), ("x", None, 1)):
        racks[rack] = gpu_nodes(trays, prefix=f"{pool}-{rack}", gpus=GPUS,
                                annotations=tray_annotation(clique_id))
    others = [n for rack in ("a", "c", "x") for n in racks[rack]]
    for i, tray in enumerate(others):
        kube.create_pod(cluster, namespace, f"cpu-filler-{i}", cpu="40", pool=pool,
                        node_name=tray)
    for i in range(len(others)):
        kube.wait_pod_running(cluster, namespace, f"cpu-filler-{i}")
    with running_extender(cluster, tmp_path) as (_, url):
        scheduler_config(extender_config(url))
        kube.create_pod(cluster, namespace, "train-0", gpus=GPUS, pool=pool, gang="train",
                        gang_total=2, annotations=NVLINK_REQUIRED)
        first = kube.wait_pod_running(cluster, namespace, "train-0").spec.node_name
        assert first in racks["b"], first
        (partner,) = [n for n in racks["b"] if n != first]
        kube.create_pod(cluster, namespace, "train-1", gpus=GPUS, pool=pool, gang="train",
                        gang_total=2, annotations=NVLINK_REQUIRED)
        assert kube.wait_pod_running(cluster, namespace, "train-1").spec.node_name == partner
        # a third member has no room left in that clique: it waits, saying why
        kube.create_pod(cluster, namespace, "train-2", gpus=GPUS, pool=pool, gang="train",
                        gang_total=3, annotations=NVLINK_REQUIRED)
        pod = kube.wait_pod_unschedulable(cluster, namespace, "train-2")
        message = kube.condition(pod, "PodScheduled").message
        assert "nvlink-gang-in-another-clique" in message, message
        # a new gang of four finds no clique that can hold it (C has three trays)
        kube.create_pod(cluster, namespace, "big-0", gpus=GPUS, pool=pool, gang="big",
                        gang_total=4, annotations=NVLINK_REQUIRED)
        pod = kube.wait_pod_unschedulable(cluster, namespace, "big-0")
        message = kube.condition(pod, "PodScheduled").message
        assert "nvlink-required-gang-but-no-clique-fits" in message, message


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
