"""The eviction gate's decision: may this Eviction of a pod go ahead now? Pure: no I/O or clock.

The gate (``controller/gate/gate.py``) is a validating admission webhook on ``pods/eviction``. For
each Eviction it reads the pod, and ``decide`` answers one of:

- ``ALLOW``: the eviction goes ahead (a pod that cannot checkpoint, an excluded namespace or
  priority class, our own controller's eviction after its drain, a pod already terminating, a
  checkpoint acknowledged, a deadline passed);
- ``REFUSE``: 429 until ``until``, writing nothing (a drain request of any origin is standing:
  one of our plans, the early warning of node taints, or an earlier refusal);
- ``REQUEST``: 429 until ``until``, and the gate writes ``request`` (a ``DrainRequest`` whose
  ``plan`` is a disruption id, ``disruption/<hash>``) as the pod's drain annotation, the one the
  checkpoint agent already answers.

Guarantees (hypothesis properties in tests/policies/test_eviction_gate.py):

- **The cap holds, whatever the pod says.** A refusal never lasts past the earliest of the
  stored request's deadline, its ``requested`` time plus the cap, and the time this gate first
  refused the pod plus the cap (``first_refused``: the gate's own memory, which no tenant can
  write). So a huge ``checkpoint-seconds``, a drain request re-written with a far deadline, or a
  request re-written again and again never holds an eviction past ``max_checkpoint_seconds``
  after the gate first refused it.
- **Deadlines once.** A standing request is never replaced while it holds; a pod that never acks
  is evicted at its deadline, not given a new one on every retry.
- **Bad input frees, never protects.** A malformed drain annotation counts as none; malformed
  checkpoint annotations make the pod one that cannot checkpoint (allowed at once).
- **An ack counts only for its own id, and only while fresh.** ``checkpoint-done`` must name
  the standing request's plan exactly; an ack of another disruption releases nothing. An ack
  older than one hold and ``ACK_RETRY_SLACK_SECONDS`` (an early warning's checkpoint at a
  cordon, the drain long after) asks again, once: the new request is fresh when acknowledged.
- **Same view, same answer.** The disruption id is derived from the pod's uid and the
  resourceVersion the decision was made at, so two gate replicas that read the same pod compute
  the same request; the write is conditional on that resourceVersion, so only one lands.
"""

from __future__ import annotations

import enum
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

from ckpt_preempt.policies.lifecycle.plan_record import (
    DISRUPTION_ID_HEX,
    DISRUPTION_PREFIX,
    DrainRequest,
    acked,
    standing_request,
)
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.model.times import rfc3339

# A stored request this long past its deadline belongs to an earlier disruption (a drain that
# was cancelled, a plan long done): a new Eviction then starts a new one. An assumption, sized
# to outlast kubectl drain's and the autoscalers' retries of one eviction by far.
STALE_REQUEST_SECONDS = 3600.0
# An acknowledged request lets Evictions through only while its checkpoint is fresh: for one
# hold (the pod's checkpoint-seconds, capped) after the request was made, plus the slack of an
# eviction client's retries. Past that, the work done since the checkpoint began exceeds what a
# new checkpoint may take, so an Eviction asks again (an early warning at a cordon, the drain
# long after it); a drain right after its cordon still passes on the cordon's ack. The slack
# outlasts kubectl drain's retry every 5 s (k8s.io/kubectl pkg/drain) several times over. An
# assumption, not measured: the simulator's gate compares the two losses exactly
# (policies/sim/disruptions.py).
ACK_RETRY_SLACK_SECONDS = 30.0


class Verdict(enum.StrEnum):
    ALLOW = "allow"
    REFUSE = "refuse"
    REQUEST = "refuse-and-request"


@dataclass(frozen=True, kw_only=True)
class GateLimits:
    """The admin's rules: the drain cap (the controller's ``maxCheckpointSeconds``) and who is
    never delayed."""

    max_checkpoint_seconds: float = 600.0
    excluded_namespaces: frozenset[str] = frozenset()
    excluded_priority_classes: frozenset[str] = frozenset()

    def excludes(self, namespace: str, priority_class: str) -> bool:
        return bool({ann.ANY, namespace} & self.excluded_namespaces
                    or (priority_class
                        and {ann.ANY, priority_class} & self.excluded_priority_classes))


