"""Leader election on a coordination/v1 Lease, small and explicit.

One replica holds the Lease; it renews every ``duration / 3``. Another replica takes over only
when ``renewTime + leaseDurationSeconds`` has passed *by its own clock since it last saw the
Lease change* (so clock skew between replicas does not matter), and only with an update guarded
by the resourceVersion it read: of two replicas racing, the API server lets exactly one win
(409 for the other). A leader that cannot renew within the duration steps down by itself
before anyone else may take over.

``may_write()`` is what ``controller.writes.actions`` asks before every single write: true only
while the last successful renewal is less than ``renew_deadline`` old (by this process's monotonic
clock, measured from *before* the renewal request was sent). The config keeps
``renew_deadline + request timeout <= duration``, so a write sent in time lands before any other
replica may take over, even if this process is then stopped (SIGSTOP, a long GC) mid-pass.
"""

from __future__ import annotations

import logging
import threading
import time

from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core.backoff import retrying
from ckpt_preempt.policies.model.times import rfc3339_micro

log = logging.getLogger("ckpt_preempt.leader")


class LeaseElector:
    def __init__(self, api: client.ApiClient, *, name: str, namespace: str, identity: str,
                 duration: float = 15.0, renew_deadline: float | None = None,
                 request_timeout: float = 5.0, on_change=None) -> None:
        self.api = client.CoordinationV1Api(api)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.duration = duration
        self.renew_deadline = renew_deadline if renew_deadline is not None else duration * 2 / 3
        self.request_timeout = request_timeout
        self._leader = threading.Event()
        self._valid_until = 0.0  # monotonic: writing stops here unless renewed
        self._seen: tuple[str, float] | None = None  # (resourceVersion, monotonic when seen)
        self._stop = threading.Event()
        self._on_change = on_change or (lambda leader: None)
        self._thread = threading.Thread(target=self._run, name="leader", daemon=True)

    @property
    def is_leader(self) -> bool:
        if self._leader.is_set() and time.monotonic() >= self._valid_until:
            self._set(False)
        return self._leader.is_set()

    def may_write(self) -> bool:
        return self.is_leader

    def start(self) -> None:
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if release and self._leader.is_set():
            self._release()
        self._set(False)

    def _set(self, leader: bool) -> None:
        if leader != self._leader.is_set():
            log.info("leadership %s", "acquired" if leader else "lost",
                     extra={"identity": self.identity, "lease": self.name})
            (self._leader.set if leader else self._leader.clear)()
            self._on_change(leader)

    def _spec(self, transitions: int, acquire: str | None) -> dict:
        now = rfc3339_micro(time.time())
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration),
                "acquireTime": acquire or now, "renewTime": now, "leaseTransitions": transitions}

    def try_acquire_or_renew(self) -> bool:
        start = time.monotonic()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace,
                                                  _request_timeout=self.request_timeout)
        except ApiException as e:
            if e.status != 404:
                raise
            body = {"metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(0, None)}
            try:
                self.api.create_namespaced_lease(self.namespace, body,
                                                 _request_timeout=self.request_timeout)
            except ApiException as e2:
                if e2.status == 409:
                    return False
                raise
            self._valid_until = start + self.renew_deadline
            return True
        spec, rv = lease.spec, lease.metadata.resource_version
        if self._seen is None or self._seen[0] != rv:
            self._seen = (rv, start)
        holder = spec.holder_identity or ""
        duration = spec.lease_duration_seconds or self.duration
        mine = holder == self.identity
        expired = not holder or start - self._seen[1] >= duration
        if not (mine or expired):
            return False
        transitions = (spec.lease_transitions or 0) + (0 if mine else 1)
        acquire = rfc3339_micro(spec.acquire_time) \
            if mine and spec.acquire_time else None
        body = {"metadata": {"name": self.name, "namespace": self.namespace,
                             "resourceVersion": rv},
                "spec": self._spec(transitions, acquire)}
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, body,
                                              _request_timeout=self.request_timeout)
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        self._valid_until = start + self.renew_deadline
        return True

    def _release(self) -> None:
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec.holder_identity != self.identity:
                return
            body = {"metadata": {"name": self.name, "namespace": self.namespace,
                                 "resourceVersion": lease.metadata.resource_version},
                    "spec": {"holderIdentity": "", "leaseDurationSeconds": 1,
                             "leaseTransitions": lease.spec.lease_transitions or 0}}
            self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except ApiException as e:
            log.info("lease release skipped: %s", e.reason)

    def _run(self) -> None:
        # API errors are retried with the project's one backoff policy, capped well inside the
        # renew deadline; meanwhile ``is_leader`` lapses by itself at ``_valid_until``.
        policy = retrying(self._stop, what=f"lease {self.name}", logger=log,
                          cap_seconds=self.duration / 5)
        while not self._stop.is_set():
            ok = bool(policy(self.try_acquire_or_renew))
            self._set(ok and time.monotonic() < self._valid_until)
            self._stop.wait(self.duration / 3 if ok else self.duration / 5)
