"""`hwprobe publish` against a real API server: the Node annotation and labels it writes.

NVML is NVIDIA-shaped but mocked (the testbin's libnvidia-ml.so.1 with hwprobe's profiles);
the Kubernetes side is real: the `cluster` fixture's API server, a kwok node, and the CLI run
as a subprocess with the cluster's kubeconfig, exactly as the DaemonSet would run it.
"""

from __future__ import annotations

import json

import pytest

from e2e.harness import kube

pytestmark = [pytest.mark.e2e, pytest.mark.mocknvml]

ANNOTATION = "hwprobe.ckpt-preempt.io/topology"
LABEL = "hwprobe.ckpt-preempt.io/"


def publish(cluster, nvml, node, profile, *args, faults=None):
    done = nvml.run(profile, "publish", "--node", node, "--kubeconfig", str(cluster.kubeconfig),
                    *args, faults=faults)
    assert done.returncode == 0, done.stderr
    return done


def published(cluster, node):
    meta = cluster.core.read_node(node).metadata
    labels = {k.removeprefix(LABEL): v for k, v in (meta.labels or {}).items()
              if k.startswith(LABEL)}
    return json.loads(meta.annotations[ANNOTATION]), labels


def test_publish_verified_hgx_h100(cluster, gpu_nodes, nvml):
    (node,) = gpu_nodes(1)
    done = publish(cluster, nvml, node, "h100", "--expect", "hgx-h100-8")
    assert f"on node {node} (verified=true)" in done.stdout
    value, labels = published(cluster, node)
    assert value["schema"] == "hwprobe/v1"
    assert value["gpu_count"] == 8
    assert value["nvlink_domains"] == [list(range(8))]
    assert value["verified"] is True and value["spec"] == "hgx-h100-8"
    assert labels == {"gpu-count": "8", "nvlink-domain-size": "8", "nvlink-domains": "1",
                      "nvswitch": "true", "verified": "true"}
    # kwok's own annotation and the pool label survive the patch
    meta = cluster.core.read_node(node).metadata
    assert meta.annotations[kube.KWOK_ANNOTATION] == "fake"
    assert kube.POOL_LABEL in meta.labels


def test_republish_tracks_faults_and_machine_changes(cluster, gpu_nodes, nvml):
    (node,) = gpu_nodes(1)
    publish(cluster, nvml, node, "gb200", "--expect", "gb200-tray")
    value, labels = published(cluster, node)
    assert labels["clique"] == "6a3f1c2e-9d4b-4e21-8a77-1b2c3d4e5f60.4"
    assert value["clique"] == labels["clique"]

    publish(cluster, nvml, node, "gb200", "--expect", "gb200-tray",
            faults={"fabric": [{"gpu": 2, "state": 2, "status": 0}]})
    value, labels = published(cluster, node)
    assert value["verified"] is False and labels["verified"] == "false"
    assert "clique" not in labels  # GPU2 left the clique: the stale label is removed

    publish(cluster, nvml, node, "l40s")
    value, labels = published(cluster, node)
    assert value["verified"] is None and labels["verified"] == "unknown"
    assert value["nvlink_domains"] == [[i] for i in range(8)]
    assert labels["nvlink-domain-size"] == "1" and labels["nvswitch"] == "false"


def test_publish_to_a_missing_node_is_one_line_exit_2(cluster, nvml):
    done = nvml.run("h100", "publish", "--node", "no-such-node-hwprobe", "--kubeconfig",
                    str(cluster.kubeconfig))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    # (urllib3 may warn first: the test cluster's kubeconfig skips TLS verification)
    last = done.stderr.strip().splitlines()[-1]
    assert last == "hwprobe: node no-such-node-hwprobe: API answered 404 Not Found"


def test_planner_reads_the_published_value(cluster, gpu_nodes, nvml):
    from ckpt_preempt.policies.model import topology
    (node,) = gpu_nodes(1)
    publish(cluster, nvml, node, "h100-nvl", "--expect", "h100-nvl")
    raw = cluster.core.read_node(node).metadata.annotations[ANNOTATION]
    parsed = topology.parse_node_topology(raw)
    assert parsed.gpu_count == 4
    assert sorted(map(sorted, parsed.domains)) == [[0, 1], [2, 3]]
    assert parsed.verified is True
