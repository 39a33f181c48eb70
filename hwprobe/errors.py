"""The hwprobe exception tree (drawn in the package docstring)."""


class HwprobeError(Exception):
    """Base of every error hwprobe raises on purpose."""


class NvmlUnavailable(HwprobeError):
    """NVML cannot be used at all: no library, no driver. Nothing to probe; CLI exits 2."""


class SpecError(HwprobeError):
    """A named reference topology is unknown, or an expectations file is malformed."""


class PublishError(HwprobeError):
    """The Kubernetes API refused the update or could not be reached."""
