"""Benchmark: one GPU-health refresh for 1,000 nodes x 8 GPUs against a real Prometheus.

Usage: python -m bench.health_refresh [--nodes 1000] [--gpus 8] [--refreshes 100]
[--mode direct,recorded] [--spacing-ms 200]
Target: p99 <= 200 ms.

The test bench's Prometheus (e2e/harness/promstack.py; `make testbin` gets it) scrapes, every 15 s,
the fixture exporter serving dcgm-exporter's format for 8,000 GPUs, every field of
deploy/dcgm/health-counters.csv (15 series per GPU). Every 50th node misbehaves, so every kind
of rule has something to find: critical and memory XIDs, and NVLink CRC errors, PCIe replays
and thermal throttling that keep rising at every scrape. With `recorded` among the modes,
Prometheus also loads the health recording rules (controller/health/health_promql.py, this window),
evaluated every 15 s. Once Prometheus has scraped enough for the rate window, each mode
(`healthQueryMode`: direct, recorded) runs ``--refreshes`` refreshes ``--spacing-ms`` apart
through ``controller.health.health.PrometheusHealth.refresh`` (the controller's own code, then
``policies.model.health.judge``).

Reported per mode: refresh wall time (p50, p99, max); ``fetch_critical``: the slowest query of
a refresh (HTTP, Prometheus' evaluation and JSON decoding), ``fetch_sum``: all of them added;
``extract``: the rest (mapping samples to nodes and judging); ``prometheus_eval_sequential``:
Prometheus' own evaluation time for a refresh's queries run one at a time (its query stats);
the states found. And ``rule_group_evaluation``: Prometheus' own time to evaluate the recording
rules group (/api/v1/rules evaluationTime, every distinct evaluation seen during the run): the
cost recorded mode moves from the refresh to the server, once per evaluation interval. Both
modes run against the same Prometheus, rules installed. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from ckpt_preempt.controller.core.config import Config, HealthQueryMode
from ckpt_preempt.controller.health.health import PrometheusHealth
from ckpt_preempt.controller.health.health_promql import (
    RECORDED_REPORTING,
    RULES_GROUP,
    recording_rules,
    render,
)
from ckpt_preempt.policies.model import health as ph
from e2e.harness.promstack import (
    DcgmFixtureExporter,
    PrometheusMissing,
    find_prometheus,
    start_prometheus,
)

SCRAPE_SECONDS = 15.0  # a common dcgm-exporter scrape interval
WINDOW_SECONDS = 60  # the rate rules' window: four scrapes in it
PROBLEM_EVERY = 50  # every 50th node misbehaves
TARGET_P99_SECONDS = 0.200
SPACING_MS = 200.0


def misbehave(exporter: DcgmFixtureExporter, nodes: list[str], step: int) -> None:
    """Every PROBLEM_EVERY-th node has a problem; counters rise a little more at each call."""
    for i, name in enumerate(nodes[::PROBLEM_EVERY]):
        kind = i % 5
        if kind == 0:
            exporter.set("DCGM_FI_DEV_XID_ERRORS", 79, gpu=i % 8, hostname=name)
        elif kind == 1:
            exporter.set("DCGM_FI_DEV_XID_ERRORS", 63, gpu=i % 8, hostname=name)
        elif kind == 2:
            exporter.add("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 40 * step,
                         gpu=i % 8, hostname=name)
        elif kind == 3:
            exporter.add("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 30 * step, gpu=i % 8, hostname=name)
        else:
            exporter.add("DCGM_FI_DEV_THERMAL_VIOLATION", 2e9 * step, gpu=i % 8, hostname=name)


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--refreshes", type=int, default=100)
    ap.add_argument("--mode", default="direct,recorded",
                    help="healthQueryMode(s) to measure, comma-separated (default %(default)s)")
    ap.add_argument("--spacing-ms", type=float, default=SPACING_MS,
                    help="pause between refreshes (default %(default)g: 100 refreshes span "
                         "more than one rule evaluation interval)")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    if args.nodes < 1 or args.gpus < 1 or args.refreshes < 1 or args.spacing_ms < 0:
        print("health_refresh: --nodes, --gpus and --refreshes must be positive, --spacing-ms "
              "not negative", file=sys.stderr)
        return 2
    if not modes or any(m not in tuple(HealthQueryMode) for m in modes):
        print(f"health_refresh: --mode takes {', '.join(HealthQueryMode)}, comma-separated",
              file=sys.stderr)
        return 2
    try:
        binary = find_prometheus()
    except PrometheusMissing as e:
        print(f"health_refresh: {e}", file=sys.stderr)
        return 2
    nodes = [f"gpu-node-{i:04d}" for i in range(args.nodes)]
    labels = Config().health_hostname_labels
    with DcgmFixtureExporter() as exporter, tempfile.TemporaryDirectory() as tmp:
        for name in nodes:
            exporter.add_node(name, gpus=args.gpus)
        t0 = time.perf_counter()
        body = len(exporter.render())
        render_s = time.perf_counter() - t0
        rules = Path(tmp) / "recording-rules.yaml"
        rules.write_text(render(recording_rules(ph.DEFAULT_RULES, WINDOW_SECONDS, labels),
                                WINDOW_SECONDS, labels))
        installed = [rules] if HealthQueryMode.RECORDED in modes else []
        with start_prometheus([exporter.target], Path(tmp), SCRAPE_SECONDS, binary=binary,
                              rule_files=installed) as prom:
            t0 = time.perf_counter()
            prom.wait_until("count(DCGM_FI_DEV_XID_ERRORS)", timeout=120, check=lambda r: r and
                            int(r[0]["value"][1]) == args.nodes * args.gpus)
            ingest_s = time.perf_counter() - t0
            stop = threading.Event()
            rising = threading.Thread(target=keep_rising, args=(exporter, nodes, stop),
                                      daemon=True)
            rising.start()
            evals = RuleEvaluations(prom, stop)
            if installed:
                evals.start()
            time.sleep(WINDOW_SECONDS + SCRAPE_SECONDS)  # the window fills with rises
            if installed:
                prom.wait_until(f"count({RECORDED_REPORTING})", timeout=120, check=lambda r: r
                                and int(r[0]["value"][1]) == args.nodes)
            results = {}
            for m in modes:
                evals.phase = m
                results[m] = measure(prom.url, m, nodes, args.refreshes, args.spacing_ms)
            stop.set()
            rising.join()
            evals.join()
    first = next(iter(results.values()))
    out = {
        "benchmark": "health_refresh", "nodes": args.nodes, "gpus": args.nodes * args.gpus,
        "series": args.nodes * args.gpus * len(exporter.fields), "refreshes": args.refreshes,
        "spacing_ms": args.spacing_ms, "recording_rules_installed": bool(installed),
        "modes": results,
        "rule_group_evaluation": evals.summary(),
        "expected_problem_nodes": len(nodes[::PROBLEM_EVERY]),
        "same_states": all(r["nodes_by_state"] == first["nodes_by_state"]
                           for r in results.values()),
        "exposition_mb": round(body / 1e6, 1), "exporter_render_s": round(render_s, 2),
        "first_scrape_s": round(ingest_s, 1), "target_p99_ms": TARGET_P99_SECONDS * 1e3,
    }
    print(json.dumps(out))
    return 0


def measure(url: str, mode: str, nodes: list[str], refreshes: int, spacing_ms: float) -> dict:
    """`refreshes` refreshes in `mode`, `spacing_ms` apart, through the controller's code."""
    cfg = Config(prometheus_url=url, health_window_seconds=WINDOW_SECONDS,
                 health_query_timeout_seconds=5, health_query_mode=mode)
    source = PrometheusHealth(cfg, nodes=lambda: nodes)
    fetch = Fetch(source)
    walls, critical, summed, extract, report = [], [], [], [], None
    for _ in range(refreshes):
        fetch.times = []
        t0 = time.perf_counter()
        report = source.refresh()
        walls.append(time.perf_counter() - t0)
        critical.append(max(fetch.times))
        summed.append(sum(fetch.times))
        extract.append(walls[-1] - critical[-1])
        time.sleep(spacing_ms / 1e3)
    queries = [source.coverage, *sorted(set(source.queries.values()))]
    floor = [prometheus_eval_seconds(url, queries) for _ in range(5)]
    assert report is not None
    p99 = percentile(walls, 0.99)
    return {
        "queries_per_refresh": len(queries), "source_up": report.source_up,
        "refresh_p50_ms": round(statistics.median(walls) * 1e3, 1),
        "refresh_p99_ms": round(p99 * 1e3, 1),
        "refresh_max_ms": round(max(walls) * 1e3, 1),
        "fetch_critical_p50_ms": round(statistics.median(critical) * 1e3, 1),
        "fetch_critical_p99_ms": round(percentile(critical, 0.99) * 1e3, 1),
        "fetch_sum_p50_ms": round(statistics.median(summed) * 1e3, 1),
        "extract_p50_ms": round(statistics.median(extract) * 1e3, 1),
        "prometheus_eval_sequential_p50_ms": round(statistics.median(floor) * 1e3, 1),
        "nodes_by_state": {s.value: sum(1 for n in report.nodes.values() if n.state is s)
                           for s in ph.Health},
        "meets_target": report.source_up and p99 <= TARGET_P99_SECONDS,
    }


