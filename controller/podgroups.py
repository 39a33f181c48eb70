"""Native PodGroups (``scheduling.k8s.io/v1beta1``, Kubernetes 1.37): discovery, trim, informer.

The API is served only where the ``GenericWorkload`` gate is on and the group version enabled
(both off by default in 1.37; kubernetes@v1.37.2 pkg/features/kube_features.go and
pkg/registry/scheduling/rest/storage_scheduling.go). So the controller asks discovery once at
start: when ``podgroups`` is not listed, it logs one line and runs without the informer (pods
naming a group are then gangs of unknown size, evicted whole: ``policies.native_gangs``). No
list is ever sent to an API that is not there, so nothing retries.

Each PodGroup is trimmed right away to a ``policies.native_gangs.NativeGroup`` (namespace,
name, ``spec.schedulingPolicy.gang.minCount``, ``spec.disruptionMode``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.policies.native_gangs import Disruption, NativeGroup

log = logging.getLogger("ckpt_preempt.podgroups")
GROUP, VERSION, PLURAL = "scheduling.k8s.io", "v1beta1", "podgroups"
MAX_MIN_COUNT = 100_000  # as policies.gangs.MAX_GANG_SIZE: larger is malformed, not a gang size


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


def served(api: client.ApiClient) -> bool:
    """Whether the API server lists ``podgroups`` in scheduling.k8s.io/v1beta1 (discovery).
    Not served, or discovery failing, is logged once and answered False."""
    try:
        found = client.CustomObjectsApi(api).get_api_resources(GROUP, VERSION,
                                                               _request_timeout=30)
    except ApiException as e:
        if e.status == 404:
            log.info("native PodGroups: %s/%s is not served; pods naming a PodGroup are gangs "
                     "of unknown size, evicted whole", GROUP, VERSION)
        else:
            log.warning("native PodGroups: discovery of %s/%s failed (%s %s); running without "
                        "them until restart", GROUP, VERSION, e.status, e.reason)
        return False
    except (urllib3.exceptions.HTTPError, OSError) as e:
        log.warning("native PodGroups: discovery of %s/%s failed (%s); running without them "
                    "until restart", GROUP, VERSION, e)
        return False
    names = {r.name for r in found.resources or ()}
    if PLURAL not in names:
        log.info("native PodGroups: %s/%s is served without %s", GROUP, VERSION, PLURAL)
        return False
    return True


def list_fn(api: client.ApiClient):
    """The list/watch call for every PodGroup (the keywords of any list call), or None when the
    API is not served or RBAC does not let us list it (a chart older than this code): then one
    warning, and the controller runs as without the API rather than never becoming ready."""
    if not served(api):
        return None
    objects = client.CustomObjectsApi(api)

    def call(**kw):
        return objects.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw)

    try:
        call(limit=1, _preload_content=False, _request_timeout=30).release_conn()
    except ApiException as e:
        hint = (": grant list/watch as deploy/rbac/controller.yaml does"
                if e.status in (401, 403) else " until restart")
        log.warning("native PodGroups: %s/%s is served but listing %s failed (%s %s); running "
                    "without them%s", GROUP, VERSION, PLURAL, e.status, e.reason, hint)
        return None
    except (urllib3.exceptions.HTTPError, OSError) as e:
        log.warning("native PodGroups: listing %s failed (%s); running without them until "
                    "restart", PLURAL, e)
        return None
    return call


def informer(api: client.ApiClient, changed: threading.Event):
    """A ``watch.Informer`` over every PodGroup (key ``<namespace>/<name>``), or None when the
    API is not served."""
    from ckpt_preempt.controller.watch import Informer

    call = list_fn(api)
    if call is None:
        return None
    return Informer(PLURAL, call, podgroup_info,
                    lambda d: f"{d['metadata'].get('namespace', '')}/{d['metadata']['name']}",
                    changed)


def index(podgroups) -> dict[str, NativeGroup]:
    """``{"<namespace>/<name>": NativeGroup}`` from an informer (None: the API is absent)."""
    return {} if podgroups is None else {g.key: g for g in podgroups.items()}
