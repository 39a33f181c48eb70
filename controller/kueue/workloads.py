"""Kueue's Workloads and the priority classes in use: discovery, trim, informers.

Kueue v0.17 serves ``workloads.kueue.x-k8s.io`` at ``v1beta2`` (storage) and ``v1beta1``
(``config/components/crd/bases/kueue.x-k8s.io_workloads.yaml``); ``WorkloadInformer`` asks
discovery for either, in its own thread, as ``controller.kube.podgroups`` does for native
PodGroups: when neither is served, or listing them is forbidden, it logs one line, reports
synced with nothing in it (no Workload, so no write), and looks again every
``DISCOVER_SECONDS``. WorkloadPriorityClasses are looked for the same way; PriorityClasses
(``scheduling.k8s.io/v1``) are always served.

A Workload is trimmed at once to a ``WorkloadInfo``; one that cannot be read (a priority that
is not a 32-bit integer, no name) keeps its ``problem`` and is skipped, never raises. Kueue's
names, read at v0.17.0: ``spec.priority`` (nil: ``DefaultPriority`` 0,
``pkg/util/priority/priority.go``), conditions ``Admitted`` and ``Evicted``
(``apis/kueue/v1beta2/workload_types.go``), the pod annotation ``kueue.x-k8s.io/workload``
naming the admitted Workload (``WorkloadAnnotation``, ``apis/kueue/v1beta2/topology_types.go``;
written on the Job's pod template while the ``TopologyAwareScheduling`` gate is on, beta and on
by default since v0.14), and the Workload's ``ownerReferences`` (the Job, or for plain pods the
pods themselves).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core.backoff import retrying
from ckpt_preempt.controller.kube.group_crds import DISCOVER_SECONDS
from ckpt_preempt.controller.kube.informer import Informer
from ckpt_preempt.policies.kueue import boost

log = logging.getLogger("ckpt_preempt.kueue")
VERSIONS = ("v1beta2", "v1beta1")  # preferred first
PRIORITY_CLASSES = "workloadpriorityclasses"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"  # on pods: the admitted Workload's name


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadInfo:
    namespace: str
    name: str
    resource_version: str = ""
    priority: int = boost.DEFAULT_PRIORITY
    annotation: str | None = None  # its priority-boost annotation, raw
    owners: frozenset[str] = frozenset()  # ownerReferences' uids
    admitted: bool = False  # Admitted=True and not Evicted=True
    problem: str | None = None  # why it cannot be read: skipped

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def as_rule_input(self) -> boost.Workload:
        return boost.Workload(namespace=self.namespace, name=self.name, priority=self.priority,
                              annotation=self.annotation, admitted=self.admitted)


def _mapping(value: object) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _condition(status: Mapping, kind: str) -> bool:
    conditions = status.get("conditions")
    return any(isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
               for c in (conditions if isinstance(conditions, list) else ()))


def workload_info(d: Mapping) -> WorkloadInfo:
    """A Workload as the cache keeps it; never raises (bad input: ``problem``)."""
    meta, spec, status = (_mapping(d.get(k)) for k in ("metadata", "spec", "status"))
    ns, name = meta.get("namespace"), meta.get("name")
    if not (isinstance(ns, str) and ns and isinstance(name, str) and name):
        return WorkloadInfo(namespace=str(ns or ""), name=str(name or ""),
                            problem="no namespace or name")
    base = WorkloadInfo(namespace=ns, name=name, resource_version=str(
        meta.get("resourceVersion") or ""))
    raw = spec.get("priority")
    if raw is None:
        priority = boost.DEFAULT_PRIORITY
    elif isinstance(raw, int) and not isinstance(raw, bool) \
            and boost.INT32_MIN <= raw <= boost.INT32_MAX:
        priority = raw
    else:
        return _replace(base, problem=f"spec.priority {raw!r} is not a 32-bit integer")
    annotations = _mapping(meta.get("annotations"))
    value = annotations.get(boost.ANNOTATION)
    owners = meta.get("ownerReferences")
    return _replace(
        base, priority=priority, annotation=value if isinstance(value, str) else None,
        owners=frozenset(o["uid"] for o in (owners if isinstance(owners, list) else ())
                         if isinstance(o, Mapping) and isinstance(o.get("uid"), str)),
        admitted=_condition(status, "Admitted") and not _condition(status, "Evicted"))


def _replace(w: WorkloadInfo, **changes) -> WorkloadInfo:
    fields = {f: getattr(w, f) for f in WorkloadInfo.__slots__}
    return WorkloadInfo(**{**fields, **changes})


def class_value(d: Mapping) -> int | None:
    """A PriorityClass's or WorkloadPriorityClass's ``value`` (both top-level int32)."""
    v = d.get("value")
    return v if isinstance(v, int) and not isinstance(v, bool) \
        and boost.INT32_MIN <= v <= boost.INT32_MAX else None


def object_key(d: Mapping) -> str:
    """``<namespace>/<name>`` of any API object; never raises."""
    meta = _mapping(d.get("metadata"))
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def served_version(api: client.ApiClient, plural: str, *, report: bool = True) -> str | None:
    """The Kueue API version that serves ``plural`` and that we may list, or None (one log line
    unless not ``report``). Raises on anything else (connection, server errors)."""
    objects = client.CustomObjectsApi(api)
    for version in VERSIONS:
        try:
            found = objects.get_api_resources(boost.GROUP, version, _request_timeout=30)
        except ApiException as e:
            if e.status != 404:
                raise
            continue
        if found is None or plural not in {r.name for r in found.resources or ()}:
            continue
        try:
            objects.list_cluster_custom_object(boost.GROUP, version, plural, limit=1,
                                               _preload_content=False,
                                               _request_timeout=30).release_conn()
        except ApiException as e:
            if e.status not in (401, 403):
                raise
            if report:
                log.warning("kueue: %s.%s/%s is served but listing it is forbidden (HTTP %s); "
                            "doing nothing until it is granted", plural, boost.GROUP, version,
                            e.status)
            return None
        return version
    if report:
        log.info("kueue: %s.%s is not served (Kueue is not installed); doing nothing, will look "
                 "again every %.0f s", plural, boost.GROUP, DISCOVER_SECONDS)
    return None


class KueueInformer(Informer):
    """One Kueue kind, cluster-wide, once discovery finds it; ``version`` is None until then
    (and while it is not served: synced and empty, asked again every ``discover_seconds``)."""

    def __init__(self, api: client.ApiClient, plural: str, trim: Callable[[dict], object],
                 changed: threading.Event, *,
                 discover: Callable[..., str | None] = served_version,
                 discover_seconds: float = DISCOVER_SECONDS) -> None:
        super().__init__(plural, lambda **kw: self._list(**kw), trim, object_key, changed)
        self._api = api
        self._plural = plural
        self._discover = discover
        self._discover_seconds = discover_seconds
        self.version: str | None = None

    def _list(self, **kw):
        return client.CustomObjectsApi(self._api).list_cluster_custom_object(
            boost.GROUP, self.version, self._plural, **kw)

    def _run(self) -> None:
        policy = retrying(self._stop, what=f"discovery of {self._plural}", logger=log)
        first = True
        while not self._stop.is_set():
            version = policy(lambda report=first: self._discover(self._api, self._plural,
                                                                 report=report))
            first = False
            if version:
                self.version = version
                log.info("kueue: watching %s.%s/%s", self._plural, boost.GROUP, version)
                super()._run()
                return
            self.synced.set()
            self._stop.wait(self._discover_seconds)


def priority_class_informer(api: client.ApiClient, changed: threading.Event) -> Informer:
    """Every PriorityClass's value (scheduling.k8s.io/v1, always served)."""
    return Informer("priorityclasses",
                    functools.partial(client.SchedulingV1Api(api).list_priority_class),
                    class_value, object_key, changed)
