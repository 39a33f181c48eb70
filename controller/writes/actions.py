"""Every write the controller makes to the API server goes through ``Actions``, and only there.

Each write passes one choke point, ``Actions._write``, which enforces, in order:

1. **dry-run**: nothing is written except Events; the write is logged as skipped;
2. **leadership**: ``may_write()`` (the Lease elector's renew deadline) is asked before every
   write, so a replica that lost or cannot renew its Lease stops mid-pass (``NotLeader``);
3. **a request timeout** on every call (reads included), so no call outlives the Lease;
4. **an audit log line** (logger ``ckpt_preempt.audit``) naming the verb, the object and the plan.

What each write says (bodies, names, labels, taints) is built in
``controller/writes/write_bodies.py``.

The operations, each safe to repeat:

- plans: ``create_plan`` / ``update_plan`` / ``delete_plan`` on ConfigMaps in the controller's own
  namespace, guarded by resourceVersion so two writers cannot both win;
- victims: ``request_checkpoint`` / ``withdraw_checkpoint`` (the ``drain`` annotation) and
  ``evict`` (policy/v1 Eviction with a uid precondition; 429 and 5xx retried with tenacity);
- preemptors: ``nominate`` / ``clear_nomination`` (mode a), ``pin`` then ``ungate`` (mode b),
  ``tolerate`` (the reservation toleration);
- nodes: ``reserve`` / ``unreserve`` (the ``ckpt-preempt.io/reserved=<plan>:NoSchedule`` taint);
- ``emit``: an events.k8s.io/v1 Event about a pod;
- ``delete_lease``: the Lease of a controller that is gone (``ckpt-preempt cleanup`` only);
- ``set_priority_boost``: Kueue's ``kueue.x-k8s.io/priority-boost`` annotation on a Workload
  (``ckpt-preempt kueue-boost`` only), guarded by resourceVersion.

``Actions`` is safe to call from several threads at once (``controller/writes/write_lanes.py`` runs
the writes of different plans side by side): it keeps no state between calls, and the API client's
connection pool is sized for them (``connections``).

Errors: ``Blocked`` (an eviction still refused after the retries), ``Conflict`` (someone else
changed the object: re-read and decide again), ``NotLeader``. Other ``ApiException``s propagate;
the loop logs them and retries on its next pass.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException
from tenacity import (
    RetryError,
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)
from urllib3.exceptions import HTTPError

from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.controller.kube.records import ADMISSION_GATE, PodInfo
from ckpt_preempt.controller.writes import write_bodies as bodies
from ckpt_preempt.controller.writes.write_bodies import COMPONENT, plan_object_name
from ckpt_preempt.policies.kueue import boost
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.times import rfc3339_micro

log = logging.getLogger("ckpt_preempt.actions")
audit = logging.getLogger("ckpt_preempt.audit")
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
T = TypeVar("T")
TOLERATE_ATTEMPTS = 3  # reads and patches of a preemptor that keeps changing under us


class Blocked(Exception):
    """The Eviction API kept refusing (429: a PDB; or 5xx) through every retry."""


class Conflict(Exception):
    """The object changed under us (409 / failed test op): decide again from fresh state."""


class NotLeader(Exception):
    """This replica may not write now: it does not hold the Lease within its renew deadline."""


class WriteFailed(Exception):
    """The API server refused a write (``status``: its HTTP status) or could not be reached
    (``status`` None: a timeout, a dropped connection). The one error type for the rest;
    the client's own exception types never leave ``Actions``."""

    def __init__(self, message: str, *, status: int | None) -> None:
        super().__init__(message)
        self.status = status


def _retryable(e: BaseException) -> bool:
    """A refusal worth another attempt: 429 (a PDB, the API's rate limits) or a 5xx."""
    return isinstance(e, WriteFailed) and e.status is not None \
        and (e.status == 429 or e.status >= 500)


def api_error(e: ApiException) -> str:
    """A short, stable description of an API error (no headers, no request ids), so Events
    built from it are deduplicated."""
    reason = e.reason or ""
    try:
        message = json.loads(e.body or "{}").get("message") or ""
    except (ValueError, AttributeError, TypeError):
        message = ""
    return f"{e.status} {reason}" + (f": {message}" if message else "")


