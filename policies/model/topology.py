"""NVLink topology as the planner needs it, read from hwprobe's node annotation.

The node annotation ``ANNOTATION`` holds a ``hwprobe/v1`` report. The planner
reads only ``schema``, ``gpu_count``, ``nvlink_domains``, ``verified`` and ``clique``;
everything else in the report is for people and for hwprobe itself.

``clique`` is the node's multi-node NVLink fabric clique (GB200/GB300 NVL72 racks), in GPU
Feature Discovery's ``nvidia.com/gpu.clique`` form ``<clusterUUID>.<cliqueId>``
(NVIDIA/k8s-device-plugin internal/lm/fabric.go@966d5b8, from NVML's nvmlGpuFabricInfo_t:
https://docs.nvidia.com/deploy/nvml-api/api/structnvmlGpuFabricInfo__t.html). Nodes of one
clique reach each other's GPUs over NVLink; absent or null: the node is in none.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

SCHEMA = "hwprobe/v1"
ANNOTATION = "hwprobe.ckpt-preempt.io/topology"  # on Nodes, written by hwprobe
CLIQUE_KEY = "clique"  # the report's key for the node's fabric clique (hwprobe writes it)
# <clusterUUID>.<cliqueId>: a UUID's hex digits and dashes, a dot, a decimal uint32; label-safe
_CLIQUE_FORM = re.compile(r"[0-9A-Fa-f-]{1,36}\.[0-9]{1,10}")


class TopologyError(ValueError):
    """The annotation is not a usable ``hwprobe/v1`` report; treat the node as unknown."""


@dataclass(frozen=True, kw_only=True)
class NodeTopology:
    gpu_count: int
    domains: tuple[frozenset[int], ...]  # every GPU index in exactly one domain
    verified: bool | None = None
    clique: str | None = None  # multi-node NVLink fabric clique; None: attached to none

    @property
    def largest_domain(self) -> int:
        return max((len(d) for d in self.domains), default=0)

    def nvlink_fits(self, free_gpus: int, need: int) -> bool:
        """Can ``need`` free GPUs be guaranteed inside one NVLink domain?

        Which device indices are free is not known to the planner (the device plugin picks
        them), so assume the worst placement of the busy GPUs. To leave every domain short of
        ``need`` free GPUs, the busy ones must fill ``|d| - need + 1`` slots in each domain big
        enough to matter; when there are fewer busy GPUs than that, some domain surely fits.
        """
        if need <= 1:
            return free_gpus >= need
        if free_gpus < need:
            return False
        busy = self.gpu_count - free_gpus
        to_block = sum(len(d) - need + 1 for d in self.domains if len(d) >= need)
        return busy < to_block

def single_domain(gpu_count: int) -> NodeTopology:
    """A node whose GPUs are all NVLink-connected (e.g. HGX behind NVSwitch)."""
    return NodeTopology(gpu_count=gpu_count, domains=(frozenset(range(gpu_count)),))


def json_report(value: str, schema: str, error: type[ValueError]) -> dict:
    """A published report's JSON object, checked for ``schema``; raises ``error`` naming what
    is wrong (hwprobe's annotations: this topology one, and ``policies.model.gpu_use``'s)."""
    try:
        doc = json.loads(value)
    except (TypeError, ValueError) as e:
        raise error(f"not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise error("report is not a JSON object")
    if doc.get("schema") != schema:
        raise error(f"schema is {doc.get('schema')!r}, expected {schema!r}")
    return doc


def parse_node_topology(value: str) -> NodeTopology:
    """Strictly parse the compact report; raise TopologyError naming what is wrong."""
    doc = json_report(value, SCHEMA, TopologyError)
    count = doc.get("gpu_count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise TopologyError(f"gpu_count must be a non-negative integer, got {count!r}")
    raw = doc.get("nvlink_domains")
    if not isinstance(raw, list):
        raise TopologyError("nvlink_domains must be a list of lists of GPU indices")
    seen: set[int] = set()
    domains = []
    for d in raw:
        if not isinstance(d, list) or not d:
            raise TopologyError(f"domain {d!r} is not a non-empty list")
        for i in d:
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < count:
                raise TopologyError(f"GPU index {i!r} outside 0..{count - 1}")
            if i in seen:
                raise TopologyError(f"GPU {i} appears in two domains")
            seen.add(i)
        domains.append(frozenset(d))
    if seen != set(range(count)):
        missing = sorted(set(range(count)) - seen)
        raise TopologyError(f"GPUs {missing} belong to no domain")
    verified = doc.get("verified")
    if verified is not None and not isinstance(verified, bool):
        raise TopologyError(f"verified must be true, false or null, got {verified!r}")
    clique = doc.get(CLIQUE_KEY)
    if clique is not None and not (isinstance(clique, str) and _CLIQUE_FORM.fullmatch(clique)):
        raise TopologyError(f"{CLIQUE_KEY} must be null or <clusterUUID>.<cliqueId>, "
                            f"got {clique!r}")
    return NodeTopology(gpu_count=count, domains=tuple(domains), verified=verified,
                        clique=clique)
