"""Compare a topology with what the node is supposed to be. Pure, but for reading spec files.

A spec is YAML: a named reference in ``specs/<name>.yaml`` or a file of the same shape. Every
key is optional; only what a spec states is checked::

    gpu_count: 8                 # or a list of allowed counts: [4, 8]
    gpu_name: H100               # substring every GPU's name must contain
    nvswitch: true
    nvlink:
      active_links_per_gpu: 18   # links that must be up on every GPU
      pair_links: 18             # NV# expected between every pair inside a domain
      domains: [[0,1,2,3,4,5,6,7]]
      domain_size: 8             # when the exact grouping does not matter
      p2p: true                  # NVML P2P status over NVLink must be OK inside domains
    pcie: {same_numa: NODE, cross_numa: SYS}  # levels of pairs without NVLink
    fabric: {attached: true}     # multi-node NVLink: COMPLETED, success, non-zero cluster UUID
    max_link_errors: 0           # per counter (replay, recovery, crc_flit, crc_data)

Findings are sentences a human can act on: ``GPU3 link 7 inactive``,
``GPU2↔GPU5 NV12 expected NV18``, ``CRC errors rising on GPU1 link 4 (17 -> 25)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ckpt_preempt.cli.files import file_problem, parse_problem
from ckpt_preempt.hwprobe.errors import SpecError
from ckpt_preempt.hwprobe.model import Topology

_KEYS = {"name", "description", "gpu_count", "gpu_name", "nvswitch", "nvlink", "pcie", "fabric",
         "max_link_errors"}
_NVLINK_KEYS = {"active_links_per_gpu", "pair_links", "domains", "domain_size", "p2p"}
_PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_COUNTER_WORDS = {"crc_flit": "CRC", "crc_data": "CRC (data)", "replay": "replay",
                  "recovery": "recovery"}


@dataclass(frozen=True, kw_only=True)
class NvlinkRules:
    active_links_per_gpu: int | None = None
    pair_links: int | None = None
    domains: tuple[tuple[int, ...], ...] | None = None
    domain_size: int | None = None
    p2p: bool = False


@dataclass(frozen=True, kw_only=True)
class Spec:
    """What a node is supposed to be; ``None`` (or empty) means "not checked"."""

    name: str
    description: str = ""
    gpu_counts: tuple[int, ...] = ()
    gpu_name: str | None = None
    nvswitch: bool | None = None
    nvlink: NvlinkRules = NvlinkRules()
    pcie_same_numa: str | None = None
    pcie_cross_numa: str | None = None
    fabric_attached: bool = False
    max_link_errors: int | None = None

    @classmethod
    def from_mapping(cls, name: str, rules: dict[str, Any]) -> Spec:
        """Build from parsed YAML; raises SpecError (one line) on any key or value the spec
        format does not allow: unknown keys, wrong types, zero or negative counts, link counts
        above NVML's limit, domains naming a GPU twice or beyond ``gpu_count``."""
        nv, pcie, fabric = (rules.get(k) or {} for k in ("nvlink", "pcie", "fabric"))
        for key, value in (("nvlink", nv), ("pcie", pcie), ("fabric", fabric)):
            if not isinstance(value, dict):
                raise SpecError(f"spec {name}: {key} must be a mapping")
        unknown = (set(rules) - _KEYS) | (set(nv) - _NVLINK_KEYS) | (
            set(pcie) - {"same_numa", "cross_numa"}) | (set(fabric) - {"attached"})
        if unknown:
            raise SpecError(f"spec {name}: unknown keys {sorted(unknown)}")
        try:
            counts = rules.get("gpu_count")
            counts = tuple(_count("gpu_count", n) for n in (
                counts if isinstance(counts, list) else [] if counts is None else [counts]))
            if "gpu_count" in rules and not counts:
                raise ValueError("gpu_count must be a count or a non-empty list of counts")
            spec = cls(
                name=_text("name", rules.get("name", name)),
                description=_text("description", rules.get("description", "")),
                gpu_counts=counts, gpu_name=_opt(_text, "gpu_name", rules.get("gpu_name")),
                nvswitch=_opt(_flag, "nvswitch", rules.get("nvswitch")),
                nvlink=NvlinkRules(
                    active_links_per_gpu=_opt(_links, "nvlink.active_links_per_gpu",
                                              nv.get("active_links_per_gpu")),
                    pair_links=_opt(_links, "nvlink.pair_links", nv.get("pair_links")),
                    domains=_domains(nv.get("domains"), max(counts, default=None)),
                    domain_size=_opt(_count, "nvlink.domain_size", nv.get("domain_size")),
                    p2p=_flag("nvlink.p2p", nv.get("p2p", False))),
                pcie_same_numa=_opt(_level, "pcie.same_numa", pcie.get("same_numa")),
                pcie_cross_numa=_opt(_level, "pcie.cross_numa", pcie.get("cross_numa")),
                fabric_attached=_flag("fabric.attached", fabric.get("attached", False)),
                max_link_errors=_opt(_count, "max_link_errors", rules.get("max_link_errors"), 0),
            )
        except ValueError as err:
            raise SpecError(f"spec {name}: {err}") from err
        _consistent(spec)
        return spec


