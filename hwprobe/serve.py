"""``hwprobe serve``: re-probe periodically, publish on change, export Prometheus metrics.

The loop is injectable (probe, publish, sleep and the metrics registry are arguments) so it
runs in tests without NVML, a cluster or waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ckpt_preempt.hwprobe.errors import HwprobeError
from ckpt_preempt.hwprobe.model import Topology
from ckpt_preempt.hwprobe.report import annotation
from ckpt_preempt.hwprobe.verify import Spec, verify

log = logging.getLogger("ckpt_preempt.hwprobe.serve")


@dataclass(frozen=True, kw_only=True)
class Metrics:
    gpus: Gauge
    domain_size: Gauge
    active_links: Gauge
    link_errors: Gauge
    verified: Gauge
    findings: Gauge
    probe_seconds: Histogram
    probe_failures: Counter
    publishes: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> Metrics:
        return cls(
            gpus=Gauge("hwprobe_gpus", "GPUs NVML reports", registry=registry),
            domain_size=Gauge("hwprobe_nvlink_domain_size_max", "Largest NVLink domain",
                              registry=registry),
            active_links=Gauge("hwprobe_nvlink_active_links", "Active NVLinks per GPU",
                               ["gpu"], registry=registry),
            link_errors=Gauge("hwprobe_nvlink_errors", "NVLink error counter values",
                              ["gpu", "link", "counter"], registry=registry),
            verified=Gauge("hwprobe_verified",
                           "1 matches the spec, 0 does not, -1 no spec", registry=registry),
            findings=Gauge("hwprobe_verify_findings", "Differences from the spec",
                           registry=registry),
            probe_seconds=Histogram("hwprobe_probe_seconds", "Full probe duration",
                                    buckets=(0.01, 0.05, 0.1, 0.2, 0.5, 1, 5),
                                    registry=registry),
            probe_failures=Counter("hwprobe_probe_failures", "Probes that failed",
                                   registry=registry),
            publishes=Counter("hwprobe_publishes", "Annotation updates written",
                              registry=registry),
        )

    def observe(self, topo: Topology, verified: bool | None, findings: int) -> None:
        self.gpus.set(topo.gpu_count)
        self.domain_size.set(max((len(d) for d in topo.nvlink_domains), default=0))
        for gpu in topo.gpus:
            self.active_links.labels(str(gpu.index)).set(len(gpu.active_links))
            for link in gpu.links:
                for counter, value in link.errors.items():
                    self.link_errors.labels(str(gpu.index), str(link.link), counter).set(value)
        self.verified.set(-1 if verified is None else int(verified))
        self.findings.set(findings)


def run(*, probe: Callable[[], Topology], publish: Callable[[Topology, bool | None], None] | None,
        spec: Spec | None, metrics: Metrics, interval: float, iterations: int | None = None,
        sleep: Callable[[float], None] = time.sleep) -> int:
    """The serve loop. Returns how many times it published (for tests; forever returns never)."""
    last_value, previous, published, done = None, None, 0, 0
    while iterations is None or done < iterations:
        done += 1
        start = time.perf_counter()
        try:
            topo = probe()
        except HwprobeError as err:
            metrics.probe_failures.inc()
            log.warning("probe failed: %s", err)
            sleep(interval)
            continue
        metrics.probe_seconds.observe(time.perf_counter() - start)
        verdict = verify(topo, spec, earlier=previous) if spec is not None else None
        verified = verdict.ok if verdict is not None else None
        metrics.observe(topo, verified, len(verdict.findings) if verdict else 0)
        if verdict is not None and not verdict.ok:
            log.warning("verify %s: %s", spec.name, "; ".join(verdict.findings))
        value = annotation(topo, verified=verified, spec=spec.name if spec else None)
        if publish is not None and value != last_value:
            try:
                publish(topo, verified)
                published += 1
                metrics.publishes.inc()
                last_value = value
            except HwprobeError as err:
                log.warning("publish failed: %s", err)
        previous = topo
        if iterations is None or done < iterations:
            sleep(interval)
    return published
