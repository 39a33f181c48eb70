"""GPU and node health from dcgm-exporter metrics: rules are data, judging is pure.

A ``Rule`` names one dcgm-exporter field, how to read it (its latest value, or its per-second
rate over a window, times a scale) and the state it puts a GPU in when it fires. The controller
turns each rule into one PromQL query for the whole cluster (``controller/health/health.py``) that
returns only the GPUs where the rule fires, plus one coverage query that says which GPUs
report at all; ``judge`` turns those readings into a ``HealthReport``.

States, best to worst for placement: ``healthy`` (reports, no rule fires), ``unknown`` (no data:
the exporter, the counter or Prometheus is missing), ``degraded``, ``failing``. Missing data is
``unknown``, never ``failing``: a GPU or node is only ever failing because a reading made a
failing rule fire. A node is as bad as its worst GPU; it is healthy when some GPU of it reports
and none is degraded or failing, unknown when none reports.

The default rules (``DEFAULT_RULES``) follow NVIDIA DCGM's own health watches, mapping DCGM's
FAIL to ``failing`` and WARN to ``degraded``; each rule's ``source`` cites where. XID names are
dcgm-exporter's (github.com/NVIDIA/dcgm-exporter internal/pkg/collector/xid_errors.go
@ 4.5.3-4.8.2); their meaning is NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


class DcgmField(enum.StrEnum):
    """dcgm-exporter's metric names this project reads: the health rules here and hwprobe's
    NVML cross-check (``hwprobe/dcgm_check.py``). From github.com/NVIDIA/dcgm-exporter
    etc/default-counters.csv (the ECC and NVLink error fields are there, commented out;
    deploy/dcgm/health-counters.csv enables them)."""

    XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
    ECC_DBE_VOL_TOTAL = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
    ECC_DBE_AGG_TOTAL = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
    UNCORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
    CORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
    ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
    PCIE_REPLAY_COUNTER = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
    NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
    NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
    NVLINK_REPLAY_ERROR_COUNT_TOTAL = "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"
    NVLINK_RECOVERY_ERROR_COUNT_TOTAL = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
    THERMAL_VIOLATION = "DCGM_FI_DEV_THERMAL_VIOLATION"
    POWER_VIOLATION = "DCGM_FI_DEV_POWER_VIOLATION"


class Health(enum.StrEnum):
    HEALTHY = "healthy"
    UNKNOWN = "unknown"
    DEGRADED = "degraded"
    FAILING = "failing"

    @property
    def rank(self) -> int:
        """Worse is larger: healthy 0, unknown 1, degraded 2, failing 3. Placement prefers the
        lowest; a node's state is its GPUs' highest."""
        return _RANK[self]


_RANK = {Health.HEALTHY: 0, Health.UNKNOWN: 1, Health.DEGRADED: 2, Health.FAILING: 3}


class Reading(enum.StrEnum):
    """How a rule reads its field."""

    VALUE = "value"  # the latest sample (a gauge, or a counter that must stay 0)
    RATE = "rate"  # per-second rate over the window (Prometheus rate()), times `scale`


@dataclass(frozen=True, kw_only=True)
class Rule:
    """Fires on a GPU when its reading of `metric` is `>= threshold` (`> threshold` if
    `strict`), or, with `codes`, when the latest value is one of them (XIDs)."""

    name: str
    metric: str
    verdict: Health  # DEGRADED or FAILING
    what: str  # the reason's text, e.g. "NVLink CRC flit errors"
    source: str  # where the default comes from
    reading: Reading = Reading.VALUE
    threshold: float = 0.0
    strict: bool = True
    scale: float = 1.0  # applied to a rate: 60 = per minute, 1e-9 = ns per s as a fraction
    unit: str = ""  # of the scaled reading, for reasons
    codes: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.verdict not in (Health.DEGRADED, Health.FAILING):
            raise ValueError(f"rule {self.name}: a rule makes a GPU degraded or failing")
        if self.codes and self.reading is not Reading.VALUE:
            raise ValueError(f"rule {self.name}: codes are matched against the latest value")

    def fires(self, value: float) -> bool:
        if self.codes:
            return value in self.codes
        return value > self.threshold if self.strict else value >= self.threshold

    def reason(self, value: float) -> str:
        if self.codes:
            code = int(value)
            return f"XID {code} ({XID_NAMES.get(code, 'see the Xid catalog')}): {self.verdict}"
        shown = f"{value:.3g}{self.unit}"
        return f"{self.what} {shown} {'>' if self.strict else '>='} " \
               f"{self.threshold:g}{self.unit}: {self.verdict}"


XID_NAMES = {
    48: "Double Bit ECC Error", 63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure", 74: "NVLINK Error",
    79: "GPU has fallen off the bus", 92: "High single-bit ECC error rate",
    94: "Contained ECC error", 95: "Uncontained ECC error",
}
XID = DcgmField.XID_ERRORS
DCGM_HEALTH_WATCH = "github.com/NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp @ ffde4e5"
DCGM_XID_TABLE = ("github.com/NVIDIA/DCGM testing/TestHealthMonitor.cpp @ 28bfbd4 "
                  "(XIDs the health watch fails on, and those it warns on)")
NVLINK_CRC_FAIL_PER_S = 100.0  # DCGM_LIMIT_MAX_NVLINK_CRC_ERROR: "CRC errors only matter at
# rates of 100+ per second" (DCGM dcgm_gpu_hardware_limits.h); below that DCGM warns
PCIE_REPLAYS_PER_MIN = 8.0  # DCGM_LIMIT_MAX_PCIREPLAY_RATE: "8 replays per minute is the
# maximum recommended" (same header); above it DCGM warns
POWER_THROTTLED_FRACTION = 0.5  # project default, see the rule

DEFAULT_RULES: tuple[Rule, ...] = (
    Rule(name="xid-critical", metric=XID, verdict=Health.FAILING, what="XID",
         codes=frozenset({48, 74, 79, 94, 95}), source=DCGM_XID_TABLE),
    Rule(name="xid-memory", metric=XID, verdict=Health.DEGRADED, what="XID",
         codes=frozenset({63, 64, 92}),
         source=DCGM_XID_TABLE + "; 92 is not in DCGM's table: a high single-bit ECC rate is a "
                "warning sign, not a failure (project default)"),
    Rule(name="row-remap-failure", metric=DcgmField.ROW_REMAP_FAILURE,
         verdict=Health.FAILING, what="row remapping failed", source=DCGM_HEALTH_WATCH),
    Rule(name="uncorrectable-remapped-rows-rising",
         metric=DcgmField.UNCORRECTABLE_REMAPPED_ROWS, reading=Reading.RATE, scale=3600.0,
         unit="/h", verdict=Health.DEGRADED, what="rows remapped for uncorrectable errors",
         source="docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/ (a new remapping takes effect "
                "only after a GPU reset); rising at all = degraded (project default)"),
    Rule(name="ecc-dbe", metric=DcgmField.ECC_DBE_VOL_TOTAL, verdict=Health.FAILING,
         what="volatile double-bit ECC errors", source=DCGM_HEALTH_WATCH + " (any volatile DBE)"),
    Rule(name="nvlink-crc-flit-errors", metric=DcgmField.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
         reading=Reading.RATE, unit="/s", verdict=Health.DEGRADED,
         what="NVLink CRC flit error rate", source=DCGM_HEALTH_WATCH),
    Rule(name="nvlink-crc-flit-error-rate",
         metric=DcgmField.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, reading=Reading.RATE,
         threshold=NVLINK_CRC_FAIL_PER_S, strict=False, unit="/s", verdict=Health.FAILING,
         what="NVLink CRC flit error rate", source=DCGM_HEALTH_WATCH),
    Rule(name="nvlink-crc-data-errors", metric=DcgmField.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
         reading=Reading.RATE, unit="/s", verdict=Health.DEGRADED,
         what="NVLink CRC data error rate", source=DCGM_HEALTH_WATCH),
    Rule(name="nvlink-crc-data-error-rate",
         metric=DcgmField.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, reading=Reading.RATE,
         threshold=NVLINK_CRC_FAIL_PER_S, strict=False, unit="/s", verdict=Health.FAILING,
         what="NVLink CRC data error rate", source=DCGM_HEALTH_WATCH),
    Rule(name="nvlink-replay-errors", metric=DcgmField.NVLINK_REPLAY_ERROR_COUNT_TOTAL,
         reading=Reading.RATE, unit="/s", verdict=Health.FAILING,
         what="NVLink replay error rate", source=DCGM_HEALTH_WATCH + " (any replay: FAIL)"),
    Rule(name="nvlink-recovery-errors", metric=DcgmField.NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
         reading=Reading.RATE, unit="/s", verdict=Health.FAILING,
         what="NVLink recovery error rate", source=DCGM_HEALTH_WATCH + " (any recovery: FAIL)"),
    Rule(name="pcie-replay-rate", metric=DcgmField.PCIE_REPLAY_COUNTER,
         reading=Reading.RATE, scale=60.0, threshold=PCIE_REPLAYS_PER_MIN, unit="/min",
         verdict=Health.DEGRADED, what="PCIe replay rate", source=DCGM_HEALTH_WATCH),
    Rule(name="thermal-violation", metric=DcgmField.THERMAL_VIOLATION,
         reading=Reading.RATE, scale=1e-9, verdict=Health.DEGRADED,
         what="share of time throttled for heat", source=DCGM_HEALTH_WATCH + " (any: WARN)"),
    Rule(name="power-violation", metric=DcgmField.POWER_VIOLATION, reading=Reading.RATE,
         scale=1e-9, threshold=POWER_THROTTLED_FRACTION, verdict=Health.DEGRADED,
         what="share of time throttled for power",
         source=DCGM_HEALTH_WATCH + " warns on any; capping at the power limit is routine under "
                "full load, so only more than half the window counts (project default)"),
)


@dataclass(frozen=True, order=True)
class GpuKey:
    """A GPU as the controller maps a sample to a Node: its node name and GPU index label."""

    node: str
    gpu: str


@dataclass(frozen=True)
class Finding:
    rule: str
    verdict: Health
    reason: str


@dataclass(frozen=True)
class GpuHealth:
    gpu: str
    state: Health
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class NodeHealth:
    node: str
    state: Health
    gpus: tuple[GpuHealth, ...] = ()  # the GPUs where a rule fired, by index label
    reporting: int = 0  # how many of its GPUs report (the coverage query)
    note: str = ""  # why it is unknown, when it is

    @property
    def reasons(self) -> tuple[str, ...]:
        """One line per finding ("gpu 3: XID 79 (...): failing"), worst first; or the note."""
        found = sorted(((f.verdict.rank, g.gpu, f.reason) for g in self.gpus for f in g.findings),
                       key=lambda t: (-t[0], _gpu_order(t[1]), t[2]))
        lines = tuple(f"gpu {gpu}: {reason}" for _, gpu, reason in found)
        if lines or self.note:
            return lines or (self.note,)
        return (f"{self.reporting} GPU(s) report, no rule fires",)


@dataclass(frozen=True)
class HealthReport:
    """Every node's health at one refresh. `source_up` False: nothing could be read, and every
    node is unknown (`problem` says why)."""

    nodes: Mapping[str, NodeHealth] = field(default_factory=dict)
    source_up: bool = True
    problem: str = ""

    def state(self, node: str) -> Health:
        got = self.nodes.get(node)
        return got.state if got is not None else Health.UNKNOWN

    def node(self, node: str) -> NodeHealth:
        """This node's health; a node no GPU of which reports is unknown."""
        got = self.nodes.get(node)
        if got is not None:
            return got
        note = (f"no health data: {self.problem}" if not self.source_up
                else "no health data: no GPU of this node reports to Prometheus")
        return NodeHealth(node=node, state=Health.UNKNOWN, note=note)


