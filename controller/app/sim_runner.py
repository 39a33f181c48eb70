"""Runs a ``simulate`` cell on worker processes, one (seed, policy) replay per task, and tells
the person waiting how far it got.

Each replay is independent and deterministic, so running them side by side changes nothing in
the results but the measured plan latency (``policies.sim.experiment.run_seed`` documents the
pattern). Progress goes to stderr:

- on a terminal, one bar over every replay, fed by each worker's own progress through a queue,
  so it moves as the replays do;
- otherwise (a pipe, a CI log), one start line (cell, jobs, nodes, policies, processes and a
  rough expected time) and one line per replay as it ends, so a log shows the run is alive;
- with ``--no-progress``, nothing.

The expected time is the fit below for one replay, times the replays, over the processes: a
guess to plan a coffee by, not a promise (the floor cuts come on top).
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import os
import queue
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ckpt_preempt.controller.app import trace_files
from ckpt_preempt.policies.sim import experiment, floor_cuts

# one replay's CPU-seconds, fitted to openb/stress in the realistic world on a 2-core machine
# (2026-12-07): about 1.9 s at scale 0.1 (7,483 jobs), 42 s at 0.25 (19,143 jobs; the mean of
# eight policies, which differ by up to 2x); the work grows with the jobs and with the pods
# each plan looks at
REPLAY_SECONDS_AT_1000_JOBS = 0.0035
REPLAY_SECONDS_GROWTH = 3.13  # the exponent of jobs / 1000
REPLAY_OVERHEAD_SECONDS = 1.0  # building the workload and starting the replay
POLL_SECONDS = 0.2  # how often the parent reads the workers' progress
# workers fork where they can: they start at once and share the parent's parsed trace
_CONTEXT = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")

_progress_queue: multiprocessing.Queue | None = None  # set in each worker (``_init``)


@dataclass(frozen=True, kw_only=True)
class Trace:
    """Where a worker loads the trace from (the parsed trace is not sent to it)."""

    workload: str
    pods: Path | None = None
    nodes: Path | None = None


@functools.cache
def load_trace(trace: Trace):
    """The trace's pods and nodes, parsed once per process (ValueError: one line)."""
    return trace_files.load(trace.workload, trace.pods, trace.nodes)


def _init(progress_queue: multiprocessing.Queue | None) -> None:
    global _progress_queue
    _progress_queue = progress_queue


def _replay(cell: experiment.Cell, seed: int, policy: str, trace: Trace
            ) -> tuple[experiment.Run, float]:
    """One policy on one seed (in a worker), and its seconds."""
    pods, nodes = load_trace(trace)
    q = _progress_queue
    tick = (lambda _policy, f: q.put((seed, policy, f))) if q is not None else None
    started = time.perf_counter()
    [run] = experiment.run_seed(cell, seed, [policy], pods, nodes, clock=time.perf_counter,
                                progress=tick)
    return run, time.perf_counter() - started


@functools.cache
def _built(cell: experiment.Cell, seed: int, trace: Trace):
    pods, nodes = load_trace(trace)
    return experiment.build(cell, seed, pods, nodes)


def _cut(cell: experiment.Cell, seed: int, k: int, trace: Trace) -> floor_cuts.CutFloor:
    """Cut ``k`` of the cell, taken from seed ``seed``'s workload, and its floor."""
    return floor_cuts.floor_of(*_built(cell, seed, trace), cell.config,
                               floor_cuts.cut_key(cell.label, seed, k))


def floor_summary(cell: experiment.Cell, seeds: Sequence[int], policies: Sequence[str],
                  cuts: int, trace: Trace, *, processes: int
                  ) -> floor_cuts.FloorSummary | None:
    """Each policy's loss ÷ the hindsight floor on ``cuts`` seeded small cuts of the cell (cut
    k from the run's seeds in turn), computed now on ``processes`` workers; None when ``cuts``
    is 0."""
    if cuts == 0:
        return None
    used = list(seeds[:cuts])
    tasks = [(used[(k - 1) % len(used)], k) for k in range(1, cuts + 1)]
    if min(processes, len(tasks)) <= 1:
        done = [_cut(cell, seed, k, trace) for seed, k in tasks]
    else:
        with ProcessPoolExecutor(max_workers=processes, mp_context=_CONTEXT) as pool:
            done = list(pool.map(_cut, itertools.repeat(cell), [seed for seed, _ in tasks],
                                 [k for _, k in tasks], itertools.repeat(trace)))
    return floor_cuts.summarise(cell.label, used, done, policies)


def _count(n: int, stem: str, one: str, many: str) -> str:
    return f"{n} {stem}{one if n == 1 else many}"


