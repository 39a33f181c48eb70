"""How long a checkpoint of GPU-resident state takes on this machine: torch.distributed.checkpoint
(DCP) save and load, blocking and asynchronous, for a few state sizes.

The planner charges a victim's drain with its `checkpoint-seconds` and the simulator charges each
restart a fixed restore time; this measures both on real hardware instead of assuming them.
One process, no process group (DCP runs single-process), local disk under --dir.

    python3 e2e/gpu/checkpoint_timing.py --dir /tmp/ckpt --gib 2 8 --out result.json

Prints one JSON object (and writes it to --out): per size, seconds for a blocking save, the
seconds an asynchronous save blocks the caller and its total, a load back into GPU tensors, and
whether the loaded bytes equal the saved ones. Exit 0 when every round trip is exact, 1 when
one is not, 2 without CUDA.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

CHUNK_MIB = 256


def _state(gib: float, torch, seed: int, device: str) -> dict:
    gen = torch.Generator(device=device).manual_seed(seed)
    count = max(1, int(gib * 1024 / CHUNK_MIB))
    numel = CHUNK_MIB * 1024 * 1024 // 2  # bf16
    return {f"layer{i}": torch.randn(numel, generator=gen, device=device, dtype=torch.bfloat16)
            for i in range(count)}


def _timed(fn, torch) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(gib: float, root: Path, device: str) -> dict:
    import torch
    import torch.distributed.checkpoint as dcp

    state = _state(gib, torch, seed=int(gib * 10), device=device)
    size = sum(t.numel() * t.element_size() for t in state.values())
    row: dict = {"gib": round(size / 2**30, 2), "tensors": len(state)}
    blocking = root / f"blocking-{gib}"
    row["save_s"] = round(_timed(lambda: dcp.save(state, checkpoint_id=str(blocking)), torch), 3)
    if hasattr(dcp, "async_save"):
        target = root / f"async-{gib}"
        t0 = time.perf_counter()
        try:
            future = dcp.async_save(state, checkpoint_id=str(target))
            row["async_blocked_s"] = round(time.perf_counter() - t0, 3)
            future.result()
            row["async_total_s"] = round(time.perf_counter() - t0, 3)
        except Exception as err:  # recorded; the other numbers still stand
            row["async_error"] = f"{type(err).__name__}: {err}"[:300]
        shutil.rmtree(target, ignore_errors=True)
    loaded = {k: torch.empty_like(v) for k, v in state.items()}
    row["load_s"] = round(_timed(lambda: dcp.load(loaded, checkpoint_id=str(blocking)), torch), 3)
    row["exact"] = all(torch.equal(loaded[k], state[k]) for k in state)
    on_disk = sum(f.stat().st_size for f in blocking.rglob("*") if f.is_file())
    row["disk_gib"] = round(on_disk / 2**30, 2)
    row["save_gbps"] = round(size / row["save_s"] / 1e9, 2)
    row["load_gbps"] = round(size / row["load_s"] / 1e9, 2)
    shutil.rmtree(blocking, ignore_errors=True)
    state.clear()
    loaded.clear()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", type=Path, required=True, help="checkpoints are written here")
    ap.add_argument("--gib", type=float, nargs="+", default=[2.0, 8.0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu to try the script")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("checkpoint_timing: torch is not installed", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("checkpoint_timing: no CUDA device", file=sys.stderr)
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    result = {"device": name, "torch": torch.__version__,
              "dir": str(args.dir), "rows": []}
    for gib in args.gib:
        result["rows"].append(measure(gib, args.dir, args.device))
        print(json.dumps(result["rows"][-1]), flush=True)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0 if all(r["exact"] for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