# NVML_NVLINK_MAX_LINKS, the most NVLinks one GPU can have: 36 in nvml.h 13.x (pynvml 13).
MAX_NVLINKS_PER_GPU = 36


def _opt(check: Any, key: str, value: Any, *args: Any) -> Any:
    return None if value is None else check(key, value, *args)


def _count(key: str, value: Any, least: int = 1, most: int | None = None) -> int:
    """An integer in [least, most]. YAML's true/false, 2.5 and "8" are not counts."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if is_int and value >= least and (most is None or value <= most):
        return value
    if most is not None:
        wanted = f"an integer from {least} to {most}"
    else:
        wanted = "a positive integer" if least == 1 else f"an integer >= {least}"
    raise ValueError(f"{key} must be {wanted}, got {value!r}")


def _links(key: str, value: Any) -> int:
    return _count(key, value, 1, MAX_NVLINKS_PER_GPU)


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false, got {value!r}")
    return value


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, got {value!r}")
    if key == "gpu_name" and not value.strip():  # "" is a substring of every name
        raise ValueError(f"{key} must not be empty")
    return value


def _level(key: str, value: Any) -> str:
    if value not in _PCIE_LEVELS:
        raise ValueError(f"{key}: PCIe level {value!r} is not one of {', '.join(_PCIE_LEVELS)}")
    return str(value)


def _domains(value: Any, gpu_count: int | None) -> tuple[tuple[int, ...], ...] | None:
    """Lists of GPU indices: each GPU in at most one domain, each below ``gpu_count``."""
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(
            isinstance(d, list) and d for d in value):
        raise ValueError(f"nvlink.domains must be a list of non-empty lists of GPU indices, "
                         f"got {value!r}")
    most = None if gpu_count is None else gpu_count - 1
    seen: set[int] = set()
    for domain in value:
        for i in domain:
            _count("nvlink.domains GPU index", i, 0, most)
            if i in seen:
                raise ValueError(f"nvlink.domains names GPU {i} twice")
            seen.add(i)
    return tuple(tuple(sorted(d)) for d in sorted(value))


def _consistent(spec: Spec) -> None:
    """Rules that each parse but cannot hold together."""
    nv, most = spec.nvlink, max(spec.gpu_counts, default=None)
    why = None
    if nv.pair_links and nv.active_links_per_gpu and nv.pair_links > nv.active_links_per_gpu:
        why = (f"nvlink.pair_links {nv.pair_links} is more than nvlink.active_links_per_gpu "
               f"{nv.active_links_per_gpu}")
    elif most is not None and nv.domain_size is not None and nv.domain_size > most:
        why = f"nvlink.domain_size {nv.domain_size} is more than gpu_count {most}"
    if why:
        raise SpecError(f"spec {spec.name}: {why}")


@dataclass(frozen=True, kw_only=True)
class Verdict:
    spec: str
    findings: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.findings


def reference_names() -> list[str]:
    folder = resources.files("ckpt_preempt.hwprobe").joinpath("specs")
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir()
                  if p.name.endswith(".yaml"))


def load_spec(name_or_path: str) -> Spec:
    """A named reference (``hgx-h100-8``) or a path to a YAML file. Raises SpecError."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        try:
            text = path.read_text()
        except OSError as err:
            raise SpecError(f"cannot read spec {file_problem(name_or_path, err)}") from err
        default_name = path.stem
    else:
        ref = resources.files("ckpt_preempt.hwprobe").joinpath(f"specs/{name_or_path}.yaml")
        if not ref.is_file():
            raise SpecError(f"unknown spec {name_or_path!r}; named references: "
                            + ", ".join(reference_names()))
        text, default_name = ref.read_text(), name_or_path
    try:
        rules = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:  # one line: where and why, not the parser's excerpt
        raise SpecError(f"spec {name_or_path}: {parse_problem(err, 'YAML')}") from err
    if not isinstance(rules, dict):
        raise SpecError(f"spec {name_or_path} must be a mapping")
    return Spec.from_mapping(default_name, rules)


