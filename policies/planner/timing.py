"""When to preempt: evict now, right after a victim's next periodic checkpoint, or once it ends.

A plan's victims are chosen first (``policies.planner.preemption``); this module then decides when
the plan evicts them. Two predictions, both from what the pod declares
(``policies.model.annotations``):

- a periodic checkpointer (``checkpoint-interval`` and a reported ``last-checkpoint`` L) next
  checkpoints at L + interval; a pod whose report is already overdue (L + interval + margin is
  past) is predicted nothing;
- a pod with a declared end (``expected-end``, or its start + ``activeDeadlineSeconds``) ends
  then.

Either is usable when it is seen by the drain cap: expected time + ``margin`` (the lag of the
report, or of the pod's end reaching the watch) no later than now + ``max_wait``. Waiting until
time T costs: each victim seen checkpointed by T loses its work since that checkpoint plus its
restart; each one seen ended loses nothing (it is not evicted and does not restart); every other
victim runs until T and loses what it would have lost then (a drained on-request victim: its
checkpoint time, as now); and the preemptor waits, its GPUs × (T − now) charged as delay. The
candidate times are the plan's drain deadline and every usable prediction after it; the least
expected total wins, ties to the earliest, and "no wait" (evict at the drain deadline, as before)
unless a wait is cheaper.

Victims are chosen knowing their ends (``end_rate``, the planner's ``end_aware``): a pod whose
declared end is seen within the cap is charged, when victims are chosen, the lesser of its loss
and the preemptor's wait for it (the preemptor's GPUs × the wait), since a pod that ends loses
nothing. That charge is off for a preemptor when the pods queued at its priority or above, with
it, ask for more GPUs than the ends within the cap free: each end would go to one of them anyway.

Predictions are never trusted beyond the deadline: the controller evicts whatever still runs at
``Timing.deadline`` and the victim is charged as it would have been (``Plan.lost_gpu_seconds``
stays the charge of evicting at once), so a lying or late annotation costs the preemptor at most
the wait. A declared end can make only the pod that declares it cheaper to choose (more likely
a victim, never less), and a false one is found out at the deadline, where the pod is evicted
with all it had not saved.

``wait_for_ends`` is the ``wait-then-evict`` baseline's rule: kube-default's victims, waiting up
to a fixed time for the ones that declare an end, whatever the wait costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ckpt_preempt.policies.model.model import Plan, Pod, Timing, Victim, VictimWait, When
from ckpt_preempt.policies.model.snapshot import Snapshot

# Assumption: how late a checkpoint's last-checkpoint report, or a pod's end, is seen after it
# happens (one annotation write, or kubelet's status update, then the watch); the simulator's
# defaults are a 30 s report lag with up to 30 s of error (policies.sim.costs).
MARGIN_SECONDS = 60.0


def next_checkpoint(pod: Pod, now: float, margin: float) -> float | None:
    """When a periodic checkpointer's next checkpoint is due, or None when it declares no
    interval, reports no valid checkpoint, or its due checkpoint is overdue by ``margin``."""
    if pod.checkpoint_interval is None or pod.last_checkpoint is None \
            or pod.checkpoint_malformed:
        return None
    due = pod.last_checkpoint + pod.checkpoint_interval
    return due if due + margin > now else None


def end_seen(pod: Pod, now: float, *, margin: float, max_wait: float) -> float | None:
    """When ``pod``'s declared end is seen (its end + ``margin``), if that is after now and no
    later than now + ``max_wait``; else None."""
    end = pod.expected_end
    if end is None or not now < end + margin <= now + max_wait:
        return None
    return end + margin


def end_rate(snapshot: Snapshot, preemptor: Sequence[Pod], priority: int, *, margin: float,
             max_wait: float) -> float | None:
    """The end-aware charge's rate (the preemptor's GPUs, charged per second of its wait for a
    victim's end), or None when the charge is off for this preemptor: no pod below
    ``priority`` has its end seen within ``max_wait`` (the charge would change no cost, and
    the plan shares the caches of plans without it, ``preemption.warm``'s among them), or the
    pods that outrank what ends (the preemptor and ``Snapshot.queued_gpus``) ask for more GPUs
    than those ends free, so an end taken here is an end another queued pod would have had.
    Reads ``Snapshot.declared_ends`` only, not every pod."""
    ending = sum(p.gpu_share for p in snapshot.declared_ends
                 if p.priority < priority
                 and end_seen(p, snapshot.now, margin=margin, max_wait=max_wait) is not None)
    if ending <= 0:
        return None
    own = sum(p.gpu_share for p in preemptor)
    if snapshot.queued_gpus > 0 and own + snapshot.queued_gpus > ending:
        return None
    return own


def queued_gpus(asks: Sequence[tuple[int, float]]) -> list[float]:
    """For each (priority, GPUs) ask of a pending queue, the GPUs the other asks at its priority
    or above add up to (``Snapshot.queued_gpus``); O(n log n) for a queue of n."""
    total: dict[int, float] = {}
    for prio, gpus in asks:
        total[prio] = total.get(prio, 0.0) + gpus
    at_or_above, running = {}, 0.0
    for prio in sorted(total, reverse=True):
        running += total[prio]
        at_or_above[prio] = running
    return [at_or_above[prio] - gpus for prio, gpus in asks]


def prediction(pod: Pod, now: float, *, margin: float, max_wait: float,
               ends_only: bool = False) -> VictimWait | None:
    """The earliest usable prediction for ``pod`` (seen by now + ``max_wait``), an end first on
    a tie; None when there is none."""
    found = []
    if end_seen(pod, now, margin=margin, max_wait=max_wait) is not None:
        found.append((pod.expected_end, 0, When.AFTER_END))
    ckpt = None if ends_only else next_checkpoint(pod, now, margin)
    if ckpt is not None:
        found.append((ckpt, 1, When.AFTER_CHECKPOINT))
    usable = [f for f in found if f[0] + margin <= now + max_wait]
    if not usable:
        return None
    at, _, when = min(usable)
    return VictimWait(uid=pod.uid, when=when, expected=at)


def _loss(v: Victim, pod: Pod, wait: VictimWait | None, until: float, now: float,
          margin: float, restart_seconds: float) -> float:
    """Expected GPU-seconds ``v`` loses when the plan evicts at ``until``."""
    share = pod.gpu_share
    if wait is not None and wait.expected + margin <= until:
        if wait.when is When.AFTER_END:
            return 0.0
        return share * (until - wait.expected + restart_seconds)
    return v.lost_gpu_seconds + (0.0 if v.drain else share * (until - now))


def _total(plan: Plan, pods: dict[str, Pod], waits: dict[str, VictimWait], until: float,
           now: float, margin: float, restart_seconds: float, preemptor_share: float
           ) -> tuple[float, float]:
    lost = sum(_loss(v, pods[v.uid], waits.get(v.uid), until, now, margin, restart_seconds)
               for v in plan.victims)
    delay = preemptor_share * (until - now)
    return lost + delay, delay


def _hours(gpu_seconds: float) -> str:
    return f"{gpu_seconds / 3600:.2f} GPU-h"


def decide(plan: Plan, snapshot: Snapshot, preemptor: Sequence[Pod], *, max_wait: float,
           margin: float = MARGIN_SECONDS, restart_seconds: float = 0.0,
           ends_only: bool = False, always_wait: bool = False) -> Plan:
    """``plan`` with its ``timing`` decided (and its drain deadline moved to the chosen time).

    ``ends_only``: consider declared ends only; ``always_wait``: wait for the latest usable
    prediction whatever it costs (the ``wait-then-evict`` baseline). Plans without victims
    are returned unchanged."""
    if not plan.feasible or not plan.victim_groups:
        return plan
    now = snapshot.now
    pods = {v.uid: snapshot.pod_on(v.node, v.uid) for v in plan.victims}
    share = sum(p.gpu_share for p in preemptor)
    drained_until = max(now, plan.drain_deadline if plan.drain_deadline is not None else now)
    # a drained victim checkpoints on request already: only its end can save more
    found = (prediction(pods[v.uid], now, margin=margin, max_wait=max_wait,
                        ends_only=ends_only or v.drain) for v in plan.victims)
    waits = {w.uid: w for w in found if w is not None}
    args = (now, margin, restart_seconds, share)
    base, base_delay = _total(plan, pods, {}, drained_until, *args)
    best = (base, drained_until, base_delay, ())
    times = sorted({max(drained_until, w.expected + margin) for w in waits.values()})
    for until in times:
        covered = tuple(w for w in waits.values() if w.expected + margin <= until)
        total, delay = _total(plan, pods, waits, until, *args)
        if always_wait or total < best[0]:
            best = (total, until, delay, covered)
    total, until, delay, covered = best
    if not covered:
        why = ("no victim declares a checkpoint or end within the drain cap" if not waits else
               f"waiting for {len(waits)} predicted checkpoint(s)/end(s) would cost more")
        timing = Timing(when=When.NOW, deadline=until, expected_gpu_seconds=total,
                        now_gpu_seconds=base, delay_gpu_seconds=delay, reason=why)
        return replace(plan, timing=timing)
    binding = max(covered, key=lambda w: (w.expected, w.uid))
    kinds = ", ".join(f"{sum(w.when is k for w in covered)} {k.value}"
                      for k in When if any(w.when is k for w in covered))
    why = (f"evict at now + {until - now:.0f}s, after the predicted checkpoint/end of "
           f"{len(covered)} victim(s) ({kinds}): expected loss {_hours(total)} "
           f"(incl. {_hours(delay)} of preemptor wait) against {_hours(base)} without waiting; "
           "whatever still runs then is evicted")
    timing = Timing(when=binding.when, deadline=until, waits=covered,
                    expected_gpu_seconds=total, now_gpu_seconds=base, delay_gpu_seconds=delay,
                    reason=why)
    return replace(plan, timing=timing, drain_deadline=until,
                   reason=f"{plan.reason}; timing: {binding.when.value}")


def wait_for_ends(plan: Plan, snapshot: Snapshot, preemptor: Sequence[Pod], *,
                  max_wait: float, margin: float = MARGIN_SECONDS, policy: str) -> Plan:
    """The ``wait-then-evict`` rule: ``plan``'s victims, evicted once every one of them that
    declares an end within ``max_wait`` has ended (the rest run until then)."""
    timed = decide(plan, snapshot, preemptor, max_wait=max_wait, margin=margin,
                   ends_only=True, always_wait=True)
    return replace(timed, policy=policy)
