"""Two-process PyTorch training (gloo, DDP) that saves a torch.distributed.checkpoint (DCP) when
the checkpoint agent asks and when SIGTERM stops it, reports through the SDK, and resumes.

    python examples/pytorch_dcp/train.py --dir /tmp/run --pidfile /tmp/run/train.pid &
    ckpt-preempt agent --pod $POD_NAME --namespace $POD_NAMESPACE \
        --signal-pidfile /tmp/run/train.pid

Run without RANK/WORLD_SIZE in the environment it is the launcher: it starts --nproc workers
(this file again, with the env:// variables torchrun would set) and forwards SIGTERM to them.
Started by torchrun it is a worker at once.

- Rank 0 polls the agent through the SDK (and writes --pidfile, so the agent's SIGUSR1 makes it
  poll at once), and reports its progress, from which the agent declares the run's end. Every
  step all ranks all-reduce [loss, save wanted, SIGTERM seen], so they all agree on the step at
  which they save or stop.
- A checkpoint request: every rank saves the model and optimiser state (DCP, one shard file per
  rank) into <dir>/checkpoints/step-<N>; rank 0 then points <dir>/checkpoints/latest at it
  (atomic rename), acknowledges the plan through the SDK and training goes on.
- SIGTERM (an eviction, a preemption by any scheduler, a drain; the SDK's stop handler only
  sets a flag): at the end of the step the ranks agree, all save a DCP checkpoint of that step
  as above, rank 0 acknowledges any request still open and reports it as its final checkpoint
  (``saved_on_stop``), and every worker exits ``sdk.EXIT_CHECKPOINTED`` (75); the launcher
  then exits 75 too, or 143 (``sdk.EXIT_NOT_SAVED``) if any worker stopped without that save.
  More SIGTERMs during the save are counted, not obeyed. A Job never counts a preempted run as
  Succeeded: 0 only after all --steps.
- Started again with the same --dir it loads `latest` and goes on from that step. The batch of
  each step is a function of (seed, step, rank), so a resumed run computes the same losses as
  one that never stopped. Rank 0 appends {"step", "loss"} lines to <dir>/loss.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

with contextlib.suppress(IndexError):  # run from a source checkout: the SDK is in sdk/
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk"))
import ckpt_preempt_sdk as sdk

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # save, then exit EXIT_CHECKPOINTED
FEATURES, HIDDEN, BATCH = 16, 64, 32
LATEST = "latest"  # file in <dir>/checkpoints naming the newest complete checkpoint
KEEP_CHECKPOINTS = 2
COLLECTIVE_TIMEOUT_SECONDS = 120  # a dead peer fails the collective instead of hanging


def at_least(low: float, kind=int):
    def parse_value(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value >= low:
            raise argparse.ArgumentTypeError(f"must be >= {low}: {text!r}")
        return value
    return parse_value


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump: the project's bad-input rule
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="checkpoints and loss.jsonl go here")
    ap.add_argument("--steps", type=at_least(0), default=100_000)
    ap.add_argument("--nproc", type=at_least(1), default=2, help="workers (launcher only)")
    ap.add_argument("--seed", type=at_least(0), default=0)
    ap.add_argument("--lr", type=at_least(0.0, float), default=0.01)
    ap.add_argument("--every", type=at_least(0), default=0,
                    help="periodic checkpoint interval (0: off)")
    ap.add_argument("--step-seconds", type=at_least(0.0, float), default=0.0,
                    help="sleep after each step")
    ap.add_argument("--pidfile", help="rank 0 writes its pid here for the agent's signals")
    ap.add_argument("--agent-url", help="the agent's endpoint (default: the SDK's)")
    return ap.parse_args(argv)


# ---------------------------------------------------------------------------- the launcher


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: argparse.Namespace, argv: list[str]) -> int:
    """Start the workers as torchrun would; forward SIGTERM; exit 75 when they all saved on it,
    143 when stopped without that checkpoint."""
    try:
        (Path(args.dir) / "checkpoints").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"train.py: cannot use --dir {args.dir}: {e.strerror or e}", file=sys.stderr)
        return 2
    env = {"OMP_NUM_THREADS": "1",  # as torchrun does: one thread per worker unless told
           **os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": str(args.nproc)}
    workers = [subprocess.Popen([sys.executable, __file__, *argv],
                                env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
               for r in range(args.nproc)]
    evicted = threading.Event()

    def forward(signum, _frame):
        evicted.set()
        for w in workers:
            with contextlib.suppress(ProcessLookupError):
                w.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    first_failure: int | None = None  # the exit code of the first worker that failed
    running = list(workers)
    while running:
        for w in [w for w in running if w.poll() is not None]:
            running.remove(w)
            if w.returncode not in (0, sdk.EXIT_CHECKPOINTED) and first_failure is None:
                first_failure = w.returncode
                for other in running:  # one gone: the others cannot go on alone
                    with contextlib.suppress(ProcessLookupError):
                        other.terminate()
        time.sleep(0.05)
    codes = {w.returncode for w in workers}
    if codes == {sdk.EXIT_CHECKPOINTED}:
        return sdk.EXIT_CHECKPOINTED  # every rank saved the stop's step
    if codes == {0}:
        return 0
    if evicted.is_set() or first_failure in (sdk.EXIT_NOT_SAVED, -signal.SIGTERM):
        return sdk.EXIT_NOT_SAVED  # SIGTERM to the launcher, or to the workers themselves
    return abs(first_failure or 1) or 1


# ---------------------------------------------------------------------------- the workers


def worker(args: argparse.Namespace) -> int:
    # First, before torch's imports: from now on SIGTERM is a flag read at the end of a step.
    agent = sdk.Checkpointer(args.agent_url) if os.environ["RANK"] == "0" else None
    stop = agent.install_stop_handler(STOP_SIGNALS) if agent is not None else \
        sdk.StopRequest().install(STOP_SIGNALS)

    import datetime

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", timeout=datetime.timedelta(
        seconds=COLLECTIVE_TIMEOUT_SECONDS))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    torch.use_deterministic_algorithms(True)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1)))
    optim = torch.optim.Adam(model.parameters(), lr=args.lr)
    teacher = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(args.seed + 1))

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed((args.seed * 1_000_003 + step) * world + rank)
        x = torch.randn(BATCH, FEATURES, generator=g)
        return x, 2 * torch.sin(x @ teacher / 4) + 0.05 * torch.randn(BATCH, 1, generator=g)

    ckpts = Path(args.dir) / "checkpoints"
    ckpts.mkdir(parents=True, exist_ok=True)

    def save(step: int) -> Path:
        model_sd, optim_sd = get_state_dict(model, optim)
        path = ckpts / f"step-{step:08d}"
        dcp.save({"model": model_sd, "optim": optim_sd, "step": torch.tensor(step)},
                 checkpoint_id=path)
        dist.barrier()  # every rank's shard is written before `latest` names it
        if rank == 0:
            sdk.fsync_tree(path)  # the shards and their names are durable, then:
            sdk.atomic_write(ckpts / LATEST, path.name)  # a kill mid-save leaves the previous
            for old in sorted(ckpts.glob("step-*"))[:-KEEP_CHECKPOINTS]:
                shutil.rmtree(old, ignore_errors=True)
        return path

    step = 0
    if (ckpts / LATEST).exists():
        path = ckpts / (ckpts / LATEST).read_text().strip()
        model_sd, optim_sd = get_state_dict(model, optim)
        state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=path)  # in place, into each rank's own tensors
        # get/load/set is DCP's documented resume sequence; set_state_dict also covers state
        # that get_state_dict had to copy (sharded models, optimisers keyed by name).
        set_state_dict(model, optim, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        step = int(state["step"])
        if rank == 0:
            print(f"resumed from step {step} ({path.name})", flush=True)

    if agent is not None:
        agent.install_signal_handlers()
        if args.pidfile:  # only now: the agent may signal this process once it knows the pid
            Path(args.pidfile).write_text(str(os.getpid()))
        print(f"training from step {step}", flush=True)
    losses = open(Path(args.dir) / "loss.jsonl", "a") if rank == 0 else None  # noqa: SIM115
    plans: list[str] = []  # requests seen by rank 0, answered at the next agreed save
    try:
        while step < args.steps:
            if agent is not None:
                try:
                    events = agent.events()
                except sdk.AgentUnavailable:
                    events = []
                for event in events:
                    if event.state is sdk.State.REQUESTED:
                        plans.append(event.plan)
                    elif event.state is sdk.State.CANCELLED:
                        if event.plan in plans:
                            plans.remove(event.plan)
                        print(f"checkpoint request for plan {event.plan} cancelled at step "
                              f"{step}; training on", flush=True)
            x, y = batch(step)
            loss = torch.nn.functional.mse_loss(model(x), y)
            optim.zero_grad()
            loss.backward()  # DDP averages the gradients over the ranks (gloo all-reduce)
            optim.step()
            step += 1
            agreed = torch.tensor([loss.item(), float(bool(plans)), float(bool(stop))],
                                  dtype=torch.float64)
            dist.all_reduce(agreed)  # every rank stops or saves at the same step
            if losses is not None:
                losses.write(json.dumps({"step": step, "loss": agreed[0].item() / world}) + "\n")
                losses.flush()
            if agreed[2] > 0:  # a rank got SIGTERM: all save this step, then all exit
                return stop_saved(save, step, agent, plans)
            periodic = args.every > 0 and step % args.every == 0
            if agreed[1] > 0 or periodic:
                path = save(step)
                if agent is not None:
                    answer_agent(agent, plans, step, path, periodic)
            if agent is not None:  # the agent declares the run's end from it (every 5 s at most)
                with contextlib.suppress(sdk.AgentUnavailable):
                    agent.progress(step, args.steps)
            if args.step_seconds:
                time.sleep(args.step_seconds)
    finally:
        if losses is not None:
            losses.close()
        dist.destroy_process_group()
    if rank == 0:
        print(f"finished at step {step}", flush=True)
    return 0


def stop_saved(save, step: int, agent: sdk.Checkpointer | None, plans: list[str]) -> int:
    """Every rank saves the step it stopped at; rank 0 acknowledges the requests that save
    answers too and reports it as the final checkpoint. The exit code: 75, or 143 when the save
    failed."""
    if agent is not None:
        print(f"evicted at step {step}", flush=True)
    try:
        path = save(step)
    except Exception as e:  # a full disk, a peer gone: nothing new, the previous one stands
        print(f"evicted at step {step}: could not save: {e}", flush=True)
        return sdk.EXIT_NOT_SAVED
    if agent is None:
        return sdk.EXIT_CHECKPOINTED
    for plan in plans:
        with contextlib.suppress(sdk.AgentUnavailable):
            agent.done(plan)
    print(f"saved on stop at step {step} in {path.name}", flush=True)
    return agent.saved_on_stop()


def answer_agent(agent: sdk.Checkpointer, plans: list[str], step: int, path: Path,
                 periodic: bool) -> None:
    """After a save every rank took part in: acknowledge the requests, report a periodic one."""
    for plan in plans:
        acked = False
        with contextlib.suppress(sdk.AgentUnavailable):
            acked = agent.done(plan)
        print(f"checkpoint on request for plan {plan} at step {step} in {path.name} "
              f"(acked={acked}); training on", flush=True)
    plans.clear()
    if periodic:
        with contextlib.suppress(sdk.AgentUnavailable):  # training goes on without it
            agent.checkpointed()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        code = worker(args)
        # The worker has closed its files and destroyed its process group. torch's C++ threads
        # (gloo, DDP) can still abort the interpreter's teardown after a clean run ("terminate
        # called without an active exception", SIGABRT, seen once in CI on a resume), so a
        # worker leaves without running destructors.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
