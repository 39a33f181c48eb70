"""Human-readable output: a ``nvidia-smi topo -m`` style matrix and a summary. Pure."""

from __future__ import annotations

from ckpt_preempt.hwprobe.model import Topology
from ckpt_preempt.hwprobe.verify import Verdict

LEGEND = """Legend:
  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within
         a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""


def _na(value: object) -> str:
    return "N/A" if value is None else str(value)


def matrix_text(topo: Topology) -> str:
    n = topo.gpu_count
    head = ["", *[f"GPU{i}" for i in range(n)], "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    rows = [head]
    for a, gpu in enumerate(topo.gpus):
        cells = [topo.level(a, b) for b in range(n)]
        rows.append([f"GPU{a}", *cells, _na(gpu.cpu_affinity), _na(gpu.numa_node),
                     _na(gpu.gpu_numa_id)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
    )


def summary_text(topo: Topology) -> str:
    names = sorted({g.name for g in topo.gpus if g.name}) or ["unknown GPU"]
    lines = [f"{topo.gpu_count} × {', '.join(names)}   driver {_na(topo.driver_version)}"]
    domains = topo.nvlink_domains
    linked = [d for d in domains if len(d) > 1]
    unreadable = {g.index: g.unavailable["nvlink"] for g in topo.gpus
                  if not g.links and "nvlink" in g.unavailable}
    if not linked:
        note = ""
        if any(g.links for g in topo.gpus):
            note = " (links present, none active)"
        elif unreadable:  # a GPU without NVLink and a driver that will not say look the same
            note = (f" (link state {'/'.join(sorted(set(unreadable.values())))} on GPU "
                    + ",".join(map(str, unreadable)) + ")")
        lines.append("NVLink: no NVLink peers" + note)
    else:
        kind = "NVSwitch" if topo.nvswitch else "direct bridges"
        lines.append(f"NVLink: {kind}; {len(domains)} domain(s)")
        for d in domains:
            if len(d) == 1:
                lines.append(f"  GPU{d[0]}: no NVLink peer")
                continue
            levels = sorted({topo.level(a, b) for a in d for b in d if a < b})
            gbps = topo.expected_gbps(d[0], d[1])
            lines.append(f"  GPUs {','.join(map(str, d))}: {'/'.join(levels)}, "
                         f"~{_na(gbps)} GB/s per pair per direction")
    if "pcie_level" in topo.unavailable:
        lines.append(f"PCIe: common ancestor unreadable: {topo.unavailable['pcie_level']}; "
                     "N/A in the matrix")
    if "p2p" in topo.unavailable:
        lines.append(f"P2P: status unreadable: {topo.unavailable['p2p']}")
    cliques = {g.fabric.clique for g in topo.gpus if g.fabric and g.fabric.clique}
    states = sorted({g.fabric.state for g in topo.gpus if g.fabric})
    if cliques:
        lines.append(f"Fabric: clique {', '.join(sorted(cliques))}")
    elif states:
        lines.append(f"Fabric: not multi-node ({'/'.join(states)}, no cluster UUID)")
    for g in topo.gpus:
        if g.lost or "handle" in g.unavailable:
            lines.append(f"GPU{g.index}: unreadable ({g.unavailable.get('handle', 'lost')})")
        elif g.mig_mode == "enabled":
            lines.append(f"GPU{g.index}: MIG enabled, {len(g.mig_devices)} instance(s)")
    return "\n".join(lines)


def show(topo: Topology) -> str:
    return f"{matrix_text(topo)}\n\n{LEGEND}\n\n{summary_text(topo)}"


def verdict_text(verdict: Verdict) -> str:
    if verdict.ok:
        return f"OK: matches {verdict.spec}"
    lines = [f"FAIL: {len(verdict.findings)} difference(s) from {verdict.spec}"]
    lines += [f"  - {finding}" for finding in verdict.findings]
    return "\n".join(lines)
