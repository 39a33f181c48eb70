"""Planning ``nvlink: required`` gangs on rack-scale NVLink: the cost of the one-clique rule.

Usage: python -m bench.nvlink_cliques [--racks 278] [--samples 10] [--seed 1]
Target: every feasible plan with cliques uses one rack (checked); latency: none, a measurement.

A cluster of ``--racks`` GB200 NVL72 racks (18 compute trays of 4 GPUs each, one NVLink fabric
clique per rack), every GPU busy with 1-4-GPU training pods of random checkpoint ages. Each
sample plans one pending gang of 2-8 four-GPU members, ``nvlink: required``, of higher
priority, twice on the same pods: with the cliques on the nodes (the gang must stay in one rack,
``policies.model.cliques``) and with them stripped (today's rule: any trays). Reports plan latency
(median, p99, and their ratio, measured in this run), the lost work of both (the price of
keeping the gang's NVLink), and checks that every feasible plan with cliques uses one rack.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import replace

from ckpt_preempt.policies.model.model import Node, NvlinkNeed, Pod, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.model.topology import single_domain
from ckpt_preempt.policies.planner import preemption

NOW = 2_000_000_000.0
TRAYS_PER_RACK = 18  # GB200 NVL72: 18 compute trays of 4 GPUs
GPUS_PER_TRAY = 4


def cluster(racks: int, rng: random.Random) -> tuple[list[Node], list[Pod]]:
    nodes, pods = [], []
    for r in range(racks):
        clique = f"6a3f1c2e-9d4b-4e21-8a77-{r:012x}.1"
        for t in range(TRAYS_PER_RACK):
            name = f"rack{r}-tray{t}"
            nodes.append(Node(name=name, allocatable=Resources(
                cpu_milli=144_000, memory_mib=900_000, gpus=GPUS_PER_TRAY),
                topology=single_domain(GPUS_PER_TRAY), clique=clique))
            left = GPUS_PER_TRAY
            while left:
                g = rng.choice([g for g in (1, 2, 4) if g <= left])
                left -= g
                pods.append(Pod(uid=f"{name}-{left}", name=f"{name}-{left}", node=name,
                                requests=Resources(cpu_milli=1000, memory_mib=1024, gpus=g),
                                start_time=NOW - rng.randint(1, 48) * 900))
    return nodes, pods


def gang(k: int, size: int) -> list[Pod]:
    return [Pod(uid=f"g{k}-{i}", name=f"g{k}-{i}", priority=100, nvlink=NvlinkNeed.REQUIRED,
                gang=f"default/g{k}", gang_total=size,
                requests=Resources(cpu_milli=1000, memory_mib=1024, gpus=GPUS_PER_TRAY))
            for i in range(size)]


def timed(snapshot: Snapshot, members: list[Pod]):
    start = time.perf_counter()
    plan = preemption.plan(snapshot, members)
    return plan, time.perf_counter() - start


def p99(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--racks", type=int, default=278)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.racks < 1 or args.samples < 1:
        print("bench/nvlink_cliques.py: --racks and --samples must be at least 1",
              file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    nodes, pods = cluster(args.racks, rng)
    with_cliques = Snapshot(now=NOW, nodes=tuple(nodes), pods=tuple(pods))
    flat = Snapshot(now=NOW, nodes=tuple(replace(n, clique=None) for n in nodes),
                    pods=tuple(pods))
    clique_of = {n.name: n.clique for n in nodes}
    times = {"cliques": [], "flat": []}
    lost = {"cliques": 0.0, "flat": 0.0}
    one_rack = feasible = 0
    for k in range(args.samples):
        members = gang(k, rng.randint(2, 8))
        for label, snap in (("cliques", with_cliques), ("flat", flat)):
            plan, seconds = timed(snap, members)
            times[label].append(seconds)
            lost[label] += plan.lost_gpu_seconds
            if label == "cliques" and plan.feasible:
                feasible += 1
                one_rack += len({clique_of[n] for n in plan.target_nodes}) == 1
        print(f"sample {k + 1}/{args.samples}", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({
        "racks": args.racks, "nodes": len(nodes), "running_pods": len(pods),
        "samples": args.samples, "seed": args.seed,
        "median_ms": {k: round(v * 1000, 1) for k, v in med.items()},
        "p99_ms": {k: round(p99(v) * 1000, 1) for k, v in times.items()},
        "median_ratio_cliques_over_flat": round(med["cliques"] / med["flat"], 2),
        "lost_gpu_hours": {k: round(v / 3600, 1) for k, v in lost.items()},
        "feasible_with_cliques": feasible, "feasible_in_one_rack": one_rack,
    }))
    return 0 if one_rack == feasible else 1


if __name__ == "__main__":
    sys.exit(main())
