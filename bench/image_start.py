"""Benchmark: the image's containers as the chart runs them (e2e/harness/images.py), on the local
control plane: for the controller, the extender and hwprobe (on the mock NVML), `--runs` cold starts
each, timing `podman run` to `/readyz` answering 200, then the resident memory (VmRSS of the
container's process) after `--idle` seconds of doing nothing. Also the image's size, and the
time of `podman run ... --version` (container start, Python start and the CLI, nothing else).

Usage: python -m bench.image_start [--runs 5] [--idle 5]   (needs `make testbin` and `make image`)
Target: none: a measurement (deploy/README.md reports it; good: each component ready within a
few seconds of `podman run`).

Every start is cold for the process (a new container; the image's layers are in the page cache
after the first). Reported per component: mean and 95 % confidence interval (Student's t), min,
max, and the load average, since these 2-core machines are shared.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

import pytest  # (the e2e helpers skip through it; caught below)
import urllib3
from kubernetes import config

from e2e.harness import images, kube
from e2e.harness.images import mock_nvml_flags
from e2e.harness.localcluster import LocalCluster, TestbinMissing, find_testbin, free_port
from e2e.harness.mock_nvml import mock_library

# Student's t at 97.5 % for n-1 degrees of freedom (n = 2..10), for the 95 % interval.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262}


def summary(xs: list[float]) -> dict:
    mean = statistics.fmean(xs)
    half = T975[len(xs) - 1] * statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else None
    return {"n": len(xs), "mean": round(mean, 3),
            "ci95": None if half is None else [round(mean - half, 3), round(mean + half, 3)],
            "min": round(min(xs), 3), "max": round(max(xs), 3)}


def _one(image: str, c: kube.Cluster, component: str, node: str, idle: float,
         tmp: Path) -> tuple[float, float]:
    port = free_port()
    values: dict = {"controller": {"metricsPort": port}, "hwprobe": {"enabled": False}}
    if component == "extender":
        values = {"extender": {"enabled": True, "port": port}}
    if component == "hwprobe":
        values = {"hwprobe": {"metricsPort": port, "interval": 1}}
    extra = mock_nvml_flags(mock_library()) if component == "hwprobe" else ()
    work = Path(tempfile.mkdtemp(prefix=f"{component}-", dir=tmp))
    with images.chart_pod(c, component, values, node=node) as (template, view, _):
        started = time.monotonic()
        with images.running(image, template, view, work, extra=extra) as ctr:
            seconds = images.wait_ready(ctr, port, started)
            time.sleep(idle)
            rss = int(images.status(ctr.pid)["VmRSS"].split()[0]) / 1024
    return seconds, rss


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--idle", type=float, default=5.0)
    args = p.parse_args(argv)
    if not 2 <= args.runs <= 10 or args.idle < 0:
        print("image_start: need 2 <= --runs <= 10 and --idle >= 0", file=sys.stderr)
        return 2
    try:
        bins = find_testbin()
        image = images.image()
    except (TestbinMissing, pytest.skip.Exception) as e:
        print(f"image_start: {e}", file=sys.stderr)
        return 2
    if not mock_library().is_file():
        print("image_start: the mock NVML is not built: run `make testbin`", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    t0 = time.monotonic()
    size = int(images.podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    out: dict = {"benchmark": "image_start", "image": image, "image_mb": round(size / 1e6, 1),
                 "runs": args.runs, "idle_s": args.idle, "load_average_start": os.getloadavg()}
    version = []
    for _ in range(args.runs):
        s = time.monotonic()
        subprocess.run([*images.PODMAN, "run", "--rm", "--pull=never", "--read-only",
                        "--network=none", *images.RUN_FLAGS, image, "--version"],
                       check=True, capture_output=True)
        version.append(time.monotonic() - s)
    out["podman_run_version_s"] = summary(version)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="image-start-")))
        lc = stack.enter_context(LocalCluster(bins, tmp / "cluster"))
        api = config.new_client_from_config(config_file=str(lc.kubeconfig))
        c = kube.Cluster("local", lc.kubeconfig, api, local=lc)
        (node,) = kube.create_gpu_nodes(c, 1, prefix=f"img{uuid.uuid4().hex[:6]}",
                                        labels={"nvidia.com/gpu.present": "true"})
        for component in images.COMPONENTS:
            runs = [_one(image, c, component, node, args.idle, tmp) for _ in range(args.runs)]
            out[component] = {"start_to_readyz_s": summary([s for s, _ in runs]),
                              "rss_idle_mib": summary([r for _, r in runs])}
    out["load_average_end"] = os.getloadavg()
    out["wall_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