def unknown(problem: str) -> HealthReport:
    """The report when the source cannot be read: every node unknown."""
    return HealthReport(source_up=False, problem=problem)


def judge(rules: Iterable[Rule], reporting: Mapping[str, int],
          readings: Mapping[str, Mapping[GpuKey, float]]) -> HealthReport:
    """Each node's health from how many of its GPUs report (`reporting`, node -> count) and
    each rule's readings (`readings[rule.name]`: the GPUs where its query returned a value).
    A rule without readings (its query failed, or its field is not exported) finds nothing. A
    node with a reporting GPU and no finding is healthy; a GPU with a finding counts as
    reporting, as it evidently does."""
    findings: dict[GpuKey, list[Finding]] = {}
    for rule in rules:
        for key, value in readings.get(rule.name, {}).items():
            if rule.fires(value):
                findings.setdefault(key, []).append(
                    Finding(rule=rule.name, verdict=rule.verdict, reason=rule.reason(value)))
    by_node: dict[str, dict[str, GpuHealth]] = {}
    for key, found in findings.items():
        ordered = tuple(sorted(found, key=lambda f: (-f.verdict.rank, f.rule)))
        by_node.setdefault(key.node, {})[key.gpu] = GpuHealth(key.gpu, ordered[0].verdict,
                                                                ordered)
    nodes = {}
    for node in set(by_node) | {n for n, count in reporting.items() if count > 0}:
        gpus = by_node.get(node, {})
        ordered = tuple(gpus[g] for g in sorted(gpus, key=_gpu_order))
        worst = max((g.state for g in ordered), key=lambda s: s.rank, default=Health.HEALTHY)
        nodes[node] = NodeHealth(node=node, state=worst, gpus=ordered,
                                 reporting=max(reporting.get(node, 0), len(ordered)))
    return HealthReport(nodes=nodes)


def turned_worse(before: Health, after: Health) -> bool:
    """Did a node go from placeable-and-fine (healthy or unknown) to degraded or failing? The
    proactive checkpoint fires on this edge, once per turn."""
    return before.rank <= Health.UNKNOWN.rank < after.rank


def _gpu_order(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)
