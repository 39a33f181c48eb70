"""What a chaos run is given and what it makes: its settings (`ChaosConfig`), the pods it
created (`Made`) and its preemptors (`Group`), with the labels and priorities they carry."""

from __future__ import annotations

from dataclasses import dataclass

from e2e.harness.controller_run import HIGH_KUBE, HIGH_NEVER, LOW, LOWER
from e2e.harness.faultproxy import Faults

GPUS_PER_NODE = 8
PRIORITY = {HIGH_NEVER: 1000, HIGH_KUBE: 1000, LOW: 100, LOWER: 50}
ACKS_LABEL = "e2e.ckpt-preempt.io/acks"  # victims the acker answers
ROLE_LABEL = "e2e.ckpt-preempt.io/role"
VICTIM, BYSTANDER, PREEMPTOR = "victim", "bystander", "preemptor"
LOOP_SECONDS = 0.3


@dataclass(frozen=True, kw_only=True)
class ChaosConfig:
    seed: int = 1
    drains: int = 100  # stop creating preemptors once this many plans are Done ...
    min_kills: int = 0  # ... and this many SIGKILLs happened
    max_seconds: float = 900.0  # ... or after this long
    nodes: int = 8
    in_flight: int = 3  # preemptors pending at once
    replicas: int = 2
    kill_every: tuple[float, float] | None = (4.0, 12.0)  # seconds between SIGKILLs; None: none
    restart_after: tuple[float, float] = (0.3, 3.0)
    faults: Faults | None = None  # put the replicas behind a fault proxy
    withdraw_share: float = 0.1  # preemptors deleted while their plan drains
    patience_seconds: float = 45.0  # a preemptor still pending after this is withdrawn
    settle_seconds: float = 60.0


@dataclass(frozen=True, kw_only=True)
class Made:
    """A pod the driver created."""

    namespace: str
    name: str
    uid: str
    role: str
    priority: int
    gang: str | None
    gpus: int
    node: str | None  # bound at creation (victims and bystanders)


@dataclass
class Group:
    """A preemptor: one pod or a gang, pending until every member is bound."""

    key: str
    mode: str  # nominate | admit
    members: list[str]
    created: float
    withdraw: bool  # delete it once its plan is Draining
    hold: float  # seconds it runs once bound, before the driver deletes it
    bound_at: float | None = None
    ended: str | None = None  # finished | withdrawn-draining | withdrawn-patience | -at-end


