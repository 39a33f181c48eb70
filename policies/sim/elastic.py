"""Elastic jobs in the simulator: a shrink stops some members, the job runs on, and grows back.

An elastic job (``Job.min_members``; the training scenario draws them, ``policies.sim.scenarios``)
that a plan shrinks (``VictimGroup.shrink``, ``policies.planner.shrink``) loses no work: its leaving
members stop when the plan's victims do (``release``), and the rest re-form for
``SimConfig.rendezvous_seconds`` (every GPU of the job, leaving ones included, idles that long:
charged as restart time, as the planner charges it) and then train on at reduced speed.

Assumption (labelled, not measured): throughput is proportional to workers, so a job running k of
its n members advances k/n as fast (data-parallel training at a fixed per-worker batch; it
ignores the better scaling of fewer workers and the global-batch change).

Grow back: once no high-priority job waits, a shrunken job whose missing members fit again takes
them back (placed as the job's members would be) and re-forms once more, paying the rendezvous
on all its GPUs; from then on it runs at full speed. It grows back only whole (all missing
members at once): elastic frameworks re-form on any count above the minimum, but one re-form per
change is the cheaper policy for a job that lost a node to a preemptor.

This is a mixin of ``policies.sim.engine.Simulation`` (like ``PlannerView``); it reads and
updates the engine's job states, capacity and ledger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ckpt_preempt.policies.sim.engine import JobState


class ElasticJobs:
    """``_shrink`` and ``_grow_back`` over the engine's state."""

    def _progress(self, js: JobState, at: float) -> None:
        """Fold the work done by ``at`` into ``remaining``, so the job can change speed then."""
        js.remaining = max(1.0, js.remaining - max(0.0, at - js.origin) * js.speed)

    def _shrinks(self, js: JobState, named: set[str], leaving: set[str], t: float,
                 release: float, measured: bool) -> bool:
        """Shrink ``js`` when the plan's victims of it (``named``) are all of a shrink
        (``leaving``) and leave at least its minimum running; False: it is no shrink."""
        running = len(js.pods)
        if not named or not named <= leaving or running - len(named) < (js.job.min_members or 1):
            return False
        self._shrink(js, named, t, release, measured)
        self.counts["victims"] += measured * len(named)
        return True

    def _shrink(self, js: JobState, leaving: set[str], t: float, release: float,
                measured: bool) -> None:
        """Stop ``leaving`` (pod uids) of running job ``js`` at ``release`` (plan made at
        ``t``); the rest re-form and train on at reduced speed."""
        cfg = self.cfg
        lo, hi = self.w.warmup, self.w.window
        held = max(0.0, min(release, hi) - max(js.start, lo))
        stay = []
        for pod, i in js.pods:
            if pod.uid in leaving:
                self.cap.give(i, pod.requests)
                self._hold(i, pod, -1)
                self.busy += pod.gpus * held
            else:
                stay.append((pod, i))
        gpus = sum(p.gpus for p, _ in js.pods)  # every GPU waits for the re-form
        self._progress(js, release)
        js.pods = stay
        js.models = tuple(p for p, _ in stay)
        js.speed = len(stay) / len(js.job.members)
        js.origin = release + cfg.rendezvous_seconds
        js.token += 1
        self.ledger.evicted(t, 0.0, gpus * cfg.rendezvous_seconds)
        self.counts["shrinks"] += measured
        self._push(js.origin + js.remaining / js.speed, "finish", (js, js.token))

    def _grow_back(self) -> None:
        """Give shrunken jobs their missing members back where they fit, while no
        high-priority job waits."""
        if self.high:
            return
        shrunken = [js for js in self.running.values() if js.speed < 1.0]
        for js in sorted(shrunken, key=lambda s: s.job.id):
            have = {int(p.uid.rsplit("-", 1)[1]) for p, _ in js.pods}
            missing = tuple(k for k in range(len(js.job.members)) if k not in have)
            # one tuple per job and missing set, so the capacity remembers a failed ask
            ask = self.missing_asks.setdefault((js.job.id, missing), tuple(
                js.job.members[k] for k in missing))
            placed = self.cap.place(ask)
            if placed is None:
                continue
            lo, hi = self.w.warmup, self.w.window
            for k, i in zip(missing, placed, strict=True):
                pod = self._model(js, k, self.nodes[i].name, self.t)
                js.pods.append((pod, i))
                self._hold(i, pod, +1)
                # the engine counts a job's pods busy from its start: not these, before now
                self.busy -= pod.gpus * max(0.0, min(self.t, hi) - max(js.start, lo))
            self._progress(js, self.t)
            js.pods.sort(key=lambda x: x[0].uid)
            js.models = tuple(p for p, _ in js.pods)
            js.speed = 1.0
            js.origin = self.t + self.cfg.rendezvous_seconds
            js.token += 1
            self.ledger.restarted(self.t, js.job.gpus * self.cfg.rendezvous_seconds)
            self.counts["grown_back"] += self.ledger.measured(self.t)
            self._push(js.origin + js.remaining, "finish", (js, js.token))
