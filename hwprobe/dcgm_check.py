"""``hwprobe verify --with-prometheus URL``: NVML's error counters against DCGM's, per GPU.

hwprobe reads each GPU's health counters through NVML (``model.GPU_COUNTERS`` and the NVLink
error counters of every link). dcgm-exporter reads the same counters through DCGM and
Prometheus scrapes them. Where the two disagree for the same GPU, one of the paths is broken
(a stale exporter, a field DCGM does not watch, the wrong node) or the GPU changed between the
reads. This module asks Prometheus one instant query per metric, keeps the series of this node
(label ``Hostname``, or ``hostname`` as dcgm-exporter names it after 4.5.3), matches each
series to an NVML GPU by its ``UUID`` label, else by ``pci_bus_id``, and compares.

Each check prints one line, like ``verify``'s::

    PASS: dcgm ecc_dbe_volatile (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL): 8 GPUs agree
    FAIL: dcgm pcie_replay (DCGM_FI_DEV_PCIE_REPLAY_COUNTER): GPU7 NVML 120, DCGM 0
    SKIP: dcgm ecc_dbe_aggregate (DCGM_FI_DEV_ECC_DBE_AGG_TOTAL): no series for node gpu-1 ...

``compare`` and ``render`` are pure; ``query`` is the Prometheus edge (prometheus-api-client,
one query per metric, a timeout, one retry, and one line when Prometheus cannot be reached).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from ckpt_preempt.hwprobe.errors import HwprobeError
from ckpt_preempt.hwprobe.model import Gpu, Topology, bus_key
from ckpt_preempt.policies.model.health import DcgmField

HOSTNAME_LABELS = ("Hostname", "hostname")  # dcgm-exporter <= 4.5.3, and after its PR #655
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True, kw_only=True)
class CounterCheck:
    """One NVML counter and the dcgm-exporter field that carries the same number."""

    name: str
    metric: str
    gpu_counter: str | None = None  # a key of Gpu.counters
    link_counter: str | None = None  # a key of NvLink.errors, summed over the GPU's links


# DCGM field names: policies.model.health.DcgmField. DCGM's
# per-GPU NVLink totals (field ids 409, 419, 429, 439) add up every link, as we do here.
CHECKS = (
    CounterCheck(name="ecc_dbe_volatile", metric=DcgmField.ECC_DBE_VOL_TOTAL,
                 gpu_counter="ecc_dbe_volatile"),
    CounterCheck(name="ecc_dbe_aggregate", metric=DcgmField.ECC_DBE_AGG_TOTAL,
                 gpu_counter="ecc_dbe_aggregate"),
    CounterCheck(name="remapped_rows_uncorrectable",
                 metric=DcgmField.UNCORRECTABLE_REMAPPED_ROWS,
                 gpu_counter="remapped_rows_uncorrectable"),
    CounterCheck(name="remapped_rows_correctable", metric=DcgmField.CORRECTABLE_REMAPPED_ROWS,
                 gpu_counter="remapped_rows_correctable"),
    CounterCheck(name="row_remap_failure", metric=DcgmField.ROW_REMAP_FAILURE,
                 gpu_counter="row_remap_failure"),
    CounterCheck(name="pcie_replay", metric=DcgmField.PCIE_REPLAY_COUNTER,
                 gpu_counter="pcie_replay"),
    CounterCheck(name="nvlink_crc_flit", metric=DcgmField.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
                 link_counter="crc_flit"),
    CounterCheck(name="nvlink_crc_data", metric=DcgmField.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
                 link_counter="crc_data"),
    CounterCheck(name="nvlink_replay", metric=DcgmField.NVLINK_REPLAY_ERROR_COUNT_TOTAL,
                 link_counter="replay"),
    CounterCheck(name="nvlink_recovery", metric=DcgmField.NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
                 link_counter="recovery"),
)


class DcgmUnavailable(HwprobeError):
    """Prometheus could not be asked (unreachable, timed out, refused the query); CLI exits 2."""


class Outcome(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One series of an instant vector: its labels and value."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    check: CounterCheck
    outcome: Outcome
    detail: str

    @property
    def line(self) -> str:
        return f"{self.outcome}: dcgm {self.check.name} ({self.check.metric}): {self.detail}"


def nvml_value(gpu: Gpu, check: CounterCheck) -> int | None:
    """What NVML said for this counter on this GPU; None when it could not say."""
    if check.gpu_counter is not None:
        return gpu.counters.get(check.gpu_counter)
    values = [link.errors[check.link_counter] for link in gpu.active_links
              if check.link_counter in link.errors]
    return sum(values) if values else None


def on_node(samples: Iterable[Sample], node: str) -> list[Sample]:
    return [s for s in samples if any(s.labels.get(k) == node for k in HOSTNAME_LABELS)]


def match(gpu: Gpu, samples: list[Sample]) -> list[Sample]:
    """The series of this GPU: by UUID label when any series carries it, else by PCI bus id."""
    by_uuid = [s for s in samples if gpu.uuid and s.labels.get("UUID") == gpu.uuid]
    if by_uuid:
        return by_uuid
    if not gpu.bus_id:
        return []
    want = bus_key(gpu.bus_id)
    return [s for s in samples if s.labels.get("pci_bus_id")
            and bus_key(s.labels["pci_bus_id"]) == want]


def compare_one(topo: Topology, check: CounterCheck, samples: list[Sample],
                node: str) -> CheckResult:
    """PASS when every GPU NVML could read has a DCGM series with the same value."""
    mine = on_node(samples, node)
    if not mine:
        return CheckResult(check=check, outcome=Outcome.SKIP, detail=(
            f"no series for node {node} (is {check.metric} in dcgm-exporter's counters file, "
            f"and is the node's {'/'.join(HOSTNAME_LABELS)} label {node}?)"))
    agree, differ, missing, unreadable = 0, [], [], []
    for gpu in topo.gpus:
        ours = nvml_value(gpu, check)
        if ours is None:
            unreadable.append(gpu.index)
            continue
        theirs = match(gpu, mine)
        if not theirs:
            missing.append(f"GPU{gpu.index} ({gpu.uuid or 'no UUID'}, {gpu.bus_id or 'no bus id'})"
                           " has no DCGM series")
            continue
        value = max(s.value for s in theirs)
        if value == ours:
            agree += 1
        else:
            differ.append(f"GPU{gpu.index} NVML {ours}, DCGM {_number(value)}")
    if differ or missing:
        return CheckResult(check=check, outcome=Outcome.FAIL, detail="; ".join(differ + missing))
    if not agree:
        why = "; ".join(sorted({_why_unreadable(g, check) for g in topo.gpus})) or "no GPUs"
        return CheckResult(check=check, outcome=Outcome.SKIP,
                           detail=f"NVML cannot read it ({why})")
    detail = f"{agree} GPU{'s' if agree != 1 else ''} agree"
    if unreadable:
        detail += f" (NVML cannot read GPU {','.join(map(str, unreadable))})"
    return CheckResult(check=check, outcome=Outcome.PASS, detail=detail)


def compare(topo: Topology, samples: Mapping[str, list[Sample]], node: str,
            checks: tuple[CounterCheck, ...] = CHECKS) -> tuple[CheckResult, ...]:
    """Every check against the samples of its metric (a metric absent from ``samples`` skips)."""
    return tuple(compare_one(topo, c, samples.get(c.metric, []), node) for c in checks)


def passed(results: Iterable[CheckResult]) -> bool:
    return all(r.outcome is not Outcome.FAIL for r in results)


def render(results: Iterable[CheckResult]) -> str:
    return "\n".join(r.line for r in results)


def _why_unreadable(gpu: Gpu, check: CounterCheck) -> str:
    if check.gpu_counter is not None:
        key = "remapped_rows" if check.gpu_counter.startswith(("remapped", "row_remap")) \
            else check.gpu_counter
        return gpu.unavailable.get(key, "not read")
    return gpu.unavailable.get("nvlink", "no active NVLinks with error counters")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


# -- the Prometheus edge ---------------------------------------------------------------------------
def selector(metric: str, node: str) -> str:
    """One PromQL query for a metric on one node, under either hostname label."""
    quoted = node.replace("\\", "\\\\").replace('"', '\\"')
    return " or ".join(f'{metric}{{{label}="{quoted}"}}' for label in HOSTNAME_LABELS)


def query(url: str, node: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
          checks: tuple[CounterCheck, ...] = CHECKS) -> dict[str, list[Sample]]:
    """One instant query per metric. Raises DcgmUnavailable with one line."""
    import requests
    from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
    from urllib3.util.retry import Retry

    # urllib3 logs each retry as a warning; the one line below says what failed, once.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    out: dict[str, list[Sample]] = {}
    with PrometheusConnect(url=url, disable_ssl=False, timeout=timeout_s,
                           retry=Retry(total=1, backoff_factor=0.2)) as prom:
        for check in checks:
            try:
                result = prom.custom_query(selector(check.metric, node))
            except (requests.RequestException, PrometheusApiClientException) as err:
                raise DcgmUnavailable(f"Prometheus at {url} cannot be queried: "
                                      f"{_one_line(err)}") from err
            except ValueError as err:  # a 200 that is not Prometheus' JSON
                raise DcgmUnavailable(f"{url} did not answer like Prometheus: "
                                      f"{_one_line(err)}") from err
            out[check.metric] = [Sample(labels=r.get("metric", {}), value=float(r["value"][1]))
                                 for r in result]
    return out


def run(topo: Topology, url: str, node: str, *,
        timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[CheckResult, ...]:
    return compare(topo, query(url, node, timeout_s=timeout_s), node)


def _one_line(err: Exception) -> str:
    text = " ".join(str(err).split())
    name = type(err).__name__
    return f"{name}: {text[:200]}" if text else name


# -- command-line options (hwprobe verify) ---------------------------------------------------------
def prometheus_url(text: str) -> str:
    if not text.startswith(("http://", "https://")) or len(text) <= len("https://"):
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL")
    return text.rstrip("/")


def timeout_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 300:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in (0, 300]")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``hwprobe verify`` takes for this cross-check."""
    parser.add_argument("--with-prometheus", metavar="URL", type=prometheus_url,
                        help="also compare NVML's ECC, row-remap, PCIe replay and NVLink error "
                             "counters with dcgm-exporter's in this Prometheus; a difference "
                             "exits 1, an unreachable Prometheus exits 2")
    parser.add_argument("--node", default=os.environ.get("NODE_NAME"),
                        help="this node's name in dcgm-exporter's Hostname/hostname label "
                             "(default $NODE_NAME, else this host's name)")
    parser.add_argument("--prometheus-timeout", metavar="S", type=timeout_seconds,
                        default=DEFAULT_TIMEOUT_S,
                        help="seconds to wait for each Prometheus query (default %(default)s)")
