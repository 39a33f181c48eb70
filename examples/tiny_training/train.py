"""A tiny training loop that checkpoints on request, keeps training, and resumes after eviction.

CPU only, standard library only: it fits y = 3x + 1 with SGD on a two-parameter model, in the
shape of a PyTorch loop (model state dict, optimiser step, torch.save-style atomic checkpoint).

    python examples/tiny_training/train.py --dir /tmp/run --steps 2000 \
        --pidfile /tmp/run/train.pid &
    ckpt-preempt agent --pod $POD_NAME --namespace $POD_NAMESPACE \
        --signal-pidfile /tmp/run/train.pid

- A checkpoint request (the agent's SIGUSR1, or seen by polling the agent through the SDK): it
  saves at once, acknowledges through the SDK and **keeps training**. The request only means
  "this pod may be evicted soon"; the plan may still be cancelled (SIGUSR2 / a ``cancelled``
  event), and then nothing happens at all.
- Eviction (SIGTERM): it saves if it can and exits 143, so a Job never counts a preempted run as
  Succeeded. Started again with the same --dir, it resumes from the saved step.
- Every --every steps it saves on its own and reports it (periodic checkpoint). It exits 0 only
  when all --steps are done.
- It reports its progress (step of --steps); the agent declares the run's end on the pod from
  it (``ckpt-preempt.io/expected-end``), so a run minutes from its end is waited for, not
  evicted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a source checkout
import ckpt_preempt_sdk as sdk

EXIT_EVICTED = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM


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
    evicted = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: evicted.set())
    agent = sdk.Checkpointer(args.agent_url)
    agent.install_signal_handlers()
    if args.pidfile:  # only now: the agent may signal this process once it knows the pid
        Path(args.pidfile).write_text(str(os.getpid()))

    state = {"step": 0, "w": 0.0, "b": 0.0, "lr": 0.05}
    if ckpt.exists():
        state = json.loads(ckpt.read_text())
        print(f"resumed from step {state['step']}", flush=True)
    print(f"training from step {state['step']}", flush=True)
    rng = random.Random(state["step"])
    while state["step"] < args.steps:
        if evicted.is_set():
            try:
                save(ckpt, state)
                print(f"evicted: saved at step {state['step']}", flush=True)
            except OSError as e:
                print(f"evicted: could not save at step {state['step']}: {e}", flush=True)
            return EXIT_EVICTED
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
        with contextlib.suppress(sdk.AgentUnavailable):  # sent every 5 s at most
            agent.progress(state["step"], args.steps)
        try:
            events = agent.events()
        except sdk.AgentUnavailable:
            events = []
        for event in events:
            if event.state is sdk.State.REQUESTED:
                save(ckpt, state)
                acked = False
                with contextlib.suppress(sdk.AgentUnavailable):
                    acked = agent.done(event.plan)
                print(f"checkpoint on request for plan {event.plan} at step {state['step']} "
                      f"(acked={acked}); training on", flush=True)
            elif event.state is sdk.State.CANCELLED:
                print(f"checkpoint request for plan {event.plan} cancelled at step "
                      f"{state['step']}; training on", flush=True)
    save(ckpt, state)
    print(f"finished: w={state['w']:.3f} b={state['b']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
