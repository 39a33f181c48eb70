"""API objects (raw JSON dicts from list/watch) → the compact records the watch cache keeps.

``PodInfo`` / ``NodeInfo`` / ``PdbInfo`` hold only what planning needs (a few hundred bytes
each), never whole API objects, so memory stays bounded; ``pod_info`` / ``node_info`` /
``pdb_info`` build them, and a value that does not parse becomes a safe default here (a pod
with no requests, which ``controller.kube.convert`` reports; a node with nothing allocatable).
They live apart from ``controller.kube.convert`` (records → the policies ``Snapshot``) because the
cache, the cluster model and the extender hold records without converting them. Import them
from here (one import path per name).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from kubernetes.utils import parse_quantity

from ckpt_preempt.controller.core import gpu_resources
from ckpt_preempt.controller.core.config import DEFAULT_SCHEDULER
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model import gpu_use, native_gangs
from ckpt_preempt.policies.model.model import LabelRequirement, Resources
from ckpt_preempt.policies.model.topology import ANNOTATION as TOPOLOGY_ANNOTATION

ADMISSION_GATE = ann.PREFIX + "admission"

MANAGED_BY = ("app.kubernetes.io/managed-by", "ckpt-preempt")  # label on every stored plan


@dataclass(frozen=True, kw_only=True, slots=True)
class PodInfo:
    uid: str
    name: str
    namespace: str
    resource_version: str
    created: float
    labels: Mapping[str, str]
    annotations: Mapping[str, str]  # ours, the gang conventions' and the checkpoint aliases
    deleting: bool
    node: str | None
    phase: str
    priority: int
    priority_class: str
    preemption_policy: str
    owner_uid: str | None  # the controlling owner's uid (ownerReferences, controller: true)
    requests: Resources | None  # None: no container states any request
    gates: tuple[str, ...]
    unschedulable: bool  # PodScheduled=False, reason Unschedulable
    nominated: str | None
    start_time: float | None
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping, ...]
    required_terms: tuple[Mapping, ...]  # required node affinity nodeSelectorTerms (ORed)
    scheduler_name: str = DEFAULT_SCHEDULER  # spec.schedulerName (the API server's default)
    claims: tuple[str, ...] = ()  # its ResourceClaims' names (its namespace), for DRA GPUs
    mig: frozenset[str] = frozenset()  # the MIG resources it requests (gpu_resources)
    # The native group it names (policies.model.native_gangs.group_ref): spec.schedulingGroup or the
    # 1.35 spec.workloadRef; None when it names none.
    pod_group: str | None = None
    # spec.activeDeadlineSeconds: the kubelet ends the pod this long after it started (None:
    # not set, or not a positive number); the planner's expected end (policies.planner.timing)
    active_deadline_seconds: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def done(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    allocatable: Resources
    topology: str | None
    unschedulable: bool
    taints: tuple[Mapping, ...]
    mig: frozenset[str] = frozenset()  # the MIG resources it advertises (gpu_resources)
    gpu_use: str | None = None  # hwprobe's gpu-use annotation (policies.model.gpu_use), raw


@dataclass(frozen=True, kw_only=True, slots=True)
class PdbInfo:
    name: str
    namespace: str
    match_labels: Mapping[str, str]
    match_expressions: tuple[LabelRequirement, ...]
    selector: str  # "null" (covers nothing), "empty" (policy/v1: the whole namespace), "set"
    disruptions_allowed: int


def _time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _qty(value: object) -> float:
    return float(parse_quantity(str(value)))


def pod_requests(spec: Mapping,
                 gpus: gpu_resources.GpuResources = gpu_resources.DEFAULT) -> Resources | None:
    """Effective requests: containers summed, then the max with each init container. GPUs
    are the resources ``gpus`` names (whole GPUs and MIG slices, ``controller.core.gpu_resources``);
    DRA GPUs are added later, from the pod's claims (``controller.kube.resource_claims``)."""
    def one(c: Mapping) -> Resources | None:
        req = (c.get("resources") or {}).get("requests")
        if not req:
            return None
        whole, milli = gpus.count(req)
        return Resources(
            cpu_milli=math.ceil(_qty(req.get("cpu", 0)) * 1000),
            memory_mib=math.ceil(_qty(req.get("memory", 0)) / 2**20),
            gpus=whole, gpu_milli=milli,
        )
    total, seen = Resources(), False
    for c in spec.get("containers") or []:
        r = one(c)
        if r is not None:
            total, seen = total + r, True
    for c in spec.get("initContainers") or []:
        r = one(c)
        if r is not None:
            seen = True
            total = Resources(cpu_milli=max(total.cpu_milli, r.cpu_milli),
                              memory_mib=max(total.memory_mib, r.memory_mib),
                              gpus=max(total.gpus, r.gpus),
                              gpu_milli=max(total.gpu_milli, r.gpu_milli))
    return total if seen else None