def verify(topo: Topology, spec: Spec, earlier: Topology | None = None) -> Verdict:
    """Findings of ``topo`` against ``spec``; pass a previous probe as ``earlier`` for trends."""
    findings: list[str] = []
    findings += _check_gpus(topo, spec)
    findings += _check_nvlink(topo, spec.nvlink, spec.nvswitch)
    findings += _check_pcie(topo, spec)
    if spec.fabric_attached:
        findings += _check_fabric(topo)
    if spec.max_link_errors is not None:
        findings += _check_errors(topo, spec.max_link_errors, earlier)
    return Verdict(spec=spec.name, findings=tuple(findings))


def _check_gpus(topo: Topology, spec: Spec) -> list[str]:
    out = []
    if spec.gpu_counts and topo.gpu_count not in spec.gpu_counts:
        wanted = " or ".join(str(n) for n in spec.gpu_counts)
        out.append(f"expected {wanted} GPUs, found {topo.gpu_count}")
    wrong: dict[str, list[int]] = {}
    for gpu in topo.gpus:
        if gpu.lost or "handle" in gpu.unavailable:
            out.append(f"GPU{gpu.index} unreadable: {gpu.unavailable.get('handle', 'lost')}")
        elif spec.gpu_name and spec.gpu_name not in (gpu.name or ""):
            wrong.setdefault(gpu.name or "unknown", []).append(gpu.index)
    for name, indexes in wrong.items():
        which = "all GPUs are" if len(indexes) == topo.gpu_count else (
            "GPU" + ",".join(map(str, indexes)) + (" is" if len(indexes) == 1 else " are"))
        out.append(f"{which} {name!r}, expected {spec.gpu_name}")
    return out


def _check_nvlink(topo: Topology, nv: NvlinkRules, nvswitch: bool | None) -> list[str]:
    out = []
    unreadable = {g.index: g.unavailable["nvlink"] for g in topo.gpus
                  if not g.links and "nvlink" in g.unavailable}
    if nvswitch is not None and topo.nvswitch != nvswitch:
        if not nvswitch:
            out.append("NVSwitch detected, expected none")
        elif unreadable:  # what NVML would not say cannot be confirmed
            out.append(f"NVSwitch not detected (NVLink unreadable on {len(unreadable)} of "
                       f"{topo.gpu_count} GPUs: {'/'.join(sorted(set(unreadable.values())))})")
        else:
            out.append("NVSwitch not detected")
    want_active = nv.active_links_per_gpu
    if want_active is not None:
        for gpu in topo.gpus:
            if gpu.lost or "handle" in gpu.unavailable:
                continue
            if gpu.index in unreadable:
                out.append(f"GPU{gpu.index} NVLink unreadable ({unreadable[gpu.index]}): "
                           f"cannot confirm {want_active} active links")
                continue
            active = len(gpu.active_links)
            if active >= want_active:
                continue
            down = [link.link for link in gpu.links if not link.active]
            if len(gpu.links) == want_active:
                out += [f"GPU{gpu.index} link {n} inactive" for n in down]
            else:
                out.append(f"GPU{gpu.index}: {active} of {want_active} NVLinks active "
                           f"(inactive: {_ranges(down) or 'none reported'})")
    domains = topo.nvlink_domains
    if nv.domains is not None:
        want = [list(d) for d in nv.domains]
        if domains != want:
            out.append(f"NVLink domains {_fmt_domains(domains)} expected {_fmt_domains(want)}")
    if nv.domain_size is not None:
        sizes = sorted({len(d) for d in domains})
        if sizes != [nv.domain_size]:
            out.append(f"NVLink domain sizes {sizes} expected {nv.domain_size}")
    for domain in domains:
        for i, a in enumerate(domain):
            for b in domain[i + 1:]:
                out += _check_pair(topo, a, b, nv)
    return out


