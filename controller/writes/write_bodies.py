"""What each of the controller's writes says, as pure data; ``Actions`` sends it.

This module holds the marks the controller leaves on API objects (the stored plans' names and
labels, the reservation taint and toleration), the predicates that recognise them, and the body
of every patch, ConfigMap and Event that ``controller.writes.actions.Actions`` writes, each built
from what was read. Nothing here calls the API server: every write still goes through
``Actions._write`` and only there. It is apart from ``actions.py`` because readers
(``plans.py``, ``advance.py``, ``watch.py``, ``explain_live.py``) recognise these marks without
an API client, and because deciding what a write says is pure while sending it is the write path
(dry-run, leadership, timeouts, audit).

A function that returns ``None`` means the object already says it: nothing is to be written.
"""

from __future__ import annotations

from ckpt_preempt.controller.kube.records import ADMISSION_GATE, MANAGED_BY, PodInfo
from ckpt_preempt.policies.kueue import boost
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.annotations import RESERVED_TAINT

COMPONENT = "ckpt-preempt.io/controller"  # the Events' reporting controller
PLAN_STATE_LABEL = "ckpt-preempt.io/plan-state"
PLAN_PREFIX = "ckpt-plan-"  # ConfigMap name = prefix + plan id
EVENT_NOTE_CHARS = 1024  # the API server's limit on an events.k8s.io/v1 Event's note


# ------------------------------------------------------------------------------- the marks
def plan_object_name(plan_id: str) -> str:
    return PLAN_PREFIX + plan_id


def has_reservation_toleration(pod: PodInfo, plan: str) -> bool:
    return any(t.get("key") == RESERVED_TAINT and t.get("value") == plan
               for t in pod.tolerations)


def node_reserved_for(taints, plan: str) -> bool:
    return any(t.get("key") == RESERVED_TAINT and t.get("value") == plan for t in taints)


def _json_pointer(key: str) -> str:
    return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")


# ---------------------------------------------------------------------------- stored plans
def plan_config_map(record: plan_record.PlanRecord, namespace: str, rv: str | None) -> dict:
    """The ConfigMap a plan is stored as; with ``rv``, only replaceable at that version."""
    meta = {"name": plan_object_name(record.id), "namespace": namespace,
            "labels": {MANAGED_BY[0]: MANAGED_BY[1],
                       PLAN_STATE_LABEL: record.state.value}}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta,
            "data": {plan_record.PLAN_DATA_KEY: plan_record.plan_to_annotation(record)}}


# ------------------------------------------------------------------------------ the victims
def drain_request_patch(request: plan_record.DrainRequest, rv: str | None = None) -> dict:
    """A merge patch writing the drain request; with ``rv``, only at that version."""
    metadata: dict = {"annotations": {
        plan_record.DRAIN_ANNOTATION: plan_record.drain_to_annotation(request)}}
    if rv is not None:
        metadata["resourceVersion"] = rv
    return {"metadata": metadata}


def drain_withdrawal_patch(raw: str) -> list[dict]:
    """A JSON patch removing the drain request, only while it still reads exactly ``raw``."""
    path = _json_pointer(plan_record.DRAIN_ANNOTATION)
    return [{"op": "test", "path": path, "value": raw}, {"op": "remove", "path": path}]


# --------------------------------------------------------------------------- the preemptor
def nomination_patch(node: str) -> dict:
    return {"status": {"nominatedNodeName": node}}


def nomination_withdrawal_patch(node: str) -> list[dict]:
    """A JSON patch removing the nomination, only while it still names ``node``."""
    return [{"op": "test", "path": "/status/nominatedNodeName", "value": node},
            {"op": "remove", "path": "/status/nominatedNodeName"}]


