"""Parsers for the Alibaba openb CSV format (cluster-trace-gpu-v2023).

They take lines of text, not paths, so they stay pure; ``TraceError`` names the line and column.
Pod columns: name, cpu_milli, memory_mib, num_gpu, gpu_milli, qos, creation_time, deletion_time
(others are ignored). Node columns: sn, cpu_milli, memory_mib, gpu, model.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass

QOS_CLASSES = ("LS", "Guaranteed", "BE", "Burstable")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "qos", "creation_time",
               "deletion_time")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu")


class TraceError(ValueError):
    """A trace file is malformed; the message names the line and the problem."""


@dataclass(frozen=True, kw_only=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int  # whole GPUs; a fractional share (gpu_milli < 1000) occupies one GPU
    gpu_milli: int
    qos: str
    creation: float
    deletion: float


@dataclass(frozen=True, kw_only=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


def _rows(lines: Iterable[str], required: tuple[str, ...], what: str):
    reader = csv.DictReader(lines)
    missing = [c for c in required if c not in (reader.fieldnames or ())]
    if missing:
        raise TraceError(
            f"{what} trace lacks column(s) {', '.join(missing)}; "
            f"needs {', '.join(required)} (Alibaba openb format)"
        )
    for row in reader:
        yield reader.line_num, row


def _int(row: dict, key: str, line: int, default: int | None = None) -> int:
    raw = (row.get(key) or "").strip()
    if not raw and default is not None:
        return default
    try:
        value = int(float(raw))
    except ValueError:
        raise TraceError(f"line {line}: {key}={raw!r} is not a number") from None
    if value < 0:
        raise TraceError(f"line {line}: {key}={raw!r} is negative")
    return value


def parse_pods(lines: Iterable[str]) -> list[TracePod]:
    pods = []
    for line, row in _rows(lines, POD_COLUMNS, "pod"):
        qos = (row["qos"] or "").strip()
        if qos not in QOS_CLASSES:
            raise TraceError(f"line {line}: qos={qos!r}, expected one of {QOS_CLASSES}")
        created = _int(row, "creation_time", line)
        deleted = _int(row, "deletion_time", line)
        if deleted < created:
            raise TraceError(f"line {line}: deletion_time precedes creation_time")
        gpus = _int(row, "num_gpu", line)
        pods.append(TracePod(
            name=row["name"], cpu_milli=_int(row, "cpu_milli", line),
            memory_mib=_int(row, "memory_mib", line), gpus=gpus,
            gpu_milli=_int(row, "gpu_milli", line, default=1000 * gpus),
            qos=qos, creation=float(created), deletion=float(deleted),
        ))
    if not pods:
        raise TraceError("pod trace has no rows")
    return pods


def parse_nodes(lines: Iterable[str]) -> list[TraceNode]:
    nodes = []
    for line, row in _rows(lines, NODE_COLUMNS, "node"):
        nodes.append(TraceNode(
            name=row["sn"], cpu_milli=_int(row, "cpu_milli", line),
            memory_mib=_int(row, "memory_mib", line), gpus=_int(row, "gpu", line),
            model=(row.get("model") or "").strip(),
        ))
    gpu_nodes = [n for n in nodes if n.gpus > 0]
    if not gpu_nodes:
        raise TraceError("node trace has no GPU nodes")
    return gpu_nodes