@dataclass(frozen=True, kw_only=True)
class WriteGuard:
    """What every write is checked against (see the module docstring)."""

    dry_run: bool = False
    may_write: Callable[[], bool] = lambda: True
    request_timeout: float = 5.0


def client_with_pool(api: client.ApiClient, connections: int) -> client.ApiClient:
    """``api``'s credentials on a connection pool of its own that keeps ``connections``
    connections per host. urllib3 opens more when more requests are in flight at once, but keeps
    only ``maxsize`` and drops the rest with "Connection pool is full" (the kubernetes client's
    default maxsize is 5 per CPU, and the watches hold some of them for as long as they run)."""
    if connections <= 1:
        return api
    cfg = copy.copy(api.configuration)  # shares the credentials, and their refreshes
    cfg.connection_pool_maxsize = max(connections, cfg.connection_pool_maxsize or 0)
    return client.ApiClient(cfg)


class Actions:
    def __init__(self, api: client.ApiClient, *, plan_namespace: str,
                 guard: WriteGuard | None = None, evict_attempts: int = 4,
                 on_retry: Callable[[], None] | None = None, connections: int = 1,
                 on_event: Callable[[Reason], None] | None = None) -> None:
        """``connections``: how many writes may be in flight at once (``writeConcurrency``);
        above 1 the writes get a connection pool of their own, that big. ``on_event`` hears
        each Event's reason as it is sent (the metric by reason)."""
        api = client_with_pool(api, connections)
        self.core = client.CoreV1Api(api)
        self.events = client.EventsV1Api(api)
        self.instance = COMPONENT
        self.plan_namespace = plan_namespace
        self.guard = guard or WriteGuard()
        self.evict_attempts = evict_attempts
        self._on_retry = on_retry or (lambda: None)
        self._on_event = on_event or (lambda reason: None)

    @property
    def timeout(self) -> float:
        return self.guard.request_timeout

    # -------------------------------------------------------------------- the choke point
    def _write(self, verb: str, target: str, call: Callable[[], T], *, plan: str = "",
               event: bool = False) -> T | None:
        if self.guard.dry_run and not event:
            audit.info("dry-run: skipped %s %s", verb, target,
                       extra={"audit": verb, "target": target, "plan": plan, "dry_run": True})
            return None
        if not self.guard.may_write():
            raise NotLeader(f"not the leader within its renew deadline; {verb} {target} "
                            "not sent")
        audit.info("%s %s", verb, target, extra={"audit": verb, "target": target, "plan": plan})
        return self._translated(verb, target, call)

    @staticmethod
    def _translated(verb: str, target: str, call: Callable[[], T]) -> T:
        """``call()``, with the client's errors as ``WriteFailed``."""
        try:
            return call()
        except ApiException as e:
            raise WriteFailed(f"{verb} {target}: {api_error(e)}", status=e.status) from e
        except HTTPError as e:  # a timeout, a dropped connection: decided again later
            raise WriteFailed(f"{verb} {target}: {type(e).__name__}: {e}", status=None) from e

    def _read(self, what: str, call: Callable[[], T]) -> T:
        """A read a write depends on (the live object it patches): its errors are the
        write's, ``WriteFailed``, so none of the client's types leave ``Actions``."""
        return self._translated(f"read for {what}", "", call)

    # ------------------------------------------------------------------------ stored plans
    def create_plan(self, record: plan_record.PlanRecord) -> str | None:
        """Store a new plan; returns its resourceVersion (None in dry-run)."""
        def call() -> str:
            try:
                cm = self.core.create_namespaced_config_map(
                    self.plan_namespace, bodies.plan_config_map(record, self.plan_namespace, None),
                    _request_timeout=self.timeout)
            except ApiException as e:
                if e.status == 409:
                    raise Conflict(f"plan {record.id} exists already") from e
                raise
            return cm.metadata.resource_version
        return self._write("create-plan", f"{self.plan_namespace}/{plan_object_name(record.id)}",
                           call, plan=record.id)

    def update_plan(self, record: plan_record.PlanRecord, rv: str) -> str | None:
        """Replace the stored plan, only if it is still at `rv`; returns the new one."""
        def call() -> str:
            try:
                cm = self.core.replace_namespaced_config_map(
                    plan_object_name(record.id), self.plan_namespace,
                    bodies.plan_config_map(record, self.plan_namespace, rv),
                    _request_timeout=self.timeout)
            except ApiException as e:
                if e.status in (404, 409):
                    raise Conflict(f"plan {record.id} changed: {e.reason}") from e
                raise
            return cm.metadata.resource_version
        return self._write(f"update-plan {record.state.value}",
                           f"{self.plan_namespace}/{plan_object_name(record.id)}", call,
                           plan=record.id)

    def delete_plan(self, plan_id: str, rv: str) -> None:
        def call() -> None:
            try:
                self.core.delete_namespaced_config_map(
                    plan_object_name(plan_id), self.plan_namespace,
                    body=client.V1DeleteOptions(
                        preconditions=client.V1Preconditions(resource_version=rv)),
                    _request_timeout=self.timeout)
            except ApiException as e:
                if e.status not in (404, 409):
                    raise
        self._write("delete-plan", f"{self.plan_namespace}/{plan_object_name(plan_id)}", call,
                    plan=plan_id)

    # --------------------------------------------------------------------------- the victims
    def request_checkpoint(self, pod: PodInfo, request: plan_record.DrainRequest, *,
                           only_if_unchanged: bool = False, decode: bool = True) -> bool:
        """True when this call wrote the request (False: terminating, asked, or dry-run).

        ``only_if_unchanged``: write only if the pod is still at the resourceVersion this view of
        it was read at (else False, and nothing is written). The health path uses it, so that a
        request built from a stale view never replaces a plan's request written meanwhile; the
        next refresh decides again on a fresh view; so does the eviction gate (its replicas race).
        ``decode=False``: the response is not decoded into a ``V1Pod`` (about a millisecond of
        interpreter time; the eviction gate writes during bursts of answers)."""
        if pod.deleting or plan_record.drain_requested(pod.annotations, request.plan):
            return False
        body = bodies.drain_request_patch(
            request, pod.resource_version if only_if_unchanged else None)

        def call() -> bool:
            try:
                raw = {} if decode else {"_preload_content": False}
                sent = self.core.patch_namespaced_pod(pod.name, pod.namespace, body,
                                                      _content_type=MERGE, **raw,
                                                      _request_timeout=self.timeout)
                if not decode:  # read to the end, or the pooled connection is left mid-body
                    sent.drain_conn()
                    sent.release_conn()
            except ApiException as e:
                if only_if_unchanged and e.status == 409:  # changed since read: not written
                    return False
                raise
            return True
        return bool(self._write("request-checkpoint", pod.key, call, plan=request.plan))

    def withdraw_checkpoint(self, pod: PodInfo, plan_id: str) -> None:
        """Remove the drain request, only if it still names `plan_id` (the agent then tells the
        workload the request is cancelled)."""
        raw = pod.annotations.get(plan_record.DRAIN_ANNOTATION)
        if raw is None or not plan_record.drain_requested(pod.annotations, plan_id):
            return
        ops = bodies.drain_withdrawal_patch(raw)

        def call() -> None:
            try:
                self.core.patch_namespaced_pod(pod.name, pod.namespace, ops,
                                               _content_type=JSON_PATCH,
                                               _request_timeout=self.timeout)
            except ApiException as e:
                if e.status not in (404, 409, 422):  # gone, or the request changed meanwhile
                    raise
        self._write("withdraw-checkpoint", pod.key, call, plan=plan_id)

    def evict(self, pod: PodInfo, plan_id: str = "") -> bool:
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
        def attempt() -> None:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                self._on_retry()
            # Leadership is asked again before every attempt: a retry may outlive the Lease.
            self._write("evict", pod.key, lambda: self.core.create_namespaced_pod_eviction(
                pod.name, pod.namespace, body, _request_timeout=self.timeout), plan=plan_id)

        if self.guard.dry_run:
            self._write("evict", pod.key, lambda: None, plan=plan_id)
            return False
        try:
            attempt()
        except RetryError as e:
            last = e.last_attempt.exception()
            cause = getattr(last, "__cause__", None)
            why = api_error(cause) if isinstance(cause, ApiException) else str(last)
            raise Blocked(f"eviction of {pod.key} refused: {why}") from e
        except WriteFailed as e:
            if e.status in (404, 409):  # gone, or (uid precondition) another pod has the name
                return False
            raise
        return True

    # -------------------------------------------------------------------------- the preemptor
    def nominate(self, pod: PodInfo, node: str, plan_id: str = "") -> None:
        if pod.deleting or pod.node or pod.nominated == node:
            return

        def call() -> None:
            try:
                self.core.patch_namespaced_pod_status(
                    pod.name, pod.namespace, bodies.nomination_patch(node),
                    _content_type=MERGE, _request_timeout=self.timeout)
            except ApiException as e:
                if e.status not in (404, 422):  # 422: bound meanwhile (our cache lagged): done
                    raise
        self._write("nominate", f"{pod.key} -> {node}", call, plan=plan_id)

    def clear_nomination(self, pod: PodInfo, node: str, plan_id: str = "") -> None:
        """Withdraw our nomination of `pod` on `node` (an aborted plan), if it still stands."""
        if pod.deleting or pod.node or pod.nominated != node:
            return
        ops = bodies.nomination_withdrawal_patch(node)

        def call() -> None:
            try:
                self.core.patch_namespaced_pod_status(pod.name, pod.namespace, ops,
                                                      _content_type=JSON_PATCH,
                                                      _request_timeout=self.timeout)
            except ApiException as e:
                if e.status not in (404, 409, 422):
                    raise
        self._write("clear-nomination", pod.key, call, plan=plan_id)

    def _read_pod(self, pod: PodInfo) -> dict:
        return self.core.api_client.sanitize_for_serialization(self._read(
            f"patch {pod.key}", lambda: self.core.read_namespaced_pod(
                pod.name, pod.namespace, _request_timeout=self.timeout)))

    def pin(self, pod: PodInfo, node: str, plan_id: str = "") -> None:
        """Narrow required node affinity to `node` (allowed while the pod is gated)."""
        if pod.deleting or ADMISSION_GATE not in pod.gates:
            return
        body = bodies.pin_patch(self._read_pod(pod), node)
        if body is not None:
            self._patch_guarded("pin", pod, body, plan_id)

    def ungate(self, pod: PodInfo, plan_id: str = "") -> None:
        if pod.deleting or ADMISSION_GATE not in pod.gates:
            return
        body = bodies.ungate_patch(self._read_pod(pod))
        if body is not None:
            self._patch_guarded("ungate", pod, body, plan_id)

    def tolerate(self, pod: PodInfo, plan_id: str) -> None:
        """Add the reservation toleration to the preemptor (a pod update may add tolerations).
        A pending pod changes often (kube-scheduler writes its status after every attempt), so
        a conflict is read again and retried, up to ``TOLERATE_ATTEMPTS`` times in all."""
        if pod.deleting or pod.node or bodies.has_reservation_toleration(pod, plan_id):
            return
        for attempt in range(1, TOLERATE_ATTEMPTS + 1):
            body = bodies.toleration_patch(self._read_pod(pod), plan_id)
            if body is None:
                return
            try:
                self._patch_guarded("tolerate", pod, body, plan_id)
                return
            except Conflict:
                if attempt == TOLERATE_ATTEMPTS:
                    raise

    def _patch_guarded(self, verb: str, pod: PodInfo, body: dict, plan_id: str) -> None:
        def call() -> None:
            try:
                self.core.patch_namespaced_pod(pod.name, pod.namespace, body,
                                               _content_type=MERGE,
                                               _request_timeout=self.timeout)
            except ApiException as e:
                if e.status == 409:
                    raise Conflict(f"{pod.key} changed: {e.reason}") from e
                raise
        self._write(verb, pod.key, call, plan=plan_id)

    # ------------------------------------------------------------------- node reservation
    def reserve(self, node: str, plan_id: str) -> None:
        """Taint `node` with RESERVED_TAINT=<plan>:NoSchedule (pods already there stay)."""
        live = self._read(f"reserve node/{node}",
                          lambda: self.core.read_node(node, _request_timeout=self.timeout))
        taints = bodies.reserving_taints([t.to_dict() for t in live.spec.taints or []], plan_id)
        if taints is not None:
            self._patch_node("reserve", live, taints, plan_id)

    def unreserve(self, node: str, plan_id: str) -> None:
        try:
            live = self._read(f"unreserve node/{node}",
                              lambda: self.core.read_node(node, _request_timeout=self.timeout))
        except WriteFailed as e:
            if e.status == 404:
                return
            raise
        taints = bodies.unreserving_taints([t.to_dict() for t in live.spec.taints or []],
                                           plan_id)
        if taints is not None:
            self._patch_node("unreserve", live, taints, plan_id)

    def _patch_node(self, verb: str, live, taints: list[dict], plan_id: str) -> None:
        body = bodies.node_taints_patch(live.metadata.resource_version, taints)

        def call() -> None:
            try:
                self.core.patch_node(live.metadata.name, body, _content_type=MERGE,
                                     _request_timeout=self.timeout)
            except ApiException as e:
                if e.status == 409:
                    raise Conflict(f"node {live.metadata.name} changed: {e.reason}") from e
                raise
        self._write(verb, f"node/{live.metadata.name}", call, plan=plan_id)

    # -------------------------------------------------------------------------------- events
    def emit(self, pod: PodInfo, reason: Reason, message: str, *, warning: bool = False) -> None:
        """An events.k8s.io/v1 Event regarding the pod (also listed by core/v1 readers)."""
        now = rfc3339_micro(datetime.now(UTC))
        body = bodies.event_body(pod, reason, message, warning=warning, instance=self.instance,
                                 event_time=now, suffix=uuid.uuid4().hex[:12])

        def call() -> None:
            try:
                self.events.create_namespaced_event(pod.namespace, body,
                                                    _request_timeout=self.timeout)
            except ApiException as e:  # an Event is best effort; never fail an action over it
                log.warning("event %s on %s not recorded: %s", reason, pod.key, e.reason)
                return
            self._on_event(reason)
        self._write(f"event {reason}", pod.key, call, event=True)

    # ------------------------------------------------------------------ cleanup's last step
    def delete_lease(self, name: str, namespace: str, rv: str) -> None:
        """Delete a Lease only if it is still at ``rv`` (nobody renewed it since it was read)."""
        def call() -> None:
            try:
                client.CoordinationV1Api(self.core.api_client).delete_namespaced_lease(
                    name, namespace, body=client.V1DeleteOptions(
                        preconditions=client.V1Preconditions(resource_version=rv)),
                    _request_timeout=self.timeout)
            except ApiException as e:
                if e.status == 409:
                    raise Conflict(f"lease {namespace}/{name} renewed meanwhile") from e
                if e.status != 404:
                    raise
        self._write("delete-lease", f"{namespace}/{name}", call)

    # -------------------------------------------------------------- Kueue Workloads' boost
    def set_priority_boost(self, namespace: str, name: str, value: str | None, *,
                           version: str, rv: str) -> bool:
        """Set (``value`` None: remove) the Workload's priority-boost annotation, only at
        resourceVersion ``rv`` (``Conflict`` otherwise: decide again from fresh state). True
        when written; False when the Workload is gone, or in dry-run."""
        body = bodies.priority_boost_patch(value, rv)

        def call() -> bool:
            try:
                client.CustomObjectsApi(self.core.api_client).patch_namespaced_custom_object(
                    boost.GROUP, version, namespace, boost.WORKLOADS, name, body,
                    _content_type=MERGE, _request_timeout=self.timeout)
            except ApiException as e:
                if e.status == 404:
                    return False
                if e.status == 409:
                    raise Conflict(f"workload {namespace}/{name} changed: {e.reason}") from e
                raise
            return True
        return bool(self._write(f"priority-boost {value or 0}",
                                f"workloads.{boost.GROUP}/{namespace}/{name}", call))
