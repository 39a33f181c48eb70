"""Gang membership from Kubernetes' own gang scheduling: the ``PodGroup`` a pod names.

Kubernetes 1.37 serves ``scheduling.k8s.io/v1beta1`` ``PodGroup`` (GenericWorkload gate); a pod
joins one with ``spec.schedulingGroup.podGroupName`` (k8s.io/api@v0.37.2 core/v1/types.go,
``PodSchedulingGroup``). Kubernetes 1.35 had ``spec.workloadRef{name, podGroup,
podGroupReplicaKey}`` instead, naming a group inside a ``Workload`` (k8s.io/api@v0.35.0
core/v1/types.go, ``WorkloadReference``); 1.36 replaced it (tombstoned in v0.37.2).

This convention is tried before every label convention of ``policies.model.gangs``: a pod in a
native group is that group's gang, whatever labels it also carries.

What the PodGroup says (k8s.io/api@v0.37.2 scheduling/v1beta1/types.go):

- ``spec.schedulingPolicy.gang.minCount``: the fewest members the gang runs with, so a minimum
  (``Pod.gang_minimum``), never an exact size: the pending members of an ``All`` group are
  planned together once that many exist, bound members included, and the bound members above
  it may leave while the rest run on (an elastic shrink, ``policies.planner.shrink``);
- ``spec.disruptionMode``: ``{all: {}}`` means the group is disrupted as a whole, so it is one
  eviction unit, exactly like a labelled gang; ``{single: {}}`` (the default) means its members
  may be disrupted one by one, so a bound member is its own unit (and loses its own work only).
  A pending member of a ``Single`` group is still planned with the group's other pending
  members: the scheduler admits a gang whole.

A group we have not seen (the API is not served, the object is not there yet, or a 1.35
``workloadRef``) is treated as ``All`` with no declared size: evicting it whole never makes a
member cheaper than evicting it alone.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

CONVENTION = "native"
MAX_NAME = 253  # a DNS subdomain, as the API server validates it


class Disruption(enum.Enum):
    ALL = "All"
    SINGLE = "Single"


@dataclass(frozen=True, kw_only=True)
class NativeGroup:
    """A PodGroup reduced to what planning needs."""

    namespace: str
    name: str
    min_count: int | None  # None: no gang policy (basic scheduling)
    disruption: Disruption

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def group_ref(scheduling_group: object, workload_ref: object) -> str | None:
    """The group a pod names, from its spec's ``schedulingGroup`` (1.36+) or ``workloadRef``
    (1.35): the PodGroup name, or ``<workload>/<podGroup>[/<replicaKey>]`` (a PodGroup name
    holds no '/', so the two never collide). None when it names none or the value is malformed
    (the API server validates both, so that is a bug elsewhere, not a gang)."""
    if isinstance(scheduling_group, dict):
        name = scheduling_group.get("podGroupName")
        return name if _name(name) else None
    if isinstance(workload_ref, dict):
        parts = [workload_ref.get("name"), workload_ref.get("podGroup")]
        replica = workload_ref.get("podGroupReplicaKey")
        if replica:
            parts.append(replica)
        return "/".join(parts) if all(_name(p) for p in parts) else None
    return None


def _name(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME and "/" not in value


def gang_key(namespace: str, ref: str) -> str:
    """Unique across conventions, like ``policies.model.gangs.GangMembership.key``. Trust:
    ``namespace`` is the pod's own (a PodGroup reference names a group of the pod's namespace),
    and a reference holds no "/" (``_name``)."""
    return f"{namespace}/{CONVENTION}/{ref}"


def membership(*, namespace: str, ref: str, group: NativeGroup | None,
               bound: bool) -> tuple[str | None, int | None]:
    """(gang key, gang minimum: its ``minCount``) of a pod naming native group ``ref``; ``group``
    is the PodGroup when known. A bound member of a ``Single`` group is no gang member:
    (None, None)."""
    if group is None:
        return gang_key(namespace, ref), None
    if group.disruption is Disruption.SINGLE:
        return (None, None) if bound else (gang_key(namespace, ref), None)
    return gang_key(namespace, ref), group.min_count
