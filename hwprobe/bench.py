"""``hwprobe bench``: on-GPU checks with whatever CUDA library is importable (torch, else cupy).

For every GPU: device-to-device copy bandwidth. For every pair inside an NVLink domain: P2P
copy bandwidth (compared with the model's expected figure) and a data-integrity check (a
seeded pattern copied across and compared bit for bit). Without CUDA it returns a skip with
the reason; it never raises for a missing library.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ckpt_preempt.hwprobe.model import Topology

_MIB = 1 << 20


@dataclass(frozen=True, kw_only=True)
class BenchResult:
    backend: str | None
    skipped: str | None = None  # the reason, when nothing ran
    d2d_gbps: dict[int, float] = field(default_factory=dict)
    p2p: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "skipped": self.skipped,
                "d2d_gbps": {str(k): v for k, v in self.d2d_gbps.items()}, "p2p": self.p2p}


def _torch() -> Any | None:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _cupy() -> Any | None:
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # ImportError, or CUDARuntimeError without a driver
        return None
    return cupy


def run(topo: Topology, *, size_mib: int = 256, repeats: int = 5) -> BenchResult:
    torch = _torch()
    if torch is not None:
        return _run(_TorchOps(torch), "torch", topo, size_mib, repeats)
    cupy = _cupy()
    if cupy is not None:
        return _run(_CupyOps(cupy), "cupy", topo, size_mib, repeats)
    return BenchResult(backend=None, skipped="no CUDA: neither torch with CUDA nor cupy importable")


def _run(ops: Any, name: str, topo: Topology, size_mib: int, repeats: int) -> BenchResult:
    n = min(ops.count(), topo.gpu_count)
    if n == 0:
        return BenchResult(backend=name, skipped="CUDA sees no GPU")
    nbytes = size_mib * _MIB
    d2d = {g: round(ops.copy_gbps(g, g, nbytes, repeats), 1) for g in range(n)}
    p2p = []
    for domain in topo.nvlink_domains:
        for i, a in enumerate(domain):
            for b in domain[i + 1:]:
                if b >= n:
                    continue
                gbps = ops.copy_gbps(a, b, nbytes, repeats)
                expected = topo.expected_gbps(a, b)
                p2p.append({
                    "a": a, "b": b, "level": topo.level(a, b), "gbps": round(gbps, 1),
                    "expected_gbps": expected,
                    "ratio": round(gbps / expected, 2) if expected else None,
                    "intact": ops.intact(a, b, 16 * _MIB),
                })
    return BenchResult(backend=name, d2d_gbps=d2d, p2p=p2p)


class _TorchOps:
    def __init__(self, torch: Any) -> None:
        self.t = torch

    def count(self) -> int:
        return self.t.cuda.device_count()

    def copy_gbps(self, src: int, dst: int, nbytes: int, repeats: int) -> float:
        t = self.t
        a = t.empty(nbytes, dtype=t.uint8, device=f"cuda:{src}")
        b = t.empty(nbytes, dtype=t.uint8, device=f"cuda:{dst}")
        b.copy_(a)  # warm-up: enables peer access, allocates
        t.cuda.synchronize(src)
        t.cuda.synchronize(dst)
        start = time.perf_counter()
        for _ in range(repeats):
            b.copy_(a, non_blocking=True)
        t.cuda.synchronize(src)
        t.cuda.synchronize(dst)
        return nbytes * repeats / (time.perf_counter() - start) / 1e9

    def intact(self, src: int, dst: int, nbytes: int) -> bool:
        t = self.t
        gen = t.Generator(device=f"cuda:{src}").manual_seed(src * 1000 + dst)
        a = t.randint(0, 256, (nbytes,), dtype=t.uint8, device=f"cuda:{src}", generator=gen)
        there = a.to(f"cuda:{dst}")
        back = there.to(f"cuda:{src}")
        return bool(t.equal(a, back))


class _CupyOps:
    def __init__(self, cupy: Any) -> None:
        self.cp = cupy

    def count(self) -> int:
        return self.cp.cuda.runtime.getDeviceCount()

    def copy_gbps(self, src: int, dst: int, nbytes: int, repeats: int) -> float:
        cp = self.cp
        with cp.cuda.Device(src):
            a = cp.empty(nbytes, dtype=cp.uint8)
        with cp.cuda.Device(dst):
            b = cp.empty(nbytes, dtype=cp.uint8)
        cp.cuda.runtime.memcpyPeer(b.data.ptr, dst, a.data.ptr, src, nbytes)
        cp.cuda.runtime.deviceSynchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            cp.cuda.runtime.memcpyPeer(b.data.ptr, dst, a.data.ptr, src, nbytes)
        cp.cuda.runtime.deviceSynchronize()
        return nbytes * repeats / (time.perf_counter() - start) / 1e9

    def intact(self, src: int, dst: int, nbytes: int) -> bool:
        cp = self.cp
        with cp.cuda.Device(src):
            a = cp.random.default_rng(src * 1000 + dst).integers(0, 256, nbytes, dtype=cp.uint8)
        with cp.cuda.Device(dst):
            there = cp.empty_like(a)
        cp.cuda.runtime.memcpyPeer(there.data.ptr, dst, a.data.ptr, src, nbytes)
        with cp.cuda.Device(src):
            back = cp.empty_like(a)
        cp.cuda.runtime.memcpyPeer(back.data.ptr, src, there.data.ptr, dst, nbytes)
        cp.cuda.runtime.deviceSynchronize()
        with cp.cuda.Device(src):
            return bool(cp.array_equal(a, back))
