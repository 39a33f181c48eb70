"""Benchmark: how well a gang admitted without preemption leaves the cluster for what comes
next, under each placement rule of the planner (``PlannerConfig.placement``): best fit, our
scorer one member at a time, and our scorer on the block of members a node can take.

Usage: python -m bench.admission_placement [--n 2000] [--seed 11] [--queue 0] [--large 2000]
Target: none: a measurement (a rule is better than best fit where it leaves less fragmentation
and the next arrivals get more GPUs).

Instances: 4–12 nodes of 4 or 8 GPUs, partly filled with 1/2/4/8-GPU pods; a pending gang of
2–4 members of 1, 2 or 4 GPUs that fits without preemption (others are skipped). After the plan:

- ``frag_gpus``: FGD's fragmentation of the cluster (fgd.node_fragmentation, summed over nodes,
  in GPUs) for the target the planner uses (the snapshot's typical shapes);
- ``next_gpus_bestfit`` / ``next_gpus_ours``: GPUs a fixed sequence of 64 later arrivals
  (drawn from the running pods' shapes, the same for every rule) gets, each placed by best fit
  / by our scorer (as the extender's prioritize would), or failed where it fits nowhere, until
  their demand would pass the GPUs left free (FGD's allocation at 100 % arrived demand).

Prints one JSON line: per rule the means, and against best fit how often it is better, equal
or worse on each instance. The rule's own time per plan is in ``ms_per_plan``;
``large_cluster`` times plans in a cluster of ``--large`` nodes where most nodes are
candidates (every one of them is scored).
``--queue K`` puts the first K arrivals in the snapshot as pending pods, as a controller
cycle's queue is: the planner's target then sees what is about to arrive.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from ckpt_preempt.policies.model.model import Node, Pod, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.placement import admission, fgd
from ckpt_preempt.policies.planner import preemption

NOW = 1_000_000.0
SHAPES = (1, 1, 2, 2, 4, 8)  # GPUs of the running pods


def instance(rng: random.Random, queue: int = 0) -> tuple[Snapshot, list[Pod], list[int]]:
    nodes, pods = [], []
    for i in range(rng.randint(4, 12)):
        gpus = rng.choice((4, 8))
        nodes.append(Node(name=f"n{i:02d}", allocatable=Resources(
            cpu_milli=64_000, memory_mib=512_000, gpus=gpus)))
        free = gpus
        for _ in range(rng.randint(0, 4)):
            g = rng.choice([s for s in SHAPES if s <= free] or [0])
            if not g:
                break
            pods.append(Pod(uid=f"p{len(pods)}", name=f"p{len(pods)}", priority=0,
                            requests=Resources(cpu_milli=4000 * g, memory_mib=16_000 * g,
                                               gpus=g),
                            node=f"n{i:02d}", start_time=NOW - 3600))
            free -= g
    g = rng.choice((1, 2, 4))
    gang = [Pod(uid=f"m{k}", name=f"m{k}", priority=100, gang="default/seed/new",
                requests=Resources(cpu_milli=4000 * g, memory_mib=16_000 * g, gpus=g))
            for k in range(rng.randint(2, 4))]
    arrivals = [rng.choice(SHAPES) for _ in range(64)]
    waiting = tuple(  # the first arrivals, already pending: the planner's target counts them
        Pod(uid=f"q{k}", name=f"q{k}", priority=0,
            requests=Resources(cpu_milli=4000 * g, memory_mib=16_000 * g, gpus=g))
        for k, g in enumerate(arrivals[:queue]))
    snap = Snapshot(now=NOW, nodes=tuple(nodes), pods=tuple(pods) + tuple(gang) + waiting)
    return snap, gang, arrivals


def after(snap: Snapshot, plan, gang: list[Pod]) -> dict[str, Resources]:
    free = dict(snap.free_by_node)
    by_uid = {p.uid: p for p in gang}
    for pl in plan.placements:
        free[pl.node] = free[pl.node] - by_uid[pl.pod_uid].requests
    return free


def frag_gpus(snap: Snapshot, free: dict[str, Resources]) -> float:
    target = admission.target(snap)
    total = 0.0
    for node in snap.nodes:
        view = admission.device_view(node, free[node.name])
        total += fgd.node_fragmentation(view.model, view.cpu_free, view.gpu_free, target)
    return total / 1000


def next_gpus(snap: Snapshot, free: dict[str, Resources], arrivals: list[int],
              follow: str) -> int:
    """GPUs the arrivals get, each placed by ``follow`` (best fit, or our scorer as the
    extender's prioritize would) or failed when it fits nowhere, as in FGD's protocol."""
    free = dict(free)
    scorer = admission.AdmissionScorer(snap) if follow != admission.BESTFIT else None
    placed = arrived = 0
    room = sum(f.gpus for f in free.values())
    for g in arrivals:
        arrived += g
        if arrived > room:  # FGD's measure at 100 % of what is free: what fragmentation cost
            break
        need = Resources(cpu_milli=4000 * g, memory_mib=16_000 * g, gpus=g)
        fitting = [n for n in snap.nodes if need.fits_in(free[n.name])]
        if not fitting:
            continue
        if scorer is None:
            _, name = min((free[n.name].gpus - g, n.name) for n in fitting)
        else:
            _, name = min((tuple(-x for x in scorer.key(n, free[n.name], need)), n.name)
                           for n in fitting)
        free[name] = free[name] - need
        placed += g
    return placed


def large_cluster_ms(nodes: int, rng: random.Random, samples: int = 60) -> dict:
    """Plan time (ms, p50 and max) per rule in a cluster of ``nodes`` 8-GPU nodes, each with
    0–8 GPUs used, so most nodes are candidates: the worst case for scoring every one."""
    made, pods = [], []
    for i in range(nodes):
        made.append(Node(name=f"big{i:05d}", allocatable=Resources(
            cpu_milli=96_000, memory_mib=768_000, gpus=8)))
        for k in range(rng.randint(0, 4)):
            g = rng.choice((1, 2))
            pods.append(Pod(uid=f"b{i}-{k}", name=f"b{i}-{k}", node=f"big{i:05d}",
                            start_time=NOW - 3600, requests=Resources(
                                cpu_milli=4000 * g, memory_mib=16_000 * g, gpus=g)))
    snap = Snapshot(now=NOW, nodes=tuple(made), pods=tuple(pods))
    _ = (snap.free_gpus_index, snap.request_counts)  # once per cycle, as in the controller
    pending = [[Pod(uid=f"x{s}-{m}", name=f"x{s}-{m}", priority=100, gang=f"d/x{s}" if n > 1
                    else None, requests=Resources(cpu_milli=4000 * g, memory_mib=16_000 * g,
                                                  gpus=g)) for m in range(n)]
               for s, (g, n) in enumerate((rng.choice((1, 2, 4)), rng.choice((1, 1, 2, 4)))
                                          for _ in range(samples))]
    out = {}
    for rule in admission.PLACEMENTS:
        cfg = preemption.PlannerConfig(placement=rule, record_rejections=False)
        times = []
        for pre in pending:
            t0 = time.perf_counter()
            preemption.plan(snap, pre, cfg)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        out[rule] = {"p50": round(times[len(times) // 2], 2), "max": round(times[-1], 2)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--large", type=int, default=2000,
                    help="nodes of the large cluster timed for every rule (0: skip)")
    ap.add_argument("--queue", type=int, default=0,
                    help="the first QUEUE arrivals are pending in the snapshot (in the target)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rules = admission.PLACEMENTS
    metrics = ("frag_gpus", "next_gpus_bestfit", "next_gpus_ours")
    sums = {r: {**dict.fromkeys(metrics, 0.0), "seconds": 0.0, "plans": 0} for r in rules}
    vs = {r: {m: [0, 0, 0] for m in metrics} for r in rules}
    used = differ = 0
    for _ in range(args.n):
        snap, gang, arrivals = instance(rng, args.queue)
        got = {}
        for rule in rules:
            t0 = time.perf_counter()
            plan = preemption.plan(snap, gang, preemption.PlannerConfig(placement=rule))
            sums[rule]["seconds"] += time.perf_counter() - t0
            sums[rule]["plans"] += 1
            if not plan.feasible or plan.victims:
                break
            free = after(snap, plan, gang)
            got[rule] = (frag_gpus(snap, free), next_gpus(snap, free, arrivals, admission.BESTFIT),
                         next_gpus(snap, free, arrivals, admission.PER_POD), plan.target_nodes)
        if len(got) < len(rules):
            continue
        used += 1
        differ += len({v[3] for v in got.values()}) > 1
        base = got[admission.BESTFIT]
        for rule in rules:
            for k, m in enumerate(metrics):
                mine, theirs = got[rule][k], base[k]
                sums[rule][m] += mine
                if m != "frag_gpus":  # more GPUs placed is better; less fragmentation is
                    mine, theirs = -mine, -theirs
                vs[rule][m][0 if mine < theirs - 1e-9 else 2 if mine > theirs + 1e-9 else 1] += 1
    out = {"benchmark": "admission_placement", "instances": args.n, "fit_without_preemption":
           used, "rules_disagree": differ, "seed": args.seed, "queue": args.queue, "rules": {}}
    for rule in rules:
        s = sums[rule]
        out["rules"][rule] = {
            **{f"{m}_mean": round(s[m] / max(used, 1), 3) for m in metrics},
            "vs_bestfit_better_equal_worse": vs[rule],
            "ms_per_plan": round(1000 * s["seconds"] / max(s["plans"], 1), 3),
        }
    if args.large:
        out["large_cluster"] = {"nodes": args.large,
                                "plan_ms": large_cluster_ms(args.large, rng)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
