"""Native PodGroups (``scheduling.k8s.io/v1beta1``, Kubernetes 1.37): discovery, trim, informer.

The API is served only where the ``GenericWorkload`` gate is on and the group version enabled
(both off by default in 1.37; kubernetes@v1.37.2 pkg/features/kube_features.go and
pkg/registry/scheduling/rest/storage_scheduling.go). So ``PodGroupInformer`` first asks
discovery, in its own thread (constructing it touches no network): when ``podgroups`` is not
listed, or RBAC forbids listing them, it logs one line, reports synced with nothing in it (pods
naming a group are then gangs of unknown size, evicted whole: ``policies.model.native_gangs``), and
asks again every ``DISCOVER_SECONDS``, as the Volcano and coscheduling kinds are looked for
(``group_crds``), so an API enabled or a grant given after start is seen without a restart. A
connection failure or a server error is retried with the project's backoff, like every watch.
Once served and listable it lists and watches like the other informers.

Each PodGroup is trimmed right away to a ``policies.model.native_gangs.NativeGroup`` (namespace,
name, ``spec.schedulingPolicy.gang.minCount``, ``spec.disruptionMode``).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Mapping

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core.backoff import retrying
from ckpt_preempt.controller.kube.group_crds import DISCOVER_SECONDS
from ckpt_preempt.controller.kube.informer import Informer
from ckpt_preempt.policies.model.native_gangs import Disruption, NativeGroup

log = logging.getLogger("ckpt_preempt.podgroups")
GROUP, VERSION, PLURAL = "scheduling.k8s.io", "v1beta1", "podgroups"
# as policies.model.gangs.MAX_GANG_SIZE: larger is malformed, not a gang size
MAX_MIN_COUNT = 100_000


def podgroup_info(d: Mapping) -> NativeGroup:
    """A PodGroup as the cache keeps it. A malformed minCount counts as unknown (None); a
    malformed or missing disruptionMode as the API's default, ``single`` (types.go:
    ``+default={"single": {}}``), unless ``all`` is set."""
    meta = d["metadata"]
    spec = _field(d, "spec")
    raw = _field(_field(spec, "schedulingPolicy"), "gang").get("minCount")
    min_count = (raw if isinstance(raw, int) and not isinstance(raw, bool)
                 and 0 < raw <= MAX_MIN_COUNT else None)
    disruption = (Disruption.ALL if _field(spec, "disruptionMode").get("all") is not None
                  else Disruption.SINGLE)
    return NativeGroup(namespace=meta.get("namespace", ""), name=meta["name"],
                       min_count=min_count, disruption=disruption)


def _field(d: Mapping, key: str) -> Mapping:
    value = d.get(key)
    return value if isinstance(value, Mapping) else {}


def _list_call(api: client.ApiClient):
    return functools.partial(client.CustomObjectsApi(api).list_cluster_custom_object,
                             GROUP, VERSION, PLURAL)


def available(api: client.ApiClient, *, report: bool = True) -> bool:
    """True when PodGroups are served and we may list them. False (one log line, unless not
    ``report``) when they are not served or RBAC forbids the list. Raises on anything else
    (connection, server errors)."""
    try:
        found = client.CustomObjectsApi(api).get_api_resources(GROUP, VERSION,
                                                               _request_timeout=30)
    except ApiException as e:
        if e.status != 404:
            raise
        found = None
    if found is None or PLURAL not in {r.name for r in found.resources or ()}:
        if report:
            log.info("native PodGroups: %s %s/%s is not served; pods naming a PodGroup are gangs "
                 "of unknown size, evicted whole; will look again every %.0f s", PLURAL, GROUP,
                     VERSION, DISCOVER_SECONDS)
        return False
    try:
        _list_call(api)(limit=1, _preload_content=False, _request_timeout=30).release_conn()
    except ApiException as e:
        if e.status not in (401, 403):
            raise
        if report:
            log.warning("native PodGroups: %s/%s is served but listing %s is forbidden (HTTP "
                        "%s); running without them: grant list/watch as "
                        "deploy/rbac/controller.yaml does", GROUP, VERSION, PLURAL, e.status)
        return False
    return True


class PodGroupInformer(Informer):
    """Every PodGroup, by ``<namespace>/<name>``; ``served`` is None until discovery answers,
    then whether the informer lists and watches (False: synced, empty, and discovery asks again
    every ``discover_seconds``)."""

    def __init__(self, api: client.ApiClient, changed: threading.Event, *,
                 discover_seconds: float = DISCOVER_SECONDS) -> None:
        super().__init__(PLURAL, _list_call(api), podgroup_info,
                         lambda d: f"{d['metadata'].get('namespace', '')}/{d['metadata']['name']}",
                         changed)
        self._api = api
        self._discover_seconds = discover_seconds
        self.served: bool | None = None

    def _run(self) -> None:
        policy = retrying(self._stop, what="discovery of native PodGroups", logger=log)
        first = True
        while not self._stop.is_set():
            served = policy(lambda report=first: available(self._api, report=report))
            if served is None:  # stopped while retrying
                return
            self.served, first = served, False
            if served:
                log.info("native PodGroups: watching %s %s/%s", PLURAL, GROUP, VERSION)
                super()._run()
                return
            self.synced.set()
            self._stop.wait(self._discover_seconds)


def index(informer: Informer | None) -> dict[str, NativeGroup]:
    """``{"<namespace>/<name>": NativeGroup}`` from an informer (None: there is none)."""
    return {} if informer is None else {g.key: g for g in informer.items()}


def listed(api: client.ApiClient) -> dict[str, NativeGroup]:
    """Every PodGroup now, for one-shot readers (``explain``): empty when they are not served,
    not listable, or the list fails (logged; the caller goes on without them)."""
    try:
        if not available(api):
            return {}
        body = json.loads(_list_call(api)(_preload_content=False, _request_timeout=30).data)
    except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as e:
        log.warning("native PodGroups: listing %s failed (%s); going on without them", PLURAL,
                    getattr(e, "status", None) or type(e).__name__)
        return {}
    return {g.key: g for g in map(podgroup_info, body.get("items") or [])}
