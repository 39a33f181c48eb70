"""KEP-4563's EvictionRequest API: whether this cluster serves it, said once in the log.

Opt-in: only with ``evictionRequestResponder`` set (a responder name such as
``ckpt-preempt.io/checkpoint``). The leader's first pass then asks discovery once for
``lifecycle.k8s.io/v1alpha1`` and logs one line:

- not served (the ``EvictionRequestAPI`` feature gate off, or ``--runtime-config`` without the
  group version, or a release before it): that, and nothing else happens;
- served: that the responder stays off, because Kubernetes v1.37 serves the types but ships no
  ``evictionrequest-controller`` to turn an EvictionRequest into a ``lifecycle.k8s.io``
  Eviction and make a responder Active on it, which is the only thing a responder may act on
  (docs/eviction-request.md has what v1.37.2 serves and lacks, with the evidence).

Nothing here writes; the discovery read is the only call.
"""

from __future__ import annotations

import enum
import logging

from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.writes.actions import Actions

log = logging.getLogger("ckpt_preempt.eviction_requests")
GROUP, VERSION = "lifecycle.k8s.io", "v1alpha1"
REQUESTS = "evictionrequests"  # what a requester creates
HANDOFFS = "evictions"  # what the evictionrequest-controller would create for responders
DISCOVERY_TIMEOUT_SECONDS = 10.0


class Support(enum.StrEnum):
    ABSENT = "absent"
    SERVED = "served"  # the types are served; nothing hands an eviction to a responder
    UNKNOWN = "unknown"  # discovery did not answer: asked again on a later pass


def probe(api: client.ApiClient) -> tuple[Support, str]:
    """What discovery says about lifecycle.k8s.io/v1alpha1, and the line to log."""
    try:
        found = client.CustomObjectsApi(api).get_api_resources(
            GROUP, VERSION, _request_timeout=DISCOVERY_TIMEOUT_SECONDS)
    except ApiException as e:
        if e.status == 404:
            return Support.ABSENT, (f"EvictionRequest API ({GROUP}/{VERSION}) is not served; "
                                    "evictionRequestResponder has no effect")
        return Support.UNKNOWN, f"discovery of {GROUP}/{VERSION}: HTTP {e.status}"
    except Exception as e:  # connection refused, timeouts
        return Support.UNKNOWN, f"discovery of {GROUP}/{VERSION}: {e}"
    names = {r.name for r in found.resources or ()}
    if REQUESTS not in names:
        return Support.ABSENT, (f"{GROUP}/{VERSION} is served without {REQUESTS}; "
                                "evictionRequestResponder has no effect")
    return Support.SERVED, (
        f"EvictionRequest API ({GROUP}/{VERSION}: {', '.join(sorted(names))}) is served, but "
        "no evictionrequest-controller hands Evictions to responders in this release "
        "(docs/eviction-request.md); evictionRequestResponder stays off")


class EvictionRequestApi:
    """Says once, on the leader's first pass, what the cluster serves."""

    def __init__(self, actions: Actions, cfg: Config) -> None:
        """Reads through ``actions``' API client, only when ``evictionRequestResponder`` is set."""
        self.actions, self.cfg = actions, cfg
        self.support: Support | None = None  # None: not asked (opt-in off) or not yet answered

    def report_once(self) -> None:
        if not self.cfg.eviction_request_responder or self.support not in (None,
                                                                             Support.UNKNOWN):
            return
        support, line = probe(self.actions.core.api_client)
        if support is Support.UNKNOWN:
            log.debug("%s; will ask again", line)
        else:
            log.info(line, extra={"responder": self.cfg.eviction_request_responder,
                                  "support": str(support)})
        self.support = support
