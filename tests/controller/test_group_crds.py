"""Volcano and coscheduling PodGroups: trimmed to (namespace, name, minMember), keyed like the
gangs their pods name, and a gated gang waits until minMember members exist."""

from __future__ import annotations

import pytest

from ckpt_preempt.controller.kube import group_crds
from ckpt_preempt.controller.kube.group_crds import KINDS, GroupInfo, group_info, minimums
from ckpt_preempt.controller.kube.records import ADMISSION_GATE
from ckpt_preempt.policies.model import gangs
from tests.controller.fakes import T0, FakeCache, Rig, node, pod

BY_CONVENTION = {k.convention: k for k in KINDS}


def _pg(min_member: object = None, *, name: str = "pg", ns: str = "team") -> dict:
    spec = {} if min_member is None else {"minMember": min_member}
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns, "uid": "x", "resourceVersion": "3"},
            "spec": {**spec, "minResources": {"cpu": "3"}}, "status": {"phase": "Pending"}}


def test_kinds_are_the_upstream_group_versions_of_the_gang_conventions():
    assert [(k.convention, k.group, k.version, k.plural) for k in KINDS] == [
        ("volcano", "scheduling.volcano.sh", "v1beta1", "podgroups"),
        ("coscheduling", "scheduling.x-k8s.io", "v1alpha1", "podgroups"),
    ]
    for k in KINDS:  # the gang table names the same object for the same convention
        assert gangs.BY_ID[k.convention].group_object == k.resource


def test_group_info_keeps_only_namespace_name_and_min_member():
    assert group_info(_pg(3)) == GroupInfo(namespace="team", name="pg", min_member=3)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(0, id="zero (Volcano's omitempty default)"),
        pytest.param(-2, id="negative"),
        pytest.param("3", id="a string"),
        pytest.param(3.0, id="a float"),
        pytest.param(True, id="a boolean"),
        pytest.param(gangs.MAX_GANG_SIZE + 1, id="past the largest gang"),
        pytest.param(None, id="absent"),
    ],
)
def test_a_bad_or_absent_min_member_declares_no_minimum(bad):
    assert group_info(_pg(bad)).min_member is None
    assert minimums(BY_CONVENTION["coscheduling"], [group_info(_pg(bad))]) == {}


def test_minimums_are_keyed_like_the_pods_gang():
    infos = [group_info(_pg(4, name="a")), group_info(_pg(2, name="b", ns="other"))]
    got = minimums(BY_CONVENTION["volcano"], infos)
    member, _ = gangs.detect("team", {}, {"scheduling.k8s.io/group-name": "a"})
    assert got == {member.key: 4, "other/volcano/b": 2}


def _gang(n: int, *, group: str = "pg") -> list:
    return [pod(f"m{i}", priority=1000, gpus=1, gates=(ADMISSION_GATE,),
                labels={"scheduling.x-k8s.io/pod-group": group}) for i in range(n)]


@pytest.mark.parametrize(
    ("members", "minimum", "admitted"),
    [
        pytest.param(2, None, True, id="no PodGroup: two members are the gang"),
        pytest.param(2, 3, False, id="fewer than minMember: stays gated"),
        pytest.param(3, 3, True, id="minMember reached"),
        pytest.param(4, 3, True, id="more than minMember: elastic, admitted"),
    ],
)
def test_a_gated_gang_waits_for_its_podgroups_min_member(members, minimum, admitted):
    key = gangs.gang_key("team", "coscheduling", "pg")
    cache = FakeCache(nodes=[node("n1")], pods=_gang(members),
                      group_minimums=None if minimum is None else {key: minimum})
    rig = Rig(cache)
    rig.tick(T0)
    rig.tick(T0 + 10)
    ungated = {c.target for c in rig.actions.of("ungate")}
    assert ungated == ({f"team/m{i}" for i in range(members)} if admitted else set())
    assert "GangTotalMismatch" not in rig.actions.event_reasons()


# ----------------------------------------------------------------------------- discovery


class _Resources:
    def __init__(self, names):
        self.resources = [type("R", (), {"name": n})() for n in names]


class _Custom:
    """CustomObjectsApi's discovery and list calls, answering per group as told."""

    def __init__(self, answers):
        self.answers = answers  # group -> exception | list of resource names

    def get_api_resources(self, group, version, **_):
        got = self.answers[group]
        if isinstance(got, BaseException):
            raise got
        return _Resources(got)

    def list_cluster_custom_object(self, group, version, plural, **_):
        got = self.answers.get(("list", group))
        if isinstance(got, BaseException):
            raise got
        return {"items": []}


def _objects(answers):
    import threading

    from kubernetes import client

    objs = group_crds.GroupObjects(client.ApiClient(), threading.Event())
    objs._custom = _Custom(answers)
    return objs


def test_absent_or_unlistable_kinds_are_answered_and_not_watched(caplog):
    from kubernetes.client.rest import ApiException

    caplog.set_level("WARNING", logger="ckpt_preempt.group_crds")  # whatever ran before

    objs = _objects({"scheduling.volcano.sh": ApiException(status=404),
                     "scheduling.x-k8s.io": ["podgroups", "podgroups/status"],
                     ("list", "scheduling.x-k8s.io"): ApiException(status=403)})
    assert objs._discover_once() is True
    assert objs.informers() == [] and objs.minimums() == {}
    assert "podgroups.scheduling.x-k8s.io is served but this identity may not list it" in \
        caplog.text


def test_a_group_version_without_podgroups_is_absent():
    objs = _objects({"scheduling.volcano.sh": ["queues"], "scheduling.x-k8s.io": ["elasticquotas"]})
    assert objs._discover_once() is True and objs.informers() == []


@pytest.mark.parametrize("error", [ConnectionRefusedError("refused"), "503"])
def test_an_unanswered_discovery_is_asked_again_and_holds_sync(error):
    from kubernetes.client.rest import ApiException

    err = ApiException(status=503) if error == "503" else error
    objs = _objects({"scheduling.volcano.sh": err, "scheduling.x-k8s.io": ApiException(status=404)})
    assert objs._discover_once() is False
    assert not objs.synced()
