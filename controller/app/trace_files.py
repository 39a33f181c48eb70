"""The only reader of trace files: bundled openb traces or the user's ``--pods``/``--nodes``.

``load(workload)`` returns the parsed pods (None for the synthetic training scenario) and the
node list. Bundled files come from the ``policies.data`` package. Pod traces without times
(the multi-GPU openb variants) take their times and qos from the bundled default trace, seeded
(see ``policies.sim.trace``). Missing or malformed files raise ``TraceError`` with one line.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ckpt_preempt.cli.files import file_problem
from ckpt_preempt.policies.sim.protocols import WORKLOADS
from ckpt_preempt.policies.sim.trace import TraceError, TraceNode, TracePod, parse_nodes, parse_pods

BUNDLED_PODS = {
    "openb": "openb_pod_list_default.csv",
    "openb-multigpu20": "openb_pod_list_multigpu20.csv",
}
BUNDLED_NODES = "openb_node_list_gpu_node.csv"
TIMES_REFERENCE = BUNDLED_PODS["openb"]  # the timed trace untimed pods draw from
TIMES_SEED = 1  # fixed, so a trace file always gets the same times


def _bundled(name: str) -> list[str]:
    try:
        data = resources.files("ckpt_preempt.policies").joinpath("data")
        return data.joinpath(name).read_text().splitlines()
    except OSError as e:
        raise TraceError(f"bundled trace {name} is missing ({e.strerror or e})") from None


def _file(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a text (CSV) file") from None
    except OSError as e:
        raise TraceError(file_problem(path, e)) from None


def _named(path: Path | None, lines: list[str], parse):
    try:
        return parse(lines)
    except TraceError as e:
        raise TraceError(f"{path}: {e}" if path is not None else str(e)) from None


def load(
    workload: str, pods_path: Path | None = None, nodes_path: Path | None = None,
) -> tuple[list[TracePod] | None, list[TraceNode]]:
    """Pods and nodes for ``workload``; a given path replaces the bundled file."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")
    node_lines = _bundled(BUNDLED_NODES) if nodes_path is None else _file(nodes_path)
    nodes = _named(nodes_path, node_lines, parse_nodes)
    if workload == "training":
        if pods_path is not None:
            raise ValueError("the training workload is synthetic; it takes no --pods trace")
        return None, nodes
    pod_lines = _bundled(BUNDLED_PODS.get(workload, TIMES_REFERENCE)) if pods_path is None \
        else _file(pods_path)
    reference: list[TracePod] | None = None

    def parse(lines: list[str]) -> list[TracePod]:
        nonlocal reference
        header = lines[0] if lines else ""
        if "creation_time" not in header or "qos" not in header:
            reference = parse_pods(_bundled(TIMES_REFERENCE))
        return parse_pods(lines, reference=reference, seed=TIMES_SEED)

    return _named(pods_path, pod_lines, parse), nodes
