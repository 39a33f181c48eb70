"""Benchmark: what one reconcile pass spends getting its snapshot, incremental model against a
full rebuild, at 4,278 nodes / 40k pods (the spot-GPU trace) and 12,500 nodes x 8 GPUs / 100k
pods (bench/synthetic_cluster.py), when 0 % and 1 % of the pods changed since the last pass.

Usage: python -m bench.scale_pass [--sizes small,large] [--repeats 5]
Target: <= 100 ms at 1 % changed, RSS <= 1 GiB (large).

"full": what the pass did before controller/kube/cluster_model.py: read the cache, drop finished
pods, build the pass's maps, ``convert.snapshot()`` and the Snapshot's indexes the planner
uses. "incremental": ``ClusterModel.sync()`` + ``ClusterModel.snapshot()`` after the changes
reached the store (half of the changed pods modified, a quarter finished and deleted, a quarter
created, bound where those went). Each figure is the median of ``--repeats`` passes. RSS: the
process after the cache (trimmed records) is built, and what the model adds to it.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from dataclasses import replace
from typing import Any

from bench.synthetic_cluster import rfc3339, trace, uniform
from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.controller.kube.cluster_model import ClusterModel
from ckpt_preempt.policies.model import annotations as ann
from e2e.harness.offline import LoggedStore

NOW = 2_000_000_000.0
SIZES = {"small": (4278, 40_000), "large": (12_500, 100_000)}
TARGET_MS, TARGET_RSS_MIB = 100, 1024


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def full_pass(pods: LoggedStore, nodes: LoggedStore, pdbs: LoggedStore, scope, limits,
              now: float) -> float:
    t0 = time.perf_counter()
    live = [p for p in list(pods.items.values()) if not p.done]
    by_uid = {p.uid: p for p in live}
    node_map = {n.name: n for n in list(nodes.items.values())}
    conv = convert.snapshot(now=now, nodes=node_map.values(), pods=live,
                            pdbs=tuple(pdbs.items.values()), scope=scope, limits=limits)
    s = conv.snapshot
    s.free_gpus_index, s.gangs, s.pod_by_uid, s.node_by_name, s.largest_allocatable  # noqa: B018
    assert len(by_uid) == len(s.pods)
    return (time.perf_counter() - t0) * 1000


def incremental_pass(model: ClusterModel, now: float) -> float:
    t0 = time.perf_counter()
    model.sync(now)
    model.snapshot(now=now)
    return (time.perf_counter() - t0) * 1000


def change(pods: LoggedStore, fraction: float, rng: random.Random, round_: int) -> None:
    """Touch ``fraction`` of the pods as a busy cluster does between passes."""
    keys = rng.sample(list(pods.items), int(len(pods.items) * fraction))
    for i, key in enumerate(keys):
        p = pods.items[key]
        if i % 4 < 2:  # a new checkpoint reported
            saved = rfc3339(NOW - 60 - round_)
            pods.put(key, replace(p, resource_version=f"{p.resource_version}.{round_}",
                                  annotations={**p.annotations, ann.LAST_CHECKPOINT: saved}))
        elif i % 4 == 2:  # finished and gone
            pods.delete(key)
        else:  # a new pod in the place of one that went
            new = replace(p, uid=f"{p.uid}-r{round_}", name=f"{p.name}-r{round_}")
            pods.put(new.key, new)


def one_size(name: str, repeats: int) -> dict:
    n_nodes, n_pods = SIZES[name]
    gc.collect()
    base = rss_mib()
    node_objs, pod_objs = trace(n_pods) if name == "small" else uniform(n_nodes, n_pods)
    nodes = LoggedStore({n["metadata"]["name"]: records.node_info(n) for n in node_objs})
    pods = LoggedStore({})
    for d in pod_objs:
        p = records.pod_info(d)
        pods.items[p.key] = p
    pdbs = LoggedStore({})
    del node_objs, pod_objs
    gc.collect()
    cache_rss = rss_mib()
    cfg = Config()
    scope, limits = convert.scope(cfg), convert.limits(cfg)
    model = ClusterModel(pods=pods, nodes=nodes, pdbs=pdbs, scope=scope, limits=limits)
    t0 = time.perf_counter()
    model.sync(NOW)
    model.snapshot(now=NOW)
    first_ms = (time.perf_counter() - t0) * 1000
    gc.collect()
    model_rss = rss_mib()
    rng = random.Random(7)
    out: dict[str, Any] = {
        "nodes": len(nodes.items), "gpus": sum(n.allocatable.gpus for n in nodes.items.values()),
        "pods": len(pods.items), "first_sync_ms": round(first_ms, 1),
        "rss_mib": {"before_cache": round(base, 1), "with_cache": round(cache_rss, 1),
                    "with_model": round(model_rss, 1),
                    "model_adds": round(model_rss - cache_rss, 1)},
    }
    full = [full_pass(pods, nodes, pdbs, scope, limits, NOW) for _ in range(repeats)]
    out["full_rebuild_ms"] = round(statistics.median(full), 1)
    for pct in (0, 1):
        times = []
        for r in range(repeats):
            change(pods, pct / 100, rng, r + 100 * pct)
            times.append(incremental_pass(model, NOW + r))
        out[f"incremental_ms_{pct}pct_changed"] = round(statistics.median(times), 1)
        out[f"incremental_ms_{pct}pct_changed_max"] = round(max(times), 1)
    ref = convert.snapshot(now=NOW + repeats - 1, nodes=nodes.items.values(),
                           pods=[p for p in pods.items.values() if not p.done], pdbs=(),
                           scope=scope, limits=limits)
    assert model.snapshot(now=NOW + repeats - 1).snapshot == ref.snapshot, "model != rebuild"
    out["speedup_at_1pct"] = round(out["full_rebuild_ms"]
                                   / max(out["incremental_ms_1pct_changed"], 1e-3), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="small,large")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    results = {name: one_size(name, args.repeats) for name in args.sizes.split(",")}
    print(json.dumps({"benchmark": "scale_pass", "sizes": results,
                      "target_ms_at_1pct_large": TARGET_MS, "target_rss_mib": TARGET_RSS_MIB,
                      "repeats": args.repeats}))


if __name__ == "__main__":
    main()
