"""A tiny training loop that checkpoints on request, keeps training, and saves on SIGTERM.

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
- Stop (SIGTERM: an eviction, a preemption by any scheduler, a drain): the SDK's stop handler
  only sets a flag; at the end of the step the loop saves (atomically, ``sdk.atomic_write``),
  reports it to the agent as its final checkpoint and exits ``sdk.EXIT_CHECKPOINTED`` (75); if
  the save fails it exits 143. Either way a Job never counts a preempted run as Succeeded.
  More SIGTERMs during the save are counted, not obeyed. Started again with the same --dir, it
  resumes from the saved step. ``--save-seconds`` stretches the save (written in pieces) to
  try a grace period that runs out mid-save: the old checkpoint or the new one survives.
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
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a source checkout
import ckpt_preempt_sdk as sdk

SAVE_PIECES = 10  # --save-seconds: the checkpoint is written in this many pieces


def save(path: Path, state: dict, seconds: float = 0.0) -> None:
    """Replace ``path`` atomically: a SIGKILL at any moment leaves the old or the new one."""
    text = json.dumps(state)
    with sdk.atomic_writer(path, "w") as f:
        if seconds <= 0:
            f.write(text)
            return
        piece = -(-len(text) // SAVE_PIECES)
        for i in range(0, len(text), piece):  # a slow save, as a large model's would be
            f.write(text[i:i + piece])
            f.flush()
            time.sleep(seconds / SAVE_PIECES)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--every", type=int, default=500, help="periodic checkpoint interval")
    ap.add_argument("--step-seconds", type=float, default=0.01)
    ap.add_argument("--save-seconds", type=float, default=0.0,
                    help="stretch the save on SIGTERM over this long (to try a grace period)")
    ap.add_argument("--pidfile")
    ap.add_argument("--agent-url")
    ap.add_argument("--no-save-on-stop", action="store_true",
                    help="the behaviour before save-on-SIGTERM: no stop handler, so SIGTERM "
                         "kills the loop (143) and a restart resumes from the last periodic "
                         "checkpoint")
    args = ap.parse_args(argv)

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "checkpoint.json"
    agent = sdk.Checkpointer(args.agent_url)
    # SIGTERM: a flag read at the end of each step (--no-save-on-stop: its default action)
    stop = None if args.no_save_on_stop else agent.install_stop_handler()
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
        if stop:
            print(f"stopping at step {state['step']}: saving", flush=True)
            try:
                save(ckpt, state, args.save_seconds)
            except OSError as e:
                print(f"evicted: could not save at step {state['step']}: {e}", flush=True)
                return sdk.EXIT_NOT_SAVED
            print(f"evicted: saved at step {state['step']}", flush=True)
            return agent.saved_on_stop()  # reported as the final checkpoint; exit 75
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
