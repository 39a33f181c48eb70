"""GPU-runner suite: hwprobe on real NVML, checked against nvidia-smi, then on-GPU bench.

Run on a machine with NVIDIA GPUs and a driver (no cluster needed), from the repository root:

    .venv/bin/python e2e/gpu/run.py [--expect hgx-h100-8] [--out result.json] [--quick]

Steps, in order; each one's outcome goes into the JSON result:
  1. probe     the full hwprobe/v1 report from real NVML (and verify, with --expect);
  2. topo      `nvidia-smi topo -m`, cell by cell against hwprobe's matrix (GPU columns),
               and its NUMA Affinity column against each GPU's numa_node;
  3. query     `nvidia-smi --query-gpu` (index, uuid, name, bus id, memory) and the Fabric
               section of `nvidia-smi -q`, against the report;
  4. nvlink    `nvidia-smi nvlink --status`: active links per GPU against the report;
  5. bench     hwprobe bench (torch or cupy): D2D and P2P bandwidth, P2P integrity.
A step whose tool is missing is recorded as skipped with the reason.

Exit: 0 everything that ran agreed (and bench integrity held), 1 a mismatch, 2 no NVML.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ckpt_preempt.hwprobe import bench, report  # noqa: E402
from ckpt_preempt.hwprobe.errors import HwprobeError, NvmlUnavailable  # noqa: E402
from ckpt_preempt.hwprobe.nvml import probe  # noqa: E402
from ckpt_preempt.hwprobe.verify import load_spec, verify  # noqa: E402

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|N/A)$")


def smi(*args: str) -> tuple[str | None, str | None]:
    """stdout of nvidia-smi, or (None, why not)."""
    if shutil.which("nvidia-smi") is None:
        return None, "nvidia-smi not found"
    done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return None, f"nvidia-smi {' '.join(args)} exited {done.returncode}: {done.stderr[:200]}"
    return _ANSI.sub("", done.stdout), None


def parse_topo_matrix(text: str) -> list[list[str]]:
    """The GPU×GPU block of `nvidia-smi topo -m` (NIC columns and affinity ignored)."""
    rows = []
    for line in text.splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"GPU\d+", cells[0]):
            gpu_cells = []
            for cell in cells[1:]:
                if not _CELL.match(cell):
                    break
                gpu_cells.append(cell)
            if gpu_cells:  # the header line starts with GPU0 too
                rows.append(gpu_cells)
    n = len(rows)
    return [row[:n] for row in rows]


def parse_topo_numa(text: str) -> list[int | None]:
    """Each GPU row's "NUMA Affinity" column of `nvidia-smi topo -m` (None where it is N/A):
    the cell after "CPU Affinity", which follows the GPU and NIC columns."""
    out = []
    for line in text.splitlines():
        cells = line.split()
        # a GPU row: GPUn, then its own cell X or a link; the header line starts GPU0 GPU1 ...
        if len(cells) < 2 or not re.fullmatch(r"GPU\d+", cells[0]) or not _CELL.match(cells[1]):
            continue
        rest = cells[1:]
        while rest and _CELL.match(rest[0]):
            rest = rest[1:]
        out.append(int(rest[1]) if len(rest) > 1 and rest[1].isdigit() else None)
    return out


def check_topo(doc: dict) -> dict:
    text, why = smi("topo", "-m")
    if text is None:
        return {"skipped": why}
    theirs = parse_topo_matrix(text)
    ours = [row.split() for row in doc["matrix"]]
    diffs = [f"GPU{a}↔GPU{b}: hwprobe {ours[a][b]}, nvidia-smi {theirs[a][b]}"
             for a in range(min(len(ours), len(theirs)))
             for b in range(min(len(ours), len(theirs[a])))
             if ours[a][b] != theirs[a][b]]
    for gpu, numa in zip(doc["gpus"], parse_topo_numa(text), strict=False):
        if numa is not None and gpu["numa_node"] != numa:
            diffs.append(f"GPU{gpu['index']} NUMA node: hwprobe {gpu['numa_node']}, "
                         f"nvidia-smi {numa}")
    if len(ours) != len(theirs):
        diffs.insert(0, f"hwprobe sees {len(ours)} GPUs, nvidia-smi topo -m {len(theirs)}")
    return {"ok": not diffs, "diffs": diffs, "nvidia_smi": text}


def _norm_bus(bus: str) -> str:
    domain, _, rest = bus.strip().lower().partition(":")
    return f"{int(domain, 16):08x}:{rest}"


def check_query(doc: dict) -> dict:
    text, why = smi("--query-gpu=index,uuid,name,pci.bus_id,memory.total",
                    "--format=csv,noheader,nounits")
    if text is None:
        return {"skipped": why}
    diffs = []
    rows = [[c.strip() for c in line.split(",")] for line in text.strip().splitlines()]
    for index, uuid, name, bus, memory in rows:
        gpu = next((g for g in doc["gpus"] if g["index"] == int(index)), None)
        if gpu is None:
            diffs.append(f"GPU{index} missing from hwprobe")
            continue
        for field, theirs, ours in (("uuid", uuid, gpu["uuid"]), ("name", name, gpu["name"])):
            if theirs != ours:
                diffs.append(f"GPU{index} {field}: hwprobe {ours!r}, nvidia-smi {theirs!r}")
        if gpu["bus_id"] and _norm_bus(bus) != _norm_bus(gpu["bus_id"]):
            diffs.append(f"GPU{index} bus id: hwprobe {gpu['bus_id']}, nvidia-smi {bus}")
        if gpu["memory_mib"] is not None and memory.isdigit() and \
                abs(int(memory) - gpu["memory_mib"]) > 1:
            diffs.append(f"GPU{index} memory: hwprobe {gpu['memory_mib']}, nvidia-smi {memory}")
    full, _ = smi("-q")
    fabric = parse_fabric(full or "")
    for index, section in enumerate(fabric):
        gpu = doc["gpus"][index] if index < len(doc["gpus"]) else None
        ours = (gpu or {}).get("fabric") or {}
        if section.get("State") == "Completed" and ours.get("state") != "COMPLETED":
            diffs.append(f"GPU{index} fabric: nvidia-smi Completed, hwprobe {ours.get('state')}")
    return {"ok": not diffs, "diffs": diffs, "gpus": len(rows), "fabric": fabric}


def parse_fabric(text: str) -> list[dict[str, str]]:
    """The `Fabric` section of each GPU in `nvidia-smi -q` (key: value lines)."""
    sections, current, indent = [], None, None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "Fabric":
            current, indent = {}, len(line) - len(line.lstrip())
            sections.append(current)
        elif current is not None:
            if not stripped or len(line) - len(line.lstrip()) <= indent:
                current = None
            elif ":" in stripped:
                key, _, value = stripped.partition(":")
                current[key.strip()] = value.strip()
    return sections


def check_nvlink(doc: dict) -> dict:
    text, why = smi("nvlink", "--status")
    if text is None:
        return {"skipped": why}
    active: dict[int, int] = {}
    gpu = None
    for line in text.splitlines():
        m = re.match(r"GPU (\d+):", line.strip())
        if m:
            gpu = int(m.group(1))
            active[gpu] = 0
        elif gpu is not None and re.match(r"Link \d+: [\d.]+ GB/s", line.strip()):
            active[gpu] += 1
    diffs = [f"GPU{g['index']}: hwprobe {g['active_links']} active links, nvidia-smi "
             f"{active.get(g['index'], 0)}" for g in doc["gpus"]
             if "active_links" in g and g["active_links"] != active.get(g["index"], 0)]
    return {"ok": not diffs, "diffs": diffs, "active": active}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--expect", help="a hwprobe spec to verify against")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="small bench buffers")
    args = parser.parse_args()
    started = time.time()
    result: dict = {"host": socket.gethostname(), "started": time.strftime("%FT%TZ",
                    time.gmtime(started))}
    try:
        t0 = time.perf_counter()
        topo = probe()
        result["probe_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        verdict = verify(topo, load_spec(args.expect)) if args.expect else None
    except NvmlUnavailable as err:
        print(f"e2e/gpu: {err}", file=sys.stderr)
        return 2
    except HwprobeError as err:
        print(f"e2e/gpu: {err}", file=sys.stderr)
        return 2
    doc = report.full_report(topo, verified=verdict.ok if verdict else None,
                             spec=verdict.spec if verdict else None,
                             findings=list(verdict.findings) if verdict else None)
    result["report"] = doc
    result["topo"] = check_topo(doc)
    result["query"] = check_query(doc)
    result["nvlink"] = check_nvlink(doc)
    size, repeats = (64, 3) if args.quick else (256, 5)
    result["bench"] = bench.run(topo, size_mib=size, repeats=repeats).as_dict()
    failed = [step for step in ("topo", "query", "nvlink") if result[step].get("ok") is False]
    if verdict is not None and not verdict.ok:
        failed.append("verify")
    if any(p.get("intact") is False for p in result["bench"]["p2p"]):
        failed.append("bench integrity")
    result["failed"] = failed
    result["seconds"] = round(time.time() - started, 1)
    out = args.out or REPO / "e2e" / "gpu" / "results" / (
        f"{result['host']}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(started))}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    summary = ", ".join(f"{k}: {'skipped' if 'skipped' in result[k] else result[k].get('ok')}"
                        for k in ("topo", "query", "nvlink"))
    print(f"{topo.gpu_count} GPUs, probe {result['probe_ms']} ms; {summary}; "
          f"bench: {result['bench']['skipped'] or result['bench']['backend']}; "
          f"failed: {failed or 'none'} -> {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
