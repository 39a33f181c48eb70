"""The disruption protocol's model: which nodes are disrupted when, and when each pod stops.

Evictions ckpt-preempt does not make itself (issue 23): maintenance drains of whole nodes, spot
reclaims with a 30 s or a 120 s notice, and autoscaler scale-down of under-used nodes. Each one
is compared in three worlds on the same seed:

- ``no-gate``: the Eviction is allowed at once; the pod keeps only its last periodic checkpoint.
- ``gate``: the eviction gate refuses the first Eviction of a pod that can checkpoint on request
  (an ``on-request`` job that reports), asks it to checkpoint, and lets the Eviction through on
  its ack (seen ``report_lag_seconds`` after the checkpoint ends) or at its deadline: its
  ``checkpoint-seconds`` capped by the admin's maximum (``SimConfig.max_checkpoint_seconds``).
  A spot node vanishes at the end of its notice whatever the gate says: a checkpoint that does
  not end by then is lost.
- ``gate+warning``: the request goes out at the signal that precedes the Eviction (the cordon
  before a drain, the spot notice, the autoscaler's taint). The pod trains on after its
  checkpoint; when the Eviction comes, the gate lets it through at once if the work since that
  request is no more than what asking again would lose, else asks again. (An idealised gate:
  the real one, ``policies.disruption.eviction_gate``, cannot know how long the new checkpoint would
  take, and asks again once the acknowledged request is older than the pod's
  checkpoint-seconds and ``ACK_RETRY_SLACK_SECONDS``.)

Which Evictions reach the gate (a modelling choice, stated): a maintenance drain is
``kubectl drain`` ``maintenance_lead_seconds`` after the cordon; a 120 s spot notice (AWS) is
drained at once by a termination handler (Evictions at the notice); a 30 s notice (GCP) is met
by the kubelet's graceful node shutdown, which kills pods at the notice's end without any
Eviction, so the gate alone cannot help there, and only the early warning (the termination
taint) asks for a checkpoint; the autoscaler drains ``autoscaler_lead_seconds`` after its
``ToBeDeletedByClusterAutoscaler`` taint.

What is not modelled: pods that checkpoint only periodically (or silently, or never) are not
held by the gate (it cannot ask them), so they lose the same in every world; a gate that waits
for a periodic checkpoint inside the window is left out, and with it the harsh world's lies
(a lie only moves what the planner is shown). A silent on-request job cannot be held either: its
ack is never seen. Elastic jobs stop whole. The autoscaler never gives up on a held pod
(cluster-autoscaler's ``max-pod-eviction-time`` is not modelled).

Everything here is pure and seeded: ``schedule`` draws the fixed disruptions (maintenance and
spot) from ``random.Random`` keyed by the seed; ``stop`` is arithmetic.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from ckpt_preempt.policies.sim.costs import DrainOutcome

DAY = 86_400.0
WORLDS = ("no-gate", "gate", "gate+warning")
MAINTENANCE, AUTOSCALER = "maintenance", "autoscaler"
SPOT_SHORT, SPOT_LONG = "spot-30s", "spot-120s"
KINDS = (MAINTENANCE, SPOT_SHORT, SPOT_LONG, AUTOSCALER)
# GCP: "30 seconds for Spot VMs" between ACPI G2 Soft Off and G3 Mechanical Off (Compute Engine
# API, Scheduling.skipGuestOsShutdown,
# https://pub.dev/documentation/googleapis/latest/compute_v1/Scheduling/skipGuestOsShutdown.html)
SPOT_SHORT_NOTICE_SECONDS = 30.0
# AWS: "a warning that is issued two minutes before Amazon EC2 stops or terminates your Spot
# Instance" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html)
SPOT_LONG_NOTICE_SECONDS = 120.0


@dataclass(frozen=True, kw_only=True)
class DisruptionParams:
    """Rates and lead times. Every default is an assumption unless a source is given."""

    maintenance_per_node_day: float = 0.1  # assumption: each node drained every ~10 days
    maintenance_lead_seconds: float = 600.0  # assumption: cordon 10 min before kubectl drain
    maintenance_out_seconds: float = 3600.0  # assumption: node back 1 h after its drain ends
    spot_share: float = 0.5  # assumption: share of nodes that are spot/preemptible
    spot_per_node_day: float = 0.2  # assumption: reclaims per spot node per day
    spot_short_share: float = 0.5  # assumption: of reclaims, those with the 30 s notice
    spot_out_seconds: float = 1800.0  # assumption: a replacement node joins 30 min later
    # cluster-autoscaler defaults: a node is unneeded below 50 % of its allocatable requested
    # (--scale-down-utilization-threshold 0.5) for 10 min (--scale-down-unneeded-time), FAQ:
    # https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/FAQ.md; here GPUs
    # requested, checked every 10 min and unneeded at two checks in a row
    autoscaler_threshold: float = 0.5
    autoscaler_check_seconds: float = 600.0
    autoscaler_lead_seconds: float = 0.0  # assumption: the taint comes right before the drain
    autoscaler_out_seconds: float = 3600.0  # assumption: scaled back up 1 h later

    def lead(self, kind: str) -> float:
        """Seconds from the signal to the first Eviction (the notice's end for a 30 s spot
        reclaim, where no Eviction comes: see the module docstring)."""
        return {MAINTENANCE: self.maintenance_lead_seconds, SPOT_SHORT: SPOT_SHORT_NOTICE_SECONDS,
                SPOT_LONG: 0.0, AUTOSCALER: self.autoscaler_lead_seconds}[kind]

    def out_seconds(self, kind: str) -> float:
        return {MAINTENANCE: self.maintenance_out_seconds, AUTOSCALER: self.autoscaler_out_seconds
                }.get(kind, self.spot_out_seconds)


DEFAULT_PARAMS = DisruptionParams()


@dataclass(frozen=True, kw_only=True)
class Disruption:
    """One node disrupted: ``signal`` (cordon, notice or taint) precedes ``eviction``; a spot
    node vanishes at ``hard_end`` (``math.inf`` for drains)."""

    index: int  # unique in the run
    kind: str
    node: int
    signal: float
    eviction: float
    hard_end: float = math.inf

    @property
    def gated(self) -> bool:
        """Whether an Eviction reaches the gate before the node goes (not on a 30 s notice)."""
        return self.kind != SPOT_SHORT


def disruption(index: int, kind: str, node: int, signal: float,
               params: DisruptionParams) -> Disruption:
    notice = {SPOT_SHORT: SPOT_SHORT_NOTICE_SECONDS, SPOT_LONG: SPOT_LONG_NOTICE_SECONDS}
    return Disruption(index=index, kind=kind, node=node, signal=signal,
                      eviction=signal + params.lead(kind),
                      hard_end=signal + notice[kind] if kind in notice else math.inf)


def spot_nodes(seed: int, nodes: int, share: float) -> frozenset[int]:
    rng = random.Random(f"spot-nodes-{seed}")
    return frozenset(i for i in range(nodes) if rng.random() < share)


def schedule(*, seed: int, nodes: int, start: float, end: float,
             params: DisruptionParams) -> tuple[Disruption, ...]:
    """The fixed disruptions (maintenance, spot) of one run, by signal time: Poisson per node
    in [start, end), signals leaving room for the lead before ``end``."""
    rng = random.Random(f"disruptions-{seed}")
    spot = spot_nodes(seed, nodes, params.spot_share)
    drawn: list[tuple[float, str, int]] = []
    for i in range(nodes):
        rates = [(MAINTENANCE, params.maintenance_per_node_day)]
        if i in spot:
            rates.append(("spot", params.spot_per_node_day))
        for kind, per_day in rates:
            if per_day <= 0:
                continue
            t = start
            while True:
                t += rng.expovariate(per_day / DAY)
                if t >= end:
                    break
                k = kind
                if kind == "spot":
                    k = SPOT_SHORT if rng.random() < params.spot_short_share else SPOT_LONG
                if t + params.lead(k) < end:
                    drawn.append((t, k, i))
    drawn.sort()
    return tuple(disruption(n, k, i, t, params) for n, (t, k, i) in enumerate(drawn))


@dataclass(frozen=True, kw_only=True)
class Pod:
    """What ``stop`` needs of one job on a disrupted node."""

    can_request: bool  # on-request and its ack is seen (not silent)
    estimate: float  # its checkpoint-seconds
    last_checkpoint: Callable[[float], float]  # its last periodic checkpoint by a time


@dataclass(frozen=True, kw_only=True)
class Gate:
    cap_seconds: float  # the admin's maximum hold
    ack_lag_seconds: float  # a checkpoint's ack is seen this long after it ends


@dataclass(frozen=True, kw_only=True)
class Stop:
    """When a pod stops and from what state it restarts: it loses ``at - saved`` of work."""

    at: float
    saved: float  # the time its kept state was taken (a checkpoint's request, or periodic)
    requests: int  # checkpoint requests sent to it

    @property
    def lost_seconds(self) -> float:
        return max(0.0, self.at - self.saved)


def _plain(pod: Pod, at: float) -> Stop:
    return Stop(at=at, saved=min(at, pod.last_checkpoint(at)), requests=0)


def _held(d: Disruption, pod: Pod, gate: Gate, request: float, out: DrainOutcome,
          not_before: float) -> Stop:
    """A checkpoint requested at ``request``; the gate releases the pod on its ack or at the
    deadline, never before ``not_before`` (the Eviction) and never after the node is gone."""
    deadline = request + min(pod.estimate, gate.cap_seconds)
    done = request + out.seconds
    if out.saved and done <= min(deadline, d.hard_end):  # a checkpoint past either is lost
        at = max(not_before, min(done + gate.ack_lag_seconds, deadline))
        return Stop(at=min(at, d.hard_end), saved=request, requests=1)
    return _plain(pod, min(max(not_before, deadline), d.hard_end))


def stop(world: str, d: Disruption, pod: Pod, gate: Gate, out: DrainOutcome) -> Stop:
    """When ``pod`` stops for disruption ``d`` in ``world``; ``out``: its checkpoint's seeded
    outcome (``costs.drain_outcome``), the same draw for both requests of one pod."""
    evict = min(d.eviction, d.hard_end)
    if world == "no-gate" or not pod.can_request:
        return _plain(pod, evict)
    if world == "gate":
        if not d.gated:
            return _plain(pod, evict)
        return _held(d, pod, gate, evict, out, evict)
    if world != "gate+warning":
        raise ValueError(f"unknown world {world!r}")
    early = _held(d, pod, gate, d.signal, out, d.signal)
    if early.saved != d.signal:  # the early checkpoint was lost: the gate holds no longer
        return _plain(pod, evict) if early.at <= evict else early
    if not d.gated:  # no Eviction comes: the node goes at its notice's end
        return Stop(at=d.hard_end, saved=d.signal, requests=1)
    if early.at > evict:  # still checkpointing when the Eviction comes: held until the ack
        return early
    reuse = Stop(at=evict, saved=d.signal, requests=1)
    again = _held(d, pod, gate, evict, out, evict)  # stale: ask again
    if reuse.lost_seconds <= again.lost_seconds:
        return reuse
    return Stop(at=again.at, saved=again.saved, requests=2)
