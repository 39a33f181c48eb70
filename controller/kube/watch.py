"""The controller's watch cache: one ``Informer`` (``controller.kube.informer``) per kind it reads.

``ClusterCache`` holds nodes, pods, PDBs and the controller's stored plans, plus native and
other schedulers' PodGroups where served (``controller.kube.podgroups``,
``controller.kube.group_crds``) and,
with DRA on, ResourceClaims and ResourceSlices (``controller.kube.resource_claims``).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass

from kubernetes import client

from ckpt_preempt.controller.core.gpu_resources import DEFAULT as DEFAULT_GPUS
from ckpt_preempt.controller.core.gpu_resources import GpuResources
from ckpt_preempt.controller.kube import records
from ckpt_preempt.controller.kube import resource_claims as rc
from ckpt_preempt.controller.kube.group_crds import GroupObjects
from ckpt_preempt.controller.kube.informer import Informer
from ckpt_preempt.controller.kube.podgroups import PodGroupInformer
from ckpt_preempt.controller.kube.records import MANAGED_BY
from ckpt_preempt.policies.lifecycle import plan_record


def _ns_key(d: dict) -> str:
    m = d["metadata"]
    return f"{m.get('namespace', '')}/{m['name']}"


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredPlan:
    """A plan ConfigMap as the cache keeps it: its name, resourceVersion and raw plan text."""

    name: str
    resource_version: str
    raw: str | None  # None: the ConfigMap has no plan data (never acted on)


def stored_plan(d: dict) -> StoredPlan:

    meta = d["metadata"]
    return StoredPlan(name=meta["name"], resource_version=meta.get("resourceVersion", ""),
                      raw=(d.get("data") or {}).get(plan_record.PLAN_DATA_KEY))


class ClusterCache:
    """Nodes, Pods, PDBs, our stored plans (ConfigMaps in the controller's namespace with our
    managed-by label) and native PodGroups where served (``controller.kube.podgroups``), each
    watched by its own Informer; other schedulers' PodGroups where served (``groups``,
    ``controller.kube.group_crds``). ``changed`` wakes the loop. With DRA on (``gpus.dra``),
    ResourceClaims and ResourceSlices too, whose GPUs ``pods`` and ``nodes`` add as they
    are read (``controller.kube.resource_claims``)."""

    def __init__(self, api: client.ApiClient, *, plan_namespace: str,
                 gpus: GpuResources = DEFAULT_GPUS) -> None:
        core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
        self.changed = threading.Event()
        self.nodes = Informer("nodes", core.list_node,
                              functools.partial(records.node_info, gpus=gpus),
                              lambda d: d["metadata"]["name"], self.changed)
        self.pods = Informer("pods", core.list_pod_for_all_namespaces,
                             functools.partial(records.pod_info, gpus=gpus), _ns_key, self.changed)
        self.pdbs = Informer("pdbs", policy.list_pod_disruption_budget_for_all_namespaces,
                             records.pdb_info, _ns_key, self.changed)
        self.plans = Informer("plans", functools.partial(
            core.list_namespaced_config_map, plan_namespace,
            label_selector=f"{MANAGED_BY[0]}={MANAGED_BY[1]}"), stored_plan,
            lambda d: d["metadata"]["name"], self.changed)
        self.podgroups = PodGroupInformer(api, self.changed)  # empty where not served
        self.informers = (self.nodes, self.pods, self.pdbs, self.plans, self.podgroups)
        # Volcano and coscheduling PodGroups where their CRDs are served (gang minimums)
        self.groups = GroupObjects(api, self.changed)
        self._stopping = threading.Event()
        if gpus.dra:  # DRA GPUs: added to pods' requests and nodes' allocatable as read
            self.informers += self._watch_dra(api, gpus)

    def _watch_dra(self, api: client.ApiClient, gpus: GpuResources) -> tuple[Informer, ...]:
        dra = client.ResourceV1Api(api)
        claims = Informer("resourceclaims", rc.tolerant(
            dra.list_resource_claim_for_all_namespaces, self._stopping),
            functools.partial(rc.claim_info, gpus=gpus), _ns_key, self.changed)
        slices = Informer("resourceslices", rc.tolerant(dra.list_resource_slice, self._stopping),
                          functools.partial(rc.slice_info, gpus=gpus),
                          lambda d: d["metadata"]["name"], self.changed)
        self.pods, self.nodes = rc.PodsWithClaims(self.pods, claims), rc.NodesWithSlices(
            self.nodes, slices)
        return claims, slices

    def start(self) -> None:
        for i in self.informers:
            i.start()
        self.groups.start()

    def stop(self) -> None:
        self._stopping.set()
        for i in self.informers:
            i.stop()
        self.groups.stop()

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers) and self.groups.synced()

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(i.synced.wait(max(0.0, deadline - time.monotonic()))
                   for i in self.informers) and self.groups.wait_synced(
            max(0.0, deadline - time.monotonic()))
