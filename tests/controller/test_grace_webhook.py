"""controller.grace.grace: AdmissionReviews of pod CREATE in, answers out. Always allowed; a
JSONPatch (base64) only when the grace is raised; anything it cannot read is left unchanged."""

from __future__ import annotations

import base64
import json

import pytest

from ckpt_preempt.controller.grace.grace import GraceWebhook, new_pod
from ckpt_preempt.policies.disruption.grace_period import GraceLimits

SECONDS = "ckpt-preempt.io/checkpoint-seconds"
HOOK = GraceWebhook(GraceLimits(max_checkpoint_seconds=600, margin_seconds=30,
                                excluded_namespaces=frozenset({"ckpt-preempt"})))


def review(annotations: dict | None = None, grace: int | None = 30, namespace: str = "team-a",
           **request) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "x"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "train-0", "namespace": namespace,
                        "annotations": annotations or {}}, "spec": spec}
    req = {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
           "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": "pods"},
           "operation": "CREATE", "namespace": namespace, "object": pod, **request}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def patch_of(answer: dict) -> list[dict] | None:
    r = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert r["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002" and r["allowed"] is True
    if "patch" not in r:
        assert "patchType" not in r
        return None
    assert r["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(r["patch"]))


@pytest.mark.parametrize(("body", "patch", "warns"), [
    pytest.param(review({SECONDS: "120"}), 150, False, id="declared: raised, no warning"),
    pytest.param(review({SECONDS: "120"}, grace=None), 150, False,
                 id="no grace in the object: added"),
    pytest.param(review({SECONDS: "99999h"}), 630, True, id="capped: set, with a warning"),
    pytest.param(review({SECONDS: "NaN"}), None, True, id="malformed: unchanged, a warning"),
    pytest.param(review(), None, False, id="no annotation: unchanged, silent"),
    pytest.param(review({SECONDS: "120"}, grace=600), None, False, id="the user's larger value"),
    pytest.param(review({SECONDS: "120"}, namespace="kube-system"), None, False,
                 id="kube-system"),
    pytest.param(review({SECONDS: "120"}, namespace="ckpt-preempt"), None, False,
                 id="an excluded namespace"),
    pytest.param(review({SECONDS: "120"}, operation="UPDATE"), None, False, id="not a CREATE"),
    pytest.param(review({SECONDS: "120"}, subResource="status"), None, False,
                 id="a subresource"),
    pytest.param(review({SECONDS: "120"}, kind={"group": "apps", "version": "v1",
                                                "kind": "Deployment"}), None, False,
                 id="not a pod"),
    pytest.param(review({SECONDS: "120"}, grace="600"), None, False,
                 id="a grace that is not an integer: unchanged"),
    pytest.param(review({SECONDS: 120}), None, False, id="an annotation that is not a string"),
    pytest.param(review({SECONDS: "120"}, object=None), None, False, id="no object"),
])
def test_answers(body, patch, warns):
    answer = HOOK.review(body)
    ops = patch_of(answer)
    if patch is None:
        assert ops is None
    else:
        assert ops == [{"op": "add", "path": "/spec/terminationGracePeriodSeconds",
                        "value": patch}]
    warnings = answer["response"].get("warnings", [])
    assert bool(warnings) == warns
    assert all(w.startswith("ckpt-preempt grace webhook: ") for w in warnings)


def test_a_pod_from_generate_name_is_named_by_its_prefix():
    body = review({SECONDS: "120"})
    meta = body["request"]["object"]["metadata"]
    del meta["name"]
    meta["generateName"] = "train-"
    assert new_pod(body["request"]).name == "train-*"
    assert patch_of(HOOK.review(body))[0]["value"] == 150


@pytest.mark.parametrize("body", [None, [], {"request": "x"}, {"request": {"uid": 1}}])
def test_a_body_that_is_no_admission_review_is_an_error(body):
    with pytest.raises(ValueError):
        HOOK.review(body)
