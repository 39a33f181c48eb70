"""Event reasons are one closed set (controller/core/events.py): every reason the code writes is a
``Reason``, every ``Reason`` has a meaning and is documented, and the metric by reason counts
only the Events the API server accepted."""

from __future__ import annotations

import ast
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core.events import MEANING, Reason
from ckpt_preempt.controller.kube.records import PodInfo
from ckpt_preempt.controller.writes import actions as actions_mod
from tests.controller import fakes

REPO = Path(__file__).resolve().parents[2]
EMITTERS = {"emit", "_note_once", "_warn_once", "_note", "warn"}


def _reason_arguments() -> list[tuple[str, int, ast.expr]]:
    """(file, line, the reason argument) of every call of an Event-writing helper."""
    found = []
    for path in sorted((REPO / "controller").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and len(node.args) >= 2:
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                if name in EMITTERS:
                    found.append((path.name, node.lineno, node.args[1]))
    return found


def test_every_event_the_controller_writes_names_a_reason_member():
    calls = _reason_arguments()
    assert len(calls) >= 20, calls  # the scan still finds the call sites
    literal = [(f, line) for f, line, arg in calls if isinstance(arg, ast.Constant)]
    assert literal == [], f"Event reasons written as string literals: {literal}"


def test_every_reason_has_a_meaning_and_is_documented():
    readme = (REPO / "controller" / "README.md").read_text()
    assert set(MEANING) == set(Reason)
    undocumented = [r.value for r in Reason if f"`{r.value}`" not in readme]
    assert undocumented == [], f"controller/README.md does not list {undocumented}"


class _EventsApi:
    """Records Event creations; refuses them when ``refuse`` is set."""

    def __init__(self, refuse: bool) -> None:
        self.refuse, self.created = refuse, []

    def create_namespaced_event(self, namespace, body, _request_timeout=None):
        if self.refuse:
            raise ApiException(status=403, reason="Forbidden")
        self.created.append(body["reason"])


def _actions(refuse: bool) -> tuple[actions_mod.Actions, list[Reason]]:
    heard: list[Reason] = []
    act = actions_mod.Actions(client.ApiClient(), plan_namespace="ns", on_event=heard.append)
    act.events = _EventsApi(refuse)
    return act, heard


def _pod() -> PodInfo:
    return fakes.pod("p", node="n1")


def test_the_metric_hears_an_accepted_event_and_not_a_refused_one():
    act, heard = _actions(refuse=False)
    act.emit(_pod(), Reason.EVICTED, "evicted by plan x")
    assert heard == [Reason.EVICTED] and act.events.created == ["Evicted"]
    act, heard = _actions(refuse=True)
    act.emit(_pod(), Reason.EVICTED, "evicted by plan x")  # best effort: no exception
    assert heard == []
