"""The grace webhook's decision: how long a pod being created is given between SIGTERM and
SIGKILL. Pure: no I/O or clock.

Kueue, Volcano, KAI and kube-scheduler's own preemption delete a victim with its own
``spec.terminationGracePeriodSeconds`` (Kubernetes' default: 30 s). A pod whose training code
checkpoints on SIGTERM needs at least as long as its checkpoint takes. The grace webhook
(``controller/grace/grace.py``, a mutating webhook on pod CREATE) asks ``decide`` and sets what it
answers:

- ``SET``: ``spec.terminationGracePeriodSeconds`` becomes ``grace_seconds``: the pod's declared
  ``ckpt-preempt.io/checkpoint-seconds`` (rounded up to a whole second, capped by the controller's
  ``maxCheckpointSeconds``) plus ``margin_seconds``;
- ``KEPT``: the pod already asks for at least that long (or for something the API server's
  validation will judge: a negative value); nothing changes;
- ``NOT_DECLARED``, ``MALFORMED``, ``EXCLUDED``: nothing changes, and ``reason`` says why.

Guarantees (hypothesis properties in tests/policies/test_grace_period.py):

- **Never lowers.** A value is set only when it is larger than the pod's own (an absent value
  counts as Kubernetes' default, 30 s).
- **The cap holds, whatever the pod says.** A set value is at most ``cap_seconds``
  (``ceil(max_checkpoint_seconds) + margin_seconds``); only the pod's own larger value, which
  this webhook never touches, can exceed it. A huge declared time gets the cap; NaN, infinity,
  zero, a negative or an unparsable one gets nothing.
- **One parser.** The declared time is read by ``policies.model.annotations`` exactly as the
  planner reads ``checkpoint-seconds`` (seconds or a duration: ``90``, ``90s``, ``2m``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ckpt_preempt.policies.model import annotations as ann

# Added to the declared checkpoint time: the process must also notice SIGTERM, finish the step
# it is in and flush the save. The one default; the command's flag and the chart's
# graceWebhook.marginSeconds default to it (a chart test pins them equal).
DEFAULT_MARGIN_SECONDS = 30
# What the API server gives a pod that sets no terminationGracePeriodSeconds (core/v1 PodSpec).
KUBERNETES_DEFAULT_GRACE_SECONDS = 30
ALWAYS_EXCLUDED = frozenset({"kube-system"})
SHOWN_CHARS = 40  # of a malformed value, in the reason (a warning the client prints)


class Outcome(enum.StrEnum):
    SET = "set"
    KEPT = "kept"
    NOT_DECLARED = "not-declared"
    MALFORMED = "malformed"
    EXCLUDED = "excluded"


@dataclass(frozen=True, kw_only=True)
class GraceLimits:
    """The admin's settings: the controller's cap on a declared checkpoint time, the margin,
    and the namespaces never changed (``kube-system`` always among them)."""

    max_checkpoint_seconds: float = ann.Limits.max_checkpoint_seconds  # the planner's default cap
    margin_seconds: int = DEFAULT_MARGIN_SECONDS
    excluded_namespaces: frozenset[str] = ALWAYS_EXCLUDED

    def __post_init__(self) -> None:
        if not (math.isfinite(self.max_checkpoint_seconds) and self.max_checkpoint_seconds > 0):
            raise ValueError("max_checkpoint_seconds must be a positive number")
        if isinstance(self.margin_seconds, bool) or not isinstance(self.margin_seconds, int) \
                or self.margin_seconds < 0:
            raise ValueError("margin_seconds must be a whole number of seconds, 0 or more")
        object.__setattr__(self, "excluded_namespaces",
                           frozenset(self.excluded_namespaces) | ALWAYS_EXCLUDED)

    @property
    def cap_seconds(self) -> int:
        """The most this webhook ever sets."""
        return math.ceil(self.max_checkpoint_seconds) + self.margin_seconds


@dataclass(frozen=True, kw_only=True)
class NewPod:
    """What the decision reads of a pod being created. ``grace_seconds``: its
    ``spec.terminationGracePeriodSeconds`` as sent (None: absent)."""

    namespace: str
    name: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    grace_seconds: int | None = None


@dataclass(frozen=True, kw_only=True)
class Decision:
    outcome: Outcome
    reason: str
    grace_seconds: int | None = None  # the value to set; only with SET
    capped: bool = False  # the declared time was above max_checkpoint_seconds

    @property
    def changes(self) -> bool:
        return self.grace_seconds is not None


def declared_checkpoint_seconds(annotations: Mapping[str, str]
                                ) -> tuple[float | None, ann.AnnotationProblem | None]:
    """The pod's ``checkpoint-seconds`` as the planner parses it (positive and finite), or None
    and what is wrong with it. Only that key is handed to the parser: a bad
    ``last-checkpoint`` (which makes the planner drop all checkpoint information, so that a bad
    value never buys protection) says nothing about how long a save takes, and grace buys
    nothing beyond the cap."""
    fields = ann.parse_pod_fields(
        namespace="", labels={}, now=0.0,
        annotations={ann.CHECKPOINT_SECONDS: annotations[ann.CHECKPOINT_SECONDS]})
    if fields.checkpoint_seconds is not None:
        return fields.checkpoint_seconds, None
    return None, next(iter(fields.problems), None)


def decide(pod: NewPod, limits: GraceLimits) -> Decision:
    if pod.namespace in limits.excluded_namespaces:
        return Decision(outcome=Outcome.EXCLUDED,
                        reason=f"namespace {pod.namespace} is excluded: left unchanged")
    if ann.CHECKPOINT_SECONDS not in pod.annotations:
        return Decision(outcome=Outcome.NOT_DECLARED,
                        reason=f"no {ann.CHECKPOINT_SECONDS} annotation: left unchanged")
    declared, problem = declared_checkpoint_seconds(pod.annotations)
    if declared is None:
        raw = pod.annotations[ann.CHECKPOINT_SECONDS]
        shown = raw if len(raw) <= SHOWN_CHARS else raw[:SHOWN_CHARS] + "..."
        why = problem.problem if problem else "unreadable"
        return Decision(outcome=Outcome.MALFORMED,
                        reason=f"{ann.CHECKPOINT_SECONDS}={shown!r}: {why}; "
                               "terminationGracePeriodSeconds left unchanged")
    capped = declared > limits.max_checkpoint_seconds
    checkpoint = math.ceil(min(declared, limits.max_checkpoint_seconds))
    sized = checkpoint + limits.margin_seconds
    how = (f"checkpoint-seconds {_seconds(declared)}"
           + (f" capped at maxCheckpointSeconds {_seconds(limits.max_checkpoint_seconds)}"
              if capped else "")
           + f" + margin {limits.margin_seconds} s = {sized} s")
    own = pod.grace_seconds
    if own is not None and own < 0:
        return Decision(outcome=Outcome.KEPT, capped=capped,
                        reason=f"{how}; the pod's own value {own} is left to the API server's "
                               "validation")
    current = KUBERNETES_DEFAULT_GRACE_SECONDS if own is None else own
    whose = "Kubernetes' default" if own is None else "the pod's own"
    if current >= sized:
        return Decision(outcome=Outcome.KEPT, capped=capped,
                        reason=f"{how}; {whose} {current} s is kept")
    return Decision(outcome=Outcome.SET, grace_seconds=sized, capped=capped,
                    reason=f"{how}; raised from {whose} {current} s")


def _seconds(x: float) -> str:
    return f"{x:g} s"
