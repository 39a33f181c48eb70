"""The versioned report (``hwprobe/v1``) and the compact Node annotation. Pure.

Stable top-level keys that other components read (the planner's ``parse_node_topology``):
``schema``, ``gpu_count``, ``nvlink_domains`` (every GPU index in exactly one list) and
``verified`` (true / false / null when no spec was checked). Everything else may grow; a new
required key or a changed meaning is a new schema version. ``schema/hwprobe-v1.json`` is the
JSON Schema of the full report; the annotation is a subset of it.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from importlib import resources
from typing import Any

from ckpt_preempt.hwprobe.model import Topology
from ckpt_preempt.policies.model.topology import (
    CLIQUE_KEY,
)

SCHEMA = "hwprobe/v1"
LABEL_PREFIX = "hwprobe.ckpt-preempt.io/"


def json_schema() -> dict:
    text = resources.files("ckpt_preempt.hwprobe").joinpath("schema/hwprobe-v1.json").read_text()
    return json.loads(text)


def matrix(topo: Topology) -> list[list[str]]:
    n = topo.gpu_count
    return [[topo.level(a, b) for b in range(n)] for a in range(n)]


def _gpu(gpu) -> dict[str, Any]:
    out = asdict(gpu)
    out["links"] = [
        {**asdict(link), "remote_type": str(link.remote_type) if link.remote_type else None}
        for link in gpu.links
    ]
    out["mig_devices"] = list(gpu.mig_devices)
    out["active_links"] = len(gpu.active_links)
    if gpu.fabric is not None:
        out["fabric"] = {**asdict(gpu.fabric), "attached": gpu.fabric.attached,
                         "clique": gpu.fabric.clique}
    return out


def _summary(topo: Topology, verified: bool | None, spec: str | None) -> dict[str, Any]:
    domains = topo.nvlink_domains
    names = sorted({gpu.name for gpu in topo.gpus if gpu.name})
    return {
        "schema": SCHEMA,
        "gpu_count": topo.gpu_count,
        "nvlink_domains": domains,
        "verified": verified,
        "spec": spec,
        "gpu_name": names[0] if len(names) == 1 else (names or None),
        "nvswitch": topo.nvswitch,
        "max_domain_size": max((len(d) for d in domains), default=0),
        CLIQUE_KEY: topo.clique,
        "matrix": [" ".join(row) for row in matrix(topo)],
    }


def full_report(topo: Topology, *, verified: bool | None = None, spec: str | None = None,
                findings: list[str] | None = None) -> dict[str, Any]:
    """Everything hwprobe knows, as JSON-ready data."""
    pairs = []
    for (a, b), pair in sorted(topo.pairs.items()):
        pairs.append({
            "a": a, "b": b, "level": pair.level, "nvlinks": pair.nvlinks,
            "pcie": pair.pcie.name if pair.pcie is not None else None,
            "p2p": pair.p2p, "expected_gbps": topo.expected_gbps(a, b),
        })
    return {
        **_summary(topo, verified, spec),
        "findings": findings,
        "driver_version": topo.driver_version,
        "hostname": topo.hostname,
        "gpus": [_gpu(gpu) for gpu in topo.gpus],
        "pairs": pairs,
        "unavailable": topo.unavailable,
    }


def annotation(topo: Topology, *, verified: bool | None = None, spec: str | None = None) -> str:
    """The compact JSON written to the Node annotation: the summary, no per-link detail."""
    return json.dumps(_summary(topo, verified, spec), separators=(",", ":"), sort_keys=True)


def labels(topo: Topology, *, verified: bool | None = None) -> dict[str, str]:
    """A few Node labels for selectors: sizes, switch presence, verification, clique."""
    domains = topo.nvlink_domains
    out = {
        "gpu-count": str(topo.gpu_count),
        "nvlink-domain-size": str(max((len(d) for d in domains), default=0)),
        "nvlink-domains": str(len(domains)),
        "nvswitch": str(topo.nvswitch).lower(),
        "verified": "unknown" if verified is None else str(verified).lower(),
    }
    if topo.clique:
        out["clique"] = topo.clique  # <uuid>.<id>: 63 characters at most, label-safe
    return {LABEL_PREFIX + key: value for key, value in out.items()}