def _check_pair(topo: Topology, a: int, b: int, nv: NvlinkRules) -> list[str]:
    pair = topo.pair(a, b)
    if pair is None:
        return []
    out = []
    want = nv.pair_links
    if want is not None and pair.nvlinks != want:
        out.append(f"GPU{a}↔GPU{b} {pair.level} expected NV{want}")
    status = pair.p2p.get("nvlink")
    if nv.p2p and status is not None and status != "OK":
        out.append(f"GPU{a}↔GPU{b} P2P over NVLink {status}")
    return out


def _check_pcie(topo: Topology, spec: Spec) -> list[str]:
    out = []
    unknown = sum(1 for p in topo.pairs.values() if not p.nvlinks and p.pcie is None)
    wanted = [f"{k} {v}" for k, v in (("same_numa", spec.pcie_same_numa),
                                      ("cross_numa", spec.pcie_cross_numa)) if v]
    if unknown and wanted:
        why = topo.unavailable.get("pcie_level", f"{unknown} pair(s)")
        out.append(f"PCIe level unreadable: {why}; cannot confirm " + " / ".join(wanted))
    for (a, b), pair in sorted(topo.pairs.items()):
        if pair.nvlinks or pair.pcie is None:
            continue
        same = _same_socket(topo, a, b)
        expected = spec.pcie_same_numa if same else spec.pcie_cross_numa
        if expected and pair.pcie.name != expected and same is not None:
            out.append(f"GPU{a}↔GPU{b} {pair.pcie.name} expected {expected}")
    return out


def _same_socket(topo: Topology, a: int, b: int) -> bool | None:
    """Same CPU socket: by slot NUMA node when sysfs told us, else by identical CPU affinity."""
    ga, gb = topo.gpus[a], topo.gpus[b]
    if ga.numa_node is not None and gb.numa_node is not None:
        return ga.numa_node == gb.numa_node
    if ga.cpu_affinity and gb.cpu_affinity:
        return ga.cpu_affinity == gb.cpu_affinity
    return None


def _check_fabric(topo: Topology) -> list[str]:
    out = []
    for gpu in topo.gpus:
        f = gpu.fabric
        if f is None:
            why = gpu.unavailable.get("fabric", "unreadable")
            out.append(f"GPU{gpu.index} fabric info unavailable ({why})")
        elif not f.attached:
            detail = f"state {f.state}, status {f.status}"
            if not f.cluster_uuid:
                detail += ", no cluster UUID"
            out.append(f"GPU{gpu.index} not attached to the NVLink fabric ({detail})")
    cliques = {gpu.fabric.clique for gpu in topo.gpus if gpu.fabric and gpu.fabric.clique}
    if len(cliques) > 1:
        out.append(f"GPUs in different fabric cliques: {sorted(cliques)}")
    return out


def _check_errors(topo: Topology, limit: int, earlier: Topology | None) -> list[str]:
    out = []
    before = {}
    if earlier is not None:
        before = {(g.index, link.link): link.errors for g in earlier.gpus for link in g.links}
    for gpu in topo.gpus:
        for link in gpu.links:
            for counter, value in link.errors.items():
                word = _COUNTER_WORDS.get(counter, counter)
                old = before.get((gpu.index, link.link), {}).get(counter)
                if old is not None and value > old:
                    out.append(f"{word} errors rising on GPU{gpu.index} link {link.link} "
                               f"({old} -> {value})")
                elif value > limit:
                    out.append(f"{word} errors on GPU{gpu.index} link {link.link}: {value} "
                               f"(max {limit})")
    return out


def _ranges(numbers: list[int]) -> str:
    parts, start = [], None
    for i, n in enumerate(numbers):
        start = n if start is None else start
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(n) if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)


def _fmt_domains(domains: list[list[int]]) -> str:
    return " ".join("{" + ",".join(map(str, d)) + "}" for d in domains)
