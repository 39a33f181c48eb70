"""Benchmark: one GPU-health refresh for 1,000 nodes x 8 GPUs against a real Prometheus.

The test bench's Prometheus (e2e/promstack.py; `make testbin` gets it) scrapes, every 15 s, the
fixture exporter serving dcgm-exporter's format for 8,000 GPUs, every field of
deploy/dcgm/health-counters.csv (15 series per GPU). Every 50th node misbehaves, so every kind
of rule has something to find: critical and memory XIDs, and NVLink CRC errors, PCIe replays
and thermal throttling that keep rising at every scrape. Once Prometheus has scraped enough for
the rate window, ``--refreshes`` refreshes run back to back through
``controller.health.PrometheusHealth.refresh`` (the controller's own code: the coverage query
and the rules' queries in parallel, then ``policies.health.judge``).

Reported: refresh wall time (p50, p99, max); ``fetch_critical``: the slowest query of a
refresh (HTTP, Prometheus' evaluation and JSON decoding), ``fetch_sum``: all of them added;
``extract``: the rest (mapping samples to nodes and judging); ``prometheus_eval_sequential``:
Prometheus' own evaluation time for a refresh's queries run one at a time (its query stats:
the server's part, which no client can save); the states found, and how long Prometheus took
to ingest the first scrape. Prints one JSON line; target p99 <= 200 ms.
Usage: python bench/health_refresh.py [--nodes 1000] [--gpus 8] [--refreshes 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ckpt_preempt.controller.config import Config  # noqa: E402
from ckpt_preempt.controller.health import PrometheusHealth  # noqa: E402
from ckpt_preempt.policies import health as ph  # noqa: E402
from e2e.promstack import (  # noqa: E402
    DcgmFixtureExporter,
    PrometheusMissing,
    find_prometheus,
    start_prometheus,
)

SCRAPE_SECONDS = 15.0  # a common dcgm-exporter scrape interval
WINDOW_SECONDS = 60  # the rate rules' window: four scrapes in it
PROBLEM_EVERY = 50  # every 50th node misbehaves
TARGET_P99_SECONDS = 0.200


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
    args = ap.parse_args(argv)
    if args.nodes < 1 or args.gpus < 1 or args.refreshes < 1:
        print("health_refresh: --nodes, --gpus and --refreshes must be positive", file=sys.stderr)
        return 2
    try:
        binary = find_prometheus()
    except PrometheusMissing as e:
        print(f"health_refresh: {e}", file=sys.stderr)
        return 2
    nodes = [f"gpu-node-{i:04d}" for i in range(args.nodes)]
    with DcgmFixtureExporter() as exporter, tempfile.TemporaryDirectory() as tmp:
        for name in nodes:
            exporter.add_node(name, gpus=args.gpus)
        t0 = time.perf_counter()
        body = len(exporter.render())
        render_s = time.perf_counter() - t0
        with start_prometheus([exporter.target], Path(tmp), SCRAPE_SECONDS,
                              binary=binary) as prom:
            t0 = time.perf_counter()
            prom.wait_until("count(DCGM_FI_DEV_XID_ERRORS)", timeout=120, check=lambda r: r and
                            int(r[0]["value"][1]) == args.nodes * args.gpus)
            ingest_s = time.perf_counter() - t0
            stop = threading.Event()
            rising = threading.Thread(target=keep_rising, args=(exporter, nodes, stop),
                                      daemon=True)
            rising.start()
            time.sleep(WINDOW_SECONDS + SCRAPE_SECONDS)  # the window fills with rises
            cfg = Config(prometheus_url=prom.url, health_window_seconds=WINDOW_SECONDS,
                         health_query_timeout_seconds=5)
            source = PrometheusHealth(cfg, nodes=lambda: nodes)
            fetch = Fetch(source)
            walls, critical, summed, extract, report = [], [], [], [], None
            for _ in range(args.refreshes):
                fetch.times = []
                t0 = time.perf_counter()
                report = source.refresh()
                walls.append(time.perf_counter() - t0)
                critical.append(max(fetch.times))
                summed.append(sum(fetch.times))
                extract.append(walls[-1] - critical[-1])
            floor = [prometheus_eval_seconds(prom.url, [source.coverage, *set(
                source.queries.values())]) for _ in range(5)]
            stop.set()
            rising.join()
    assert report is not None
    found = {s.value: sum(1 for n in report.nodes.values() if n.state is s) for s in ph.Health}
    out = {
        "benchmark": "health_refresh", "nodes": args.nodes, "gpus": args.nodes * args.gpus,
        "series": args.nodes * args.gpus * len(exporter.fields),
        "queries_per_refresh": 1 + len(set(source.queries.values())),
        "refreshes": args.refreshes, "source_up": report.source_up,
        "refresh_p50_ms": round(statistics.median(walls) * 1e3, 1),
        "refresh_p99_ms": round(percentile(walls, 0.99) * 1e3, 1),
        "refresh_max_ms": round(max(walls) * 1e3, 1),
        "fetch_critical_p50_ms": round(statistics.median(critical) * 1e3, 1),
        "fetch_critical_p99_ms": round(percentile(critical, 0.99) * 1e3, 1),
        "fetch_sum_p50_ms": round(statistics.median(summed) * 1e3, 1),
        "extract_p50_ms": round(statistics.median(extract) * 1e3, 1),
        "prometheus_eval_sequential_p50_ms": round(statistics.median(floor) * 1e3, 1),
        "expected_problem_nodes": len(nodes[::PROBLEM_EVERY]),
        "nodes_by_state": found, "exposition_mb": round(body / 1e6, 1),
        "exporter_render_s": round(render_s, 2), "first_scrape_s": round(ingest_s, 1),
        "target_p99_ms": TARGET_P99_SECONDS * 1e3,
        "meets_target": report.source_up and percentile(walls, 0.99) <= TARGET_P99_SECONDS,
    }
    print(json.dumps(out))
    return 0


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
