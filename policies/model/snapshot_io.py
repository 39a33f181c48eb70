"""Snapshots and plans as plain data (JSON/YAML documents), parsed strictly.

Document shape (times are RFC 3339 strings or Unix seconds; resources in millicores, MiB and
whole GPUs; optional ``gpu_milli`` on nodes and pods: MIG slices in thousandths of a GPU)::

    now: 2026-12-02T10:00:00Z
    nodes:
      - {name: n1, gpus: 8, cpu_milli: 96000, memory_mib: 1048576,
         annotations: {hwprobe.ckpt-preempt.io/topology: '{...}'}, unschedulable: false,
         health: healthy}   # optional: healthy | degraded | failing | unknown (the default)
    pods:
      - {name: a, namespace: ml, priority: 0, gpus: 4, node: n1, start_time: ...,
         labels: {...}, annotations: {ckpt-preempt.io/last-checkpoint: ...},
         priority_class: batch, owner_uid: job-uid}     # the last two are optional
    pdbs:
      - {name: b, namespace: ml, match_labels: {app: x}, disruptions_allowed: 0,
         match_expressions: [{key: tier, operator: In, values: [a]}]}   # optional
    recent_preemptions: {ml/owner/job-uid: 2}   # optional: workload -> preemptions in the
                                                # window
    preemption_history: {ml/owner/job-uid: 4}   # optional: the same within the starvation
                                                # bound's window (the penalty doubles with each;
                                                # at the bound the workload is no victim:
                                                # explain applies it)
    preemptor: ml/big      # or a list of pod names: the members of a pending gang

Workload keys are ``Pod.workload``: a gang's ``<namespace>/<convention>/<name>``, else
``<namespace>/owner/<owner uid>``, else ``<namespace>/pod/<pod uid>``; ``explain -o json`` shows
each victim's.

Pods are built by ``policies.model.annotations.build_pod`` exactly as the controller builds them,
with the given ``Limits`` (who may opt out, caps, the unknown-checkpoint policy), so a snapshot
explains what the live controller would decide.
"""

from __future__ import annotations

import enum
from dataclasses import asdict
from typing import Any

from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.health import Health
from ckpt_preempt.policies.model.model import (
    LabelRequirement,
    Node,
    Plan,
    Pod,
    PodDisruptionBudget,
    Resources,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.model.times import parse_rfc3339
from ckpt_preempt.policies.model.topology import ANNOTATION as TOPOLOGY_ANNOTATION
from ckpt_preempt.policies.model.topology import TopologyError, parse_node_topology


class SnapshotError(ValueError):
    """The document is not a valid snapshot; the message names the field."""


_EARLIEST_TIME = -62135596800  # 0001-01-01T00:00:00Z in Unix seconds
_LATEST_TIME = 253402300799  # 9999-12-31T23:59:59Z


def _time(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise SnapshotError(f"{where}: expected a time, got {value!r}")
    if isinstance(value, int | float):
        # A time datetime can print (years 1-9999); anything else, NaN included, is not a time.
        if not _EARLIEST_TIME <= value <= _LATEST_TIME:
            raise SnapshotError(f"{where}: time {value!r} is out of range")
        return float(value)
    if isinstance(value, str):
        try:
            return parse_rfc3339(value)
        except ValueError as e:
            raise SnapshotError(f"{where}: {e}") from None
    if hasattr(value, "timestamp"):  # YAML parses unquoted timestamps into datetimes
        if getattr(value, "tzinfo", None) is None:
            raise SnapshotError(f"{where}: time needs a zone offset")
        return value.timestamp()
    raise SnapshotError(f"{where}: expected a time, got {value!r}")


def _int(d: dict, key: str, where: str, default: int | None = None) -> int:
    v = d.get(key, default)
    if v is None:
        raise SnapshotError(f"{where}: missing {key}")
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise SnapshotError(f"{where}: {key} must be a non-negative integer, got {v!r}")
    return v


def _strmap(d: dict, key: str, where: str) -> dict[str, str]:
    v = d.get(key) or {}
    if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
        raise SnapshotError(f"{where}: {key} must be a mapping of strings")
    return {k: str(x) for k, x in v.items()}


def _list(doc: dict, key: str) -> list:
    v = doc.get(key) or []
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise SnapshotError(f"{key} must be a list of mappings")
    return v


def _node(d: dict, i: int, problems: list[str]) -> Node:
    where = f"nodes[{i}]"
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise SnapshotError(f"{where}: missing name")
    topo = None
    raw = _strmap(d, "annotations", where).get(TOPOLOGY_ANNOTATION)
    if raw is not None:
        try:
            topo = parse_node_topology(raw)
        except TopologyError as e:
            problems.append(f"node {name}: {TOPOLOGY_ANNOTATION}: {e}; topology unknown")
    return Node(
        name=name,
        allocatable=Resources(
            cpu_milli=_int(d, "cpu_milli", where, 1_000_000),
            memory_mib=_int(d, "memory_mib", where, 1 << 30),
            gpus=_int(d, "gpus", where, 0),
            gpu_milli=_int(d, "gpu_milli", where, 0),
        ),
        topology=topo,
        unschedulable=bool(d.get("unschedulable", False)),
        health=_health(d.get("health", Health.UNKNOWN.value), where),
        clique=topo.clique if topo is not None else None,  # as controller.kube.convert reads it
    )


def _health(value: Any, where: str) -> Health:
    try:
        return Health(value)
    except ValueError:
        raise SnapshotError(f"{where}: health must be one of "
                            f"{', '.join(h.value for h in Health)}, not {value!r}") from None


def node_to_dict(node: Node) -> dict:
    """A node as a snapshot document's entry (``_node`` reads it back to an equal Node; the
    topology travels as its annotation, which this does not write)."""
    return {"name": node.name, "gpus": node.allocatable.gpus,
            **({"gpu_milli": node.allocatable.gpu_milli} if node.allocatable.gpu_milli else {}),
            "cpu_milli": node.allocatable.cpu_milli, "memory_mib": node.allocatable.memory_mib,
            "unschedulable": node.unschedulable, "health": node.health.value}


def _pod(d: dict, i: int, now: float, limits: ann.Limits, problems: list[str]) -> Pod:
    where = f"pods[{i}]"
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise SnapshotError(f"{where}: missing name")
    ns = str(d.get("namespace", "default"))
    node = d.get("node")
    start = d.get("start_time")
    priority = d.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise SnapshotError(f"{where}: priority must be an integer, got {priority!r}")
    owner = d.get("owner_uid")
    pod, found = ann.build_pod(
        uid=str(d.get("uid", f"{ns}/{name}")), name=name, namespace=ns,
        labels=_strmap(d, "labels", where), annotations=_strmap(d, "annotations", where),
        now=now, limits=limits, priority=priority,
        priority_class=str(d.get("priority_class") or ""),
        requests=Resources(
            cpu_milli=_int(d, "cpu_milli", where, 0),
            memory_mib=_int(d, "memory_mib", where, 0),
            gpus=_int(d, "gpus", where, 0),
            gpu_milli=_int(d, "gpu_milli", where, 0),
        ),
        node=str(node) if node else None,
        start_time=None if start is None else _time(start, f"{where}.start_time"),
        owner_uid=str(owner) if owner else None,
    )
    problems.extend(f"pod {ns}/{name}: {p}" for p in found)
    return pod


def _pdb(d: dict, i: int) -> PodDisruptionBudget:
    where = f"pdbs[{i}]"
    exprs = d.get("match_expressions") or []
    if not isinstance(exprs, list) or not all(isinstance(e, dict) for e in exprs):
        raise SnapshotError(f"{where}: match_expressions must be a list of mappings")
    reqs = []
    for e in exprs:
        values = e.get("values") or []
        if e.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist") or not isinstance(
                values, list):
            raise SnapshotError(f"{where}: bad match expression {e!r}")
        reqs.append(LabelRequirement(key=str(e.get("key", "")), operator=e["operator"],
                                     values=tuple(str(v) for v in values)))
    return PodDisruptionBudget(
        name=str(d.get("name")), namespace=str(d.get("namespace", "default")),
        match_labels=_strmap(d, "match_labels", where),
        disruptions_allowed=_int(d, "disruptions_allowed", where),
        match_expressions=tuple(reqs),
    )


def _counts(doc: dict, key: str) -> dict[str, int]:
    v = doc.get(key) or {}
    if not isinstance(v, dict) or not all(
            isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool) and n >= 0
            for k, n in v.items()):
        raise SnapshotError(f"{key} must map workload keys to counts")
    return dict(v)


