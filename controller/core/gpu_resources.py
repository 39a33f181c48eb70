"""Which Kubernetes resources are GPUs, and how many GPUs a request or a node holds.

Three kinds are counted:

- **Whole GPUs**: the extended resources named in the config key ``gpuResources`` (default
  ``nvidia.com/gpu``; ``amd.com/gpu``, ``gpu.intel.com/i915``, ... as a cluster's device
  plugins advertise them), one GPU per unit, in ``Resources.gpus``.
- **MIG slices**: ``nvidia.com/mig-<g>g.<mem>gb`` (optionally with a ``+me``-style suffix), the
  names NVIDIA's device plugin advertises under its ``mixed`` MIG strategy
  (https://docs.nvidia.com/datacenter/cloud-native/kubernetes/latest/index.html, "MIG Support
  in Kubernetes": ``nvidia.com/mig-<slice_count>g.<memory_size>gb``). One slice of profile
  ``<g>g`` is ``g`` of the ``MIG_SLICES_PER_GPU`` compute slices of an A100/H100/H200 (NVIDIA
  MIG User Guide, "Supported MIG Profiles":
  https://docs.nvidia.com/datacenter/tesla/mig-user-guide/). Counted in ``Resources.gpu_milli``,
  thousandths of a GPU, so a ``1g`` slice is 142 and a ``7g`` slice a whole 1000. hwprobe
  reads MIG device uuids but publishes no MIG data on the Node, and no profiles, so the
  fraction comes from the profile name; an A30 (4 slices per GPU) is counted as if it had 7,
  which undercounts its slices.
- **DRA devices**: counted by ``controller.kube.resource_claims`` from ResourceClaims and
  ResourceSlices of the drivers and DeviceClasses in ``gpuDraDrivers`` / ``gpuDeviceClasses``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from kubernetes.utils import parse_quantity

from ckpt_preempt.policies.model.model import MILLI_PER_GPU

DEFAULT_WHOLE = ("nvidia.com/gpu",)
DEFAULT_DRA_DRIVERS = ("gpu.nvidia.com",)  # NVIDIA's DRA driver (k8s-dra-driver-gpu)
DEFAULT_DEVICE_CLASSES = ("gpu.nvidia.com",)  # the DeviceClass that driver installs
MIG_SLICES_PER_GPU = 7  # compute slices of an A100/H100/H200 GPU
MIG_RESOURCE = re.compile(r"nvidia\.com/mig-(?P<g>[1-9][0-9]*)g\.(?P<mem>[0-9]+)gb(\+[a-z.]+)?")
# a qualified extended resource name: <DNS-1123 subdomain>/<name>
_EXTENDED = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def mig_milli(resource: str) -> int | None:
    """Thousandths of a GPU one device of this MIG resource is, or None when it is none."""
    m = MIG_RESOURCE.fullmatch(resource)
    if m is None:
        return None
    g = min(int(m["g"]), MIG_SLICES_PER_GPU)
    return g * MILLI_PER_GPU // MIG_SLICES_PER_GPU


def check_names(names: tuple[str, ...], key: str) -> str | None:
    """Why a list of GPU resource names (config key ``key``) is unusable, or None."""
    if not names:
        return f"{key} must name at least one resource"
    for n in names:
        if not _EXTENDED.fullmatch(n) or n.startswith(("kubernetes.io/", "requests.")):
            return f"{key}: {n!r} is not an extended resource name (domain/name)"
        if mig_milli(n) is not None:
            return f"{key}: {n!r} is a MIG slice, counted as its fraction of a GPU already"
    return None


def check_driver_names(names: tuple[str, ...], key: str) -> str | None:
    """Why a list of DRA driver or DeviceClass names is unusable, or None (empty: DRA off)."""
    for n in names:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", n):
            return f"{key}: {n!r} is not a DNS subdomain"
    return None


@dataclass(frozen=True, kw_only=True)
class GpuResources:
    """What counts as a GPU (see the module docstring). Frozen, built once from the config."""

    whole: frozenset[str] = frozenset(DEFAULT_WHOLE)
    dra_drivers: frozenset[str] = frozenset(DEFAULT_DRA_DRIVERS)
    device_classes: frozenset[str] = frozenset(DEFAULT_DEVICE_CLASSES)

    @property
    def dra(self) -> bool:
        """Whether ResourceClaims are watched at all (some driver or class configured)."""
        return bool(self.dra_drivers or self.device_classes)

    def count(self, amounts: Mapping[str, object]) -> tuple[int, int]:
        """(whole GPUs, MIG thousandths of a GPU) in a requests or allocatable map. Raises
        ValueError (or ArithmeticError) on a quantity that does not parse."""
        whole = milli = 0
        for name, value in amounts.items():
            if name in self.whole:
                whole += int(parse_quantity(str(value)))
            else:
                per = mig_milli(name)
                if per is not None:
                    milli += int(parse_quantity(str(value))) * per
        return whole, milli


def mig_names(amounts: Mapping[str, object]) -> frozenset[str]:
    """The MIG resources of a requests or allocatable map with a non-zero amount."""
    out = set()
    for name, value in amounts.items():
        if mig_milli(name) is not None:
            try:
                if parse_quantity(str(value)) > 0:
                    out.add(name)
            except (ValueError, ArithmeticError):
                continue
    return frozenset(out)


def requested_mig(spec: Mapping) -> frozenset[str]:
    """The MIG resources any container or init container of a pod spec requests."""
    out: frozenset[str] = frozenset()
    for c in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        if isinstance(c, Mapping):
            out |= mig_names((c.get("resources") or {}).get("requests") or {})
    return out


DEFAULT = GpuResources()


def from_config(cfg) -> GpuResources:
    """The ``GpuResources`` a ``controller.core.config.Config`` names."""
    return GpuResources(whole=frozenset(cfg.gpu_resources),
                        dra_drivers=frozenset(cfg.gpu_dra_drivers),
                        device_classes=frozenset(cfg.gpu_device_classes))