def _claim_names(spec: Mapping, status: Mapping) -> tuple[str, ...]:
    """The names of the ResourceClaims a pod uses: ``spec.resourceClaims`` entries naming a
    claim directly, and those from a template, named in ``status.resourceClaimStatuses``
    (k8s.io/api/core/v1 PodResourceClaim / PodResourceClaimStatus)."""
    made = {s.get("name"): s.get("resourceClaimName")
            for s in status.get("resourceClaimStatuses") or () if isinstance(s, Mapping)}
    out = []
    for c in spec.get("resourceClaims") or ():
        if not isinstance(c, Mapping):
            continue
        name = c.get("resourceClaimName") or made.get(c.get("name"))
        if isinstance(name, str) and name:
            out.append(name)
    return tuple(sorted(set(out)))


def _positive_seconds(value: object) -> float | None:
    """A positive finite number of seconds, or None for anything else (absent, a string...)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def pod_info(d: Mapping, gpus: gpu_resources.GpuResources = gpu_resources.DEFAULT) -> PodInfo:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"),
                None)
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    try:
        requests = pod_requests(spec, gpus)
    except (ValueError, ArithmeticError):
        requests = None
    # Trust: an ownerReference's uid is any text the pod's author writes, even another
    # namespace's uid; it only ever names a workload inside the pod's own namespace
    # (policies.model.model.workload_key).
    owner = next((o.get("uid") for o in meta.get("ownerReferences") or []
                  if o.get("controller") is True and o.get("uid")), None)
    return PodInfo(
        uid=meta["uid"], name=meta["name"], namespace=meta["namespace"],
        resource_version=meta.get("resourceVersion", ""),
        created=_time(meta.get("creationTimestamp")) or 0.0,
        labels=dict(meta.get("labels") or {}),
        annotations={k: v for k, v in (meta.get("annotations") or {}).items()
                     if k.startswith(ann.PREFIXES)},
        deleting=meta.get("deletionTimestamp") is not None,
        node=spec.get("nodeName") or None, phase=status.get("phase", ""),
        priority=int(spec.get("priority") or 0),
        priority_class=spec.get("priorityClassName") or "",
        preemption_policy=spec.get("preemptionPolicy") or "PreemptLowerPriority",
        owner_uid=owner,
        requests=requests,
        gates=tuple(g["name"] for g in spec.get("schedulingGates") or []),
        unschedulable=bool(cond and cond.get("status") == "False"
                           and cond.get("reason") == "Unschedulable"),
        nominated=status.get("nominatedNodeName") or None,
        start_time=_time(status.get("startTime")),
        node_selector=dict(spec.get("nodeSelector") or {}),
        tolerations=tuple(spec.get("tolerations") or ()),
        required_terms=tuple((affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
                              or {}).get("nodeSelectorTerms") or ()),
        scheduler_name=spec.get("schedulerName") or DEFAULT_SCHEDULER,
        claims=_claim_names(spec, status) if gpus.dra else (),
        mig=gpu_resources.requested_mig(spec),
        pod_group=native_gangs.group_ref(spec.get("schedulingGroup"), spec.get("workloadRef")),
        active_deadline_seconds=_positive_seconds(spec.get("activeDeadlineSeconds")),
    )


def node_info(d: Mapping, gpus: gpu_resources.GpuResources = gpu_resources.DEFAULT) -> NodeInfo:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    alloc = status.get("allocatable") or {}
    try:
        whole, milli = gpus.count(alloc)
        res = Resources(cpu_milli=math.floor(_qty(alloc.get("cpu", 0)) * 1000),
                        memory_mib=math.floor(_qty(alloc.get("memory", 0)) / 2**20),
                        gpus=whole, gpu_milli=milli)
    except (ValueError, ArithmeticError):
        res = Resources()
    return NodeInfo(
        name=meta["name"], labels=dict(meta.get("labels") or {}), allocatable=res,
        topology=(meta.get("annotations") or {}).get(TOPOLOGY_ANNOTATION),
        unschedulable=bool(spec.get("unschedulable")), taints=tuple(spec.get("taints") or ()),
        mig=gpu_resources.mig_names(alloc),
        gpu_use=(meta.get("annotations") or {}).get(gpu_use.ANNOTATION),
    )


def pdb_info(d: Mapping) -> PdbInfo:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    sel = spec.get("selector")
    labels = dict((sel or {}).get("matchLabels") or {})
    exprs = tuple(
        LabelRequirement(key=e.get("key", ""), operator=e.get("operator", ""),
                         values=tuple(e.get("values") or ()))
        for e in (sel or {}).get("matchExpressions") or ())
    kind = "null" if sel is None else "set" if labels or exprs else "empty"
    return PdbInfo(name=meta["name"], namespace=meta["namespace"], match_labels=labels,
                   match_expressions=exprs, selector=kind,
                   disruptions_allowed=int(status.get("disruptionsAllowed") or 0))