class RuleEvaluations(threading.Thread):
    """Polls /api/v1/rules every second and keeps each distinct evaluation of the health
    group: Prometheus' own time for it (`evaluationTime`), the cost recorded mode moves there,
    by what the bench was doing then (`phase`: waiting for the window, or measuring a mode)."""

    def __init__(self, prom, stop: threading.Event) -> None:
        super().__init__(daemon=True, name="rule-evaluations")
        self.prom, self.stop = prom, stop
        self.phase = "window"
        self.seen: dict[str, tuple[str, float]] = {}  # lastEvaluation -> (phase, seconds)

    def run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(OSError, ValueError, KeyError):
                for g in self.prom.rule_groups():
                    if g["name"] == RULES_GROUP and g["evaluationTime"] > 0:
                        self.seen.setdefault(g["lastEvaluation"],
                                             (self.phase, g["evaluationTime"]))
            self.stop.wait(1.0)

    def join(self, timeout: float | None = None) -> None:
        if self.is_alive():
            super().join(timeout)

    def summary(self) -> dict:
        out: dict = {"interval_s": SCRAPE_SECONDS}
        for phase in ("all", *dict.fromkeys(p for p, _ in self.seen.values())):
            xs = [t for p, t in self.seen.values() if phase in ("all", p)]
            out[phase] = {"evaluations": len(xs), "p50_ms": round(statistics.median(xs) * 1e3, 1),
                          "max_ms": round(max(xs) * 1e3, 1)} if xs else {"evaluations": 0}
        return out


