"""hwprobe: NVML topology discovery, verification, publishing and on-GPU checks.

Layers (each a module, each importable without the ones after it):

- ``model``   pure topology model: GPUs, NVLinks, pair levels exactly as ``nvidia-smi topo -m``
              prints them (NV#, PIX, PXB, PHB, NODE, SYS), NVLink domains, expected bandwidth.
              No NVML, no I/O.
- ``report``  the versioned JSON report (schema ``hwprobe/v1``, ``schema/hwprobe-v1.json``) and
              the compact Node annotation. Pure.
- ``verify``  named reference topologies (``specs/*.yaml``) or a YAML file of expectations,
              compared with a topology into findings a human can act on. Pure but for reading specs.
- ``nvml``    the NVML edge (pynvml): reads everything, degrades per field with a reason.
- ``publish``, ``serve``, ``bench``, ``cli``: the Kubernetes, metrics, CUDA and command-line edges.

Exceptions (everything hwprobe raises on purpose)::

    HwprobeError
     ├── NvmlUnavailable   no NVML library or driver: nothing can be probed (CLI exit 2)
     ├── SpecError         a reference topology or YAML expectation file is unknown or malformed
     └── PublishError      the Kubernetes API refused or could not be reached

A field NVML cannot answer (NotSupported, a lost GPU, a VM hiding the NVSwitches) is never an
exception: the report carries ``None`` for it and a reason in ``unavailable``.
"""

from ckpt_preempt.hwprobe.errors import HwprobeError, NvmlUnavailable, PublishError, SpecError

__all__ = ["HwprobeError", "NvmlUnavailable", "PublishError", "SpecError"]
