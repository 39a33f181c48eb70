"""Parsers for the Alibaba openb CSV format (cluster-trace-gpu-v2023).

They take lines of text, not paths, so they stay pure; ``TraceError`` names the line and column.

Pod columns: name, cpu_milli, memory_mib, num_gpu are required; gpu_milli (default 1000 per GPU),
gpu_spec (default "" = any GPU model), qos, creation_time and deletion_time are optional, and
others are ignored. Node columns: sn, cpu_milli, memory_mib, gpu, model.

Traces without times. The multi-GPU variants (``openb_pod_list_multigpu*.csv``) have only
name, cpu_milli, memory_mib, num_gpu, gpu_milli: no arrival or deletion times, so no durations
to lose work over. Here such a pod takes
the creation time, lifetime (deletion - creation) and qos of a pod drawn, seeded, with
replacement, from a *timed reference trace* (the bundled default trace) among the reference
pods with the same ``num_gpu`` (the nearest count when none has it, ties to the smaller). So
each GPU count keeps the reference's joint distribution of arrival time, lifetime and qos. A
file with times but no qos column takes the qos the same way (``DEFAULT_QOS`` when no reference
is given). Creation and deletion columns come together or not at all.
"""

from __future__ import annotations

import bisect
import csv
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ckpt_preempt.policies.model.model import MILLI_PER_GPU

QOS_CLASSES = ("LS", "Guaranteed", "BE", "Burstable")
DEFAULT_QOS = "BE"  # timed traces without a qos column and no reference: best effort
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu")
TIME_COLUMNS = ("creation_time", "deletion_time")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu")


class TraceError(ValueError):
    """A trace file is malformed; the message names the line and the problem."""


@dataclass(frozen=True, kw_only=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int  # whole GPUs; a fractional share (gpu_milli < 1000) counts 1 here
    gpu_milli: int
    qos: str
    creation: float
    deletion: float
    gpu_spec: str = ""  # GPU models it may run on, "|"-separated as in openb; "" any

    @property
    def fractional(self) -> bool:
        """One GPU shared: openb's num_gpu == 1 with gpu_milli below a whole GPU."""
        return self.gpus == 1 and 0 < self.gpu_milli < MILLI_PER_GPU

    @property
    def gpu_share(self) -> float:
        """GPUs it uses: its share of one GPU when fractional, else its whole GPUs."""
        return self.gpu_milli / MILLI_PER_GPU if self.fractional else float(self.gpus)

    @property
    def lifetime(self) -> float:
        return self.deletion - self.creation


@dataclass(frozen=True, kw_only=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


def _rows(lines: Iterable[str], required: tuple[str, ...], what: str):
    reader = csv.DictReader(lines)
    fields = tuple(reader.fieldnames or ())
    missing = [c for c in required if c not in fields]
    if missing:
        raise TraceError(
            f"{what} trace lacks column(s) {', '.join(missing)}; "
            f"needs {', '.join(required)} (Alibaba openb format)"
        )
    return fields, ((reader.line_num, row) for row in reader)


def _int(row: dict, key: str, line: int, default: int | None = None) -> int:
    raw = (row.get(key) or "").strip()
    if not raw and default is not None:
        return default
    try:
        value = int(float(raw))
    except (ValueError, OverflowError):
        raise TraceError(f"line {line}: {key}={raw!r} is not a number") from None
    if value < 0:
        raise TraceError(f"line {line}: {key}={raw!r} is negative")
    return value


class _Reference:
    """A timed trace's pods grouped by GPU count, for drawing times and qos."""

    def __init__(self, pods: Sequence[TracePod]) -> None:
        self.by_gpus: dict[int, list[TracePod]] = {}
        for p in pods:
            self.by_gpus.setdefault(p.gpus, []).append(p)
        self.counts = sorted(self.by_gpus)
        if not self.counts:
            raise TraceError("the reference trace for times has no pods")

    def draw(self, gpus: int, rng: random.Random) -> TracePod:
        pool = self.by_gpus.get(gpus)
        if pool is None:
            i = bisect.bisect_left(self.counts, gpus)
            near = [c for c in self.counts[max(0, i - 1):i + 1]]
            pool = self.by_gpus[min(near, key=lambda c: (abs(c - gpus), c))]
        return rng.choice(pool)


def parse_pods(
    lines: Iterable[str], *, reference: Sequence[TracePod] | None = None, seed: int = 1,
) -> list[TracePod]:
    """Pods of an openb pod list; times (and qos) absent from it are drawn from ``reference``.

    The draw is seeded by ``seed`` alone and made row by row in file order, so the same file,
    reference and seed always give the same pods.
    """
    fields, rows = _rows(lines, POD_COLUMNS, "pod")
    timed = [c for c in TIME_COLUMNS if c in fields]
    if len(timed) == 1:
        raise TraceError(
            f"pod trace has {timed[0]} but not {(set(TIME_COLUMNS) - set(timed)).pop()}; "
            "give both or neither (then times are drawn from the reference trace)"
        )
    has_times, has_qos = bool(timed), "qos" in fields
    if not has_times and reference is None:
        raise TraceError(
            "pod trace has no creation_time/deletion_time columns and no timed reference "
            "trace was given to draw them from"
        )
    ref = _Reference(reference) if reference is not None and not (has_times and has_qos) else None
    rng = random.Random(f"trace-times-{seed}")
    pods = []
    for line, row in rows:
        gpus = _int(row, "num_gpu", line)
        drawn = ref.draw(gpus, rng) if ref is not None else None
        if has_qos:
            qos = (row["qos"] or "").strip()
            if qos not in QOS_CLASSES:
                raise TraceError(f"line {line}: qos={qos!r}, expected one of {QOS_CLASSES}")
        else:
            qos = drawn.qos if drawn is not None else DEFAULT_QOS
        if has_times:
            created = float(_int(row, "creation_time", line))
            deleted = float(_int(row, "deletion_time", line))
            if deleted < created:
                raise TraceError(f"line {line}: deletion_time precedes creation_time")
        else:
            assert drawn is not None
            created, deleted = drawn.creation, drawn.deletion
        pods.append(TracePod(
            name=row["name"], cpu_milli=_int(row, "cpu_milli", line),
            memory_mib=_int(row, "memory_mib", line), gpus=gpus,
            gpu_milli=_int(row, "gpu_milli", line, default=MILLI_PER_GPU * gpus),
            gpu_spec=(row.get("gpu_spec") or "").strip(),
            qos=qos, creation=created, deletion=deleted,
        ))
    if not pods:
        raise TraceError("pod trace has no rows")
    return pods


def parse_nodes(lines: Iterable[str]) -> list[TraceNode]:
    nodes = []
    _, rows = _rows(lines, NODE_COLUMNS, "node")
    for line, row in rows:
        nodes.append(TraceNode(
            name=row["sn"], cpu_milli=_int(row, "cpu_milli", line),
            memory_mib=_int(row, "memory_mib", line), gpus=_int(row, "gpu", line),
            model=(row.get("model") or "").strip(),
        ))
    gpu_nodes = [n for n in nodes if n.gpus > 0]
    if not gpu_nodes:
        raise TraceError("node trace has no GPU nodes")
    return gpu_nodes
