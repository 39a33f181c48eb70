"""Chaos run: whether every promise holds while controller replicas are SIGKILLed at seeded
random points and preemptors keep coming (checked from the API server's audit log and API
state: no double eviction, none outside an Evicting plan, no partial gang, nothing left over).

Usage: python -m bench.chaos [--seed 1] [--drains 100] [--faults 0.15] [--max-seconds 900]
Target: 0 violations of every invariant over 100 drains (with and without --faults).

Starts its own local control plane (audit log on), N fake 8-GPU nodes filled with victims
(single pods and gangs; `checkpoint: on-request` ones acknowledged by an in-process acker
writing `checkpoint-done` as the admin, some never; grace periods of 0-4 s, so kwok keeps them
Terminating a while, as a kubelet would), bystanders that must never be evicted (equal priority,
or outside the controller's namespaces), and 2 controller replicas as processes. A driver keeps
up to `in_flight` preemptors pending (8- and 4-GPU pods and 2-pod gangs, unschedulable in
mode (a) or gated in mode (b)), withdraws some while their plan drains, lets bound ones run
briefly, then puts victims in their place and deletes them. A killer SIGKILLs a replica (the
Lease holder 3 times in 4) at seeded random times and restarts it, under a new identity or its
old one. `--faults R` also puts every replica behind e2e/harness/faultproxy.py (R of writes and
of evictions answered 409/429/500/503, watches cut). Choices come from the seed; how they
interleave with the controller depends on timing, so two runs of a seed are alike, not equal.

When `drains` plans are Done, it stops, withdraws preemptors still pending and lets the
controller settle; then it checks the invariants (e2e/harness/chaos/checks.py says each).

Prints one JSON line (figures and the violation counts); violations are listed on stderr.
Exit status 0 when every invariant holds and `drains` were reached, 1 otherwise, 2 on bad input.
The driver and the checks live in e2e/harness/chaos/; e2e/test_chaos.py (short) and
e2e/test_api_faults.py (faults, no kills) run them too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import uuid
import warnings
from pathlib import Path

import urllib3
from kubernetes import config

from e2e.harness import kube
from e2e.harness.chaos import Chaos, ChaosConfig, proxy_faults
from e2e.harness.localcluster import LocalCluster, TestbinMissing, find_testbin


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--drains", type=int, default=100)
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--in-flight", type=int, default=3)
    p.add_argument("--max-seconds", type=float, default=900.0)
    p.add_argument("--faults", type=float, default=0.0,
                   help="share of writes/evictions failed by the fault proxy (0: no proxy)")
    p.add_argument("--no-kills", action="store_true")
    p.add_argument("--workdir", help="keep the cluster's and the replicas' logs here")
    args = p.parse_args(argv)
    if not 0 <= args.faults < 1 or args.drains < 1 or args.nodes < 2 or args.in_flight < 1:
        print("chaos: need 0 <= --faults < 1, --drains >= 1, --nodes >= 2, --in-flight >= 1",
              file=sys.stderr)
        return 2
    cfg = ChaosConfig(seed=args.seed, drains=args.drains, nodes=args.nodes,
                      in_flight=args.in_flight, max_seconds=args.max_seconds,
                      faults=proxy_faults(args.seed, args.faults),
                      kill_every=None if args.no_kills else (4.0, 12.0))
    try:
        bins = find_testbin()
    except TestbinMissing as e:
        print(f"chaos: {e}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    with contextlib.ExitStack() as stack:
        tmp = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="chaos-"))
        lc = stack.enter_context(LocalCluster(bins, Path(tmp) / "cluster", audit=True))
        api = config.new_client_from_config(config_file=str(lc.kubeconfig))
        c = kube.Cluster("local", lc.kubeconfig, api, local=lc)
        ns = f"chaos-{uuid.uuid4().hex[:6]}"
        c.core.create_namespace({"metadata": {"name": ns}})
        report = Chaos(c, ns, f"p{uuid.uuid4().hex[:6]}", cfg, Path(tmp)).run()
    print(json.dumps(report.figures))
    for line in report.invariants.lines():
        print(line, file=sys.stderr)
    return 0 if report.invariants.ok and report.figures["drains"] >= args.drains else 1


if __name__ == "__main__":
    sys.exit(main())
