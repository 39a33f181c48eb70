"""The named operations the controller performs on the API server. Each is safe to repeat.

- ``write_plan``: persist a PlanRecord on the preemptor, guarded (a JSON-patch ``test`` of the
  previous value, or the resourceVersion when creating) so two writers cannot both win.
- ``request_checkpoint``: the victim's ``drain`` annotation (skipped if terminating or asked).
- ``evict``: policy/v1 Eviction with a uid precondition (never a same-named newer pod);
  429 and 5xx are retried with exponential backoff and jitter, bounded; 404 counts as done.
- ``reserve`` / ``tolerate`` / ``unreserve``: the reservation, a
  ``ckpt-preempt.io/reserved=<plan>:NoSchedule`` taint on each target node while it is freed
  and the matching toleration on the preemptor pods.
- ``nominate``: ``status.nominatedNodeName`` (mode a).
- ``pin`` then ``ungate``: narrow required node affinity to the planned node while the pod is
  gated, then lift ``ckpt-preempt.io/admission`` (mode b).
- ``emit``: a core/v1 Event on a pod.

Errors: ``Blocked`` (an eviction still refused after the retries: the plan waits, then aborts at
its evictBy); ``Conflict`` (someone else changed the object: re-read and decide again). Other
``ApiException``s propagate; the loop logs them and retries on its next pass.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.rest import ApiException
from tenacity import (
    RetryError,
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from controller.convert import ADMISSION_GATE, PodInfo
from policies import lifecycle

log = logging.getLogger("ckpt_preempt.actions")
COMPONENT = "ckpt-preempt.io/controller"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


RESERVED_TAINT = "ckpt-preempt.io/reserved"


def has_reservation_toleration(pod: PodInfo, plan: str) -> bool:
    return any(t.get("key") == RESERVED_TAINT and t.get("value") == plan
               for t in pod.tolerations)


def node_reserved_for(taints, plan: str) -> bool:
    return any(t.get("key") == RESERVED_TAINT and t.get("value") == plan for t in taints)


class Blocked(Exception):
    """The Eviction API kept refusing (429: a PDB; or 5xx) through every retry."""


class Conflict(Exception):
    """The object changed under us (409 / failed test op): decide again from fresh state."""


def _retryable(e: BaseException) -> bool:
    return isinstance(e, ApiException) and (e.status == 429 or e.status >= 500)


class Actions:
    def __init__(self, api: client.ApiClient, *, dry_run: bool = False,
                 evict_attempts: int = 4, on_retry=None) -> None:
        self.core = client.CoreV1Api(api)
        self.events = client.EventsV1Api(api)
        self.instance = COMPONENT
        self.dry_run = dry_run
        self.evict_attempts = evict_attempts
        self._on_retry = on_retry or (lambda: None)

    # ------------------------------------------------------------------------------ the plan
    def write_plan(self, pod: PodInfo, record: lifecycle.PlanRecord, previous: str | None) -> None:
        new = lifecycle.plan_to_annotation(record)
        try:
            if previous is None:
                body = {"metadata": {"resourceVersion": pod.resource_version,
                                     "annotations": {lifecycle.PLAN_ANNOTATION: new}}}
                self.core.patch_namespaced_pod(pod.name, pod.namespace, body,
                                               _content_type=MERGE)
            else:
                path = "/metadata/annotations/" + lifecycle.PLAN_ANNOTATION.replace("/", "~1")
                ops = [{"op": "test", "path": path, "value": previous},
                       {"op": "replace", "path": path, "value": new}]
                self.core.patch_namespaced_pod(pod.name, pod.namespace, ops,
                                               _content_type=JSON_PATCH)
        except ApiException as e:
            if e.status in (404, 409, 422):  # 422: the JSON-patch test failed; 404: pod gone
                raise Conflict(f"plan on {pod.key} changed: {e.reason}") from e
            raise

    # --------------------------------------------------------------------------- the victims
    def request_checkpoint(self, pod: PodInfo, request: lifecycle.DrainRequest) -> bool:
        if pod.deleting or lifecycle.drain_requested(pod.annotations, request.plan):
            return False
        body = {"metadata": {"annotations": {
            lifecycle.DRAIN_ANNOTATION: lifecycle.drain_to_annotation(request)}}}
        self.core.patch_namespaced_pod(pod.name, pod.namespace, body, _content_type=MERGE)
        return True

    def evict(self, pod: PodInfo) -> bool:
        """True when this call evicted it; False when it was already gone or terminating."""
        if pod.deleting:
            return False
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=pod.name, namespace=pod.namespace),
            delete_options=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(uid=pod.uid)))
        attempts = 0

        @retry(retry=retry_if_exception(_retryable), stop=stop_after_attempt(self.evict_attempts),
               wait=wait_random_exponential(multiplier=0.2, max=2.0), reraise=False)
        def call() -> None:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                self._on_retry()
            self.core.create_namespaced_pod_eviction(pod.name, pod.namespace, body)

        try:
            call()
        except RetryError as e:
            raise Blocked(f"eviction of {pod.key} refused {attempts} times: "
                          f"{e.last_attempt.exception()}") from e
        except ApiException as e:
            if e.status == 404:
                return False
            if e.status == 409:  # uid precondition: a different pod has this name now
                return False
            raise
        return True

    # -------------------------------------------------------------------------- the preemptor
    def nominate(self, pod: PodInfo, node: str) -> None:
        if pod.deleting or pod.node or pod.nominated == node:
            return
        try:
            self.core.patch_namespaced_pod_status(
                pod.name, pod.namespace, {"status": {"nominatedNodeName": node}},
                _content_type=MERGE)
        except ApiException as e:
            if e.status not in (404, 422):  # 422: bound meanwhile (our cache lagged): done
                raise

    def pin(self, pod: PodInfo, node: str) -> None:
        """Narrow required node affinity to `node` (allowed while the pod is gated)."""
        if pod.deleting or ADMISSION_GATE not in pod.gates:
            return
        live = self.core.api_client.sanitize_for_serialization(
            self.core.read_namespaced_pod(pod.name, pod.namespace))
        pin = {"key": "metadata.name", "operator": "In", "values": [node]}
        required = (((live["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        terms = required.get("nodeSelectorTerms") or []
        if terms and all(pin in (t.get("matchFields") or []) for t in terms):
            return
        # Narrowing may only add requirements to each existing term (or set the first one).
        terms = [{**t, "matchFields": [*(t.get("matchFields") or []), pin]} for t in terms] \
            or [{"matchFields": [pin]}]
        body = {"metadata": {"resourceVersion": live["metadata"]["resourceVersion"]},
                "spec": {"affinity": {"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": terms}}}}}
        self._patch_guarded(pod, body)

    def ungate(self, pod: PodInfo) -> None:
        if pod.deleting or ADMISSION_GATE not in pod.gates:
            return
        live = self.core.read_namespaced_pod(pod.name, pod.namespace)
        gates = [g.name for g in live.spec.scheduling_gates or []]
        if ADMISSION_GATE not in gates:
            return
        body = {"metadata": {"resourceVersion": live.metadata.resource_version},
                "spec": {"schedulingGates": [{"name": g} for g in gates if g != ADMISSION_GATE]
                         or None}}
        self._patch_guarded(pod, body)

    def _patch_guarded(self, pod: PodInfo, body: dict) -> None:
        try:
            self.core.patch_namespaced_pod(pod.name, pod.namespace, body, _content_type=MERGE)
        except ApiException as e:
            if e.status == 409:
                raise Conflict(f"{pod.key} changed: {e.reason}") from e
            raise

    # ------------------------------------------------------------------- node reservation
    def reserve(self, node: str, plan: str) -> None:
        """Taint `node` with RESERVED_TAINT=<plan>:NoSchedule (pods already there stay)."""
        live = self.core.read_node(node)
        taints = [t.to_dict() for t in live.spec.taints or []]
        if any(t["key"] == RESERVED_TAINT and t.get("value") == plan for t in taints):
            return
        taints = [{"key": t["key"], "value": t.get("value"), "effect": t["effect"]}
                  for t in taints if t["key"] != RESERVED_TAINT]
        taints.append({"key": RESERVED_TAINT, "value": plan, "effect": "NoSchedule"})
        self._patch_node(live, taints)

    def unreserve(self, node: str, plan: str) -> None:
        try:
            live = self.core.read_node(node)
        except ApiException as e:
            if e.status == 404:
                return
            raise
        taints = [t.to_dict() for t in live.spec.taints or []]
        if not any(t["key"] == RESERVED_TAINT and t.get("value") == plan for t in taints):
            return
        self._patch_node(live, [{"key": t["key"], "value": t.get("value"), "effect": t["effect"]}
                                for t in taints if t["key"] != RESERVED_TAINT])

    def _patch_node(self, live, taints: list[dict]) -> None:
        body = {"metadata": {"resourceVersion": live.metadata.resource_version},
                "spec": {"taints": [{k: v for k, v in t.items() if v is not None}
                                    for t in taints] or None}}
        try:
            self.core.patch_node(live.metadata.name, body, _content_type=MERGE)
        except ApiException as e:
            if e.status == 409:
                raise Conflict(f"node {live.metadata.name} changed: {e.reason}") from e
            raise

    def tolerate(self, pod: PodInfo, plan: str) -> None:
        """Add the reservation toleration to the preemptor (a pod update may add tolerations)."""
        if pod.deleting or pod.node or has_reservation_toleration(pod, plan):
            return
        live = self.core.api_client.sanitize_for_serialization(
            self.core.read_namespaced_pod(pod.name, pod.namespace))
        tolerations = [*(live["spec"].get("tolerations") or []),
                       {"key": RESERVED_TAINT, "operator": "Equal", "value": plan,
                        "effect": "NoSchedule"}]
        body = {"metadata": {"resourceVersion": live["metadata"]["resourceVersion"]},
                "spec": {"tolerations": tolerations}}
        self._patch_guarded(pod, body)

    # -------------------------------------------------------------------------------- events
    def emit(self, pod: PodInfo, reason: str, message: str, *, warning: bool = False) -> None:
        """An events.k8s.io/v1 Event regarding the pod (also listed by core/v1 readers)."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {
            "metadata": {"name": f"{pod.name}.{uuid.uuid4().hex[:12]}",
                         "namespace": pod.namespace},
            "eventTime": now, "reportingController": COMPONENT,
            "reportingInstance": self.instance, "action": reason, "reason": reason,
            "note": message[:1024], "type": "Warning" if warning else "Normal",
            "regarding": {"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                          "namespace": pod.namespace, "uid": pod.uid},
        }
        try:
            self.events.create_namespaced_event(pod.namespace, body)
        except ApiException as e:  # an Event is best effort; never fail an action over it
            log.warning("event %s on %s not recorded: %s", reason, pod.key, e.reason)

