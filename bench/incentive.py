"""Benchmark (issue 22, the starvation bound): does reporting checkpoints make a job a more
frequent victim than staying silent would?

Usage: python -m bench.incentive [--worlds 1000] [--first-world 1] [--policies a,b]
       [--no-report-parity] [--out FILE]
Target: reporting never makes a job more likely to be preempted over its life (issue 22): good
is a mean of extra hits from reporting at or below 0 and 0 worlds where the reporter is hit
more than its silent twin, for every policy.

Each seeded world (``policies.sim.twins``): one 2-GPU node held by two identical 1-GPU
low-priority jobs checkpointing every 5-120 min, 1-16 one-GPU high-priority pods arriving over
48 h, the product's simulator defaults (the bound: 4 preemptions of one job per 24 h; a
preemptor whose victims are all at the bound is planned again when the first leaves it,
``SimConfig.replan_at_bound_release``, which matters here: these worlds may have no other
event for days). Every policy replays it three times: job 0 reporting its checkpoints (job 1
silent), job 1 reporting (job 0 silent), and both silent. A job's extra hits from reporting
are its hits when it reports less its hits when neither does, averaged over the two jobs so
that a tie-break preferring one name cancels out (a policy that reads no report scores exactly
0). The searches that read reports hold a reporter back while a silent job was preempted no
more often (``policies.planner.parity``); ``--no-report-parity`` measures them without that rule.

Per policy it reports the worlds where the reporter is hit more than it would be silent and
more than its silent twin, the extra hits (mean, max), and the world's lost GPU-hours with one
report against none (median of per-world ratios, 95 % bootstrap interval). The twins checkpoint
in the same phase until one is preempted, so here a report gains the cluster little: these
worlds measure hits, not what a report is worth. Losses are not split per job (the engine keeps
one ledger). Writes JSON (default bench/results/incentive.json) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.starvation_bound import bound_defaults
from ckpt_preempt.policies.sim import engine, planners, stats, twins

RESULTS = Path(__file__).resolve().parent / "results" / "incentive.json"
CONFIG = engine.SimConfig()  # the simulator's defaults


def hits(interval: int, arrivals: list[tuple[float, float]], policy: str, *,
         reports: tuple[bool, bool], cfg: engine.SimConfig) -> tuple[int, int, float]:
    """Times each of the two jobs was preempted, and the world's lost GPU-hours."""
    sim = engine.Simulation(twins.twin_world(interval, arrivals, reports=reports),
                            twins.nodes(), policy, cfg)
    result = sim.run()
    return len(sim.preempted.get(0, [])), len(sim.preempted.get(1, [])), result.lost_gpu_hours


def measure(worlds: list[int], policies: tuple[str, ...],
            cfg: engine.SimConfig = CONFIG) -> dict[str, dict]:
    """Per policy, over ``worlds``: each world is replayed with job 0 reporting, with job 1
    reporting and with neither; a job's extra hits from reporting are its hits when it reports
    less its hits when neither does, averaged over the two jobs, so a tie-break that prefers
    one job's name cancels out."""
    out = {}
    for policy in policies:
        extra, over_twin, ratios = [], [], []
        for w in worlds:
            interval, arrivals = twins.draw_world(w)
            a0, a1, lost_a = hits(interval, arrivals, policy, reports=(True, False), cfg=cfg)
            b0, b1, lost_b = hits(interval, arrivals, policy, reports=(False, True), cfg=cfg)
            s0, s1, lost_s = hits(interval, arrivals, policy, reports=(False, False), cfg=cfg)
            extra.append(((a0 - s0) + (b1 - s1)) / 2)
            over_twin.append(((a0 - a1) + (b1 - b0)) / 2)
            if lost_s > 0:
                ratios.append((lost_a + lost_b) / 2 / lost_s)
        ratio = stats.bootstrap_median(ratios) if ratios else None
        out[policy] = {
            "worlds": len(worlds),
            "worlds_hit_more_than_if_silent": sum(x > 0 for x in extra),
            "extra_hits_mean": round(sum(extra) / len(extra), 3),
            "extra_hits_max": max(extra),
            "worlds_hit_more_than_twin": sum(x > 0 for x in over_twin),
            "hits_over_twin_mean": round(sum(over_twin) / len(over_twin), 3),
            "hits_over_twin_max": max(over_twin),
            "lost_with_report_over_without": ratio.as_dict(3) if ratio else None,
        }
    return out


def markdown(results: dict[str, dict]) -> str:
    lines = ["| policy | worlds: reporter hit more than if silent | extra hits mean / max | "
             "worlds: more than its twin | over twin mean / max | world's loss, report ÷ none |",
             "|---|---|---|---|---|---|"]
    for policy, r in results.items():
        loss = r["lost_with_report_over_without"]
        loss_text = (f"{loss['median']:.2f} [{loss['ci95'][0]:.2f}, {loss['ci95'][1]:.2f}]"
                     if loss else "-")
        lines.append(
            f"| {policy} | {r['worlds_hit_more_than_if_silent']} of {r['worlds']} | "
            f"{r['extra_hits_mean']:+.2f} / {r['extra_hits_max']:+g} | "
            f"{r['worlds_hit_more_than_twin']} of {r['worlds']} | "
            f"{r['hits_over_twin_mean']:+.2f} / {r['hits_over_twin_max']:+g} | {loss_text} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", type=int, default=1000, help="random worlds (default 1000)")
    ap.add_argument("--first-world", type=int, default=1, help="the first world's seed")
    ap.add_argument("--policies", help="comma-separated (default: "
                    f"{','.join(planners.REPORTED)})")
    ap.add_argument("--no-report-parity", action="store_true",
                    help="our searches choose by loss alone (policies.planner.parity off)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="JSON file to write")
    args = ap.parse_args(argv)
    if args.worlds < 1 or args.first_world < 0:
        print("incentive: --worlds must be >= 1 and --first-world >= 0", file=sys.stderr)
        return 2
    policies = tuple(planners.REPORTED)
    if args.policies:
        try:
            policies = planners.named(args.policies)
        except ValueError as e:
            print(f"incentive: {e}", file=sys.stderr)
            return 2
    worlds = list(range(args.first_world, args.first_world + args.worlds))
    started = time.monotonic()
    cfg = replace(CONFIG, report_parity=not args.no_report_parity)
    results = measure(worlds, policies, cfg)
    doc = {"benchmark": "incentive", "worlds": [worlds[0], worlds[-1]],
           "defaults": bound_defaults(), "report_parity": cfg.report_parity,
           "wall_seconds": round(time.monotonic() - started, 1), "results": results}
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as e:
        print(f"incentive: cannot write {args.out}: {e}", file=sys.stderr)
        return 2
    print(markdown(results))
    print(json.dumps({k: v for k, v in doc.items() if k != "results"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