@dataclass(frozen=True, kw_only=True)
class GatedPod:
    """What the gate reads of the pod to be evicted."""

    uid: str
    namespace: str
    name: str
    resource_version: str
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    priority_class: str = ""
    terminating: bool = False


@dataclass(frozen=True, kw_only=True)
class Decision:
    verdict: Verdict
    reason: str
    until: float | None = None  # REFUSE / REQUEST: when an eviction will be allowed at latest
    request: DrainRequest | None = None  # REQUEST: what to write

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ALLOW


def disruption_id(uid: str, resource_version: str) -> str:
    """``disruption/<hash>``: the same for the same pod seen at the same version."""
    digest = hashlib.sha256(f"{uid}\n{resource_version}".encode()).hexdigest()[:DISRUPTION_ID_HEX]
    return f"{DISRUPTION_PREFIX}{digest}"


def _allow(reason: str) -> Decision:
    return Decision(verdict=Verdict.ALLOW, reason=reason)


def decide(pod: GatedPod, *, now: float, limits: GateLimits, first_refused: float | None,
           exempt_requester: bool, dry_run: bool = False) -> Decision:
    """The answer to one Eviction of ``pod`` at ``now``. ``first_refused``: when this gate
    first refused an eviction of this pod (None: never, or forgotten); ``exempt_requester``:
    the Eviction comes from our own controller. ``dry_run``: a REQUEST becomes a REFUSE that
    writes nothing (what the real eviction would meet)."""
    cap = max(0.0, limits.max_checkpoint_seconds)
    if exempt_requester:
        return _allow("requested by the ckpt-preempt controller, after its own drain")
    if pod.terminating:
        return _allow("the pod is already terminating")
    if limits.excludes(pod.namespace, pod.priority_class):
        return _allow("the admin excludes this namespace or priority class from the gate")
    fields = ann.parse_pod_fields(namespace=pod.namespace, labels=pod.labels,
                                  annotations=pod.annotations, now=now,
                                  priority_class=pod.priority_class)
    if fields.checkpoint is not CheckpointMode.ON_REQUEST:
        return _allow("the pod does not checkpoint on request")
    # The gate's own memory bounds every hold, whatever the pod's annotations say.
    hard_until = (now if first_refused is None else min(first_refused, now)) + cap
    if now >= hard_until:
        return _allow(f"held for the maximum of {cap:.0f} s since the first refusal")
    seconds = fields.checkpoint_seconds if fields.checkpoint_seconds is not None else cap
    standing = standing_request(pod.annotations)
    fresh = standing is not None and now <= standing.deadline + STALE_REQUEST_SECONDS
    if fresh and acked(pod.annotations, standing.plan):
        if now <= standing.requested + min(seconds, cap) + ACK_RETRY_SLACK_SECONDS:
            return _allow(f"checkpoint acknowledged for {standing.plan}")
        fresh = False  # the acknowledged checkpoint is stale: ask again
    if fresh:
        until = min(standing.deadline, standing.requested + cap, hard_until)
        if now >= until:
            return _allow(f"the checkpoint deadline of {standing.plan} passed unacknowledged")
        return Decision(verdict=Verdict.REFUSE, until=until, reason=(
            f"waiting for the pod to checkpoint ({standing.plan}); retry, the eviction is "
            f"allowed on its acknowledgement or at {rfc3339(until)} at the latest"))
    until = min(now + min(seconds, cap), hard_until)
    if not math.isfinite(until) or until <= now:
        return _allow("no time to checkpoint within the maximum")
    request = DrainRequest(plan=disruption_id(pod.uid, pod.resource_version), requested=now,
                           deadline=until)
    why = (f"the pod is asked to checkpoint first ({request.plan}); retry, the eviction is "
           f"allowed on its acknowledgement or at {rfc3339(until)} at the latest")
    if dry_run:
        return Decision(verdict=Verdict.REFUSE, until=until, reason="(dry run) " + why)
    return Decision(verdict=Verdict.REQUEST, until=until, request=request, reason=why)
