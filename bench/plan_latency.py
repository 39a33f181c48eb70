"""Benchmark (c): plan latency at scale, with and without the cycle's planner caches.

Usage: python -m bench.plan_latency [--size spot|frontier] [--pods N] [--samples 300]
       [--seed 3] [--active 20] [--cold | --no-cold] [--joint-seeds N] [--silent-share 0.25]
Target: p99 <= 25 ms (spot) and <= 50 ms (frontier), cached, gangs included.

Two cluster sizes (``--size``): ``spot`` (default), the 4,278-node spot-GPU cluster with ~40k
running pods, its nodes from the bundled cluster-trace-v2026-spot-gpu node list (GPUs and CPUs
per node; memory is not in the trace, so 8 GiB per CPU is assumed); ``frontier``, 12,500
synthetic nodes of 8 GPUs and 96 CPUs (100k GPUs) with 100k running pods. GPUs are filled with
1–8-GPU training pods (a fifth in gangs of 2–4), and CPU-only pods bring the total to ``--pods``.
Each sample plans one pending pod or gang of higher priority. "warm" is what the controller
spends per preemptor: the cycle's snapshot (every pending sample in it) is indexed once, and
each sample plans on ``Snapshot.restricted()`` of it, the per-preemptor view, whose cost is
included: as in the controller, the target nodes and victims of the ``--active`` plans made
just before are excluded from that view (each with its reason), as are 1 % of the nodes
(tainted for this preemptor). The queue is planned twice in one run: with one
``policies.planner.plan_cache.PlanCache`` for the whole queue, as the controller plans a cycle
("cached"), and without ("uncached"); both must give the same plans. "cold" builds and
indexes a fresh snapshot per sample as well (``--cold``; off for ``frontier``).
"first_cycle_warmed" plans the first queue again on a cache that idle passes filled ahead
(``preemption.warm``, ``WARM_NODES_PER_PASS`` nodes a pass, as ``controller.planning.reconcile``
does
while no preemptor is due). "next_cycle" is the cycle after: ``--later`` seconds on, the first
cycle's plans carried out (victims gone, preemptors running, their workloads counted as
preempted), ``--churn`` of the running pods checkpointed since, and a new queue of
``--samples`` preemptors, planned with the caches carried from the first cycle
(``PlanCache.carried``, as the controller carries them) and with a fresh cache; both must
choose the same.
``--silent-share`` makes that share of the running ``checkpoint: periodic`` pods report no
checkpoint (default 0: every one reports), so report parity (``policies.planner.parity``) holds
reporters: plans are made with the rule's floor applied by the victim units, which share the
cycle's caches with every plan at that floor.
Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import resource
import time
from dataclasses import replace
from importlib import resources

from ckpt_preempt.controller.planning.reconcile import WARM_NODES_PER_PASS, cycle_objects_frozen
from ckpt_preempt.policies.model.model import (
    CheckpointMode,
    Node,
    Pod,
    PodHold,
    RejectReason,
    Resources,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import preemption
from ckpt_preempt.policies.planner.plan_cache import PlanCache, changed_nodes

NOW = 2_000_000_000.0
FRONTIER_NODES = 12_500  # 8 GPUs each: 100k GPUs
SIZES = {  # --size: (default running pods, target p99 in ms with the caches)
    "spot": (40_000, 25),
    "frontier": (100_000, 50),
}


def spot_nodes() -> list[Node]:
    data = resources.files("ckpt_preempt.policies").joinpath("data")
    text = data.joinpath("spot_gpu_node_info_df.csv").read_text()
    return [
        Node(name=f"spot-{row['node_name']}", allocatable=Resources(
            cpu_milli=int(row["cpu_num"]) * 1000, memory_mib=int(row["cpu_num"]) * 8192,
            gpus=int(row["gpu_capacity_num"])))
        for row in csv.DictReader(text.splitlines())
    ]


def frontier_nodes() -> list[Node]:
    return [Node(name=f"gpu-{k:05d}", allocatable=Resources(
        cpu_milli=96_000, memory_mib=96 * 8192, gpus=8)) for k in range(FRONTIER_NODES)]


def cluster(target_pods: int, rng: random.Random,
            nodes: list[Node] | None = None) -> tuple[list[Node], list[Pod]]:
    nodes = spot_nodes() if nodes is None else nodes
    pods: list[Pod] = []
    used_cpu = {}
    gang, gang_left = None, 0

    def add(node: Node, gpus: int, cpu: int) -> None:
        nonlocal gang, gang_left
        k = len(pods)
        if gpus >= 2 and gang_left == 0 and rng.random() < 0.2:
            gang, gang_left = f"ml/seed/g{k}", rng.randint(2, 4)
        age = rng.uniform(300, 48 * 3600)
        mode = rng.choice(list(CheckpointMode))
        pods.append(Pod(
            uid=f"u{k}", name=f"p{k}", namespace="ml", priority=rng.choice((0, 10, 100)),
            requests=Resources(cpu_milli=cpu, memory_mib=cpu * 4, gpus=gpus), node=node.name,
            start_time=NOW - age, checkpoint=mode,
            last_checkpoint=None if mode is CheckpointMode.NONE else NOW - rng.uniform(0, age),
            checkpoint_seconds=rng.uniform(30, 300),
            gang=gang if gpus >= 2 and gang_left else None,
        ))
        if gpus >= 2 and gang_left:
            gang_left -= 1
        used_cpu[node.name] = used_cpu.get(node.name, 0) + cpu

    for node in nodes:
        free = node.allocatable.gpus
        while free:
            g = min(free, rng.choice((1, 1, 2, 4, 8)))
            add(node, g, 4000 * g)
            free -= g
    while len(pods) < target_pods:
        node = rng.choice(nodes)
        if used_cpu.get(node.name, 0) + 500 <= node.allocatable.cpu_milli:
            add(node, 0, 500)
    return nodes, pods


def silenced(pods: list[Pod], share: float, rng: random.Random) -> list[Pod]:
    """``share`` of the periodic pods with their reported checkpoint removed, drawn from a
    generator of their own so that the cluster is otherwise the same at any share."""
    if share <= 0:
        return pods
    return [replace(p, last_checkpoint=None)
            if p.checkpoint is CheckpointMode.PERIODIC and rng.random() < share else p
            for p in pods]


def pending(rng: random.Random, k: int) -> list[Pod]:
    g = rng.choice((1, 2, 4, 8, 8))
    size = 1 if rng.random() < 0.8 else rng.choice((2, 4))
    return [
        Pod(uid=f"pre{k}-{m}", name=f"pre{k}-{m}", namespace="prod", priority=1000,
            requests=Resources(cpu_milli=4000 * g, memory_mib=16000 * g, gpus=g),
            gang=f"prod/seed/pre{k}" if size > 1 else None)
        for m in range(size)
    ]


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))], 2)


def stats(xs: list[float]) -> dict:
    return {"n": len(xs), "p50": pct(xs, 0.5), "p99": pct(xs, 0.99), "max": pct(xs, 1.0)}


def plan_queue(cycle: Snapshot, queue: list[list[Pod]], tainted: dict, active: int,
               cfg: preemption.PlannerConfig, cached: bool,
               cache: PlanCache | None = None) -> tuple[list, list, dict, dict]:
    """Plan the queue as one controller cycle does: (plans, views, wall-clock ms and CPU ms
    of this thread per preemptor kind). CPU time is what a busy machine does not inflate.
    ``cache``: the cycle's, when given (else a fresh one, or none when not ``cached``)."""
    if cache is None and cached:
        cache = PlanCache(cycle)
    plans, views = [], []
    by_kind: dict[str, list[float]] = {"single_pod": [], "gang": []}
    cpu: dict[str, list[float]] = {"single_pod": [], "gang": []}
    with cycle_objects_frozen():  # as controller.planning.reconcile plans its queue
        for pre in queue:
            recent = plans[-active:] if active else []
            closed = {**tainted, **{n: RejectReason.NODE_HELD
                                    for p in recent for n in p.target_nodes}}
            held = {v.uid: PodHold.HELD_BY_PLAN for p in recent for v in p.victims}
            c0, t0 = time.thread_time(), time.perf_counter()
            plan = preemption.plan(cycle.restricted(closed=closed, held=held), pre, cfg, cache)
            t1, c1 = time.perf_counter(), time.thread_time()
            kind = "gang" if len(pre) > 1 else "single_pod"
            by_kind[kind].append((t1 - t0) * 1000)
            cpu[kind].append((c1 - c0) * 1000)
            plans.append(plan)
            views.append((closed, held))
    return plans, views, by_kind, cpu


