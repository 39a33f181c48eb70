"""GPUs from Dynamic Resource Allocation: ResourceClaims, ResourceSlices (``resource.k8s.io/v1``).

A pod asks for DRA devices through ``spec.resourceClaims``; its claims' names are in
``PodInfo.claims`` (``records.pod_info``). The cache keeps each claim as a ``ClaimInfo``
(how many GPUs it holds or asks for) and each ResourceSlice as a ``SliceInfo`` (how many GPUs
it publishes for one node), and ``PodsWithClaims`` / ``NodesWithSlices`` add those to the
pods' requests and the nodes' allocatable GPUs, so everything downstream counts DRA GPUs
like ``nvidia.com/gpu`` ones. API fields: k8s.io/api/resource/v1 (kubernetes v1.37.2,
staging/src/k8s.io/api/resource/v1/types.go).

- **Allocated claim** (``status.allocation.devices.results``): each result whose ``driver``
  is in ``gpuDraDrivers`` is one GPU.
- **Pending claim** (no allocation yet, e.g. a pending preemptor's): each request of a
  DeviceClass in ``gpuDeviceClasses`` with ``allocationMode: ExactCount`` asks for ``count``
  GPUs (default 1). ``allocationMode: All`` asks for every matching device of the node it lands
  on, which depends on the node: counted as 1. A ``firstAvailable`` request counts its
  smallest alternative (an alternative of another class counts 0). Selectors (CEL) are not
  evaluated: a class's devices are all taken as GPUs.
- **Node capacity**: the devices of a node-local slice (``spec.nodeName``) of a GPU driver,
  of the newest generation of its pool. Slices for many nodes (``nodeSelector``,
  ``allNodes``) are not counted. Devices are whole GPUs; a DRA driver's MIG partitions count as
  whole devices.
- A claim several pods share counts for each of them (a victim never looks cheaper).

When ``resource.k8s.io/v1`` is not served (an older cluster), the lists answer 404: the cache
treats that as no claims and no slices, and looks again at every watch timeout.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core.gpu_resources import GpuResources
from ckpt_preempt.controller.kube.informer import Changes
from ckpt_preempt.policies.model.model import Resources

ABSENT_RETRY_SECONDS = 240  # while the API is not served, look again this often


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimInfo:
    namespace: str
    name: str
    gpus: int  # allocated GPU devices, or those asked for while unallocated
    allocated: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class SliceInfo:
    name: str
    node: str | None  # None: not node-local
    pool: str  # driver/pool
    generation: int
    gpus: int


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _asked(req: Mapping, classes: frozenset[str]) -> int:
    """GPUs one request of a pending claim asks for (see the module docstring)."""
    exact = req.get("exactly")
    if isinstance(exact, Mapping):
        if exact.get("deviceClassName") not in classes:
            return 0
        return 1 if exact.get("allocationMode") == "All" else _count(exact.get("count"))
    alternatives = [a for a in req.get("firstAvailable") or () if isinstance(a, Mapping)]
    if not alternatives:
        return 0
    return min(0 if a.get("deviceClassName") not in classes
               else 1 if a.get("allocationMode") == "All" else _count(a.get("count"))
               for a in alternatives)


def claim_info(d: Mapping, gpus: GpuResources) -> ClaimInfo:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    allocation = status.get("allocation")
    if isinstance(allocation, Mapping):
        results = (allocation.get("devices") or {}).get("results") or ()
        n = sum(1 for r in results
                if isinstance(r, Mapping) and r.get("driver") in gpus.dra_drivers)
        return ClaimInfo(namespace=meta.get("namespace", ""), name=meta["name"], gpus=n,
                         allocated=True)
    requests = (spec.get("devices") or {}).get("requests") or ()
    n = sum(_asked(r, gpus.device_classes) for r in requests if isinstance(r, Mapping))
    return ClaimInfo(namespace=meta.get("namespace", ""), name=meta["name"], gpus=n,
                     allocated=False)


def slice_info(d: Mapping, gpus: GpuResources) -> SliceInfo:
    meta, spec = d["metadata"], d.get("spec") or {}
    driver = spec.get("driver", "")
    pool = spec.get("pool") or {}
    devices = spec.get("devices") or ()
    generation = pool.get("generation")
    return SliceInfo(
        name=meta["name"], node=spec.get("nodeName") or None,
        pool=f"{driver}/{pool.get('name', '')}",
        generation=generation if isinstance(generation, int) else 0,
        gpus=len(devices) if driver in gpus.dra_drivers else 0)


def node_gpus(slices: list[SliceInfo]) -> dict[str, int]:
    """GPU devices per node, from the newest generation of each pool's node-local slices."""
    newest: dict[str, int] = {}
    for s in slices:
        newest[s.pool] = max(newest.get(s.pool, s.generation), s.generation)
    out: dict[str, int] = {}
    for s in slices:
        if s.node is not None and s.gpus and s.generation == newest[s.pool]:
            out[s.node] = out.get(s.node, 0) + s.gpus
    return out


def pod_gpus(p: Any, claims: Callable[[str], ClaimInfo | None]) -> int:
    """GPUs the claims of pod ``p`` (a ``PodInfo``) hold or ask for."""
    total = 0
    for name in p.claims:
        c = claims(f"{p.namespace}/{name}")
        if c is not None:
            total += c.gpus
    return total