def from_dict(doc: Any, limits: ann.Limits = ann.Limits()) -> tuple[Snapshot, list[Pod], list[str]]:
    """(snapshot, preemptor pods, warnings); SnapshotError when the document is unusable."""
    if not isinstance(doc, dict):
        raise SnapshotError("a snapshot must be a mapping with now, nodes and pods")
    problems: list[str] = []
    now = _time(doc.get("now"), "now")
    nodes = [_node(d, i, problems) for i, d in enumerate(_list(doc, "nodes"))]
    pods = [_pod(d, i, now, limits, problems) for i, d in enumerate(_list(doc, "pods"))]
    pdbs = [_pdb(d, i) for i, d in enumerate(_list(doc, "pdbs"))]
    names = {n.name for n in nodes}
    for p in pods:
        if p.node is not None and p.node not in names:
            raise SnapshotError(f"pod {p.key} is bound to unknown node {p.node}")
    wanted = doc.get("preemptor")
    wanted = [wanted] if isinstance(wanted, str) else wanted
    if not wanted or not isinstance(wanted, list):
        raise SnapshotError("preemptor must name a pending pod or a list of them")
    by_name = {p.key: p for p in pods} | {p.name: p for p in pods if p.namespace == "default"}
    preemptor = []
    for w in wanted:
        pod = by_name.get(str(w))
        if pod is None:
            raise SnapshotError(f"preemptor {w!r} is not among the pods")
        if pod.node is not None:
            raise SnapshotError(f"preemptor {w!r} is already bound to {pod.node}")
        preemptor.append(pod)
    snap = Snapshot(now=now, nodes=tuple(nodes), pods=tuple(pods), pdbs=tuple(pdbs),
                    recent_preemptions=_counts(doc, "recent_preemptions"),
                    preemption_history=_counts(doc, "preemption_history"),
                    unknown_checkpoint=limits.unknown_checkpoint)
    return snap, preemptor, problems


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def plan_to_dict(plan: Plan) -> dict:
    out = _plain(asdict(plan))
    out["lost_gpu_seconds"] = plan.lost_gpu_seconds
    out["lost_gpu_hours"] = round(plan.lost_gpu_seconds / 3600, 4)
    return out