def pin_patch(live: dict, node: str) -> dict | None:
    """Narrow the live pod's required node affinity to ``node`` (a gated pod allows it); None
    when every term pins it already."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    required = (((live["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms and all(pin in (t.get("matchFields") or []) for t in terms):
        return None
    # Narrowing may only add requirements to each existing term (or set the first one).
    terms = [{**t, "matchFields": [*(t.get("matchFields") or []), pin]} for t in terms] \
        or [{"matchFields": [pin]}]
    return {"metadata": {"resourceVersion": live["metadata"]["resourceVersion"]},
            "spec": {"affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": terms}}}}}


def ungate_patch(live: dict) -> dict | None:
    """Remove our admission gate from the live pod; None when it is not there."""
    gates = [g["name"] for g in live["spec"].get("schedulingGates") or []]
    if ADMISSION_GATE not in gates:
        return None
    return {"metadata": {"resourceVersion": live["metadata"]["resourceVersion"]},
            "spec": {"schedulingGates": [{"name": g} for g in gates if g != ADMISSION_GATE]
                     or None}}


def toleration_patch(live: dict, plan_id: str) -> dict | None:
    """Add the reservation toleration of ``plan_id`` to the live pod; None when it has it."""
    present = live["spec"].get("tolerations") or []
    if any(t.get("key") == RESERVED_TAINT and t.get("value") == plan_id for t in present):
        return None
    ours = {"key": RESERVED_TAINT, "operator": "Equal", "value": plan_id,
            "effect": "NoSchedule"}
    return {"metadata": {"resourceVersion": live["metadata"]["resourceVersion"]},
            "spec": {"tolerations": [*present, ours]}}


# ---------------------------------------------------------------------- node reservation
def reserving_taints(taints: list[dict], plan_id: str) -> list[dict] | None:
    """The node's taints with ours naming ``plan_id`` (replacing any other plan's); None when
    it is reserved for that plan already."""
    if any(t["key"] == RESERVED_TAINT and t.get("value") == plan_id for t in taints):
        return None
    taints = [{"key": t["key"], "value": t.get("value"), "effect": t["effect"]}
              for t in taints if t["key"] != RESERVED_TAINT]
    taints.append({"key": RESERVED_TAINT, "value": plan_id, "effect": "NoSchedule"})
    return taints


def unreserving_taints(taints: list[dict], plan_id: str) -> list[dict] | None:
    """The node's taints without ours; None when it is not reserved for ``plan_id``."""
    if not any(t["key"] == RESERVED_TAINT and t.get("value") == plan_id for t in taints):
        return None
    return [{"key": t["key"], "value": t.get("value"), "effect": t["effect"]}
            for t in taints if t["key"] != RESERVED_TAINT]


def node_taints_patch(rv: str, taints: list[dict]) -> dict:
    """A merge patch setting the node's taints, only at version ``rv``."""
    return {"metadata": {"resourceVersion": rv},
            "spec": {"taints": [{k: v for k, v in t.items() if v is not None}
                                for t in taints] or None}}


# ---------------------------------------------------------------------------------- events
def event_body(pod: PodInfo, reason: str, message: str, *, warning: bool, instance: str,
               event_time: str, suffix: str) -> dict:
    """An events.k8s.io/v1 Event regarding the pod, named ``<pod>.<suffix>``."""
    return {
        "metadata": {"name": f"{pod.name}.{suffix}", "namespace": pod.namespace},
        "eventTime": event_time, "reportingController": COMPONENT,
        "reportingInstance": instance, "action": reason, "reason": reason,
        "note": message[:EVENT_NOTE_CHARS], "type": "Warning" if warning else "Normal",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                      "namespace": pod.namespace, "uid": pod.uid},
    }


# ------------------------------------------------------------------- Kueue Workloads' boost
def priority_boost_patch(value: str | None, rv: str) -> dict:
    """A merge patch that sets Kueue's priority-boost annotation to ``value`` (None: removes
    it) and nothing else, only at resourceVersion ``rv``."""
    return {"metadata": {"resourceVersion": rv, "annotations": {boost.ANNOTATION: value}}}