def with_dra(pods: list[Any], nodes: list[Any], claims: list[ClaimInfo],
             slices: list[SliceInfo]) -> tuple[list[Any], list[Any]]:
    """``pods`` and ``nodes`` (``PodInfo``, ``NodeInfo``) with their DRA GPUs added, from lists
    read once (``controller.explain.explain_live``; the controller reads them through its cache)."""
    by_key = {f"{c.namespace}/{c.name}": c for c in claims}
    extra = node_gpus(slices)
    return ([_pod_with(p, by_key.get) for p in pods], [_node_with(n, extra) for n in nodes])


def _pod_with(p: Any, claims: Callable[[str], ClaimInfo | None]) -> Any:
    if p is None or not p.claims:
        return p
    n = pod_gpus(p, claims)
    if not n:
        return p
    return dataclasses.replace(p, requests=(p.requests or Resources()) + Resources(gpus=n))


def _node_with(n: Any, extra: Mapping[str, int]) -> Any:
    if n is None or not extra.get(n.name):
        return n
    return dataclasses.replace(n, allocatable=n.allocatable + Resources(gpus=extra[n.name]))


class PodsWithClaims:
    """The pods informer as the rest of the controller reads it (``items``, ``get``), with
    each pod's DRA GPUs added to its requests. Everything else is the informer's."""

    def __init__(self, pods: Any, claims: Any) -> None:
        self._pods, self._claims = pods, claims
        self._by_claim: dict[str, set[str]] = {}  # <namespace>/<claim> -> pod keys naming it
        self._claims_of: dict[str, tuple[str, ...]] = {}  # pod key -> the claims it names

    def items(self) -> list[Any]:
        return [_pod_with(p, self._claims.get) for p in self._pods.items()]

    def drain(self) -> Any:
        """The pods' changes (``informer.Changes``) with their DRA GPUs, plus every pod whose
        claims changed since the last drain (``controller.kube.cluster_model`` reads this)."""
        pods, claims = self._pods.drain(), self._claims.drain()
        if pods.relist is not None:
            self._by_claim, self._claims_of = {}, {}
            for key, p in pods.relist:
                self._note(key, p)
            return Changes(relist=tuple((k, _pod_with(p, self._claims.get))
                                        for k, p in pods.relist))
        out: dict[str, tuple[Any, bool]] = {}
        for key, p, moved in pods.changed:
            self._note(key, p)
            out[key] = (p, moved)
        touched = (claims.relist if claims.relist is not None else claims.changed)
        for claim_key in {t[0] for t in touched}:
            for key in self._by_claim.get(claim_key, ()):
                if key not in out:
                    out[key] = (self._pods.get(key), False)
        return Changes(changed=tuple((k, _pod_with(p, self._claims.get), moved)
                                     for k, (p, moved) in out.items()))

    def _note(self, key: str, p: Any) -> None:
        """Index pod ``key`` by the claims it names (``<namespace>/<claim>``)."""
        for claim_key in self._claims_of.pop(key, ()):
            named = self._by_claim.get(claim_key)
            if named is not None:
                named.discard(key)
                if not named:
                    del self._by_claim[claim_key]
        if p is not None and p.claims:
            self._claims_of[key] = tuple(f"{p.namespace}/{c}" for c in p.claims)
            for claim_key in self._claims_of[key]:
                self._by_claim.setdefault(claim_key, set()).add(key)

    def get(self, key: str) -> Any:
        return _pod_with(self._pods.get(key), self._claims.get)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pods, name)


class NodesWithSlices:
    """The nodes informer with each node's DRA GPUs (``node_gpus``) added to its allocatable."""

    def __init__(self, nodes: Any, slices: Any) -> None:
        self._nodes, self._slices = nodes, slices
        self._extra: dict[str, int] = {}  # node -> DRA GPUs, as of the last drain

    def items(self) -> list[Any]:
        extra = node_gpus(self._slices.items())
        return [_node_with(n, extra) for n in self._nodes.items()]

    def drain(self) -> Any:
        """The nodes' changes with their DRA GPUs, plus every node whose DRA GPUs changed
        since the last drain."""
        nodes, slices = self._nodes.drain(), self._slices.drain()
        extra = node_gpus(self._slices.items()) if slices.relist is not None or \
            slices.changed else self._extra
        before, self._extra = self._extra, extra
        if nodes.relist is not None:
            return Changes(relist=tuple((k, _node_with(n, extra)) for k, n in nodes.relist))
        out = {k: (n, moved) for k, n, moved in nodes.changed}
        for name in set(before) | set(extra):
            if before.get(name) != extra.get(name) and name not in out:
                out[name] = (self._nodes.get(name), False)
        return Changes(changed=tuple((k, _node_with(n, extra), moved)
                                     for k, (n, moved) in out.items()))

    def get(self, key: str) -> Any:
        return _node_with(self._nodes.get(key), node_gpus(self._slices.items()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._nodes, name)


class _Absent:
    """What a list or watch of an API the server does not serve reads as: nothing; a watch
    waits ``ABSENT_RETRY_SECONDS`` (or until ``stop``) before the informer asks again."""

    data = json.dumps({"items": [], "metadata": {"resourceVersion": ""}}).encode()

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop

    def stream(self, *_a: Any, **_kw: Any):
        self._stop.wait(ABSENT_RETRY_SECONDS)
        return iter(())

    def release_conn(self) -> None:
        pass


def tolerant(list_fn: Callable[..., Any], stop: threading.Event) -> Callable[..., Any]:
    """``list_fn``, answering an empty list when the API is not served (404)."""
    def call(*args: Any, **kw: Any) -> Any:
        try:
            return list_fn(*args, **kw)
        except ApiException as e:
            if e.status != 404:
                raise
            return _Absent(stop)
    return call
