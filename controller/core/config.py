"""The controller's config file (YAML or JSON), parsed strictly into a frozen ``Config``.

    namespaces: [team-a, team-b]     # scope: preemptors and victims (empty = all)
    priorityClasses: [training-high] # scope: preemptor priority classes (empty = all)
    schedulerNames: [default-scheduler]  # scope: pods of other schedulers are left alone
    maxCheckpointSeconds: 600        # cap on a victim's checkpoint-seconds (drain deadline)
    maxMinRuntimeSeconds: 3600       # cap on min-runtime
    evictionTimeoutSeconds: 120      # after the deadline: give up evicting and re-plan
    evictAttempts: 4                 # Eviction API calls per victim per pass (429/5xx retried)
    blockedVictimSeconds: 300        # a victim still refused at evictBy is skipped this long
    gangTimeoutSeconds: 600          # a gated gang waiting this long gets GangTimedOut
    retrySeconds: 5                  # wait before planning the same preemptor again
    drain: true                      # ask on-request victims to checkpoint first
    reserveNodes: true               # taint target nodes while they are freed (both modes)
    dryRun: false                    # plan and emit Events only
    leaseName: ckpt-preempt-controller
    leaseNamespace: kube-system
    leaseDurationSeconds: 15
    renewDeadlineSeconds: 10         # a leader writes only within this long of its last renewal
    planNamespace: ckpt-preempt      # the controller's own namespace: plans live here (ConfigMaps)
    requestTimeoutSeconds: 5         # every API call gives up after this long
    writeConcurrency: 8              # plans whose writes are sent at once (1: one plan at a time)
    bindTimeoutSeconds: 300          # after its victims are gone, the preemptor must bind by then
    planHistorySeconds: 86400        # finished plans are kept this long (fairness, bound, audit)
    optOutNamespaces: []             # where preemptible: "false" is honoured ("*": everywhere)
    optOutPriorityClasses: []        # likewise, by priority class (default: nowhere)
    unknownCheckpoint: start-time    # start-time | cluster-median | assume:30m
    fairnessWindowSeconds: 3600      # preemptions this recent count against a workload
    fairnessPenaltySeconds: 900      # per GPU per recent preemption, added to its cost (0: off)
    restartCostSeconds: 150          # per evicted GPU: your jobs' restart/restore time (0: off)
    restartCostGpuSecondsPerWorkload: 0  # per evicted gang or pod, whatever its size (0: off)
    elasticShrink: true              # elastic gangs may give up members above their minimum
    planTiming: true                 # a plan may wait for victims' next checkpoint or end
    reportParity: true               # a reporting periodic pod waits behind a silent one
    rendezvousCostSeconds: 60        # per GPU of a shrinking gang: its re-rendezvous (assumed)
    maxPreemptionsPerWindow: 4       # starvation bound: a workload preempted this often within
    preemptionBoundWindowSeconds: 86400  # this window is no victim (0: off;
    policies/planner/bound.py)
    # GPU health from dcgm-exporter through Prometheus (controller/health/health.py); off without a
    URL
    prometheusUrl: https://prometheus.monitoring:9090
    prometheusBearerTokenFile: /var/run/secrets/prometheus/token   # sent as Authorization
    prometheusCaFile: /etc/prometheus-ca/ca.crt   # or prometheusInsecureSkipVerify: true
    healthRefreshSeconds: 30         # one refresh (a query per rule) at most this often
    healthQueryTimeoutSeconds: 5     # per query; 3 tries each
    healthWindowSeconds: 300         # the window of the rate rules (NVLink, PCIe, throttling)
    healthQueryMode: direct          # direct | recorded (Prometheus recording rules installed)
    healthHostnameLabels: [Hostname, hostname]   # the labels naming a sample's node, in order
    healthNodeNames: []              # "exporter-host=node-name" where they differ
    healthCheckpoint: true           # ask on-request pods to checkpoint when a node degrades
    healthCheckpointIntervalSeconds: 1800   # at most one such round per node this often
    # what counts as a GPU (controller/core/gpu_resources.py; MIG slices count as their fraction)
    gpuResources: [nvidia.com/gpu]   # whole-GPU extended resources (amd.com/gpu, ...)
    gpuDraDrivers: [gpu.nvidia.com]  # DRA drivers whose allocated devices are GPUs ([]: off)
    gpuDeviceClasses: [gpu.nvidia.com]   # DeviceClasses a pending claim's GPUs are asked from
    # early warning: ask checkpointing pods of a node showing a disruption signal
    earlyWarning: true
    earlyWarningSignals: [karpenter.sh/disrupted:NoSchedule, ...]  # taint key[:Effect]
    earlyWarningWindowSeconds: 600   # at most one round per node this often
    earlyWarningExcludedNamespaces: []       # never asked ("*": nowhere)
    earlyWarningExcludedPriorityClasses: []
    evictionRequestResponder: ""     # KEP-4563 responder name (opt-in; docs/eviction-request.md)
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields
from pathlib import Path

from ckpt_preempt.controller.core import documents
from ckpt_preempt.controller.core import gpu_resources as gpu_names
from ckpt_preempt.policies.disruption import disruption_signals
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.planner import bound, preemption, shrink

# What kube-scheduler calls itself, and what the API server writes into a pod that names no
# scheduler (kubernetes v1.37.2 staging/src/k8s.io/api/core/v1/types.go DefaultSchedulerName;
# pkg/apis/core/v1/defaults.go SetDefaults_PodSpec).
DEFAULT_SCHEDULER = "default-scheduler"
# writeConcurrency: plans written at once (controller/writes/write_lanes.py)
MAX_WRITE_CONCURRENCY = 64
# restartCostSeconds' default, per evicted GPU, chosen by measurement (bench/restart_cost.py,
# bench/results/restart_cost.md: seeds 1-8, the stress and replay cells of every workload,
# checkpoint-aware-drain, the simulator's true restore 300 s per GPU or 60-600 s per training
# job). Any charge above 0 cut the stress cells' losses 9-14 % (openb/stress 0.87 [0.84, 0.90]
# of 0's at 150 s); of 60, 150, 300 and 600 s, 150 s was nearest the best charge in its worst
# cell (median regret 1.035; 300 s 1.12, 600 s 1.14, 0 s 1.17). The intervals of 60-600 s
# overlap: it is a robust middle, half the simulated restore, not a precise optimum; an
# operator who knows their jobs' restart time should set it.
RESTART_COST_SECONDS = 150.0


class HealthQueryMode(enum.StrEnum):
    """How a health refresh reads Prometheus (controller/health/health_promql.py)."""

    DIRECT = "direct"  # the rules' queries at every refresh
    RECORDED = "recorded"  # the series the recording rules record


class ConfigError(ValueError):
    """The config file is unreadable or has an unknown key or a bad value."""


@dataclass(frozen=True, kw_only=True)
class Config:
    namespaces: tuple[str, ...] = ()
    priority_classes: tuple[str, ...] = ()
    scheduler_names: tuple[str, ...] = (DEFAULT_SCHEDULER,)
    max_checkpoint_seconds: float = 600.0
    max_min_runtime_seconds: float = 3600.0
    eviction_timeout_seconds: float = 120.0
    evict_attempts: int = 4
    blocked_victim_seconds: float = 300.0
    gang_timeout_seconds: float = 600.0
    retry_seconds: float = 5.0
    drain: bool = True
    reserve_nodes: bool = True
    dry_run: bool = False
    lease_name: str = "ckpt-preempt-controller"
    lease_namespace: str = "kube-system"
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    plan_namespace: str = "ckpt-preempt"
    request_timeout_seconds: float = 5.0
    write_concurrency: int = 8
    bind_timeout_seconds: float = 300.0
    # at least the starvation bound's window: preemptions are counted from the plans kept
    plan_history_seconds: float = bound.PREEMPTION_BOUND_WINDOW_SECONDS
    opt_out_namespaces: tuple[str, ...] = ()
    opt_out_priority_classes: tuple[str, ...] = ()
    unknown_checkpoint: str = str(ann.UNKNOWN_CHECKPOINT)
    fairness_window_seconds: float = preemption.FAIRNESS_WINDOW_SECONDS
    fairness_penalty_seconds: float = preemption.FAIRNESS_PENALTY_SECONDS
    restart_cost_seconds: float = RESTART_COST_SECONDS
    # a restart's fixed part, once per evicted workload (gang or pod) whatever its GPUs: without
    # it a fractional pod looks many times cheaper to restart than it is. 0 by default: we have
    # no measured figure (the simulator assumes 300 GPU-s, policies/sim/costs.py)
    restart_cost_gpu_seconds_per_workload: float = 0.0
    elastic_shrink: bool = True
    # when to evict (policies.planner.timing): a plan may wait, up to max_checkpoint_seconds, for
    # its victims' next periodic checkpoint or declared end when that loses less, and victims are
    # chosen knowing their declared ends; False: at once, victims by loss only
    plan_timing: bool = True
    # report parity (policies.planner.parity): a periodic pod that reports its checkpoints is no
    # victim while a silent periodic pod preempted no more often could go instead (relaxed when
    # only reporters make room); False: victims by loss alone, reporters first
    report_parity: bool = True
    rendezvous_cost_seconds: float = shrink.RENDEZVOUS_SECONDS  # an assumption
    prometheus_url: str = ""
    prometheus_bearer_token_file: str = ""
    prometheus_ca_file: str = ""
    prometheus_insecure_skip_verify: bool = False
    health_refresh_seconds: float = 30.0
    health_query_timeout_seconds: float = 5.0
    health_window_seconds: float = 300.0
    health_query_mode: str = str(HealthQueryMode.DIRECT)
    health_hostname_labels: tuple[str, ...] = ("Hostname", "hostname")
    health_node_names: tuple[str, ...] = ()
    health_checkpoint: bool = True
    health_checkpoint_interval_seconds: float = 1800.0
    gpu_resources: tuple[str, ...] = gpu_names.DEFAULT_WHOLE
    gpu_dra_drivers: tuple[str, ...] = gpu_names.DEFAULT_DRA_DRIVERS
    gpu_device_classes: tuple[str, ...] = gpu_names.DEFAULT_DEVICE_CLASSES
    # the starvation bound (policies.planner.bound; the defaults are assumptions, cited there)
    max_preemptions_per_window: int = bound.MAX_PREEMPTIONS_PER_WINDOW
    preemption_bound_window_seconds: float = bound.PREEMPTION_BOUND_WINDOW_SECONDS
    # early warning (policies/disruption/disruption_signals.py, controller/planning/disruption.py):
    # checkpointing pods of a node that shows one of these taints (or a cordon) are asked to
    # checkpoint at once, at most one round per node per window (an assumption, see WINDOW_SECONDS)
    early_warning: bool = True
    early_warning_signals: tuple[str, ...] = disruption_signals.DEFAULT_SIGNALS
    early_warning_window_seconds: float = disruption_signals.WINDOW_SECONDS
    early_warning_excluded_namespaces: tuple[str, ...] = ()
    early_warning_excluded_priority_classes: tuple[str, ...] = ()
    # KEP-4563's EvictionRequest API (docs/eviction-request.md): our responder name, opt-in
    # ("": off); with it set the controller only reports whether the API can be used
    eviction_request_responder: str = ""

    def __post_init__(self) -> None:
        self._check_health()
        if not self.scheduler_names:
            raise ConfigError("config: schedulerNames must name at least one scheduler "
                              f"(default: [{DEFAULT_SCHEDULER}])")
        for name in self.scheduler_names:
            if not name or name != name.strip():
                raise ConfigError(f"config: schedulerNames: {name!r} is not a scheduler name")
        why = (gpu_names.check_names(self.gpu_resources, "gpuResources")
               or gpu_names.check_driver_names(self.gpu_dra_drivers, "gpuDraDrivers")
               or gpu_names.check_driver_names(self.gpu_device_classes, "gpuDeviceClasses"))
        if why:
            raise ConfigError(f"config: {why}")
        try:
            ann.parse_unknown_checkpoint(self.unknown_checkpoint)
        except ValueError as e:
            raise ConfigError(f"config: unknownCheckpoint: {e}") from None
        if not math.isfinite(self.restart_cost_seconds):
            raise ConfigError("config: restartCostSeconds must be a finite number of seconds "
                              f"(0 or more), not {self.restart_cost_seconds!r}")
        if not math.isfinite(self.restart_cost_gpu_seconds_per_workload):
            raise ConfigError("config: restartCostGpuSecondsPerWorkload must be a finite number "
                              f"(0 or more), not {self.restart_cost_gpu_seconds_per_workload!r}")
        if self.fairness_window_seconds > self.plan_history_seconds:
            raise ConfigError("config: fairnessWindowSeconds must not exceed planHistorySeconds "
                              "(preemptions are counted from the plans kept)")
        if not 0 < self.preemption_bound_window_seconds < float("inf"):
            raise ConfigError("config: preemptionBoundWindowSeconds must be a finite number > 0")
        if self.preemption_bound_window_seconds > self.plan_history_seconds:
            raise ConfigError("config: preemptionBoundWindowSeconds must not exceed "
                              "planHistorySeconds (preemptions are counted from the plans kept)")
        # A write sent before the renew deadline lands (or times out) before any other replica
        # may take the Lease over, which it can do leaseDurationSeconds after our last renewal.
        if self.renew_deadline_seconds + self.request_timeout_seconds > \
                self.lease_duration_seconds:
            raise ConfigError("config: renewDeadlineSeconds + requestTimeoutSeconds must not "
                              "exceed leaseDurationSeconds")
        if isinstance(self.write_concurrency, bool) or not isinstance(self.write_concurrency, int) \
                or not 1 <= self.write_concurrency <= MAX_WRITE_CONCURRENCY:
            raise ConfigError(f"config: writeConcurrency must be a whole number from 1 to "
                              f"{MAX_WRITE_CONCURRENCY}, not {self.write_concurrency!r}")
        self._check_early_warning()


    def _check_health(self) -> None:
        if self.prometheus_url and not self.prometheus_url.startswith(("http://", "https://")):
            raise ConfigError("config: prometheusUrl must start with http:// or https://")
        if self.prometheus_ca_file and self.prometheus_insecure_skip_verify:
            raise ConfigError("config: prometheusCaFile and prometheusInsecureSkipVerify "
                              "exclude each other")
        if self.health_query_mode not in tuple(HealthQueryMode):
            raise ConfigError(f"config: healthQueryMode must be one of "
                              f"{', '.join(HealthQueryMode)}, not {self.health_query_mode!r}")
        if not self.health_hostname_labels:
            raise ConfigError("config: healthHostnameLabels must name at least one label")
        for entry in self.health_node_names:
            host, sep, node = entry.partition("=")
            if not sep or not host or not node:
                raise ConfigError(f"config: healthNodeNames: {entry!r} is not host=node")

    def _check_early_warning(self) -> None:
        for text in self.early_warning_signals:
            try:
                disruption_signals.parse_signal(text)
            except ValueError as e:
                raise ConfigError(f"config: earlyWarningSignals: {e}") from None
        name = self.eviction_request_responder
        if name and ("/" not in name or name.startswith("/") or name.endswith("/")):
            raise ConfigError("config: evictionRequestResponder must be a domain-prefixed "
                              f"name such as ckpt-preempt.io/checkpoint, not {name!r}")

    @property
    def health_node_map(self) -> dict[str, str]:
        """healthNodeNames as exporter host -> Node name."""
        return dict(e.split("=", 1) for e in self.health_node_names)


# 0 turns the fairness guard off, leaves restarts out of a victim's cost, turns the bound off
_ZERO_ALLOWED = {"fairness_penalty_seconds", "restart_cost_seconds", "rendezvous_cost_seconds",
                 "max_preemptions_per_window", "restart_cost_gpu_seconds_per_workload"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    out = head + "".join(w.capitalize() for w in rest)
    return out


def parse(data: object) -> Config:
    if data is None:
        return Config()
    if not isinstance(data, dict):
        raise ConfigError("config: expected a mapping at the top level")
    by_key = {_camel(f.name): f for f in fields(Config)}
    kw = {}
    for key, value in data.items():
        f = by_key.get(key)
        if f is None:
            raise ConfigError(f"config: unknown key {key!r} (known: {', '.join(sorted(by_key))})")
        default = getattr(Config(), f.name)
        if isinstance(default, tuple):
            if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
                raise ConfigError(f"config: {key} must be a list of strings")
            value = tuple(value)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"config: {key} must be true or false")
        elif isinstance(default, int | float):
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    value > 0 or (value == 0 and f.name in _ZERO_ALLOWED)):
                raise ConfigError(f"config: {key} must be a positive number")
            if isinstance(default, int) and value != int(value):
                raise ConfigError(f"config: {key} must be a whole number, not {value!r}")
            value = type(default)(value)
        elif not isinstance(value, str) or not value:
            raise ConfigError(f"config: {key} must be a non-empty string")
        kw[f.name] = value
    return Config(**kw)


def load(path: str | Path | None) -> Config:
    if path is None:
        return Config()
    try:
        data = documents.load(path)
    except documents.DocumentError as e:  # one line naming the file (and line:column)
        raise ConfigError(f"config {e}") from e
    return parse(data)
