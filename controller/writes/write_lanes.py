"""The write sequences of one reconcile pass, run side by side where they share no object.

A pass carries many plans one step further, and each step is a short sequence of API writes
(store the plan, Draining, Evicting, reserve the node, tolerate, nominate, evict, Events) that
must stay in order. Sent one plan after another, a burst of 100 plans waits on some 1,100 round
trips in a row. ``Lanes`` runs up to ``width`` sequences at once on a thread pool:

- a **task** is one plan's whole sequence (one call); its own steps stay in order;
- tasks that **touch a common object** (a pod, a node, a plan; see ``plan_objects``) run one
  after another, in the order they were submitted, so no two tasks ever write the same object
  at the same time and the pass does what the sequential pass would do for them. Plans made in
  one pass never share a pod or a node (each plan closes its nodes and victims to the next;
  ``reconcile._plan_queue``), so in practice only stored plans can share a lane;
- every task runs to the end, whatever another task raised: an exception is logged and counted
  by ``on_error``, except ``NotLeader``, which stops the pass: tasks not yet started are
  dropped, and the first ``NotLeader`` is raised again on the caller's thread when the batch
  closes (or at the next ``check``);
- ``width`` 1 runs every task at once on the caller's thread, exactly as before lanes.

The caller submits from one thread and closes the batch (``with Lanes(...) as lanes:``) before
it reads what the tasks wrote: the batch waits for every task it started. Batches may share one
``pool`` (``Lanes.pool(width)``), one batch at a time, so a pass starts no threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from ckpt_preempt.controller.core.config import MAX_WRITE_CONCURRENCY
from ckpt_preempt.controller.writes.actions import NotLeader
from ckpt_preempt.policies.lifecycle.plan_record import PlanRecord

log = logging.getLogger("ckpt_preempt.lanes")


def plan_objects(r: PlanRecord) -> frozenset[str]:
    """Every API object a step of plan ``r`` may write, or read to write: the plan itself, its
    preemptors and victims, and their nodes."""
    return frozenset({f"plan/{r.id}", *(f"pod/{pl.uid}" for pl in r.placements),
                      *(f"pod/{v.uid}" for v in r.victims),
                      *(f"node/{pl.node}" for pl in r.placements),
                      *(f"node/{v.node}" for v in r.victims if v.node)})


class Lanes:
    """One batch of tasks; see the module docstring."""

    def __init__(self, width: int, *, on_error: Callable[[], None] = lambda: None,
                 name: str = "writes", pool: ThreadPoolExecutor | None = None) -> None:
        if not 1 <= width <= MAX_WRITE_CONCURRENCY:
            raise ValueError(f"width must be 1..{MAX_WRITE_CONCURRENCY}, not {width}")
        self.width, self.name, self._on_error = width, name, on_error
        self._pool, self._own_pool = pool, pool is None
        self._last: dict[str, Future] = {}  # object -> the last task submitted that touches it
        self._futures: list[Future] = []
        self._stop = threading.Event()
        self._not_leader: NotLeader | None = None
        self._lock = threading.Lock()

    @staticmethod
    def pool(width: int, name: str = "writes") -> ThreadPoolExecutor:
        """A pool for batches of this width, to be reused one batch at a time."""
        return ThreadPoolExecutor(width, thread_name_prefix=f"ckpt-{name}")

    def __enter__(self) -> Lanes:
        return self

    def __exit__(self, kind, value, tb) -> None:
        self.close(raise_not_leader=kind is None)

    def check(self) -> None:
        """Raise the ``NotLeader`` a task met, if any (the caller stops submitting)."""
        if self._not_leader is not None:
            raise self._not_leader

    def submit(self, touches: Iterable[str], fn: Callable[..., object], *args) -> None:
        self.check()
        if self.width == 1:
            self._run(fn, args)
            self.check()
            return
        if self._pool is None:
            self._pool = self.pool(self.width, self.name)
        keys = set(touches)
        before = {self._last[k] for k in keys if k in self._last}
        f = self._pool.submit(self._after, before, fn, args)
        for k in keys:
            self._last[k] = f
        self._futures.append(f)

    def close(self, *, raise_not_leader: bool = True) -> None:
        """Wait for every task started; drop those not started once a task met NotLeader."""
        wait(self._futures)
        self._futures.clear()
        if self._pool is not None and self._own_pool:
            self._pool.shutdown(wait=True)
            self._pool = None
        if raise_not_leader:
            self.check()

    # ------------------------------------------------------------------------- in a worker
    def _after(self, before: set[Future], fn: Callable[..., object], args: tuple) -> None:
        # Every task in `before` was submitted earlier to the same FIFO pool, which runs one
        # batch at a time, so it is running or finished by now: waiting cannot deadlock.
        wait(before)
        if self._stop.is_set():
            return
        self._run(fn, args)

    def _run(self, fn: Callable[..., object], args: tuple) -> None:
        try:
            fn(*args)
        except NotLeader as e:
            with self._lock:
                if self._not_leader is None:
                    self._not_leader = e
            self._stop.set()
        except Exception:
            log.exception("%s: a task failed", self.name)
            self._on_error()
