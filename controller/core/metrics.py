"""Prometheus metrics, one registry per controller (so tests can run two in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.plans = Counter("ckpt_preempt_plans_total", "Plans by outcome", ["outcome"],
                             registry=r)
        self.victims = Counter("ckpt_preempt_victims_total", "Pods evicted by plans",
                               registry=r)
        self.lost_gpu_hours = Counter("ckpt_preempt_lost_gpu_hours_total",
                                      "GPU-hours of work lost by planned victims", registry=r)
        self.saved_gpu_hours = Gauge(
            "ckpt_preempt_gpu_hours_saved",
            "Running sum over stored plans of GPU-hours kube-default preemption would have "
            "lost minus what our plan loses, on the same snapshot (negative when ours lost "
            "more)", registry=r)
        self.drain_seconds = Histogram(
            "ckpt_preempt_drain_duration_seconds", "Plan creation to the start of evictions",
            buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1200), registry=r)
        self.eviction_retries = Counter("ckpt_preempt_eviction_retries_total",
                                        "Eviction API calls retried after 429/5xx", registry=r)
        self.plan_aborts = Counter("ckpt_preempt_plan_aborts_total",
                                   "Plans aborted, by cause (AbortCause, policies/lifecycle)",
                                   ["cause"], registry=r)
        self.events = Counter("ckpt_preempt_events_total",
                              "Events written, by reason (controller/core/events.py says what each "
                              "means)", ["reason"], registry=r)
        self.plan_latency = Histogram(
            "ckpt_preempt_plan_latency_seconds", "Time to compute one plan",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5), registry=r)
        self.leader = Gauge("ckpt_preempt_is_leader", "1 while this replica holds the lease",
                            registry=r)
        self.active_plans = Gauge("ckpt_preempt_active_plans", "Plans not yet Done or Aborted",
                                  registry=r)
        self.loop_errors = Counter("ckpt_preempt_loop_errors_total",
                                   "Unexpected errors caught by the reconcile loop", registry=r)
        # GPU health (controller/health/health.py)
        self.health_source_up = Gauge(
            "ckpt_preempt_health_source_up",
            "1 when the last health refresh read Prometheus, 0 when it could not (every node "
            "is then unknown)", registry=r)
        self.health_refresh = Histogram(
            "ckpt_preempt_health_refresh_seconds", "Time of one health refresh (all queries)",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 15), registry=r)
        self.health_nodes = Gauge("ckpt_preempt_health_nodes",
                                  "Nodes with GPUs reporting, by health state", ["state"],
                                  registry=r)
        self.health_checkpoints = Counter(
            "ckpt_preempt_health_checkpoint_requests_total",
            "Checkpoint requests (no eviction) sent because a node's GPUs degraded", registry=r)
