"""An elastic run that shrinks from 3 to 2 ranks and keeps training: torchrun's elastic agents
(c10d rendezvous, gloo, CPU) and DCP checkpoints, as an elastic gang under ckpt-preempt.

    python examples/pytorch_dcp/elastic.py --dir /tmp/elastic --steps 60 --leave-at 20

The launcher starts three torchrun agents (``--nnodes 2:3``: the job runs on 2 or 3 "nodes",
one rank each; the pods of an elastic gang carrying ``ckpt-preempt.io/min-members: "2"``) on one
c10d rendezvous. Each rank trains the MLP of ``train.py`` (DDP over gloo) and all ranks save a
DCP checkpoint together every ``--every`` steps and whenever one of them hears a drain request
through the SDK (``ckpt_preempt_sdk``: with ``--agent-url``; a shrink's request names the pods
that leave in ``event.leaving``).

SIGTERM (torchrun's agent passes its own on to its worker; the SDK's stop handler only sets a
flag) is "checkpoint now": at the end of the step the ranks agree, and all of them save that
step together. The ranks that were signalled then exit ``sdk.EXIT_CHECKPOINTED`` (75); rank 0
reports the checkpoint (as its final one if it is leaving). The others train on.

At step ``--leave-at``, right after the checkpoint of that step (the one a shrink's drain
request would have asked for), the third rank waits, and the launcher ends its agent with
SIGTERM: the eviction of the member the shrink takes. That rank trains one more step with the
others, they all save it, and it exits 75. The other ranks' next collective fails, their agents
restart them, the rendezvous re-forms with the two agents left (torchrun's ``--nnodes 2:3``),
and the two new ranks load the latest checkpoint (the leaving rank's last step) and go on from
there, now with world size 2: nothing trained is lost, only the re-rendezvous and the reload.

SIGTERM to the launcher (the whole job is stopped) goes to every agent and so to every rank:
they save the step they stop at, and the launcher exits 75 once that checkpoint is the latest
(143 if it is not); started again, the run resumes from it. Rank 0 appends
``{"step", "loss", "world"}`` lines to ``<dir>/loss.jsonl``; the launcher exits 0 once the
survivors finish ``--steps``.

Worker mode (torchrun sets RANK/WORLD_SIZE) is the same file with ``--worker``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

with contextlib.suppress(IndexError):  # run from a source checkout: the SDK is in sdk/
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk"))
from train import LATEST, OneLineParser, free_port  # the DCP example beside this file

import ckpt_preempt_sdk as sdk

NODES, MIN_NODES = 3, 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
STOPPED_AT = "stopped-at"  # in checkpoints/: the checkpoint rank 0 saved on a stop
FEATURES, HIDDEN, BATCH = 16, 64, 32
# how long the rendezvous waits for more agents once it has the minimum, and for the first
# ones: short, so the demo re-forms in seconds (torch's defaults: 30 s and 600 s)
RDZV_CONF = "last_call_timeout=3,join_timeout=120,close_timeout=5"
STORE_TIMEOUT_SECONDS = 120.0  # the first agent's store must listen by then (torch's join_timeout)
STORE_FALLBACK_SECONDS = 1.0  # where /proc/net/tcp cannot be read: a pause, as before
LEAVE_TIMEOUT_SECONDS = 300
FINISH_TIMEOUT_SECONDS = 300  # from the shrink until the survivors end (seen: 15-25 s)
SHARED_STORE_OFF = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"  # see launch()


def at_least(low: int):
    def parse_value(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}: {text!r}")
        return value
    return parse_value


def parse(argv: list[str]) -> argparse.Namespace:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="checkpoints and loss.jsonl go here")
    ap.add_argument("--steps", type=at_least(1), default=60)
    ap.add_argument("--leave-at", type=at_least(1), default=20,
                    help="the step after which the third rank's agent is ended")
    ap.add_argument("--every", type=at_least(1), default=10, help="checkpoint interval")
    ap.add_argument("--seed", type=at_least(0), default=0)
    ap.add_argument("--agent-url", help="the ckpt-preempt agent's endpoint (rank 0 polls it)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not args.leave_at < args.steps:
        ap.error("--leave-at must be below --steps")
    return args


# ---------------------------------------------------------------------------- the launcher


def listening(port: int) -> bool | None:
    """Whether a socket listens on ``port`` (Linux's /proc/net/tcp and tcp6, read without
    connecting, so the store sees no stray client); None where neither can be read."""
    rows, read = [], False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                rows += f.read().splitlines()[1:]
            read = True
        except OSError:
            continue
    if not read:
        return None
    wanted = f":{port:04X}"
    return any(r.split()[1].endswith(wanted) and r.split()[3] == "0A" for r in rows)


def wait_for_store(port: int, agent: subprocess.Popen) -> None:
    """Until the first agent's c10d store listens: an agent started before that could host the
    store itself, and if it were the one the run ends, the store would go with it (seen under
    load, when starting torch took the first agent more than a second)."""
    end = time.monotonic() + STORE_TIMEOUT_SECONDS
    while time.monotonic() < end and agent.poll() is None:
        got = listening(port)
        if got is None:  # no /proc: the fixed pause this launcher used before
            time.sleep(STORE_FALLBACK_SECONDS)
            return
        if got:
            return
        time.sleep(0.2)


def launch(args: argparse.Namespace, argv: list[str]) -> int:
    run = Path(args.dir)
    try:
        (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"elastic.py: cannot use --dir {args.dir}: {e.strerror or e}", file=sys.stderr)
        return 2
    with contextlib.suppress(FileNotFoundError):
        (run / "checkpoints" / STOPPED_AT).unlink()  # a stop of an earlier run
    port = free_port()
    # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: each rendezvous round's rank 0 hosts a fresh store
    # for its workers. With the agent's shared store (torch's default) the keys of the round
    # before the shrink stay there, and a survivor could read a dead rank's address and hang
    # in gloo's connect; seen here in 1 of 3 runs on 2 loaded cores, and reported upstream as
    # pytorch/pytorch#135712 (restart counts are per agent, so they cannot scope the keys).
    env = {"OMP_NUM_THREADS": "1", **os.environ, SHARED_STORE_OFF: "1"}
    agents: list[subprocess.Popen] = []
    stopping: list[int] = []  # the signals the launcher got

    def forward(signum, _frame) -> None:  # the whole job is stopped: every rank saves
        stopping.append(signum)
        for a in agents:
            with contextlib.suppress(ProcessLookupError):
                a.send_signal(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, forward)
    for node in range(NODES):
        agents.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", f"--nnodes={MIN_NODES}:{NODES}",
             "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
             "--rdzv-id=elastic-demo", f"--rdzv-conf={RDZV_CONF}", "--max-restarts=3",
             "--monitor-interval=0.5", __file__, "--worker", *argv],
            env={**env, "CKPT_ELASTIC_NODE": str(node)}))
        if node == 0:
            wait_for_store(port, agents[0])  # the first agent hosts the store; others join it
    leaving = agents[-1]
    marker = run / f"left-at-{args.leave_at}"
    end = time.monotonic() + LEAVE_TIMEOUT_SECONDS
    while not marker.exists() and time.monotonic() < end and not stopping and all(
            a.poll() is None for a in agents):
        time.sleep(0.2)
    if stopping:
        return stopped(run, agents)
    if not marker.exists():
        for a in agents:
            a.terminate()
        print(f"elastic.py: step {args.leave_at} was not reached", file=sys.stderr)
        return 1
    print(f"launcher: ending node {NODES - 1}'s agent after step {args.leave_at} "
          "(the member the shrink takes)", flush=True)
    leaving.send_signal(signal.SIGTERM)
    leaving.wait()
    finish = time.monotonic() + FINISH_TIMEOUT_SECONDS
    try:
        codes = [a.wait(timeout=max(1.0, finish - time.monotonic())) for a in agents[:-1]]
    except subprocess.TimeoutExpired:
        for a in agents:
            a.terminate()
        print(f"elastic.py: the survivors did not finish within {FINISH_TIMEOUT_SECONDS} s of "
              "the shrink", file=sys.stderr)
        return 1
    if stopping:
        return stopped(run, agents)
    return 0 if all(c == 0 for c in codes) else 1


def stopped(run: Path, agents: list[subprocess.Popen]) -> int:
    """After SIGTERM to the launcher: 75 once every agent is gone and the checkpoint saved on
    the stop is the latest, else 143."""
    for a in agents:
        a.wait()
    ckpts = run / "checkpoints"
    try:
        saved = (ckpts / STOPPED_AT).read_text() == (ckpts / LATEST).read_text()
    except OSError:
        saved = False
    print(f"launcher: stopped, {'saved' if saved else 'without a new checkpoint'}", flush=True)
    return sdk.EXIT_CHECKPOINTED if saved else sdk.EXIT_NOT_SAVED


# ---------------------------------------------------------------------------- the workers


def worker(args: argparse.Namespace) -> int:
    # First, before torch's imports: from now on SIGTERM is a flag read at the end of a step.
    agent = sdk.Checkpointer(args.agent_url) if os.environ.get("RANK") == "0" and \
        args.agent_url else None
    stop = agent.install_stop_handler(STOP_SIGNALS) if agent is not None else \
        sdk.StopRequest().install(STOP_SIGNALS)

    import datetime

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    node = int(os.environ.get("CKPT_ELASTIC_NODE", "0"))
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1)))
    optim = torch.optim.Adam(model.parameters(), lr=0.01)
    teacher = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(args.seed + 1))
    ckpts = Path(args.dir) / "checkpoints"

    def batch(step: int):
        g = torch.Generator().manual_seed((args.seed * 1_000_003 + step) * 16 + rank)
        x = torch.randn(BATCH, FEATURES, generator=g)
        return x, 2 * torch.sin(x @ teacher / 4)

    def save(step: int) -> Path:
        model_sd, optim_sd = get_state_dict(model, optim)
        path = ckpts / f"step-{step:08d}"
        dcp.save({"model": model_sd, "optim": optim_sd, "step": torch.tensor(step)},
                 checkpoint_id=path)
        dist.barrier()  # every rank's shard is written before `latest` names it
        if rank == 0:
            sdk.fsync_tree(path)
            sdk.atomic_write(ckpts / LATEST, path.name)  # a kill mid-save leaves the previous
        return path

    step = 0
    if (ckpts / LATEST).exists():
        path = ckpts / (ckpts / LATEST).read_text().strip()
        model_sd, optim_sd = get_state_dict(model, optim)
        state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=path)  # resharded to this world size by DCP
        set_state_dict(model, optim, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        step = int(state["step"])
    if rank == 0:
        print(f"rank 0: world size {world}, training from step {step}", flush=True)
    losses = open(Path(args.dir) / "loss.jsonl", "a") if rank == 0 else None  # noqa: SIM115
    try:
        while step < args.steps:
            wanted = []
            if agent is not None:
                with contextlib.suppress(sdk.AgentUnavailable):
                    wanted = [e for e in agent.events() if e.state is sdk.State.REQUESTED]
                for e in wanted:  # a shrink names who leaves; everyone saves first
                    print(f"drain request {e.plan}: leaving {list(e.leaving) or 'all'}",
                          flush=True)
            x, y = batch(step)
            loss = torch.nn.functional.mse_loss(model(x), y)
            optim.zero_grad()
            loss.backward()
            optim.step()
            step += 1
            agreed = torch.tensor([loss.item(), float(bool(wanted)), float(bool(stop))],
                                  dtype=torch.float64)
            dist.all_reduce(agreed)
            if losses is not None:
                losses.write(json.dumps({"step": step, "loss": agreed[0].item() / world,
                                         "world": world}) + "\n")
                losses.flush()
            if agreed[1] > 0 or agreed[2] > 0 or step % args.every == 0 or step == args.leave_at:
                path = save(step)
                for e in wanted:
                    with contextlib.suppress(sdk.AgentUnavailable):
                        agent.done(e.plan)
                if agreed[2] > 0:  # someone got SIGTERM: this save was the stop's
                    if rank == 0:
                        sdk.atomic_write(ckpts / STOPPED_AT, path.name)
                        print(f"rank 0: saved on stop at step {step} in {path.name}",
                              flush=True)
                    if stop:
                        return agent.saved_on_stop() if agent is not None else \
                            sdk.EXIT_CHECKPOINTED
                    if agent is not None:  # a peer left; this rank trains on
                        with contextlib.suppress(sdk.AgentUnavailable):
                            agent.checkpointed()
            if step == args.leave_at and node == NODES - 1 and world == NODES:
                (Path(args.dir) / f"left-at-{step}").write_text("")  # the launcher's cue
                wait_until = time.monotonic() + LEAVE_TIMEOUT_SECONDS
                while not stop and time.monotonic() < wait_until:  # evicted here: SIGTERM
                    time.sleep(0.05)
    finally:
        if losses is not None:
            losses.close()
    if rank == 0:
        print(f"rank 0: finished at step {step} with world size {world}", flush=True)
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.worker:
        code = worker(args)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # as train.py: torch's threads can abort the interpreter's teardown
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
