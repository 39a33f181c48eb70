"""Wires the controller together: cache, leader election, HTTP endpoints, the reconcile loop.

``Controller(api, cfg).run(stop)`` blocks until ``stop`` is set; e2e tests run it in a thread
or, through ``ckpt-preempt run``, as a subprocess. Only the Lease holder acts; every replica
keeps its cache warm so a new leader starts from a synced view. A dry-run replica never takes
the Lease (it writes nothing but Events), so it cannot keep the real replicas from acting.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

from kubernetes import client

from ckpt_preempt.controller.app.server import serve
from ckpt_preempt.controller.core import gpu_resources
from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.core.metrics import Metrics
from ckpt_preempt.controller.health.health import PrometheusHealth
from ckpt_preempt.controller.kube.watch import ClusterCache
from ckpt_preempt.controller.planning.reconcile import Reconciler
from ckpt_preempt.controller.writes.actions import Actions, NotLeader, WriteGuard
from ckpt_preempt.controller.writes.leader import LeaseElector

log = logging.getLogger("ckpt_preempt.controller")
TICK_SECONDS = 1.0  # a pass at least this often (deadlines), or sooner on any watch event
MIN_PASS_GAP_SECONDS = 0.05  # but not back to back: a busy cluster changes all the time


class Controller:
    def __init__(self, api: client.ApiClient, cfg: Config, *, identity: str | None = None,
                 listen: tuple[str, int] | None = None, elect: bool = True) -> None:
        self.cfg = cfg
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.metrics = Metrics()
        self.cache = ClusterCache(api, plan_namespace=cfg.plan_namespace,
                                  gpus=gpu_resources.from_config(cfg))
        self.elector = LeaseElector(
            api, name=cfg.lease_name, namespace=cfg.lease_namespace, identity=self.identity,
            duration=cfg.lease_duration_seconds, renew_deadline=cfg.renew_deadline_seconds,
            request_timeout=cfg.request_timeout_seconds,
            on_change=lambda leader: self.metrics.leader.set(1 if leader else 0),
        ) if elect and not cfg.dry_run else None  # a dry run never takes the Lease
        guard = WriteGuard(dry_run=cfg.dry_run, request_timeout=cfg.request_timeout_seconds,
                           may_write=self.elector.may_write if self.elector else lambda: True)
        self.actions = Actions(api, plan_namespace=cfg.plan_namespace, guard=guard,
                               evict_attempts=cfg.evict_attempts,
                               on_retry=self.metrics.eviction_retries.inc,
                               connections=cfg.write_concurrency,
                               on_event=lambda r: self.metrics.events.labels(r.value).inc())
        self.actions.instance = self.identity[:128]
        # GPU health, when a Prometheus is configured: refreshed by its own thread
        self.health = PrometheusHealth(
            cfg, self.metrics, nodes=lambda: [n.name for n in self.cache.nodes.items()],
        ) if cfg.prometheus_url else None
        self.reconciler = Reconciler(self.cache, self.actions, cfg, self.metrics,
                                     health=self.health)
        self.listen = listen
        self.server = None
        self._last_tick = time.monotonic()

    @property
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def healthy(self) -> bool:
        return time.monotonic() - self._last_tick < 30

    def run(self, stop: threading.Event) -> None:
        self.cache.start()
        if self.elector:
            self.elector.start()
        if self.health:
            self.health.start(stop)
        if self.listen:
            self.server = serve(*self.listen, self.metrics.registry, healthy=self.healthy,
                                ready=self.cache.synced,
                                detail=self.health.readiness_detail if self.health else None)
        log.info("controller started", extra={"identity": self.identity,
                                              "dry_run": self.cfg.dry_run})
        try:
            while not stop.is_set():
                self.cache.changed.wait(TICK_SECONDS)
                self.cache.changed.clear()
                self._last_tick = time.monotonic()
                if stop.is_set() or not self.cache.synced() or not self.is_leader:
                    continue
                try:
                    self.reconciler.tick()
                except NotLeader as e:
                    log.warning("pass stopped: %s", e)
                except Exception:
                    log.exception("reconcile pass failed")
                    self.metrics.loop_errors.inc()
                stop.wait(MIN_PASS_GAP_SECONDS)
        finally:
            if self.elector:
                self.elector.stop()
            self.cache.stop()
            if self.server:
                self.server.shutdown()