def prometheus_eval_seconds(url: str, queries: list[str]) -> float:
    """Prometheus' own evaluation time (its `stats` timings) for these queries, one at a time:
    the server's share of a refresh, whatever the client does."""
    total = 0.0
    for q in queries:
        args = urllib.parse.urlencode({"query": q, "stats": "all"})
        with urllib.request.urlopen(f"{url}/api/v1/query?{args}", timeout=30) as r:
            total += json.load(r)["data"]["stats"]["timings"]["evalTotalTime"]
    return total


def keep_rising(exporter: DcgmFixtureExporter, nodes: list[str], stop: threading.Event) -> None:
    step = 0
    while not stop.is_set():
        step += 1
        misbehave(exporter, nodes, step)
        stop.wait(SCRAPE_SECONDS)


class Fetch:
    """Times each of the source's queries (HTTP, evaluation, JSON decoding) by wrapping its
    client's call; the queries of one refresh run in parallel."""

    def __init__(self, source: PrometheusHealth) -> None:
        self.times: list[float] = []
        inner = source.prom.custom_query

        def timed(query: str, params: dict | None = None, timeout: float | None = None):
            t0 = time.perf_counter()
            try:
                return inner(query, params, timeout)
            finally:
                self.times.append(time.perf_counter() - t0)
        source.prom.custom_query = timed


if __name__ == "__main__":
    raise SystemExit(main())
