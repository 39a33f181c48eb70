"""Scenario 7: the same cluster state preempted by kube-scheduler and by ckpt-preempt, side by
side; GPU-hours each loses. Also `explain` on the live cluster before acting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.explain import explain_live
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_KUBE,
    HIGH_NEVER,
    LOW,
    LOWER,
    REPO,
    config_for,
    exists,
    priority_classes,
    running_controller,
)

CLI = "ckpt_preempt.controller.app.cli"
pytestmark = pytest.mark.e2e
HOUR = 3600.0

# name, node index, gpus, priority class, started (h ago), last checkpoint (h ago or None)
WORKLOAD = [
    ("a", 0, 8, LOWER, 6.0, 5.0),     # lowest priority, 5 h of unsaved work
    ("b", 1, 8, LOW, 6.0, 1 / 6),     # checkpointed 10 min ago
    ("c1", 2, 4, LOW, 3.0, 2.0),
    ("c2", 2, 4, LOW, 3.0, 2.0),
    ("d", 3, 8, LOW, 0.5, None),      # young: 30 min of work
]


def _ts(hours_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _make(c, ns, pool, nodes, suffix):
    for name, i, gpus, pc, _, ckpt in WORKLOAD:
        kube.create_pod(c, ns, f"{name}-{suffix}", gpus=gpus, pool=pool, priority_class=pc,
                        node_name=nodes[i], last_checkpoint=_ts(ckpt) if ckpt else None)
    for name, *_ in WORKLOAD:
        kube.wait_pod_running(c, ns, f"{name}-{suffix}")
    # kwok starts them now; the workload has been running for hours (kube-scheduler orders
    # victims by this start time, and the cost model counts from it before a checkpoint)
    for name, _, _, _, started, _ in WORKLOAD:
        c.core.patch_namespaced_pod_status(f"{name}-{suffix}", ns,
                                           {"status": {"startTime": _ts(started)}})


def _lost(gone: list[str]) -> float:
    by = {n: (g, s, k) for n, _, g, _, s, k in WORKLOAD}
    return sum(by[n][0] * (by[n][2] if by[n][2] is not None else by[n][1]) for n in gone)


def test_scenario7_gpu_hours_lost_kube_default_vs_ckpt_preempt(cluster, namespace, pool,
                                                               gpu_nodes):
    priority_classes(cluster)
    ours = gpu_nodes(4)
    kpool = pool + "k"
    theirs = kube.create_gpu_nodes(cluster, 4, prefix=f"{pool}-k", pool=kpool)
    try:
        _make(cluster, namespace, pool, ours, "o")
        _make(cluster, namespace, kpool, theirs, "k")
        gone: dict[str, list[str]] = {"kube-default": [], "ckpt-preempt": []}

        for i in range(2):  # two 8-GPU preemptors, one after the other
            kube.create_pod(cluster, namespace, f"big{i}-k", gpus=8, pool=kpool,
                            priority_class=HIGH_KUBE)
            kube.wait_pod_running(cluster, namespace, f"big{i}-k", timeout=90)
        time.sleep(1)
        gone["kube-default"] = [n for n, *_ in WORKLOAD
                                if not exists(cluster, namespace, f"{n}-k")]

        kube.create_pod(cluster, namespace, "big0-o", gpus=8, pool=pool,
                        priority_class=HIGH_NEVER)
        kube.wait_pod_unschedulable(cluster, namespace, "big0-o")
        shown = explain_live.explain(cluster.api, namespace, "big0-o", Config())
        text = explain_live.render(shown)
        assert "ckpt-preempt: evict 1 pod(s)" in text and "b-o on" in text, text
        assert [v.name for v in shown.kube_default.victims] == ["a-o"], text
        with running_controller(cluster, config_for(namespace)):
            kube.wait_pod_running(cluster, namespace, "big0-o", timeout=90)
            kube.create_pod(cluster, namespace, "big1-o", gpus=8, pool=pool,
                            priority_class=HIGH_NEVER)
            kube.wait_pod_running(cluster, namespace, "big1-o", timeout=90)
        time.sleep(1)
        gone["ckpt-preempt"] = [n for n, *_ in WORKLOAD if not exists(cluster, namespace, f"{n}-o")]
    finally:
        kube.delete_nodes(cluster, theirs)

    lost = {k: round(_lost(v), 2) for k, v in gone.items()}
    report = {"victims": gone, "lost_gpu_hours": lost}
    print("scenario 7:", json.dumps(report))
    if os.environ.get("CKPT_E2E_REPORT_DIR"):
        Path(os.environ["CKPT_E2E_REPORT_DIR"], "scenario7.json").write_text(json.dumps(report))
    assert sorted(gone["kube-default"]) == ["a", "d"]  # lowest priority, then latest start
    assert sorted(gone["ckpt-preempt"]) == ["b", "d"]  # least unsaved work
    assert lost["ckpt-preempt"] < lost["kube-default"]


def test_explain_pod_cli_on_the_live_cluster(cluster, namespace, pool, gpu_nodes):
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    kube.create_pod(cluster, namespace, "low", gpus=8, pool=pool, priority_class=LOW,
                    node_name=node)
    kube.wait_pod_running(cluster, namespace, "low")
    kube.create_pod(cluster, namespace, "big", gpus=8, pool=pool, priority_class=HIGH_NEVER)
    kube.wait_pod_unschedulable(cluster, namespace, "big")
    r = subprocess.run([sys.executable, "-m", CLI, "explain", f"{namespace}/big",
                        "--kubeconfig", str(cluster.kubeconfig)],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert f"{namespace}/low on {node}" in r.stdout and "kube-default:" in r.stdout, r.stdout
    missing = subprocess.run([sys.executable, "-m", CLI, "explain",
                              f"{namespace}/nope", "--kubeconfig", str(cluster.kubeconfig)],
                             capture_output=True, text=True, timeout=60, cwd=REPO)
    assert missing.returncode == 2 and "not found" in missing.stderr
    assert exists(cluster, namespace, "low")  # explain changes nothing
