"""Benchmark: the controller against the real control plane (local, kwok nodes): list-to-ready
and memory at scale, and the time a burst of preemptors takes to be bound.

Usage: python -m bench.scale_kwok [--nodes 1000] [--pods-per-node 8] [--burst-nodes 300]
[--preemptors 100] [--workers 16] [--burst-only] [--timeline FILE]
[--write-concurrency N (the controller's writeConcurrency; default: its default)]
Target: burst: all 100 preemptors bound <= 30 s, evicting exactly the plans' victims;
list-to-ready: none, a measurement.

1. **list-to-ready**: ``--nodes`` kwok nodes of 8 GPUs, each full with ``--pods-per-node`` bound
   pods (created in parallel, already bound with ``nodeName``: kwok makes them Running); then a
   ``ckpt-preempt run`` process starts, and the time until its ``/readyz`` answers 200 (every
   informer listed) and its resident memory (VmRSS, VmHWM) are measured. Creation rate and the
   API server's and etcd's memory are reported too: they are what stops a bigger run here.
2. **burst**: ``--burst-nodes`` full 8-GPU nodes (one low-priority 8-GPU pod each), the
   controller running, then ``--preemptors`` 8-GPU pods of a ``preemptionPolicy: Never`` class
   at once: the time until all are bound, and the evictions, which must be exactly the victims
   of the stored plans (e2e/test_scale_burst.py asserts that part in CI). Where the time went,
   from the controller's own audit log (logger ``ckpt_preempt.audit``, one line per write): when
   the first and last plan were stored and the last eviction sent, and the writes by verb. The
   burst and the bulk creation are e2e/harness/kwok_scale.py's.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

import urllib3
import yaml
from kubernetes import config
from kubernetes.client.rest import ApiException

from e2e.harness import kube
from e2e.harness.kwok_scale import burst, create_nodes, fill, vm_mib
from e2e.harness.localcluster import LocalCluster, TestbinMissing, find_testbin, free_port
from e2e.harness.paths import REPO


def list_to_ready(c: kube.Cluster, namespace: str, tmp: Path) -> dict:
    """Start ``ckpt-preempt run``; seconds until /readyz is 200, and its memory then."""
    port = free_port()
    cfg = tmp / "controller.yaml"
    cfg.write_text(yaml.safe_dump({"namespaces": [namespace], "leaseNamespace": namespace,
                                   "planNamespace": namespace}))
    log = open(tmp / "controller.log", "wb")  # noqa: SIM115 (closed below)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckpt_preempt.controller.app.cmd_run", "--kubeconfig",
         str(c.kubeconfig), "--config", str(cfg), "--identity", "scale", "--listen",
         f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        def ready() -> bool | kube.NotYet:
            if proc.poll() is not None:
                raise RuntimeError(f"controller exited {proc.returncode}; see {log.name}")
            try:
                r = urllib3.PoolManager().request("GET", f"http://127.0.0.1:{port}/readyz",
                                                  timeout=2.0, retries=False)
            except urllib3.exceptions.HTTPError as e:
                return kube.NotYet(str(e))
            return True if r.status == 200 else kube.NotYet(f"/readyz {r.status}")
        kube.wait_for("controller ready", ready, timeout=900, interval=0.1)
        seconds = time.monotonic() - t0
        time.sleep(3)  # a few passes over the synced cache
        return {"list_to_ready_s": round(seconds, 2), "controller_mib": vm_mib(proc.pid)}
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        if proc.poll() is None:
            proc.kill()
        log.close()


def _component_mib(lc: LocalCluster) -> dict[str, dict[str, float]]:
    return {name: vm_mib(p.pid) for name, p in lc.procs.items()
            if name in ("etcd", "kube-apiserver", "kwok")}


def _cluster_and_list(c: kube.Cluster, lc: LocalCluster, ns: str, pool: str,
                      args: argparse.Namespace, tmp: Path) -> dict:
    """Part 1: the full cluster, then list-to-ready."""
    out: dict = {}
    names = [f"{pool}-{i:05d}" for i in range(args.nodes)]
    t0 = time.monotonic()
    try:
        node_rate = create_nodes(c, names, pool, args.workers)
        pod_rate = fill(c, ns, pool, names, args.pods_per_node, args.workers)
    except (ApiException, kube.WaitTimeout) as e:
        out["stopped"] = f"creating objects: {str(e).splitlines()[0][:200]}"
    out["cluster"] = {"nodes": args.nodes, "pods": args.nodes * args.pods_per_node,
                      "gpus": args.nodes * 8, "create_s": round(time.monotonic() - t0, 1)}
    if "stopped" not in out:
        out["cluster"].update(nodes_per_s=round(node_rate, 1), pods_per_s=round(pod_rate, 1))
        out["list_to_ready"] = list_to_ready(c, ns, tmp)
    out["control_plane_mib"] = _component_mib(lc)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods-per-node", type=int, default=8, choices=(1, 2, 4, 8))
    p.add_argument("--burst-nodes", type=int, default=300)
    p.add_argument("--preemptors", type=int, default=100)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--burst-only", action="store_true",
                   help="skip the list-to-ready part (--nodes, --pods-per-node)")
    p.add_argument("--timeline", type=Path, default=None,
                   help="write the burst's audit lines (seconds, verb, target, plan, thread) "
                        "to this file, one JSON object a line")
    p.add_argument("--write-concurrency", type=int, default=None,
                   help="the controller's writeConcurrency in the burst (default: its default)")
    args = p.parse_args(argv)
    if args.nodes < 1 or args.burst_nodes < 1 or not 0 < args.preemptors <= args.burst_nodes \
            or (args.write_concurrency is not None and args.write_concurrency < 1):
        print("scale_kwok: need --nodes >= 1, 0 < --preemptors <= --burst-nodes, "
              "--write-concurrency >= 1", file=sys.stderr)
        return 2
    try:
        bins = find_testbin()
    except TestbinMissing as e:
        print(f"scale_kwok: {e}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    out: dict = {"benchmark": "scale_kwok"}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="scale-kwok-")))
        lc = stack.enter_context(LocalCluster(bins, tmp / "cluster"))
        api = config.new_client_from_config(config_file=str(lc.kubeconfig))
        c = kube.Cluster("local", lc.kubeconfig, api, local=lc)
        ns, pool = f"scale-{uuid.uuid4().hex[:6]}", f"s{uuid.uuid4().hex[:6]}"
        c.core.create_namespace({"metadata": {"name": ns}})
        if not args.burst_only:
            out.update(_cluster_and_list(c, lc, ns, pool, args, tmp))
        bns = f"burst-{uuid.uuid4().hex[:6]}"
        c.core.create_namespace({"metadata": {"name": bns}})
        b = burst(c, bns, f"b{uuid.uuid4().hex[:6]}", nodes=args.burst_nodes,
                  preemptors=args.preemptors, workers=args.workers,
                  write_concurrency=args.write_concurrency, timeline=args.timeline)
        ok = b.pop("planned_victims") == b.pop("evicted")
        out["burst"] = {**b, "evictions_match_plans": ok, "load_average": os.getloadavg()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
