"""Differential run: whether policies.baselines.kube_default (and, with ``--workload``,
kube_workload) chooses the victims the real kube-scheduler chooses, on random clusters.

Usage: python -m bench.differential [--cases 200] [--seed 1] [--out PATH] [--no-pdb-edges]
[--workdir DIR] [--replay RESULTS] [--workload]
Target: >= 95 % of the cases with a clean answer identical or a documented tie-break
(both modes).

Starts its own local control plane (etcd, kube-apiserver, kube-scheduler with its default
profile, kube-controller-manager, kwok) and runs `--cases` random clusters on it, one after
the other, each in a fresh namespace on fresh fake nodes deleted afterwards
(e2e/harness/differential.py says what a case is and how it is observed;
e2e/harness/differential_classify.py how it is judged: agree, documented tie, real, anomaly).
`--workload`: kube_workload against kube-scheduler's workload-aware preemption on clusters with
native PodGroups (e2e/harness/differential_workload.py and differential_workload_classify.py);
every case is stored, default --out bench/results/differential_workload.json. `--replay`
classifies a stored run again without a cluster.

The e2e test (e2e/test_kube_differential.py) runs a short version. Progress goes to stderr; one
JSON line at the end: cases, agreements, documented tie-breaks, real disagreements, anomalies
(runs without a clean answer), the agreement rate (agreements plus documented tie-breaks, over
the cases with a clean answer) and the wall time. Every case that is not a plain agreement is
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
import warnings
from collections import Counter
from pathlib import Path

import urllib3
from kubernetes import config

from e2e.harness import differential_classify as dc
from e2e.harness import differential_workload_classify as dwc
from e2e.harness import kube
from e2e.harness.localcluster import LocalCluster, TestbinMissing, find_testbin, versions
from e2e.harness.paths import REPO

DEFAULT_OUT = REPO / "bench" / "results" / "differential.json"
WORKLOAD_OUT = REPO / "bench" / "results" / "differential_workload.json"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--no-pdb-edges", action="store_true",
                   help="leave out unlabeled pods, empty PDB selectors and overlapping PDBs "
                        "(where kube-scheduler's PDB rules differ from policy/v1 eviction)")
    p.add_argument("--workdir", help="keep the control plane's logs here")
    p.add_argument("--replay", type=Path, metavar="RESULTS",
                   help="no cluster: classify again the ties and real disagreements stored in "
                        "RESULTS (an --out file) with the current kube_default")
    p.add_argument("--workload", action="store_true",
                   help="kube_workload against workload-aware preemption on clusters with native "
                        "PodGroups (e2e/harness/differential_workload.py); default --out "
                        f"{WORKLOAD_OUT.relative_to(REPO)}")
    args = p.parse_args(argv)
    if args.workload:
        return workload_main(args, WORKLOAD_OUT if args.out == DEFAULT_OUT else args.out)
    if args.replay:
        return replay(args.replay)
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
        verdicts = dc.run(c, args.cases, args.seed, pdb_edges=not args.no_pdb_edges)
        version = versions(bins).get("KUBERNETES_VERSION", "")
    figures = {**dc.summary(verdicts, time.monotonic() - t0), "seed": args.seed,
               "pdb_edges": not args.no_pdb_edges, "kubernetes": version}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps(v.as_json()) for v in verdicts if v.kind != "agree"]  # a line each
    head = json.dumps(figures)
    args.out.write_text(f'{{"summary": {head},\n"not_agreeing": [\n' + ",\n".join(rows) + "]}\n")
    print(json.dumps(figures))
    return 0 if figures["real_disagreements"] == 0 else 1


def replay(path: Path) -> int:
    """Classify the stored ties and real disagreements again with the current kube_default."""
    try:
        data = json.loads(path.read_text())
        stored, edges = data["not_agreeing"], data["summary"]["pdb_edges"]
        seen = [dc.observation(v, pdb_edges=edges) for v in stored if v["kind"] in ("tie", "real")]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"differential: cannot replay {path}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    now = [dc.classify(s) for s in seen]
    for before, after in zip((v for v in stored if v["kind"] in ("tie", "real")), now,
                             strict=True):
        if before["kind"] != after.kind:
            print(f"case {after.case}: {before['kind']} -> {after.kind}", file=sys.stderr)
    print(json.dumps({"replayed": len(now), **Counter(v.kind for v in now)}))
    return 0 if all(v.kind != "real" for v in now) else 1


def write_workload(path: Path, figures: dict, verdicts: list[dwc.Verdict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = ",\n".join(json.dumps(v.as_json(), separators=(",", ":")) for v in verdicts)
    path.write_text(f'{{"summary": {json.dumps(figures)},\n"cases": [\n{rows}]}}\n')


def workload_replay(path: Path) -> int:
    """Classify every stored case again with the current kube_workload; one JSON line."""
    try:
        stored = json.loads(path.read_text())["cases"]
        again = [dwc.classify(*dwc.snapshot_of(v["detail"]["state"]), tuple(v["kube"]["victims"]),
                          case=v["case"]) for v in stored
                 if v["kind"] != "anomaly" and "state" in v["detail"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"differential: cannot replay {path}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"replayed": len(again), **dwc.summary(again, 0.0)}))
    return 0 if all(v.kind != "real" for v in again) else 1


def workload_main(args: argparse.Namespace, out: Path) -> int:
    """--workload: `args` as main parsed them (--cases, --seed, --workdir, --replay); results to
    `out`. Exit status as main's."""
    if args.replay:
        return workload_replay(args.replay)
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
        lc = stack.enter_context(LocalCluster(bins, Path(tmp) / "cluster", native_workload=True))
        api = config.new_client_from_config(config_file=str(lc.kubeconfig))
        verdicts = dwc.run(kube.Cluster("local", lc.kubeconfig, api, local=lc), args.cases,
                       args.seed)
        version = versions(bins).get("KUBERNETES_VERSION", "")
    figures = {**dwc.summary(verdicts, time.monotonic() - t0), "seed": args.seed,
               "kubernetes": version}
    write_workload(out, figures, verdicts)
    print(json.dumps(figures))
    return 0 if figures["real_disagreements"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
