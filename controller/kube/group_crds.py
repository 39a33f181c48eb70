"""Gang minimums from other schedulers' PodGroup objects, watched when their CRDs are served.

Volcano and the scheduler-plugins coscheduling plugin each define a ``PodGroup`` custom resource
whose ``spec.minMember`` is the least number of members the group runs with; pods name their
group (``policies.model.gangs``: ``scheduling.k8s.io/group-name``,
``scheduling.x-k8s.io/pod-group``).
Field names from the upstream Go types:

- ``scheduling.volcano.sh/v1beta1`` ``podgroups``: volcano-sh/apis
  pkg/apis/scheduling/v1beta1/types.go@536f121 (v1.15.0+2), ``PodGroupSpec.MinMember``
  (``json:"minMember"``, minimum 0; 0 or absent: no minimum);
- ``scheduling.x-k8s.io/v1alpha1`` ``podgroups``: kubernetes-sigs/scheduler-plugins
  apis/scheduling/v1alpha1/types.go@903da7d (v0.35.4-devel), ``PodGroupSpec.MinMember``
  (``json:"minMember"``, minimum 1).

Each kind is looked up by discovery at start and again every ``discover_seconds`` until it is
found; a cluster without the CRD (404) simply has no minimums of that kind, and one where we may
not list it (403) is logged once and treated the same. A found kind gets its own ``Informer``
(``controller.kube.watch``) that keeps ``GroupInfo`` records only. A minMember that is not an
integer in 1..``gangs.MAX_GANG_SIZE`` counts as absent: a minimum only ever holds a gang back
(``gangs.readiness``), so dropping a bad one can admit a gang no sooner than its pods alone say.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core import api_connection
from ckpt_preempt.controller.kube.informer import Informer
from ckpt_preempt.policies.model import gangs

log = logging.getLogger("ckpt_preempt.group_crds")
DISCOVER_SECONDS = 60.0  # how often a kind not yet served is looked for again


@dataclass(frozen=True, kw_only=True)
class GroupKind:
    convention: str  # the policies.model.gangs convention whose pods name these objects
    group: str
    version: str
    plural: str = "podgroups"

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}"


KINDS: tuple[GroupKind, ...] = (
    GroupKind(convention="volcano", group="scheduling.volcano.sh", version="v1beta1"),
    GroupKind(convention="coscheduling", group="scheduling.x-k8s.io", version="v1alpha1"),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupInfo:
    namespace: str
    name: str
    min_member: int | None  # None: absent, zero or malformed


def group_info(d: Mapping) -> GroupInfo:
    meta = d["metadata"]
    raw = (d.get("spec") or {}).get("minMember")
    valid = type(raw) is int and 1 <= raw <= gangs.MAX_GANG_SIZE
    return GroupInfo(namespace=meta.get("namespace", ""), name=meta["name"],
                     min_member=raw if valid else None)


def minimums(kind: GroupKind, groups: Iterable[GroupInfo]) -> dict[str, int]:
    """Gang key (``gangs.gang_key``) -> minMember, for the groups that declare one. Trust: keyed
    by the group object's own namespace, which only a pod of that namespace's gang keys reach."""
    return {gangs.gang_key(g.namespace, kind.convention, g.name): g.min_member
            for g in groups if g.min_member is not None}


def _key(d: dict) -> str:
    m = d["metadata"]
    return f"{m.get('namespace', '')}/{m['name']}"


class GroupObjects:
    """The PodGroup kinds this cluster serves, each watched by an ``Informer``.

    ``synced`` holds once the first discovery round has answered for every kind and every
    informer started by it has listed, so a gang is never judged before its group's minimum is
    known (the caller's readiness waits for it)."""

    def __init__(self, api: client.ApiClient, changed: threading.Event, *,
                 kinds: tuple[GroupKind, ...] = KINDS,
                 discover_seconds: float = DISCOVER_SECONDS) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._changed = changed
        self._kinds = kinds
        self._discover_seconds = discover_seconds
        self._lock = threading.Lock()
        self._watched: dict[GroupKind, Informer] = {}
        self._discovered = threading.Event()
        self._unanswered = ""  # why the last round went unanswered, as logged
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._discover_loop, name="discover-podgroups",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        for i in self.informers():
            i.stop()

    def informers(self) -> list[Informer]:
        with self._lock:
            return list(self._watched.values())

    def synced(self) -> bool:
        return self._discovered.is_set() and all(i.synced.is_set() for i in self.informers())

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if not self._discovered.wait(timeout):
            return False
        return all(i.synced.wait(max(0.0, deadline - time.monotonic()))
                   for i in self.informers())

    def minimums(self) -> dict[str, int]:
        """Gang key -> minMember over every kind watched."""
        with self._lock:
            watched = list(self._watched.items())
        out: dict[str, int] = {}
        for kind, informer in watched:
            out.update(minimums(kind, informer.items()))
        return out

    # ------------------------------------------------------------------------------ discovery
    def _served(self, kind: GroupKind) -> bool | str:
        """True: served and listable; False: not served, or not ours to list; a text: unknown,
        why the API server did not answer (asked again next round)."""
        try:
            found = self._custom.get_api_resources(kind.group, kind.version,
                                                   _request_timeout=10)
        except ApiException as e:
            if e.status == 404:
                return False
            return f"HTTP {e.status}"
        except Exception as e:  # connection refused, timeouts: the API server is away
            return api_connection.cannot_reach(e) or str(e)
        if kind.plural not in {r.name for r in found.resources or ()}:
            return False
        try:
            self._custom.list_cluster_custom_object(kind.group, kind.version, kind.plural,
                                                    limit=1, _request_timeout=10)
        except ApiException as e:
            if e.status in (401, 403):
                log.warning("%s is served but this identity may not list it (HTTP %s): its "
                            "gang minimums are not read; grant list and watch on it",
                            kind.resource, e.status)
                return False
            return f"HTTP {e.status}"
        return True

    def _log_unanswered(self, unanswered: dict[str, str]) -> None:
        """A line when a round goes unanswered for a new reason, not one per kind every round
        (while the API server is away the loop asks again each second)."""
        by_reason: dict[str, list[str]] = {}
        for resource, why in unanswered.items():
            by_reason.setdefault(why, []).append(resource)
        text = "; ".join(f"{', '.join(kinds)}: {why}" for why, kinds in by_reason.items())
        if text and text != self._unanswered:
            log.info("discovery of %s; will ask again", text)
        self._unanswered = text

    def _discover_once(self) -> bool:
        """One round over the kinds not yet watched; True when every one got an answer."""
        unanswered: dict[str, str] = {}
        for kind in self._kinds:
            with self._lock:
                if kind in self._watched:
                    continue
            served = self._served(kind)
            if isinstance(served, str):
                unanswered[kind.resource] = served
            elif served:
                informer = Informer(kind.resource, functools.partial(
                    self._custom.list_cluster_custom_object, kind.group, kind.version,
                    kind.plural), group_info, _key, self._changed)
                with self._lock:
                    self._watched[kind] = informer
                informer.start()
                log.info("watching %s for gang minimums", kind.resource)
        self._log_unanswered(unanswered)
        return not unanswered

    def _discover_loop(self) -> None:
        while not self._stop.is_set():
            if self._discover_once():
                self._discovered.set()
            with self._lock:
                if len(self._watched) == len(self._kinds):
                    return
            self._stop.wait(self._discover_seconds if self._discovered.is_set() else 1.0)

