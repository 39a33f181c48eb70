"""What a workload is (controller/README.md, "What a workload is"): a key that never leaves the
pod's namespace, whatever a tenant writes in the fields it is derived from, and stored plans'
old keys read inside their victim's namespace."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from ckpt_preempt.controller.kube import convert, records
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model import gangs
from ckpt_preempt.policies.model.model import Pod, recorded_workload, workload_key

NOW = 1_000_000.0

# Namespace names are DNS-1123 labels: never a "/" in them.
namespaces = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)
# What a tenant writes is any text: uids in ownerReferences are not validated beyond being set.
tenant_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1,
                      max_size=40)
label_values = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?", fullmatch=True)


@st.composite
def raw_pods(draw, namespace: str) -> dict:
    """A pod as the API server would hand it back, with every field a tenant may write that a
    workload key is derived from: gang labels and annotations of every convention, a native
    PodGroup reference, and ownerReferences whose uid is any text (another namespace's uid, a
    gang key of another namespace, a key with slashes)."""
    labels, annotations = {}, {}
    for conv in draw(st.lists(st.sampled_from(gangs.CONVENTIONS), max_size=2, unique=True)):
        target = draw(st.sampled_from((labels, annotations)))
        target[conv.name_key] = draw(label_values)
    owners = [{"apiVersion": draw(st.sampled_from(("v1", "attach.example.com/v1"))),
               "kind": draw(st.sampled_from(("Pod", "Anchor", "Job"))),
               "name": "x", "uid": draw(tenant_text),
               "controller": draw(st.sampled_from((True, False, None)))}
              for _ in range(draw(st.integers(0, 2)))]
    spec: dict = {"containers": [{"name": "c"}]}
    if draw(st.booleans()):
        spec["schedulingGroup"] = {"podGroupName": draw(label_values)}
    return {"metadata": {"uid": draw(tenant_text), "name": "p", "namespace": namespace,
                         "labels": labels, "annotations": annotations,
                         "ownerReferences": owners},
            "spec": spec}


def _key(raw: dict) -> str:
    pod, _ = convert.to_pod(records.pod_info(raw), NOW, ann.Limits(), in_scope=True)
    return pod.workload


@given(st.data(), namespaces, namespaces)
def test_no_pod_shares_a_workload_with_a_pod_of_another_namespace(data, ns_a, ns_b):
    if ns_a == ns_b:
        ns_b = ns_a + "x"
    a, b = data.draw(raw_pods(ns_a)), data.draw(raw_pods(ns_b))
    # the attacker's pod names, as its owner, whatever the neighbour's key is or might be built from
    b["metadata"]["ownerReferences"].insert(0, {
        "apiVersion": "attach.example.com/v1", "kind": "Anchor", "name": "n",
        "uid": data.draw(st.sampled_from((a["metadata"]["uid"], _key(a)))), "controller": True})
    key_a, key_b = _key(a), _key(b)
    assert key_a != key_b
    assert key_a.startswith(ns_a + "/") and key_b.startswith(ns_b + "/")


@given(namespaces, namespaces, st.one_of(st.none(), tenant_text),
       st.one_of(st.none(), tenant_text), tenant_text)
def test_keys_built_from_any_text_stay_in_their_namespace(ns_a, ns_b, gang, owner, uid):
    """Even a Pod built by hand (the simulator, a snapshot file) with a gang key naming
    another namespace keeps its workload in its own."""
    key = Pod(uid=uid, name="p", namespace=ns_a, gang=gang, owner_uid=owner).workload
    assert key.startswith(ns_a + "/")
    if ns_a != ns_b:
        assert not key.startswith(ns_b + "/")


@pytest.mark.parametrize(("recorded", "want"), [
    pytest.param("", "team-a/pod/v-uid", id="nothing recorded: the victim itself"),
    pytest.param("v-uid", "team-a/pod/v-uid", id="old key, the victim's own uid"),
    pytest.param("job-uid", "team-a/owner/job-uid", id="old key, its controlling owner's uid"),
    pytest.param("team-a/seed/llm", "team-a/seed/llm", id="a gang key: unchanged"),
    pytest.param("team-a/owner/job-uid", "team-a/owner/job-uid", id="a new key: unchanged"),
    pytest.param("team-b/seed/llm", "team-a/owner/team-b/seed/llm",
                 id="another namespace's key: read inside the victim's namespace"),
])
def test_a_stored_victims_key_is_read_inside_its_namespace(recorded, want):
    assert recorded_workload("team-a", "v-uid", recorded) == want


@given(namespaces, tenant_text, st.one_of(st.none(), tenant_text))
def test_old_keys_carry_over_to_the_workload_they_counted_for(ns, uid, owner):
    """A plan stored before keys were namespaced recorded ``owner or uid`` for a pod without a
    gang: read back, it counts for exactly the workload that pod has now. (Old keys that cannot
    be told apart, an owner uid equal to the pod's own or beginning with its namespace and a
    slash, are read inside the namespace all the same: the test above.)"""
    old = owner or uid
    assume(owner != uid and not old.startswith(ns + "/"))
    want = workload_key(ns, gang=None, owner_uid=owner, uid=uid)
    assert recorded_workload(ns, uid, old) == want
    assert recorded_workload(ns, uid, recorded_workload(ns, uid, old)) == want  # idempotent
