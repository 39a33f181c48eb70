"""The Kubernetes edge: write the topology annotation and labels onto a Node.

One operation, safe to repeat: a strategic-merge patch of the Node's metadata that sets
``hwprobe.ckpt-preempt.io/topology`` and the ``hwprobe.ckpt-preempt.io/*`` labels, and sets
``hwprobe.ckpt-preempt.io/gpu-use`` (the GPUs in use, ``gpu_use``) or removes it when there is
no report. Labels hwprobe set earlier but no longer produces (e.g. ``clique``) are removed.
"""

from __future__ import annotations

from typing import Any

from ckpt_preempt.hwprobe.errors import PublishError
from ckpt_preempt.hwprobe.model import Topology
from ckpt_preempt.hwprobe.report import LABEL_PREFIX, annotation, labels
from ckpt_preempt.policies.model.gpu_use import ANNOTATION as GPU_USE_ANNOTATION
from ckpt_preempt.policies.model.topology import ANNOTATION


def api_client(kubeconfig: str | None = None) -> Any:
    """A CoreV1Api from a kubeconfig, the in-cluster service account, or ~/.kube/config."""
    from kubernetes import client, config

    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
    except (config.ConfigException, OSError) as err:
        raise PublishError(f"no Kubernetes configuration: {err}") from err
    return client.CoreV1Api()


def node_patch(topo: Topology, *, verified: bool | None, spec: str | None,
               current_labels: dict[str, str] | None = None, gpu_use: str | None = None) -> dict:
    """``gpu_use``: the gpu-use annotation's value; None removes it."""
    new = labels(topo, verified=verified)
    stale = {k: None for k in (current_labels or {}) if k.startswith(LABEL_PREFIX) and k not in new}
    return {"metadata": {
        "annotations": {ANNOTATION: annotation(topo, verified=verified, spec=spec),
                        GPU_USE_ANNOTATION: gpu_use},
        "labels": {**stale, **new},
    }}


def publish(api: Any, node: str, topo: Topology, *, verified: bool | None = None,
            spec: str | None = None, gpu_use: str | None = None) -> dict:
    """Patch the Node; returns the patch applied. Raises PublishError."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        current = api.read_node(node).metadata.labels or {}
        patch = node_patch(topo, verified=verified, spec=spec, current_labels=current,
                           gpu_use=gpu_use)
        api.patch_node(node, patch)
    except ApiException as err:
        raise PublishError(f"node {node}: API answered {err.status} {err.reason}") from err
    except HTTPError as err:
        raise PublishError(f"node {node}: API unreachable: {err}") from err
    return patch
