"""Differential run: policies.kube_default against the real kube-scheduler on random clusters.

    .venv/bin/python bench/differential.py [--cases 200] [--seed 1] [--out PATH]

Starts its own local control plane (etcd, kube-apiserver, kube-scheduler with its default
profile, kube-controller-manager, kwok) and runs `--cases` random clusters on it, one after
the other, each in a fresh namespace on fresh fake nodes deleted afterwards (e2e/differential.py
says what a case is and how a disagreement is classified). Progress goes to stderr; one JSON
line at the end: cases, agreements, documented tie-breaks, real disagreements, anomalies (runs
without a clean answer), the agreement rate (agreements plus documented tie-breaks, over the
cases with a clean answer) and the wall time. Every case that is not a plain agreement is
written with its full state to `--out` (default bench/results/differential.json).
Exit status 0 when there is no real disagreement, 1 otherwise, 2 on bad input or no testbin.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import uuid
import warnings
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import urllib3  # noqa: E402
from kubernetes import config  # noqa: E402

from e2e import differential, kube  # noqa: E402
from e2e.localcluster import LocalCluster, TestbinMissing, find_testbin  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "differential.json"


def summary(verdicts: list[differential.Verdict], seconds: float) -> dict:
    kinds = Counter(v.kind for v in verdicts)
    clean = len(verdicts) - kinds["anomaly"]
    return {"cases": len(verdicts), "agreements": kinds["agree"],
            "documented_ties": kinds["tie"], "real_disagreements": kinds["real"],
            "anomalies": kinds["anomaly"],
            "agreement_rate": round((kinds["agree"] + kinds["tie"]) / clean, 4) if clean else None,
            "wall_seconds": round(seconds, 1)}


def run(c: kube.Cluster, cases: int, seed: int, log=sys.stderr) -> list[differential.Verdict]:
    differential.ensure_priority_classes(c)
    tag = uuid.uuid4().hex[:5]
    verdicts = []
    for i in range(cases):
        case = differential.generate(seed, i)
        seen = differential.run_case(c, case, run=tag)
        v = differential.classify(seen)
        verdicts.append(v)
        print(f"case {i + 1}/{cases}: {v.kind:7s} kube={seen.node or '-'} "
              f"{list(seen.victims)} ours={v.ours['node'] or '-'} {v.ours['victims']} "
              f"({seen.seconds:.1f}s)", file=log, flush=True)
    return verdicts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--workdir", help="keep the control plane's logs here")
    args = p.parse_args(argv)
    if args.cases < 1:
        print("differential: --cases must be at least 1", file=sys.stderr)
        return 2
    try:
        bins = find_testbin()
    except TestbinMissing as e:
        print(f"differential: {e}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        tmp = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="diff-"))
        lc = stack.enter_context(LocalCluster(bins, Path(tmp) / "cluster"))
        api = config.new_client_from_config(config_file=str(lc.kubeconfig))
        c = kube.Cluster("local", lc.kubeconfig, api, local=lc)
        verdicts = run(c, args.cases, args.seed)
    figures = summary(verdicts, time.monotonic() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "summary": figures, "seed": args.seed,
        "kubernetes": lc_version(bins),
        "not_agreeing": [v.as_json() for v in verdicts if v.kind != "agree"]}, indent=1) + "\n")
    print(json.dumps(figures))
    return 0 if figures["real_disagreements"] == 0 else 1


def lc_version(bins: Path) -> str:
    from e2e.localcluster import versions
    return versions(bins).get("KUBERNETES_VERSION", "")


if __name__ == "__main__":
    sys.exit(main())