def next_cycle(cycle: Snapshot, queue: list[list[Pod]], plans: list, rng: random.Random,
               later: float, churn: float) -> Snapshot:
    """The cluster ``later`` seconds on: the feasible plans carried out (victims gone, their
    preemptors running on the target nodes, their workloads counted as preempted), and a
    ``churn`` fraction of the running pods having checkpointed since."""
    now = cycle.now + later
    gone = {v.uid for p in plans for v in p.victims}
    bound = {pl.pod_uid: pl.node for p in plans for pl in p.placements}
    recent = dict(cycle.recent_preemptions)
    for p in plans:
        for v in p.victims:
            recent[v.workload] = recent.get(v.workload, 0) + 1
    pods = []
    for p in cycle.pods:
        if p.uid in gone:
            continue
        if p.uid in bound:
            p = replace(p, node=bound[p.uid], start_time=now - later / 2)
        elif p.node is not None and p.last_checkpoint is not None and rng.random() < churn:
            p = replace(p, last_checkpoint=now - rng.uniform(0, later))
        pods.append(p)
    return Snapshot(now=now, nodes=cycle.nodes, pods=tuple(pods), pdbs=cycle.pdbs,
                    recent_preemptions=recent, unknown_checkpoint=cycle.unknown_checkpoint)


