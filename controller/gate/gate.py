"""The eviction gate: answers the API server's AdmissionReviews for ``pods/eviction``.

For each Eviction it reads the pod (from its watch cache, ``controller/gate/gate_cache.py``, or
with one GET when the cache does not hold it or is off), asks
``policies.disruption.eviction_gate.decide``
and answers:

- allowed, or
- **429 TooManyRequests** with a message saying why and until when; on the first refusal the
  pod gets a drain request (``ckpt-preempt.io/drain``, plan ``disruption/<id>``) through
  ``Actions.request_checkpoint(only_if_unchanged=True, decode=False)``: written only if the
  pod is still at the resourceVersion the decision was made at. Two replicas that race compute
  the same request from the same view and only one write lands. The write is made on writer
  threads after the answer (``WRITERS``), so an answer never waits for the API server: a write
  that does not land leaves the pod without a request, and the client's retry (kubectl: 5 s
  later) decides again.

It fails open: a pod it cannot read, or any error of its own, is an allowed eviction, as when
the gate is down (``failurePolicy: Ignore``); so is every later eviction of a pod whose request
the API server refused to write for us (403, 404, 422). The first time this replica refused each
pod is kept in memory (``FirstRefusals``), so no pod re-writing its own annotations, and no write
that keeps failing, holds an eviction past the cap (``policies.disruption.eviction_gate``). A
dry-run Eviction (``dryRun``, or ``deleteOptions.dryRun`` as ``kubectl drain --dry-run=server``
sends it) writes nothing and is allowed, with a warning saying what the real one would meet.

The HTTP and TLS side is ``controller/gate/gate_server.py``; the command, ``cmd_gate.py``.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core.admission import review_request, review_response
from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.controller.gate.gate_cache import PodCache
from ckpt_preempt.controller.kube.records import pod_info
from ckpt_preempt.controller.writes.actions import (
    Actions,
    WriteFailed,
    WriteGuard,
    client_with_pool,
)
from ckpt_preempt.policies.disruption import eviction_gate as eg

log = logging.getLogger("ckpt_preempt.gate")
TOO_MANY_REQUESTS = 429
RETRY_AFTER_SECONDS = 5  # what kubectl drain waits between retries anyway
# per API call: the webhook's own timeout (timeoutSeconds, chart default 5 s) must outlast a read
# and a write
API_TIMEOUT_SECONDS = 2.0
WRITERS = 4  # drain requests written at once, after the answer
# A first refusal is remembered this long after the cap ran out, so every retry of the held
# eviction meets the bound (kubectl retries every 5 s, autoscalers within a minute); a pod
# evicted again later starts over. An assumption, generous for the retries.
REMEMBER_AFTER_CAP_SECONDS = 300.0
UNWRITABLE_KEPT = 10_000  # pods remembered as not writable for us; beyond it, forgotten
GATE_CONNECTIONS = 32  # API connections kept for reviews answered at once (a burst of drains)
EVENT_QUEUE = 1024  # Events waiting to be sent; beyond it they are dropped (best effort)


@dataclass(frozen=True, kw_only=True)
class GateSettings:
    limits: eg.GateLimits
    exempt_users: frozenset[str] = frozenset()
    request_timeout: float = API_TIMEOUT_SECONDS


class FirstRefusals:
    """When this replica first refused an eviction of each pod (by uid), forgotten
    ``keep_seconds`` later (the cap plus ``REMEMBER_AFTER_CAP_SECONDS``)."""

    def __init__(self, keep_seconds: float) -> None:
        self.keep = keep_seconds
        self._at: dict[str, float] = {}
        self._lock = threading.Lock()

    def get(self, uid: str, now: float) -> float | None:
        with self._lock:
            t = self._at.get(uid)
            if t is not None and now - t > self.keep:
                del self._at[uid]
                return None
            return t

    def note(self, uid: str, now: float) -> None:
        with self._lock:
            self._at.setdefault(uid, now)
            if len(self._at) % 1024 == 0:  # now and then, drop what is forgotten
                self._at = {u: t for u, t in self._at.items() if now - t <= self.keep}


def _dry_run_delete(eviction: object) -> bool:
    """An Eviction whose deleteOptions ask for a dry run (what ``kubectl drain --dry-run=server``
    sends: the request itself is no dry run, the deletion it asks for is)."""
    if not isinstance(eviction, dict):
        return False
    options = eviction.get("deleteOptions")
    dry = options.get("dryRun") if isinstance(options, dict) else None
    return isinstance(dry, list) and len(dry) > 0


def response(uid: str, *, allowed: bool, message: str = "", retry_after: int = 0,
             warning: str = "") -> dict:
    out: dict = {"uid": uid, "allowed": allowed}
    if warning:
        out["warnings"] = [warning]
    if not allowed:
        out["status"] = {"status": "Failure", "code": TOO_MANY_REQUESTS,
                         "reason": "TooManyRequests", "message": message,
                         "details": {"retryAfterSeconds": retry_after}}
    return review_response(out)


def gated_pod(d: Mapping) -> eg.GatedPod:
    meta, spec = d.get("metadata") or {}, d.get("spec") or {}
    return eg.GatedPod(
        uid=meta.get("uid", ""), namespace=meta.get("namespace", ""), name=meta.get("name", ""),
        resource_version=meta.get("resourceVersion", ""),
        annotations=dict(meta.get("annotations") or {}), labels=dict(meta.get("labels") or {}),
        priority_class=spec.get("priorityClassName") or "",
        terminating=meta.get("deletionTimestamp") is not None)


class Gate:
    def __init__(self, api: client.ApiClient, settings: GateSettings, *,
                 clock: Callable[[], float] = time.time, cache: PodCache | None = None) -> None:
        """``cache``: read pods from it (a GET when it does not hold the pod); None: a GET
        for every review."""
        api = client_with_pool(api, GATE_CONNECTIONS)
        self.core = client.CoreV1Api(api)
        self.settings = settings
        # no leader: every replica answers; the resourceVersion precondition keeps one writer
        self.actions = Actions(api, plan_namespace="",
                               guard=WriteGuard(request_timeout=settings.request_timeout))
        self.actions.instance = "ckpt-preempt-gate"
        self.clock = clock
        self.cache = cache
        self.first_refusals = FirstRefusals(settings.limits.max_checkpoint_seconds
                                            + REMEMBER_AFTER_CAP_SECONDS)
        # (answer kind, seconds) per review, in order (bench/eviction_gate.py)
        self.handled: list[tuple[str, float]] = []
        # answers by kind (allow, refuse, request, dry-run, error) and drain requests "written"
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self.write_seconds: list[float] = []  # per drain request written (or tried)
        self._writes: queue.Queue = queue.Queue()
        self._in_flight: set[str] = set()  # disruption ids queued or being written
        for i in range(WRITERS):
            threading.Thread(target=self._writer, name=f"gate-write-{i}", daemon=True).start()
        self._unwritable: set[str] = set()  # pod uids we may not write (403/404/422)
        self._events: queue.Queue = queue.Queue(EVENT_QUEUE)
        threading.Thread(target=self._send_events, name="gate-events", daemon=True).start()

    # ---------------------------------------------------------------------------- reviews
    def review(self, body: object) -> dict:
        """The AdmissionReview answer to ``body`` (already parsed JSON); ValueError when it is
        not an AdmissionReview (the server answers 400)."""
        started = time.perf_counter()
        req = review_request(body)
        uid = req["uid"]
        try:
            out, what = self._answer(req)
        except Exception as e:  # fail open, as a dead gate would
            log.exception("eviction gate error; allowing: %s", e)
            out, what = response(uid, allowed=True), "error"
        with self._lock:
            self.handled.append((what, time.perf_counter() - started))
        self._count(what)
        return out

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def _answer(self, req: Mapping) -> tuple[dict, str]:
        uid = req["uid"]
        name, namespace = req.get("name"), req.get("namespace")
        user = ((req.get("userInfo") or {}).get("username")) or ""
        if not isinstance(name, str) or not isinstance(namespace, str):
            return response(uid, allowed=True), "allow"
        dry_run = req.get("dryRun") is True or _dry_run_delete(req.get("object"))
        exempt = user in self.settings.exempt_users
        raw = None
        if not exempt:
            raw = self._read(namespace, name)
            if raw is None:  # gone or unreadable: nothing to protect
                return response(uid, allowed=True), "allow"
        now = self.clock()
        pod = gated_pod(raw) if raw is not None else eg.GatedPod(
            uid="", namespace=namespace, name=name, resource_version="", annotations={},
            labels={})
        decision = eg.decide(pod, now=now, limits=self.settings.limits,
                             first_refused=self.first_refusals.get(pod.uid, now),
                             exempt_requester=exempt, dry_run=dry_run)
        if decision.allowed:
            log.info("eviction of %s/%s allowed: %s", namespace, name, decision.reason,
                     extra={"user": user})
            return response(uid, allowed=True), "allow"
        if decision.request is not None:
            if pod.uid in self._unwritable:  # refused to us before: we cannot ask this pod
                return response(uid, allowed=True), "allow"
            self._write_later(pod_info(raw), decision)
        if dry_run:  # allowed, saying what the real one would meet: a refused dry run would
            # only make `kubectl drain --dry-run=server` retry for ever (its --timeout does not
            # bound the retries of a dry run)
            return (response(uid, allowed=True, warning="ckpt-preempt eviction gate: a real "
                             f"eviction would be refused: {decision.reason}"), "dry-run")
        self.first_refusals.note(pod.uid, now)
        until = decision.until if decision.until is not None else now
        retry = max(1, min(RETRY_AFTER_SECONDS, math.ceil(until - now)))
        message = f"ckpt-preempt eviction gate: {decision.reason}"
        log.info("eviction of %s/%s refused: %s", namespace, name, decision.reason,
                 extra={"user": user, "dry_run": dry_run})
        return (response(uid, allowed=False, message=message, retry_after=retry),
                "request" if decision.request is not None else "refuse")

    # ----------------------------------------------------------------------------- writes
    def _write_later(self, info, decision: eg.Decision) -> None:
        """Queue the drain request for the writer threads; the answer (429) does not wait for
        it. If the write does not land, the pod carries no request and the client's retry
        decides again (the same id from the same view); the hold stays bounded by the first
        refusal."""
        plan = decision.request.plan
        with self._lock:
            if plan in self._in_flight:  # the same request, already queued or being written
                return
            self._in_flight.add(plan)
        self._writes.put((info, decision))

    def _writer(self) -> None:
        while True:
            info, decision = self._writes.get()
            try:
                self._write(info, decision)
            finally:
                self._writes.task_done()

    def _write(self, info, decision: eg.Decision) -> None:
        started = time.perf_counter()
        try:
            if self.actions.request_checkpoint(info, decision.request, only_if_unchanged=True,
                                               decode=False):
                self._count("written")
                self._event(info, decision)
        except WriteFailed as e:
            if e.status in (403, 404, 422):  # may not, gone, or refused: never ask it again
                with self._lock:
                    if len(self._unwritable) >= UNWRITABLE_KEPT:
                        self._unwritable.clear()
                    self._unwritable.add(info.uid)
            log.warning("drain request for %s not written: %s", info.key, e)
            self._count("write-failed")
        except Exception as e:  # a timeout, a broken connection: the next retry asks again
            log.warning("drain request for %s not written: %s", info.key, e)
            self._count("write-failed")
        finally:
            with self._lock:
                self._in_flight.discard(decision.request.plan)
                self.write_seconds.append(time.perf_counter() - started)

    def flush(self) -> None:
        """Wait until every queued drain request is written or failed (tests, the benchmark)."""
        self._writes.join()

    def _read(self, namespace: str, name: str) -> dict | None:
        cached = self.cache.get(namespace, name) if self.cache is not None else None
        if cached is not None:
            return cached
        try:
            r = self.core.read_namespaced_pod(name, namespace, _preload_content=False,
                                              _request_timeout=self.settings.request_timeout)
        except ApiException as e:
            if e.status != 404:
                log.warning("cannot read pod %s/%s (%s); allowing its eviction", namespace,
                            name, e.reason)
            return None
        return json.loads(r.data)

    # ----------------------------------------------------------------------------- events
    def _event(self, info, decision: eg.Decision) -> None:
        try:
            self._events.put_nowait((info, decision.reason))
        except queue.Full:
            log.warning("event queue full; EvictionDelayed for %s not recorded", info.key)

    def _send_events(self) -> None:
        while True:
            info, reason = self._events.get()
            try:
                self.actions.emit(info, Reason.EVICTION_DELAYED, reason)
            except Exception as e:  # an Event is best effort
                log.warning("EvictionDelayed for %s not recorded: %s", info.key, e)