def expected_seconds(jobs: int, replays: int, processes: int) -> float:
    one = REPLAY_OVERHEAD_SECONDS + REPLAY_SECONDS_AT_1000_JOBS * (jobs / 1000) \
        ** REPLAY_SECONDS_GROWTH
    return one * replays / max(1, processes)


class Progress:
    """What the person sees; ``bar`` is a terminal's, else one line per event."""

    def __init__(self, total: int, out: TextIO, bar: bool) -> None:
        self.total, self.out, self.done = total, out, 0
        self.fractions: dict[tuple[int, str], float] = {}
        self.bar = None
        if bar:
            from tqdm import tqdm

            self.bar = tqdm(total=100 * total, unit="%", file=out,
                            bar_format="{l_bar}{bar}| {elapsed} elapsed, {remaining} left")

    def start(self, line: str) -> None:
        if self.bar is None:
            print(line, file=self.out, flush=True)
        else:
            self.bar.write(line, file=self.out)

    def tick(self, seed: int, policy: str, fraction: float) -> None:
        if self.bar is None:
            return
        key = (seed, policy)
        before = self.fractions.get(key, 0.0)
        self.fractions[key] = max(before, fraction)
        self.bar.update(round(100 * self.fractions[key]) - round(100 * before))

    def finished(self, run: experiment.Run, seconds: float) -> None:
        self.done += 1
        self.tick(run.seed, run.policy, 1.0)
        if self.bar is None:
            print(f"simulate: [{self.done}/{self.total}] {run.policy}, seed {run.seed}: "
                  f"{run.result.lost_gpu_hours:.2f} GPU-h lost, {seconds:.1f} s", file=self.out,
                  flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_cell(cell: experiment.Cell, seeds: Sequence[int], policies: Sequence[str],
             trace: Trace, *, processes: int, show: bool, out: TextIO = sys.stderr,
             terminal: Callable[[], bool] | None = None) -> experiment.CellResult:
    """Every (seed, policy) replay on ``processes`` workers (in this process when 1), then the
    summary, with runs in seed then ``policies`` order, as ``experiment.run_cell`` gives them."""
    tasks = [(s, p) for s in seeds for p in policies]
    processes = max(1, min(processes, len(tasks)))
    progress = None
    if show:
        on_terminal = terminal() if terminal is not None else out.isatty()
        progress = Progress(len(tasks), out, bar=on_terminal)
        pods, nodes = load_trace(trace)
        w, used = experiment.build(cell, seeds[0], pods, nodes)
        guess = expected_seconds(len(w.jobs), len(tasks), processes)
        progress.start(
            f"simulate: {cell.label}, seeds {seeds[0]}..{seeds[-1]}, {len(w.jobs):,} jobs on "
            f"{len(used)} nodes (seed {seeds[0]}), {_count(len(policies), 'polic', 'y', 'ies')} "
            f"({', '.join(policies)}), {_count(processes, 'process', '', 'es')}; "
            f"expected about {guess:.0f} s")
    runs: dict[tuple[int, str], experiment.Run] = {}
    try:
        if processes == 1:
            _init(None)
            for seed, policy in tasks:
                run, seconds = _replay(cell, seed, policy, trace)
                runs[seed, policy] = run
                if progress:
                    progress.finished(run, seconds)
        else:
            _run_pool(cell, tasks, trace, processes, progress, runs)
    finally:
        if progress:
            progress.close()
    ordered = [runs[task] for task in tasks]
    return experiment.summarise(cell, ordered)


def _run_pool(cell: experiment.Cell, tasks: list[tuple[int, str]], trace: Trace,
              processes: int, progress: Progress | None,
              runs: dict[tuple[int, str], experiment.Run]) -> None:
    ticks = _CONTEXT.Queue() if progress is not None and progress.bar is not None else None
    with ProcessPoolExecutor(max_workers=processes, mp_context=_CONTEXT, initializer=_init,
                             initargs=(ticks,)) as pool:
        pending: dict[Future, tuple[int, str]] = {
            pool.submit(_replay, cell, seed, policy, trace): (seed, policy)
            for seed, policy in tasks}
        while pending:
            done, _ = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
            _drain(ticks, progress)
            for fut in done:
                task = pending.pop(fut)
                run, seconds = fut.result()
                runs[task] = run
                if progress:
                    progress.finished(run, seconds)


def _drain(ticks: multiprocessing.Queue | None, progress: Progress | None) -> None:
    if ticks is None or progress is None:
        return
    while True:
        try:
            seed, policy, fraction = ticks.get_nowait()
        except queue.Empty:
            return
        progress.tick(seed, policy, fraction)
