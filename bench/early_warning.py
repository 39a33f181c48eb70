"""What the early warning adds to every reconcile pass (controller/planning/disruption.py), at
scale.

Usage: python -m bench.early_warning [--nodes 12500] [--pods-per-node 4] [--passes 50]
Target: none: a measurement (good: the quiet pass, which every cluster pays, a small share of a
reconcile pass).

12,500 nodes of 8 GPUs (``--nodes``) with ``--pods-per-node`` running on-request pods each, as
the watch cache keeps them (``records.node_info`` / ``pod_info``). Three states, each timed over
``--passes`` passes of ``EarlyWarning.step`` after one warm-up pass (whose requests are written
into the pods, as the API server would, so later passes see them): ``quiet`` (no node shows a
signal: the cost every cluster pays), ``one-cordoned`` and ``one-percent-cordoned`` (rounds
going on, every pod already asked). Writes go to a recording stub of ``Actions`` (request and
Event only), so only our own decision and conversion time is measured.
Prints one JSON line per state: p50/p99/max milliseconds per pass, of this process's CPU time
(``time.process_time``: the pass is single-threaded, and on a shared machine wall time mostly
measures the neighbours).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.controller.planning.disruption import EarlyWarning
from ckpt_preempt.policies.lifecycle import plan_record

T0 = 1_800_000_000.0


class Writes:
    """Records the requests and applies them to the pods (the recording fake of Actions)."""

    def __init__(self) -> None:
        self.requests: dict[str, plan_record.DrainRequest] = {}

    def request_checkpoint(self, pod, request, *, only_if_unchanged=False) -> bool:
        self.requests[pod.uid] = request
        return True

    def emit(self, pod, reason, message, *, warning=False) -> None:
        pass


def cluster(nodes: int, per_node: int, cordoned: int):
    ns = [records.node_info({
        "metadata": {"name": f"n{i}"},
        "spec": {"unschedulable": i < cordoned,
                 "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "nvidia.com/gpu": "8"}}})
        for i in range(nodes)]
    ps = [records.pod_info({
        "metadata": {"name": f"p{i}-{j}", "namespace": "team", "uid": f"u{i}-{j}",
                     "resourceVersion": "1", "creationTimestamp": "2027-01-15T07:00:00Z",
                     "annotations": {"ckpt-preempt.io/checkpoint": "on-request",
                                     "ckpt-preempt.io/checkpoint-seconds": "60"}},
        "spec": {"nodeName": f"n{i}", "containers": [{"name": "c", "resources": {
            "requests": {"cpu": "8", "nvidia.com/gpu": str(8 // per_node)}}}]},
        "status": {"phase": "Running", "startTime": "2027-01-15T07:00:00Z"}})
        for i in range(nodes) for j in range(per_node)]
    return ns, ps


def run(state: str, nodes: int, per_node: int, cordoned: int, passes: int) -> dict:
    ns, ps = cluster(nodes, per_node, cordoned)
    cfg = Config()
    writes = Writes()
    ew = EarlyWarning(writes, cfg, convert.scope(cfg), convert.limits(cfg))  # type: ignore[arg-type]
    ew.step(ns, ps, T0)  # warm-up: the rounds start and their requests are written
    asked = len(writes.requests)
    ps = [replace(p, annotations={**p.annotations, plan_record.DRAIN_ANNOTATION:
                                  plan_record.drain_to_annotation(writes.requests[p.uid])})
          if p.uid in writes.requests else p for p in ps]
    times = []
    for k in range(passes):
        t = time.process_time()
        again = ew.step(ns, ps, T0 + 1 + k)
        times.append((time.process_time() - t) * 1000)
        assert again == [], again  # every pod already asked: nobody twice
    times.sort()
    return {"bench": "early_warning", "state": state, "nodes": nodes, "pods": len(ps),
            "cordoned_nodes": cordoned, "asked_in_first_pass": asked, "passes": passes,
            "p50_cpu_ms": round(statistics.median(times), 2),
            "p99_cpu_ms": round(times[min(len(times) - 1, int(0.99 * len(times)))], 2),
            "max_cpu_ms": round(times[-1], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=12_500)
    ap.add_argument("--pods-per-node", type=int, default=4)
    ap.add_argument("--passes", type=int, default=50)
    a = ap.parse_args()
    for state, cordoned in (("quiet", 0), ("one-cordoned", 1),
                            ("one-percent-cordoned", a.nodes // 100)):
        print(json.dumps(run(state, a.nodes, a.pods_per_node, cordoned, a.passes)), flush=True)


if __name__ == "__main__":
    main()
