"""Benchmark: one full hwprobe probe of the 8-GPU HGX H100 mock profile.

Usage: python -m bench.hwprobe_probe [--profile h100] [--repeats 30]
Target: a full probe (every GPU, every link with its error counters, every pair's common
ancestor and five P2P statuses, fabric info) in at most 200 ms. Measured, not asserted: the
number goes into hwprobe/README.md.

The mock library is the one e2e/testbin/mocknvml/build.sh caches for the current sources;
NVML is initialised once per probe (as `hwprobe report` does). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", default="h100")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    from e2e.harness.mock_nvml import PROFILES, mock_library

    library = mock_library()
    if not library.is_file():
        print(json.dumps({"bench": "hwprobe_probe", "skipped": f"mock NVML not built: {library}"}))
        return 0
    # The mock reads these at load time, so they are set before pynvml loads anything.
    os.environ["MOCK_NVML_CONFIG"] = str(PROFILES / f"{args.profile}.yaml")
    os.environ["HWPROBE_NVML_LIBRARY"] = str(library)
    from ckpt_preempt.hwprobe.nvml import probe

    first = time.perf_counter()
    topo = probe()  # includes loading the library
    cold_ms = (time.perf_counter() - first) * 1000
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        topo = probe()
        times.append((time.perf_counter() - start) * 1000)
    links = sum(len(g.links) for g in topo.gpus)
    print(json.dumps({
        "bench": "hwprobe_probe", "profile": args.profile, "gpus": topo.gpu_count,
        "links": links, "pairs": len(topo.pairs), "repeats": args.repeats,
        "cold_ms": round(cold_ms, 1), "median_ms": round(statistics.median(times), 1),
        "p95_ms": round(sorted(times)[int(0.95 * (len(times) - 1))], 1),
        "max_ms": round(max(times), 1), "target_ms": 200,
        "python": sys.version.split()[0], "cpus": os.cpu_count(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
