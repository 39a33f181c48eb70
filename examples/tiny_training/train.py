"""A tiny training loop that checkpoints on request and resumes from its last checkpoint.

CPU only, standard library only: it fits y = 3x + 1 with SGD on a two-parameter model, in the
shape of a PyTorch loop (model state dict, optimiser step, torch.save-style atomic checkpoint).

    python examples/tiny_training/train.py --dir /tmp/run --steps 2000 \
        --pidfile /tmp/run/train.pid &
    ckpt-preempt agent --pod $POD_NAME --namespace $POD_NAMESPACE \
        --signal-pidfile /tmp/run/train.pid

On SIGUSR1 (sent by the agent when the controller asks this pod to drain) it saves at once,
tells the agent through the SDK (which acknowledges the drain) and exits 0. Started again, it
resumes from the saved step. Every --every steps it saves on its own and reports it (periodic).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a source checkout
from controller import sdk


def save(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)  # atomic: a crash never leaves half a checkpoint


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--every", type=int, default=500, help="periodic checkpoint interval")
    ap.add_argument("--step-seconds", type=float, default=0.01)
    ap.add_argument("--pidfile")
    ap.add_argument("--agent-url")
    args = ap.parse_args(argv)

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "checkpoint.json"
    if args.pidfile:
        Path(args.pidfile).write_text(str(os.getpid()))
    agent = sdk.Checkpointer(args.agent_url)
    agent.install_signal_handler()

    state = {"step": 0, "w": 0.0, "b": 0.0, "lr": 0.05}
    if ckpt.exists():
        state = json.loads(ckpt.read_text())
        print(f"resumed from step {state['step']}", flush=True)
    rng = random.Random(state["step"])
    while state["step"] < args.steps:
        x = rng.uniform(-1, 1)
        err = state["w"] * x + state["b"] - (3 * x + 1)
        state["w"] -= state["lr"] * err * x
        state["b"] -= state["lr"] * err
        state["step"] += 1
        time.sleep(args.step_seconds)
        if state["step"] % args.every == 0:
            save(ckpt, state)
            with contextlib.suppress(sdk.AgentUnavailable):  # training goes on without it
                agent.checkpointed()
        if agent.requested():
            save(ckpt, state)
            acked = agent.done()
            print(f"checkpoint on request at step {state['step']} (acked={acked})", flush=True)
            return 0
    save(ckpt, state)
    print(f"finished: w={state['w']:.3f} b={state['b']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
