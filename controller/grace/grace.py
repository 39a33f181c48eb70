"""The grace webhook's answers to the API server's AdmissionReviews for pod CREATE.

Every answer is ``allowed: true``: the webhook never rejects a pod. When
``policies.disruption.grace_period.decide`` says SET, the answer carries a JSONPatch (base64, as
the AdmissionReview v1 API requires: ``patchType: JSONPatch``) that sets
``/spec/terminationGracePeriodSeconds``; otherwise it carries no patch. A capped or malformed
declared time also comes back as an admission warning (the client that created the pod prints
it); every decision is one log line. Anything it cannot read (not a Pod, not a CREATE, a
grace period that is not an integer) and any error of its own is an allowed, unchanged pod, as
when the webhook is down (``failurePolicy: Ignore``).

Admission webhook fields: https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Mapping

from ckpt_preempt.controller.core.admission import review_request, review_response
from ckpt_preempt.policies.disruption import grace_period as gp
from ckpt_preempt.policies.model.annotations import PREFIX

log = logging.getLogger("ckpt_preempt.grace")
PATH = "/mutate"
# The opt-in, as a label (webhook selectors match labels, not annotations) on a namespace or a
# pod; the chart's MutatingWebhookConfiguration selects it, this process never reads it.
OPT_IN_LABEL = PREFIX + "grace"
OPT_IN_VALUE = "enabled"
GRACE_FIELD = "/spec/terminationGracePeriodSeconds"
WARNING_PREFIX = "ckpt-preempt grace webhook: "


def response(uid: str, *, grace_seconds: int | None = None, warning: str = "") -> dict:
    out: dict = {"uid": uid, "allowed": True}
    if grace_seconds is not None:
        # "add" sets the member whether or not it is there (RFC 6902, 4.1)
        ops = [{"op": "add", "path": GRACE_FIELD, "value": grace_seconds}]
        out["patchType"] = "JSONPatch"
        out["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    if warning:
        out["warnings"] = [warning]
    return review_response(out)


def _is_pod_create(req: Mapping) -> bool:
    kind = req.get("kind")
    return (req.get("operation") == "CREATE" and isinstance(kind, dict)
            and kind.get("group", "") == "" and kind.get("kind") == "Pod"
            and not req.get("subResource"))


def new_pod(req: Mapping) -> gp.NewPod:
    """The pod in a CREATE review; ValueError when its fields are not what a Pod carries."""
    obj = req.get("object")
    if not isinstance(obj, dict):
        raise ValueError("request.object is not a pod")
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise ValueError("the pod's metadata or spec is not an object")
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()):
        raise ValueError("the pod's annotations are not strings")
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int)):
        raise ValueError("terminationGracePeriodSeconds is not an integer")
    # a pod created from generateName has no name yet; the namespace is the request's
    namespace = req.get("namespace") or meta.get("namespace") or ""
    name = meta.get("name") or (meta.get("generateName") or "") + "*"
    return gp.NewPod(namespace=str(namespace), name=str(name), annotations=annotations,
                     grace_seconds=grace)


class GraceWebhook:
    def __init__(self, limits: gp.GraceLimits) -> None:
        self.limits = limits
        self.counts: dict[str, int] = {}  # answers by outcome, plus "ignored" and "error"
        self._lock = threading.Lock()

    def review(self, body: object) -> dict:
        """The AdmissionReview answer to ``body`` (parsed JSON); ValueError when it is not an
        AdmissionReview (the server answers 400)."""
        req = review_request(body)
        uid = req["uid"]
        if not _is_pod_create(req):
            self._count("ignored")
            return response(uid)
        try:
            pod = new_pod(req)
            decision = gp.decide(pod, self.limits)
        except Exception as e:  # leave the pod as it came, as a webhook that is down would
            log.warning("grace webhook: pod left unchanged: %s", e)
            self._count("error")
            return response(uid)
        self._count(decision.outcome.value)
        log.info("grace of %s/%s: %s: %s", pod.namespace, pod.name, decision.outcome,
                 decision.reason)
        warn = decision.capped or decision.outcome is gp.Outcome.MALFORMED
        return response(uid, grace_seconds=decision.grace_seconds,
                        warning=WARNING_PREFIX + decision.reason if warn else "")

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + 1
