"""A stand-in training process for tests/sdk/test_stop_save.py: it saves checkpoint version 1,
"trains" until SIGTERM, then saves version 2 with ``atomic_writer`` and exits as the SDK's stop
contract says. At each named phase of that save it prints the phase and waits for a line on
stdin, so the test can signal or SIGKILL it at exactly that point (no timing involved).

    python save_child.py CHECKPOINT
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk"))
import ckpt_preempt_sdk as sdk

PAYLOAD_BYTES = 256 * 1024  # several writes, so "mid-write" is a real half file
CHUNKS = 4


def content(version: int) -> bytes:
    payload = (f"v{version}-" * (PAYLOAD_BYTES // 4))[:PAYLOAD_BYTES]
    return json.dumps({"version": version, "payload": payload,
                       "sha256": hashlib.sha256(payload.encode()).hexdigest()}).encode()


def phase(name: str) -> None:
    print(name, flush=True)
    sys.stdin.readline()  # the test answers once it has done what it wanted at this point


def main() -> int:
    path = Path(sys.argv[1])
    stop = sdk.StopRequest().install()
    sdk.atomic_write(path, content(1))
    real_replace, real_fsync_dir = sdk.os.replace, sdk.fsync_dir

    def replace(src, dst):
        phase("before-replace")
        real_replace(src, dst)

    def fsync_dir(d):
        phase("before-dir-fsync")
        real_fsync_dir(d)

    sdk.os.replace, sdk.fsync_dir = replace, fsync_dir
    print("training", flush=True)
    while not stop:  # the training loop's safe point, reached every step
        time.sleep(0.01)
    data = content(2)
    piece = len(data) // CHUNKS + 1
    with sdk.atomic_writer(path) as f:
        for i in range(0, len(data), piece):
            f.write(data[i:i + piece])
            f.flush()
            if i == 0:
                phase("mid-write")
    print(f"saved; signals {stop.count}", flush=True)
    return sdk.EXIT_CHECKPOINTED


if __name__ == "__main__":
    sys.exit(main())