def same_choices(a: list, b: list) -> bool:
    """Equal plans but for how many nodes were evaluated (a carried bound may be lower)."""
    return [replace(p, nodes_evaluated=0) for p in a] == [replace(p, nodes_evaluated=0)
                                                          for p in b]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=sorted(SIZES), default="spot")
    ap.add_argument("--pods", type=int, default=None, help="running pods (default per size)")
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--active", type=int, default=20, help="other plans holding nodes/pods")
    ap.add_argument("--cold", action=argparse.BooleanOptionalAction, default=None,
                    help="also plan each sample on a fresh snapshot (default: spot only)")
    ap.add_argument("--later", type=float, default=30.0,
                    help="seconds between the first cycle and the next")
    ap.add_argument("--churn", type=float, default=0.01,
                    help="fraction of running pods that checkpointed in between")
    ap.add_argument("--joint-seeds", type=int, default=preemption.PlannerConfig().joint_seeds,
                    help="spread victim gangs a gang plan evicts first (0: member by member)")
    ap.add_argument("--silent-share", type=float, default=0.0,
                    help="share of running periodic pods reporting no checkpoint (default 0)")
    args = ap.parse_args()
    if not 0.0 <= args.silent_share <= 1.0:
        ap.error("--silent-share must be between 0 and 1")
    target_pods, target_p99 = SIZES[args.size]
    cold_too = args.cold if args.cold is not None else args.size == "spot"
    imports_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rng = random.Random(args.seed)
    nodes, pods = cluster(args.pods or target_pods, rng,
                          frontier_nodes() if args.size == "frontier" else None)
    pods = silenced(pods, args.silent_share, random.Random(args.seed))
    if args.joint_seeds < 0:
        ap.error("--joint-seeds must be 0 or more")
    cfg = preemption.PlannerConfig(record_rejections=False, joint_seeds=args.joint_seeds)
    queue = [pending(rng, k) for k in range(args.samples)]
    cycle = Snapshot(now=NOW, nodes=tuple(nodes),
                     pods=tuple(pods) + tuple(p for pre in queue for p in pre))
    tainted = dict.fromkeys(rng.sample([n.name for n in nodes], len(nodes) // 100),
                            RejectReason.NODE_TAINT)
    cycle.restricted()  # index the cycle's snapshot once, as a controller cycle does
    plans, views, uncached, uncached_cpu = plan_queue(cycle, queue, tainted, args.active, cfg,
                                                      cached=False)
    first = PlanCache(cycle)
    again, _, cached, cached_cpu = plan_queue(cycle, queue, tainted, args.active, cfg,
                                              cached=True, cache=first)
    assert again == plans, "the caches must not change a plan"
    # the first cycle once idle passes have worked ahead (controller.planning.reconcile._warm): the
    # evictable pods of every node for the top priority band, WARM_NODES_PER_PASS a pass
    warmed, chunks = PlanCache(cycle), []
    while True:
        t0 = time.perf_counter()
        with cycle_objects_frozen():  # as controller.planning.reconcile warms
            if not preemption.warm(warmed, cfg, WARM_NODES_PER_PASS):
                break
        chunks.append((time.perf_counter() - t0) * 1000)
    after_warm, _, warm_ms, _ = plan_queue(cycle, queue, tainted, args.active, cfg,
                                           cached=True, cache=warmed)
    assert after_warm == plans, "warming must not change a plan"
    # the next cycle: the plans carried out, some pods checkpointed, a new queue; its caches
    # carried from this cycle's (as the controller does) or fresh
    queue2 = [pending(rng, args.samples + k) for k in range(args.samples)]
    cycle2 = next_cycle(cycle, queue, plans, rng, args.later, args.churn)
    cycle2 = replace(cycle2, pods=cycle2.pods + tuple(p for pre in queue2 for p in pre))
    cycle2.restricted()
    changed = changed_nodes(cycle, cycle2)
    t0 = time.perf_counter()
    carried = PlanCache.carried(first, cycle2, changed)
    carry_ms = (time.perf_counter() - t0) * 1000
    kept = carried.carried_nodes
    fresh2, _, fresh_ms, _ = plan_queue(cycle2, queue2, tainted, args.active, cfg, cached=True)
    next2, _, next_ms, next_cpu = plan_queue(cycle2, queue2, tainted, args.active, cfg,
                                             cached=True, cache=carried)
    assert same_choices(next2, fresh2), "a carried cache must not change a plan"
    cold, feasible, evaluated = [], 0, []
    for pre, plan, (closed, held) in zip(queue, plans, views, strict=True):
        feasible += plan.feasible
        evaluated.append(plan.nodes_evaluated)
        if not cold_too:
            continue
        t2 = time.perf_counter()  # cold: a fresh snapshot, GC as it comes
        own = Snapshot(now=NOW, nodes=tuple(nodes), pods=tuple(pods) + tuple(pre))
        alone = preemption.plan(own.restricted(closed=closed, held=held), pre, cfg)
        cold.append((time.perf_counter() - t2) * 1000)
        assert alone == plan, "the per-preemptor view must plan as a fresh snapshot does"
    warm = cached["single_pod"] + cached["gang"]
    bare = uncached["single_pod"] + uncached["gang"]
    out = {
        "benchmark": "plan_latency",
        "size": args.size,
        "nodes": len(nodes),
        "gpus": sum(n.allocatable.gpus for n in nodes),
        "running_pods": len(pods),
        "samples": args.samples,
        "feasible_plans": feasible,
        "warm_ms": {"p50": pct(warm, 0.5), "p99": pct(warm, 0.99), "max": pct(warm, 1.0)},
        "warm_ms_by_preemptor": {k: stats(xs) for k, xs in cached.items() if xs},
        "uncached_ms": {"p50": pct(bare, 0.5), "p99": pct(bare, 0.99), "max": pct(bare, 1.0)},
        "uncached_ms_by_preemptor": {k: stats(xs) for k, xs in uncached.items() if xs},
        "uncached_over_cached": {"p50": round(pct(bare, 0.5) / pct(warm, 0.5), 2),
                                 "p99": round(pct(bare, 0.99) / pct(warm, 0.99), 2)},
        "cpu_ms_by_preemptor": {k: stats(xs) for k, xs in cached_cpu.items() if xs},
        "uncached_cpu_ms_by_preemptor": {k: stats(xs) for k, xs in uncached_cpu.items() if xs},
        "first_cycle_warmed": {  # after idle passes filled the caches ahead
            "warm_passes": len(chunks), "warm_pass_ms": stats(chunks) if chunks else None,
            "ms": stats(warm_ms["single_pod"] + warm_ms["gang"]),
            "ms_by_preemptor": {k: stats(xs) for k, xs in warm_ms.items() if xs},
        },
        "next_cycle": {  # the following cycle, caches carried as the controller carries them
            "later_s": args.later, "churn": args.churn,
            "changed_nodes": len(changed),
            "carried_nodes": kept, "carry_ms": round(carry_ms, 2),
            "carried_ms": stats(next_ms["single_pod"] + next_ms["gang"]),
            "carried_ms_by_preemptor": {k: stats(xs) for k, xs in next_ms.items() if xs},
            "carried_cpu_ms_by_preemptor": {k: stats(xs) for k, xs in next_cpu.items() if xs},
            "fresh_cache_ms": stats(fresh_ms["single_pod"] + fresh_ms["gang"]),
            "fresh_cache_ms_by_preemptor": {k: stats(xs) for k, xs in fresh_ms.items() if xs},
        },
        "nodes_evaluated_p50": pct(evaluated, 0.5),
        "rss_mib_after_imports": round(imports_rss, 1),  # python, policies, kubernetes client
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "target_p99_ms": target_p99,
        "seed": args.seed,
        "joint_seeds": args.joint_seeds,
        "silent_share": args.silent_share,
        "active_plans": args.active,
    }
    if cold:
        out["cold_ms"] = {"p50": pct(cold, 0.5), "p99": pct(cold, 0.99), "max": pct(cold, 1.0)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
